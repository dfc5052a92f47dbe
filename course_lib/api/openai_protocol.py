"""OpenAI's wire format: request models that validate once at the boundary, the response and
chunk shapes, and the error body every failure is reported in.

>>> ChatCompletionRequest.model_validate({"model": "tinychat", "messages": [
...     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}).messages[0].content
'Hi'
>>> error = validation_error([{"type": "extra_forbidden", "loc": ("body", "logit_bias"), "msg": "..."}])
>>> error.status, error.body()["error"]["param"]
(400, 'logit_bias')
>>> print(error.body()["error"]["message"])
logit_bias is not supported by this server (the course sampler has no per-token bias); remove it

Parameters fall in four groups. Implemented ones are fields below. OpenAI's metadata that does
not change what is generated (``user``, ``metadata``, ``store``, ...) is accepted and does not
change the reply; an X-rayed request's trace line keeps its ``metadata`` tags, for slicing.
Parameters that would change generation but are not implemented are in ``UNSUPPORTED`` and
rejected with a 400 that names them (sending one with an empty value, such as
``"logit_bias": {}``, asks for nothing and is accepted). Anything else is an unknown argument,
rejected as OpenAI rejects it. The extensions ``top_k``, ``min_p``, ``repetition_penalty``,
``ignore_eos`` and ``stream_options.continuous_usage_stats`` use vLLM's names (send them with the
openai client's ``extra_body``), as do the ``/tokenize`` and ``/detokenize`` bodies.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["ChatCompletion", "ChatCompletionChunk", "ChatCompletionRequest", "CompletionRequest", "DetokenizeRequest",
           "OpenAIError", "TextCompletion", "TokenizeRequest", "UNSUPPORTED", "Usage", "sse_data", "validation_error"]

UNSUPPORTED = {
    "logit_bias": "the course sampler has no per-token bias",
    "audio": "tinychat reads and writes text only",
    "modalities": "tinychat writes text only; send [\"text\"] or leave it out",
    "functions": "it is the deprecated form of tools; send tools=[{\"type\": \"function\", ...}]",
    "function_call": "it is the deprecated form of tool_choice; send tool_choice",
    "prediction": "predicted outputs are not implemented",
    "web_search_options": "the server has no web search",
    "reasoning_effort": "tinychat is not a reasoning model",
    "verbosity": "tinychat has no verbosity control",
    "suffix": "tinychat was not trained to fill in the middle",
    "echo": "echoing the prompt is not implemented",
    "best_of": "server-side best-of sampling is not implemented; use n and pick on the client",
}
HARMLESS_VALUES = (None, "", {}, [], False, ["text"], 1)  # an unsupported parameter set to "nothing"
MAX_CHOICES = 16   # n above this would let one request fill the whole waiting queue
MAX_STOP = 4       # OpenAI's limit on stop sequences


class OpenAIError(Exception):
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def validation_error(errors: list[dict]) -> OpenAIError:
    """Pydantic's (or FastAPI's) validation errors -> one 400 naming the first bad field; an
    unsupported or unknown parameter is reported before any other mistake."""
    errors = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")
    if not errors:
        return OpenAIError(400, "the request is invalid")
    first = errors[0]
    loc = [str(part) for part in first["loc"] if part != "body"]
    param = ".".join(loc) or None
    if first["type"] == "json_invalid":
        reason = first.get("ctx", {}).get("error", first["msg"])
        return OpenAIError(400, f"the request body is not valid JSON ({reason}); send a JSON object")
    if first["type"] == "extra_forbidden" and loc:
        name = loc[-1]
        if len(loc) == 1 and name in UNSUPPORTED:
            return OpenAIError(400, f"{name} is not supported by this server ({UNSUPPORTED[name]}); remove it",
                               param=param, code="unsupported_parameter")
        return OpenAIError(400, f"Unrecognized request argument supplied: {param}", param=param,
                           code="unknown_parameter")
    if first["type"] == "invalid_parameter":  # a rule across fields (_invalid): it names its field
        return OpenAIError(400, first["msg"], param=first["ctx"]["param"], code="invalid_value")
    if not loc:
        return OpenAIError(400, f"the request body must be a JSON object with model and messages (or prompt): "
                                f"{first['msg']}")
    message = first["msg"].removeprefix("Value error, ")
    return OpenAIError(400, f"{param}: {message}", param=param, code="invalid_value")


def _invalid(param: str, message: str) -> PydanticCustomError:
    """An error for a rule that spans fields, raised where pydantic cannot locate it itself."""
    return PydanticCustomError("invalid_parameter", message, {"param": param})


class _Strict(BaseModel):
    # strict: 1.0 is not an int and "0.5" is not a number; forbid: unknown fields are errors.
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


# --- requests ------------------------------------------------------------------------------------

class FunctionCall(_Strict):
    name: str
    arguments: str            # a JSON string, as OpenAI sends it


class ToolCallEntry(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None
    name: str | None = None   # accepted; tinychat's template has no speaker names, so not shown
    tool_calls: list[ToolCallEntry] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None  # an earlier reply's refusal; tinychat never writes one

    @field_validator("content", mode="before")
    @classmethod
    def join_text_parts(cls, content: object) -> object:
        """``[{"type": "text", "text": ...}, ...]`` -> one string; any other part is an error."""
        if not isinstance(content, list):
            return content
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"only text content parts ({{\"type\": \"text\", \"text\": ...}}) are "
                                 f"supported; tinychat reads text only, got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)


class FunctionDefinition(_Strict):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None  # the server always honours the schema when it constrains a call


class ToolDefinition(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class ToolChoiceFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: ToolChoiceFunction


class JsonSchemaSpec(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None  # the grammar mask enforces the schema whatever this says
    description: str | None = None


class TextFormat(_Strict):
    type: Literal["text"]


class JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class JsonObjectFormat(_Strict):
    type: Literal["json_object"]

    @model_validator(mode="after")
    def refuse(self):
        raise _invalid("response_format", '"json_object" needs a grammar for any JSON value, which the course '
                       'compiler does not build; send {"type": "json_schema", "json_schema": {"name": ..., '
                       '"schema": ...}}')


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None  # padding against side channels; never added here
    # vLLM's extension (load clients such as guidellm send it): with include_usage, every chunk
    # also carries the usage so far of the choice it belongs to.
    continuous_usage_stats: bool | None = None


Unit = Annotated[float, Field(ge=0, le=1)]
Penalty = Annotated[float, Field(ge=-2, le=2)]


class _Sampling(_Strict):
    """What chat and completions share: the model, the sampling knobs, streaming, metadata."""

    model: str
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    seed: Annotated[int, Field(ge=-2**63, lt=2**63 - MAX_CHOICES)] | None = None  # torch's range; choice i: seed + i
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # vLLM's extensions
    top_k: Annotated[int, Field(ge=-1)] | None = None  # -1 or 0: off
    min_p: Unit | None = None
    repetition_penalty: Annotated[float, Field(gt=0)] | None = None
    ignore_eos: bool | None = None  # keep generating past end tokens, to max_tokens (load tests)
    # Metadata: accepted, changes nothing that is generated.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None

    @model_validator(mode="before")
    @classmethod
    def drop_harmless_unsupported(cls, data: object) -> object:
        """An unsupported parameter set to "nothing" (``logit_bias: {}``, ``echo: false``, ``best_of: 1``)
        asks for nothing unsupported: drop it rather than refuse the request."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items()
                    if not (k in UNSUPPORTED and any(v == h and type(v) is type(h) for h in HARMLESS_VALUES))}
        return data

    @field_validator("stop")
    @classmethod
    def stop_not_empty(cls, stop):
        for s in [stop] if isinstance(stop, str) else stop or []:
            if not s:
                raise ValueError("stop sequences must be non-empty strings")
        return stop

    @model_validator(mode="after")
    def usage_needs_stream(self):
        if self.stream_options is not None and not self.stream:
            raise _invalid("stream_options", "stream_options is only allowed with stream: true")
        return self


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: Annotated[TextFormat | JsonSchemaFormat | JsonObjectFormat,
                               Field(discriminator="type")] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None  # tinychat makes at most one call per turn, which both allow

    @model_validator(mode="after")
    def consistent(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise _invalid("top_logprobs", "top_logprobs needs logprobs: true")
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise _invalid("max_tokens", "send max_completion_tokens or max_tokens (its deprecated name), not both")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise _invalid("tool_choice", f"tool_choice {self.tool_choice!r} needs tools; send the tools it may call")
        if self.tools and isinstance(self.response_format, JsonSchemaFormat) and self.tool_choice != "none":
            raise _invalid("response_format", "response_format json_schema with tools is not supported: a tinychat "
                           "turn is one call or one answer; send tool_choice \"none\" or leave out response_format")
        return self

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None  # OpenAI's cap for completions

    @field_validator("prompt", mode="before")
    @classmethod
    def one_prompt(cls, prompt: object) -> object:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            raise ValueError("send one prompt (a string or a list of token ids) per request; "
                             "batches of prompts are not supported")
        return prompt

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_tokens


class TokenizeRequest(_Strict):
    """vLLM's ``POST /tokenize``: a text ``prompt`` (as /v1/completions reads it) or chat ``messages``
    (through the chat template, as /v1/chat/completions reads them), never both."""

    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    add_generation_prompt: bool = True   # messages only: end with the assistant marker
    add_special_tokens: bool = True      # tinychat's tokenizer adds no BOS either way
    return_token_strs: bool = False

    @model_validator(mode="after")
    def one_input(self):
        if (self.prompt is None) == (self.messages is None):
            raise _invalid("prompt", "send either prompt (text) or messages (a chat), not both and not neither")
        return self


class DetokenizeRequest(_Strict):
    """vLLM's ``POST /detokenize``: token ids back to text."""

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


# --- responses -----------------------------------------------------------------------------------

class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None
    refusal: None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: dict[str, Any] | None = None
    finish_reason: str


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    """A chunk's increment: only the keys it carries (``{"content": "Hi"}``), as OpenAI sends."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None

    @model_serializer
    def present_keys(self) -> dict[str, Any]:
        return {k: v for k, v in (("role", self.role), ("content", self.content), ("tool_calls", self.tool_calls))
                if v is not None}


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class TextCompletion(BaseModel):
    """A /v1/completions response, and (with ``finish_reason`` None until the end) each chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None


def sse_data(response: BaseModel, *, with_usage: bool) -> str:
    """One SSE ``data:`` payload. OpenAI puts ``"usage": null`` in every chunk only when the
    client asked for usage (``stream_options.include_usage``), and no key otherwise."""
    return response.model_dump_json(exclude=None if with_usage else {"usage"})


def chat_logprobs(entries, token_bytes) -> dict[str, list]:
    """Engine ``TokenLogprob``s -> ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}``."""
    def one(token_id: int, logprob: float) -> dict[str, Any]:
        raw = token_bytes(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    return {"content": [{**one(e.token_id, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]}
                        for e in entries]}


def completion_logprobs(entries, token_bytes, text_offset: int) -> dict[str, list]:
    """Engine ``TokenLogprob``s -> the legacy ``{"tokens", "token_logprobs", "top_logprobs",
    "text_offset"}`` of /v1/completions; offsets count from ``text_offset``."""
    tokens = [token_bytes(e.token_id).decode("utf-8", errors="replace") for e in entries]
    offsets = []
    for token in tokens:
        offsets.append(text_offset)
        text_offset += len(token)
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{token_bytes(t).decode("utf-8", errors="replace"): lp for t, lp in e.top}
                             for e in entries],
            "text_offset": offsets}
