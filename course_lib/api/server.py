"""``course serve``: an OpenAI-compatible HTTP server on the course's serving engine.

    $ course serve --port 8000
    serving tinychat at http://127.0.0.1:8000/v1 (Ctrl-C stops it)

Any OpenAI client then talks to it (``OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-")``).
In-process, for tests and notebooks:

>>> from fastapi.testclient import TestClient
>>> from course_lib.model import load_model, load_tokenizer
>>> app = create_app(load_model("tinychat", device="cpu"), load_tokenizer("tinychat"))
>>> with TestClient(app) as client:
...     reply = client.post("/v1/chat/completions", json={"model": "tinychat", "temperature": 0,
...         "messages": [{"role": "user", "content": "What is 2 + 2? Answer in a sentence."}]}).json()
>>> reply["choices"][0]["message"]["content"], reply["choices"][0]["finish_reason"]
('The answer is 4.', 'stop')

The chat page with the request X-ray is at ``GET /`` (``course_lib.xray``; its data at ``GET
/course/xray/{completion_id}`` and ``GET /course/pool``). Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /tokenize`` and ``POST /detokenize`` (vLLM's), ``GET /health``, ``GET /metrics`` (Prometheus). Which parameters are implemented, accepted or
rejected is in ``openai_protocol``; the engine runs on its own thread (``async_engine``).

How tools and structured output map onto the engine: ``openai_service``.
"""
from __future__ import annotations

import argparse
import contextlib
import hmac
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from course_lib.api.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from course_lib.api.openai_protocol import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest, OpenAIError,
                                            TokenizeRequest, validation_error)
from course_lib.api.openai_service import OpenAIService
from course_lib.context.trace_log import TraceLog
from course_lib.serving.async_engine import AsyncEngine
from course_lib.serving.engine import Engine
from course_lib.xray import STATIC

__all__ = ["DEFAULT_MAX_NUM_SEQS", "create_app", "main"]

# Requests decoded together; later ones wait. vLLM's CPU default: at 64 concurrent chats a limit
# of 32 kept half of them queued, and their first token waited for a whole reply (bench_step).
DEFAULT_MAX_NUM_SEQS = 128

# --- the app -------------------------------------------------------------------------------------

def create_app(model, tokenizer, *, model_name: str = "tinychat", api_key: str | None = None,
               max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, max_waiting: int = 128, speculative=None,
               trace_log: str | Path | None = None) -> FastAPI:
    """The server as an ASGI app over a new Engine on ``model`` (the engine's thread starts and
    stops with the app's lifespan). ``api_key``: every /v1 request must send
    ``Authorization: Bearer <api_key>``. ``max_waiting``: requests beyond the ``max_num_seqs``
    running ones that may wait; more get 429. ``speculative`` as in ``Engine``. ``trace_log``: a
    file where every X-rayed request leaves its redacted, hash-chained trace line (None: none)."""
    if tokenizer is None:
        raise ValueError("the server needs the model's tokenizer (load_tokenizer(name)) to read and write text")
    if api_key is not None and (not isinstance(api_key, str) or not api_key):
        raise ValueError("api_key must be a non-empty string, or None to serve without authentication")
    engine = Engine(model, tokenizer, max_num_seqs=max_num_seqs, speculative=speculative)
    async_engine = AsyncEngine(engine, max_waiting=max_waiting)
    metrics = ServerMetrics(lambda: async_engine.snapshot)
    service = OpenAIService(engine, async_engine, metrics, model_name,
                            trace_log=None if trace_log is None else TraceLog(trace_log))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async_engine.start()
        try:
            yield
        finally:
            async_engine.stop()  # aborts whatever is left and joins the engine thread

    app = FastAPI(title=f"course serve: {model_name}", lifespan=lifespan)
    app.state.async_engine, app.state.metrics = async_engine, metrics

    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, error: OpenAIError):
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError):
        return await openai_error(request, validation_error(list(error.errors())))  # 400, never 422

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        code = "not_found" if error.status_code == 404 else None
        return await openai_error(request, OpenAIError(error.status_code, f"{error.detail}: {request.method} "
                                                       f"{request.url.path}", code=code))

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(_bearer(api_key))])

    @v1.get("/models")
    async def models():
        return service.models()

    @v1.get("/models/{name}")
    async def model_card(name: str):
        service.check_model(name)
        return service.model_card()

    @v1.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        return await service.chat(body, request)

    @v1.post("/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await service.completions(body, request)

    # vLLM's token endpoints, at the root as vLLM serves them (its benchmark client aligns prompt
    # lengths through /tokenize); behind the same key as /v1.
    tokens = APIRouter(dependencies=[Depends(_bearer(api_key))])

    @tokens.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        return service.tokenize(body)

    @tokens.post("/detokenize")
    async def detokenize(body: DetokenizeRequest):
        return service.detokenize(body)

    # The X-ray (course_lib.xray): a course endpoint beside the OpenAI ones, behind the same key.
    course = APIRouter(prefix="/course", dependencies=[Depends(_bearer(api_key))])

    @course.get("/xray/{completion_id}")
    async def xray(completion_id: str, tokens_from: int = 0, steps_from: int = 0):
        return service.xray(completion_id, tokens_from=tokens_from, steps_from=steps_from)

    @course.get("/xray/{completion_id}/attention")
    async def attention(completion_id: str, token: int, choice: int = 0):
        return await service.attention(completion_id, token, choice)

    @course.get("/pool")
    async def pool():
        return service.pool()

    app.include_router(v1)
    app.include_router(tokens)
    app.include_router(course)

    # The chat page: static files shipped in the package (they hold no data; the page sends the
    # key, when the server has one, with every request it makes).
    pages = {p.name: p for p in STATIC.iterdir() if p.suffix in (".html", ".js", ".css")}

    @app.get("/", include_in_schema=False)
    async def chat_page():
        return FileResponse(pages["index.html"], headers={"Cache-Control": "no-cache"})

    @app.get("/static/{name}", include_in_schema=False)
    async def static_file(name: str):
        if name not in pages:  # a fixed list: no path from the URL ever reaches the file system
            raise HTTPException(404, "no such file")
        return FileResponse(pages[name], headers={"Cache-Control": "no-cache"})

    @app.get("/health")
    async def health():
        if not async_engine.running:
            raise OpenAIError(503, "the engine thread is not running", type="server_error", code="unavailable")
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


def _bearer(api_key: str | None):
    """A dependency that checks ``Authorization: Bearer <api_key>`` (in constant time)."""
    async def check(authorization: str | None = Header(default=None)) -> None:
        if api_key is None:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            missing = "no API key was sent" if not authorization else "incorrect API key provided"
            raise OpenAIError(401, f"{missing}; send the key the server was started with (--api-key) as the "
                                   "header Authorization: Bearer <key>", code="invalid_api_key")
    return check


# --- course serve ------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course serve", description="Serve a course model over an "
                                     "OpenAI-compatible HTTP API (chat completions, completions, models, "
                                     "health, Prometheus metrics).")
    parser.add_argument("--model", default="tinychat", help="the course model to serve, or a local Hugging Face "
                        "checkpoint folder (Llama, Mistral, SmolLM2, Qwen2, Qwen3) (default: tinychat)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1; "
                        "0.0.0.0 exposes the server to your network)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    parser.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS,
                        help=f"requests decoded together (default: {DEFAULT_MAX_NUM_SEQS})")
    parser.add_argument("--max-waiting", type=int, default=128,
                        help="requests that may wait for a running slot; more get HTTP 429 (default: 128)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 requests")
    parser.add_argument("--speculative", choices=("ngram", "draft"), default=None,
                        help="speculative decoding: prompt lookup, or the model's draft (<model>-draft), k=4")
    parser.add_argument("--trace-log", default=None, metavar="FILE",
                        help="where the chat page's requests leave their redacted, hash-chained trace lines "
                             "(default: a new file in a temporary folder, printed at start)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where the model runs (default: CUDA when available, else CPU)")
    return parser


def main(argv: list[str] | None = None) -> int:
    import sys
    import tempfile

    import uvicorn

    from course_lib.model import load_model, load_tokenizer

    args = build_parser().parse_args(argv)
    try:
        model = load_model(args.model, device=args.device)
        tokenizer = load_tokenizer(args.model)
        speculative = None
        if args.speculative == "ngram":
            speculative = {"method": "ngram", "k": 4}
        elif args.speculative == "draft":
            speculative = {"method": "draft", "model": load_model(f"{args.model}-draft", device=model.device), "k": 4}
        trace_log = args.trace_log or Path(tempfile.mkdtemp(prefix="course-serve-")) / "trace.jsonl"
        served_name = Path(args.model).expanduser().name if Path(args.model).expanduser().is_dir() else args.model
        app = create_app(model, tokenizer, model_name=served_name, api_key=args.api_key,
                         max_num_seqs=args.max_num_seqs, max_waiting=args.max_waiting, speculative=speculative,
                         trace_log=trace_log)
    except (OSError, RuntimeError, TypeError, ValueError) as error:  # unknown model, missing weights, no CUDA
        print(f"course serve: {error}", file=sys.stderr)
        return 2

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):  # Ctrl-C: end every request now rather than wait for it
            app.state.async_engine.abort_all()
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=5))
    print(f"serving {served_name} at http://{args.host}:{args.port}/v1 (Ctrl-C stops it)", flush=True)
    print(f"chat with it and watch each request's X-ray at http://{args.host}:{args.port}/ "
          f"(trace lines in {trace_log})", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled, once it has shut down
        pass
    print("course serve: stopped; requests in flight were aborted and their blocks freed", flush=True)
    return 0
