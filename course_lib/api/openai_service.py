"""The OpenAI endpoints' logic behind ``course serve``: requests in, engine submissions, and
responses or SSE chunks out (the routes, auth and CLI are in ``server``).

Tools. tinychat was trained to call its tools without reading their definitions (the corpus
never shows them), so ``tools`` is not rendered into the prompt: it tells the server which
calls it may return. ``tool_choice`` "auto" (the default with tools) lets the model choose;
a reply that starts with ``<|tool_call|>`` and parses as a call to one of ``tools`` comes back
as ``tool_calls``, anything else as text. "required" or a named function puts the marker at
the end of the prompt and constrains the JSON after it to the tools' schemas (a JSONGuide),
so the call always parses and validates. "none" returns the reply as text, whatever it is.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from course_lib.api.metrics import ServerMetrics
from course_lib.context.trace_log import TraceLog
from course_lib.api.openai_protocol import (ChatChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
                                            ChatMessageOut, ChunkChoice, CompletionChoice, CompletionRequest, Delta,
                                            DetokenizeRequest, JsonSchemaFormat, OpenAIError, TextCompletion,
                                            TokenizeRequest, ToolCallOut, Usage, chat_logprobs, completion_logprobs,
                                            sse_data)
from course_lib.sampling.params import SamplingParams
from course_lib.sampling.prompt import encode_prompt
from course_lib.serving.async_engine import AsyncEngine, EngineStopped, QueueFull, Submission
from course_lib.serving.engine import Engine
from course_lib.serving.xray import RequestXray
from course_lib.structured import JSONGuide
from course_lib.tokenization.chat_template import TOOL_CALL, encode_chat
from course_lib.tools import Tool, ToolCall, ToolRegistry, from_openai_messages, openai_tool_call
from course_lib.tools.wire import parse_tinychat_tool_call
from course_lib.xray import xray_document
from course_lib.xray.attention import token_attention
from course_lib.xray.trace import last_entry, trace_record, weights_fingerprint

__all__ = ["OpenAIService"]

DISCONNECT_POLL_S = 0.5  # how often a non-streaming request checks that its client is still there
XRAY_HEADER = "x-course-xray"  # a request that sends it (value 1) is X-rayed; see course_lib.xray
XRAYS_KEPT = 64  # X-rays of the latest requests the server keeps for GET /course/xray/{id}


@dataclass
class _Xrayed:
    """An X-rayed completion: one record per choice, and what the view needs beside them."""

    records: list[RequestXray]
    schema: dict | None
    choices: list
    user_message: str
    request_metadata: dict | None = None  # the request's OpenAI ``metadata`` tags, logged for slicing
    traces: list | None = None  # each choice's trace log entry, once the request has ended


@dataclass(frozen=True)
class _End:
    """How one choice ended: text (``content``) or a call, and OpenAI's finish reason."""

    content: str | None
    call: ToolCall | None
    reason: str             # stop, length or tool_calls
    held: bool              # the text was held back (it looked like a call) and is not yet shown


class _Choice:
    """One choice's reply as it arrives. Text is shown at once, unless the reply is (or may be)
    a tool call: then it is held until the end and comes back as ``tool_calls`` or, if it
    does not parse as a call to one of the request's tools, as text."""

    def __init__(self, *, tool_names: frozenset[str] = frozenset(), forced: bool = False, end_ids=frozenset(),
                 tool_call_id: int | None = None):
        self.tool_names, self.end_ids, self.tool_call_id = tool_names, end_ids, tool_call_id
        self.holding = forced
        self.decided = forced or not tool_names  # "auto": the first token decides
        self.parts: list[str] = []
        self.logprobs: list = []
        self.num_tokens = 0
        self.end: _End | None = None

    def add(self, output) -> tuple[str, list]:
        """Record one engine output; return the text and logprob entries to show now."""
        self.num_tokens += len(output.token_ids)
        entries = list(output.logprobs or ())
        if output.finish_reason == "stop" and output.token_ids and output.token_ids[-1] in self.end_ids:
            entries = entries[:-1]  # the end token is not part of the reply, as with OpenAI
        if not self.decided and output.token_ids:
            self.decided, self.holding = True, output.token_ids[0] == self.tool_call_id
        self.parts.append(output.text)
        self.logprobs += entries
        if output.finished:
            self.end = self._finish(output.finish_reason)
        return ("", []) if self.holding else (output.text, entries)

    def _finish(self, reason: str) -> _End:
        text = "".join(self.parts)
        if self.holding and reason == "stop":
            try:
                call = parse_tinychat_tool_call(text)
            except ValueError:
                call = None
            if call is not None and call.name in self.tool_names:
                return _End(None, call, "tool_calls", True)
        return _End(text, None, reason, self.holding)


class OpenAIService:
    """What the routes do: requests -> engine submissions -> OpenAI responses."""

    def __init__(self, engine: Engine, async_engine: AsyncEngine, metrics: ServerMetrics, model_name: str, *,
                 trace_log: TraceLog | None = None):
        self.engine, self.async_engine, self.metrics, self.model_name = engine, async_engine, metrics, model_name
        self.trace_log = trace_log  # where X-rayed requests leave their trace records, or None
        self._weights_sha256: str | None = None
        self.tokenizer = engine.tokenizer
        self.created = int(time.time())
        # tinychat's call marker; a checkpoint's tokenizer without one returns no tool calls
        self.tool_call_id = (self.tokenizer.encode(TOOL_CALL, allowed_special={TOOL_CALL})[0]
                             if TOOL_CALL in self.tokenizer.special_tokens_set else None)
        self._token_bytes: dict[int, bytes] = {}
        self._guides: OrderedDict[str, JSONGuide] = OrderedDict()  # the last 32 schemas' guides
        self._xrays: OrderedDict[str, _Xrayed] = OrderedDict()

    def models(self) -> dict:
        return {"object": "list", "data": [self.model_card()]}

    def model_card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "course"}

    # --- /v1/chat/completions ---------------------------------------------------------------------

    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        arrived = time.perf_counter()
        self.check_model(body.model)
        registry = self._tools(body)
        forced = registry is not None and body.tool_choice not in (None, "auto", "none")
        try:
            messages = from_openai_messages([m.model_dump(exclude_none=True) for m in body.messages])
            prompt_ids = encode_chat(self.tokenizer, messages)
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error), param="messages") from None
        guide = None
        if forced and self.tool_call_id is None:
            raise OpenAIError(400, f"{self.model_name}'s tokenizer has no {TOOL_CALL} marker, so this server cannot "
                                   "force a tool call; use tool_choice 'auto' or 'none'", param="tool_choice")
        if forced:
            prompt_ids.append(self.tool_call_id)  # the reply starts inside the call
            guide = await self._guide(_call_schema(registry, body.tool_choice), "tools")
        elif isinstance(body.response_format, JsonSchemaFormat):
            guide = await self._guide(body.response_format.json_schema.json_schema, "response_format")
        params = self._params(body, len(prompt_ids), guide, "messages")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        xrays = [RequestXray() for _ in range(body.n or 1)] if _wants_xray(request) else None
        stream = await self._submit(prompt_ids, params, body, guide, logprobs, xrays)
        names = frozenset(registry.names) if registry is not None and body.tool_choice != "none" else frozenset()
        choices = [_Choice(tool_names=names, forced=forced, end_ids=self._end_ids(body, guide),
                           tool_call_id=self.tool_call_id) for _ in range(body.n or 1)]
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        ended = None
        if xrays is not None:
            self._keep_xray(rid, _Xrayed(xrays, None if guide is None else guide.schema, choices,
                                         _last_user_message(messages), body.metadata))
            ended = lambda: self._trace(rid)  # noqa: E731
        if body.stream:
            chunks = self._chat_chunks(stream, choices, body, rid, created, len(prompt_ids), arrived)
            return EventSourceResponse(self._sse(chunks, stream, choices, ended), sep="\n")
        await self._collect(stream, choices, arrived, request, ended)
        lp = (lambda c: chat_logprobs(c.logprobs, self.token_bytes)) if body.logprobs else (lambda c: None)
        return JSONResponse(ChatCompletion(
            id=rid, created=created, model=self.model_name,
            choices=[ChatChoice(index=i, message=_message(c.end), logprobs=lp(c), finish_reason=c.end.reason)
                     for i, c in enumerate(choices)],
            usage=Usage.of(len(prompt_ids), sum(c.num_tokens for c in choices))).model_dump())

    async def _chat_chunks(self, stream, choices, body, rid, created, prompt_len, arrived):
        with_usage, so_far = _usage_options(body, choices, prompt_len)
        lp = (lambda entries: chat_logprobs(entries, self.token_bytes)) if body.logprobs else (lambda entries: None)

        def chunk(index, delta, logprobs=None, finish=None, *, usage=None) -> str:
            choice = [] if index is None else [ChunkChoice(index=index, delta=delta, logprobs=logprobs,
                                                           finish_reason=finish)]
            usage = so_far(index) if usage is None else usage
            return sse_data(ChatCompletionChunk(id=rid, created=created, model=self.model_name, choices=choice,
                                                usage=usage), with_usage=with_usage)

        for i in range(len(choices)):
            yield chunk(i, Delta(role="assistant", content=""))
        async for index, text, entries, end in self._events(stream, choices, arrived):
            if text or entries:
                yield chunk(index, Delta(content=text), lp(entries))
            if end is None:
                continue
            if end.call is not None:
                yield chunk(index, Delta(tool_calls=[{"index": 0, **openai_tool_call(end.call)}]))
            elif end.held:
                yield chunk(index, Delta(content=end.content), lp(choices[index].logprobs))
            yield chunk(index, Delta(), finish=end.reason)
        if with_usage:
            yield chunk(None, None, usage=Usage.of(prompt_len, sum(c.num_tokens for c in choices)))
        yield "[DONE]"

    # --- /v1/completions --------------------------------------------------------------------------

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        arrived = time.perf_counter()
        self.check_model(body.model)
        try:  # the caller owns the whole prompt here, template markers included
            prompt_ids = encode_prompt(self.tokenizer, body.prompt)
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error), param="prompt") from None
        self._check_ids(prompt_ids, "prompt")
        params = self._params(body, len(prompt_ids), None, "prompt", default_max_tokens=16)  # OpenAI's default
        stream = await self._submit(prompt_ids, params, body, None, body.logprobs)
        choices = [_Choice(end_ids=self._end_ids(body, None)) for _ in range(body.n or 1)]
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            chunks = self._completion_chunks(stream, choices, body, rid, created, len(prompt_ids), arrived)
            return EventSourceResponse(self._sse(chunks, stream, choices), sep="\n")
        await self._collect(stream, choices, arrived, request)
        lp = ((lambda c: completion_logprobs(c.logprobs, self.token_bytes, 0)) if body.logprobs is not None
              else (lambda c: None))
        return JSONResponse(TextCompletion(
            id=rid, created=created, model=self.model_name,
            choices=[CompletionChoice(index=i, text=c.end.content, logprobs=lp(c), finish_reason=c.end.reason)
                     for i, c in enumerate(choices)],
            usage=Usage.of(len(prompt_ids), sum(c.num_tokens for c in choices))).model_dump())

    async def _completion_chunks(self, stream, choices, body, rid, created, prompt_len, arrived):
        with_usage, so_far = _usage_options(body, choices, prompt_len)
        offsets = [0] * len(choices)  # characters shown so far, per choice (logprobs' text_offset)

        def chunk(new_choices, usage=None) -> str:
            usage = so_far(new_choices[0].index if new_choices else None) if usage is None else usage
            return sse_data(TextCompletion(id=rid, created=created, model=self.model_name, choices=new_choices,
                                       usage=usage), with_usage=with_usage)

        async for index, text, entries, end in self._events(stream, choices, arrived):
            logprobs = None
            if body.logprobs is not None:
                logprobs = completion_logprobs(entries, self.token_bytes, offsets[index])
            offsets[index] += len(text)
            if text or entries or end is not None:
                yield chunk([CompletionChoice(index=index, text=text, logprobs=logprobs,
                                              finish_reason=None if end is None else end.reason)])
        if with_usage:
            yield chunk([], Usage.of(prompt_len, sum(c.num_tokens for c in choices)))
        yield "[DONE]"

    # --- /tokenize and /detokenize (vLLM's) -------------------------------------------------------

    def tokenize(self, body: TokenizeRequest) -> dict:
        """The ids the model would read: a prompt as /v1/completions encodes it, messages as
        /v1/chat/completions does (the chat template, markers included)."""
        if body.model is not None:
            self.check_model(body.model)
        try:
            if body.messages is not None:
                messages = from_openai_messages([m.model_dump(exclude_none=True) for m in body.messages])
                ids = encode_chat(self.tokenizer, messages, add_generation_prompt=body.add_generation_prompt)
            else:
                ids = encode_prompt(self.tokenizer, body.prompt)
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error), param="messages" if body.messages is not None else "prompt") from None
        strs = [self.token_bytes(t).decode("utf-8", errors="replace") for t in ids] if body.return_token_strs else None
        return {"count": len(ids), "max_model_len": self.engine.window, "tokens": ids, "token_strs": strs}

    def detokenize(self, body: DetokenizeRequest) -> dict:
        if body.model is not None:
            self.check_model(body.model)
        self._check_ids(body.tokens, "tokens")
        return {"prompt": self.tokenizer.decode(body.tokens)}

    # --- /course (the X-ray; standard clients never call these) ------------------------------------

    def xray(self, completion_id: str, *, tokens_from: int = 0, steps_from: int = 0) -> dict:
        """The X-ray of a recent chat completion that asked for one (header X-Course-Xray: 1),
        one document per choice; readable while it streams (``tokens_from``, ``steps_from``:
        only what is new since an earlier read)."""
        kept = self._xrays.get(completion_id)
        if kept is None:
            raise OpenAIError(404, f"no X-ray for {completion_id!r}: only the latest {XRAYS_KEPT} chat completions "
                                   "sent with the header 'X-Course-Xray: 1' have one", code="not_found")
        docs = []
        for record, choice in zip(kept.records, kept.choices):
            end = choice.end
            extra = {"reply": None if end is None else {"finish_reason": end.reason, "content": end.content,
                                                         "tool_call": None if end.call is None else
                                                         openai_tool_call(end.call)}}
            extra["trace"] = None if kept.traces is None else kept.traces[len(docs)]
            extra["trace_pending"] = self.trace_log is not None and kept.traces is None  # written at the end
            try:
                docs.append(xray_document(record, self.tokenizer, num_blocks=self.engine.block_manager.num_blocks,
                                          schema=kept.schema, extra=extra, tokens_from=tokens_from,
                                          steps_from=steps_from))
            except ValueError as error:
                raise OpenAIError(400, str(error)) from None
        return {"id": completion_id, "object": "course.xray", "choices": docs}

    async def attention(self, completion_id: str, token: int, choice: int = 0) -> dict:
        """Each layer's and head's attention from the position that produced reply token ``token``
        (a second pass of the reference transformer, off the event loop)."""
        kept = self._xrays.get(completion_id)
        if kept is None:
            self.xray(completion_id)  # raises the 404 that says which completions have an X-ray
        if not 0 <= choice < len(kept.records):
            raise OpenAIError(400, f"choice {choice} does not exist; this completion has {len(kept.records)}",
                              param="choice")
        try:
            return await asyncio.to_thread(token_attention, self.engine.model, self.tokenizer, kept.records[choice], token)
        except ValueError as error:
            raise OpenAIError(400, str(error), param="token") from None

    def pool(self) -> dict:
        """The KV pool and the queues after the engine's latest step."""
        snap, manager = self.async_engine.snapshot, self.engine.block_manager
        return {"num_blocks": manager.num_blocks, "block_size": manager.block_size,
                "num_used_blocks": snap.num_used_blocks, "num_running": snap.num_running,
                "num_waiting": snap.num_waiting, "prefix_cache_hit_rate": snap.prefix_cache_hit_rate}

    def _trace(self, completion_id: str) -> None:
        """The request has ended (or its client left): one trace line per choice, kept for the X-ray."""
        kept = self._xrays.get(completion_id)
        if self.trace_log is None or kept is None or kept.traces is not None:
            return
        if self._weights_sha256 is None:
            self._weights_sha256 = weights_fingerprint(self.engine.model)
        traces = []
        for record in kept.records:
            doc = xray_document(record, self.tokenizer, schema=kept.schema)
            self.trace_log.append(trace_record(doc, request_id=completion_id, model_name=self.model_name,
                                               weights_sha256=self._weights_sha256, user_message=kept.user_message,
                                               request_metadata=kept.request_metadata))
            traces.append(last_entry(self.trace_log.path))
        kept.traces = traces

    def _keep_xray(self, completion_id: str, xrayed: _Xrayed) -> None:
        self._xrays[completion_id] = xrayed
        while len(self._xrays) > XRAYS_KEPT:
            self._xrays.popitem(last=False)

    # --- shared -----------------------------------------------------------------------------------

    def _check_ids(self, ids: list[int], param: str) -> None:
        vocab = self.engine.model.config.vocab_size
        if any(t >= vocab for t in ids):
            raise OpenAIError(400, f"{param} token ids must be below the vocabulary size {vocab}", param=param)

    def check_model(self, name: str) -> None:
        if name != self.model_name:
            raise OpenAIError(404, f"The model `{name}` does not exist; this server serves `{self.model_name}` "
                                   "(see GET /v1/models)", param="model", code="model_not_found")

    def _tools(self, body: ChatCompletionRequest) -> ToolRegistry | None:
        """The request's tools through course_lib.tools' checks (names, schemas, duplicates)."""
        if not body.tools:
            return None
        try:
            registry = ToolRegistry(Tool(t.function.name, t.function.description, t.function.parameters, _not_run)
                                    for t in body.tools)
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error), param="tools") from None
        choice = body.tool_choice
        if not isinstance(choice, (str, type(None))) and choice.function.name not in registry:
            raise OpenAIError(400, f"tool_choice names {choice.function.name!r}, which is not among the tools "
                                   f"({', '.join(registry.names)})", param="tool_choice")
        return registry

    async def _guide(self, schema: dict, param: str) -> JSONGuide:
        """The JSONGuide for ``schema``, built off the event loop (it compiles a DFA) and kept."""
        key = json.dumps(schema, sort_keys=True)
        guide = self._guides.get(key)
        if guide is None:
            try:
                guide = await asyncio.to_thread(JSONGuide, schema, self.tokenizer)
            except Exception as error:  # UnsupportedSchema, UnsatisfiableSchema, jsonschema's SchemaError
                raise OpenAIError(400, f"the schema cannot be enforced: {error}", param=param) from None
            self._guides[key] = guide
            if len(self._guides) > 32:
                self._guides.popitem(last=False)
        self._guides.move_to_end(key)
        return guide

    def _params(self, body, prompt_len: int, guide, prompt_param: str, *,
                default_max_tokens: int | None = None) -> SamplingParams:
        window, requested = self.engine.window, body.max_new_tokens
        if prompt_len >= window or (requested is not None and prompt_len + requested > window):
            raise OpenAIError(400, f"This model's maximum context length is {window} tokens. However, you requested "
                                   f"{prompt_len + (requested or 0)} tokens ({prompt_len} in the {prompt_param}, "
                                   f"{requested or 0} in the completion). Please reduce the length of the "
                                   f"{prompt_param} or completion.", param=prompt_param, code="context_length_exceeded")
        room = window - prompt_len
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        if guide is not None and (stop or body.ignore_eos):
            name = "stop" if stop else "ignore_eos"
            raise OpenAIError(400, f"{name} cannot be combined with a schema-constrained reply (response_format "
                                   "json_schema or a required tool call): the grammar decides where it ends",
                              param=name)
        try:
            return SamplingParams(
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p, top_k=max(body.top_k or 0, 0),
                min_p=body.min_p or 0.0, frequency_penalty=body.frequency_penalty or 0.0,
                presence_penalty=body.presence_penalty or 0.0, repetition_penalty=body.repetition_penalty or 1.0,
                max_new_tokens=requested if requested is not None else min(default_max_tokens or room, room),
                stop=stop, seed=body.seed)
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error)) from None

    def _end_ids(self, body, guide) -> frozenset[int]:
        if guide is not None:
            return frozenset({guide.eos_id})
        return frozenset() if body.ignore_eos else self.engine.eos_ids

    async def _submit(self, prompt_ids, params, body, guide, logprobs, xrays=None):
        n = body.n or 1
        if n > self.async_engine.capacity:
            raise OpenAIError(400, f"n={n} choices can never fit: this server holds {self.async_engine.capacity} "
                                   "requests at once (--max-num-seqs plus --max-waiting); ask for fewer", param="n")
        # Choice i samples with seed + i: reproducible, and n choices still differ from each other.
        seeded = [params if params.seed is None else replace(params, seed=params.seed + i) for i in range(n)]
        submissions = [Submission(prompt_ids, p, guide, logprobs, () if body.ignore_eos else None,
                                  None if xrays is None else xrays[i]) for i, p in enumerate(seeded)]
        try:
            stream = await self.async_engine.submit(submissions)
        except QueueFull as error:
            raise OpenAIError(429, str(error), type="rate_limit_error", code="queue_full",
                              headers={"Retry-After": "1"}) from None
        except EngineStopped as error:
            raise _unavailable(error) from None
        except (TypeError, ValueError) as error:
            raise OpenAIError(400, str(error)) from None
        self.metrics.prompt_tokens.inc(len(prompt_ids))
        return stream

    async def _events(self, stream, choices: list[_Choice], arrived: float):
        """(choice index, text to show, logprob entries to show, its _End or None) per engine output."""
        first = True
        async for index, output in stream:
            if output.finish_reason == "abort":  # abort_all(): the server is shutting down
                raise EngineStopped("the server is shutting down; the request was aborted, retry it")
            if first and output.token_ids:
                self.metrics.ttft.observe(time.perf_counter() - arrived)
                first = False
            self.metrics.generated_tokens.inc(len(output.token_ids))
            text, entries = choices[index].add(output)
            if output.finished:
                self.metrics.requests.labels(choices[index].end.reason).inc()
            yield index, text, entries, choices[index].end if output.finished else None

    async def _collect(self, stream, choices, arrived: float, request: Request, ended=None) -> None:
        """Run a non-streaming request to its end; abort it if the client hangs up first."""
        async def drain():
            async for _ in self._events(stream, choices, arrived):
                pass

        task = asyncio.ensure_future(drain())
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if not task.done() and await request.is_disconnected():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    # Nobody will read this; it ends the handler quietly (nginx's code for it).
                    raise OpenAIError(499, "the client closed the request", code="client_closed_request")
            task.result()
        except EngineStopped as error:
            raise _unavailable(error) from None
        finally:
            self._abandon(stream, choices, ended)

    async def _sse(self, payloads, stream, choices, ended=None):
        """Around an SSE payload generator: a shutdown becomes an error event, and a client that
        left (this generator cancelled or closed) aborts the request, which frees its blocks."""
        try:
            async for payload in payloads:
                yield payload
        except EngineStopped as error:
            yield json.dumps(_unavailable(error).body())
            yield "[DONE]"
        finally:
            self._abandon(stream, choices, ended)

    def _abandon(self, stream, choices, ended=None) -> None:
        for choice in choices:
            if choice.end is None:
                self.metrics.requests.labels("abort").inc()
        stream.abort()  # a no-op once every choice has finished
        if ended is not None:
            ended()

    def token_bytes(self, token: int) -> bytes:
        raw = self._token_bytes.get(token)
        if raw is None:
            raw = self._token_bytes[token] = self.tokenizer.decode_bytes([token])
        return raw


def _usage_options(body, choices: list[_Choice], prompt_len: int):
    """(with_usage, so_far): whether the stream reports usage (``stream_options.include_usage``),
    and the usage each chunk carries: with vLLM's ``continuous_usage_stats`` the tokens its choice
    has produced so far, else None (only the final chunk has usage)."""
    options = body.stream_options
    with_usage = bool(options and options.include_usage)
    if not (with_usage and options.continuous_usage_stats):
        return with_usage, lambda index: None
    return True, lambda index: None if index is None else Usage.of(prompt_len, choices[index].num_tokens)


def _last_user_message(messages) -> str:
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def _wants_xray(request: Request) -> bool:
    return request.headers.get(XRAY_HEADER, "").strip().lower() in ("1", "true", "on")


def _unavailable(error: EngineStopped) -> OpenAIError:
    return OpenAIError(503, str(error), type="server_error", code="unavailable")


def _message(end: _End) -> ChatMessageOut:
    if end.call is not None:
        return ChatMessageOut(content=None, tool_calls=[ToolCallOut.model_validate(openai_tool_call(end.call))])
    return ChatMessageOut(content=end.content)


def _call_schema(registry: ToolRegistry, tool_choice) -> dict:
    """The JSON after ``<|tool_call|>``: ``{"name": <one of the tools>, "arguments": <its schema>}``."""
    tools = list(registry) if tool_choice == "required" else [registry.get(tool_choice.function.name)]
    branches = [{"type": "object", "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                 "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _not_run(**_):
    raise RuntimeError("the server returns tool calls to the client, which runs them; it never runs one")
