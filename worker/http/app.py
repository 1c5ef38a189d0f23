"""`compactd serve`: the HTTP API over the service (FastAPI + uvicorn).

Sessions, exact counts and compactions under /v1/sessions; the model's own tokenizer under
/v1/tokenize and /v1/count (and llama-server's /tokenize and /apply-template, so the remote
backend can be tested against compactd itself); an OpenAI-compatible /v1/chat/completions so
an agent that takes a separate compaction model can point at compactd; /health (503 while
the model loads) and a hand-written Prometheus /metrics.

Every error is `{"error": {"code", "message", "type"}}`: 4xx for bad input, 429 with
Retry-After on overload, 503 while loading; never a traceback.

FastAPI is imported inside `create_app`, so the rest of the CLI does not pay for it (and so
this module does not use `from __future__ import annotations`: FastAPI resolves the route
annotations, which name classes imported inside that function).
"""

import argparse
import asyncio
import hmac
import inspect
import ipaddress
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from backends.base import Backend, BackendError, GenerationStats, collect

from .formats import FormatError
from .formats._common import block_text
from .pipeline import CompactionRefused
from .scheduler import MAX_QUEUE_DEPTH, Job, JobBackend, JobCancelled, Overloaded
from .service import (
    DEFAULT_CONTEXT_LIMIT,
    DEFAULT_PRE_THRESHOLD,
    CompactdService,
    ModelNotReady,
    ServiceConfig,
)
from .store import Conflict, NotFound, Store, StoreError

log = logging.getLogger("compactd.server")

DEFAULT_HOST = "127.0.0.1"
# Not the default of any local-model tool: ollama 11434, LM Studio 1234, llama-server and
# mlx_lm.server 8080, vLLM and llama-cpp-python 8000, Jupyter 8888, Gradio 7860, Open WebUI 3000.
DEFAULT_PORT = 7433
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # a long transcript with tool outputs fits; a runaway upload does not
# 32 MiB at 1 MiB/s with room to spare; a client that stalls mid-upload gets a 408, not a held task.
DEFAULT_BODY_TIMEOUT_S = 60.0
# Request line and headers are a few hundred bytes: a connection that has not sent them by
# then is idle or a slowloris, and is closed (uvicorn alone waits forever).
DEFAULT_HEADER_TIMEOUT_S = 15.0
DEFAULT_CHAT_MAX_TOKENS = 1024  # when a request names no max_tokens (and the context allows it)
DISCONNECT_POLL_S = 0.25  # how often a waiting request checks whether its client went away
LOOPBACK_NAMES = ("localhost",)
# Far above any model's window (10M tokens exist), far below SQLite's 64-bit INTEGER: a bigger
# value is a client bug, answered 400 rather than overflowing the store (500).
MAX_CONTEXT_LIMIT = 1_000_000_000
EXIT_USAGE = 2  # as cli.EXIT_USAGE


# ----------------------------------------------------------------------------- errors


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, type_: str = "invalid_request_error",
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.type, self.headers = status, code, message, type_, headers


def error_body(code: str | int, message: str, type_: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": type_}}


def api_error_for(exc: BaseException) -> ApiError:
    """Map every exception the service raises to its HTTP answer."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", str(exc), "not_found_error")
    if isinstance(exc, Conflict):
        return ApiError(409, "conflict", str(exc), "conflict_error")
    if isinstance(exc, CompactionRefused):
        return ApiError(409, "compaction_refused", str(exc), "conflict_error")
    if isinstance(exc, FormatError):
        return ApiError(400, "unsupported_format", str(exc))
    if isinstance(exc, Overloaded):
        return ApiError(429, "overloaded", str(exc), "rate_limit_error", {"Retry-After": str(exc.retry_after)})
    if isinstance(exc, ModelNotReady):
        return ApiError(503, "model_loading", str(exc), "unavailable_error", {"Retry-After": "5"})
    if isinstance(exc, JobCancelled):
        return ApiError(409, "cancelled", f"job cancelled: {exc}", "conflict_error")
    if isinstance(exc, BackendError):
        return ApiError(502, "backend_error", str(exc), "server_error")
    if isinstance(exc, StoreError):
        return ApiError(400, "store_error", str(exc))
    if isinstance(exc, ValueError):
        return ApiError(400, "invalid_request", str(exc))
    return ApiError(500, "internal_error", f"internal error ({type(exc).__name__}); see the server log", "server_error")


# ----------------------------------------------------------------------------- settings


@dataclass
class Settings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    model: str | None = None
    engine: str = "auto"  # auto | llama | mlx | openai (a remote OpenAI-compatible engine)
    engine_url: str | None = None
    ctx: int | None = None
    threads: int | None = None
    tokenizer: str = "auto"
    db: str | None = None
    api_key: str | None = None
    context_limit: int = DEFAULT_CONTEXT_LIMIT
    pre_threshold: float = DEFAULT_PRE_THRESHOLD
    queue_size: int = MAX_QUEUE_DEPTH
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    rolling: bool = True
    log_level: str = "info"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Anything but loopback is reachable by others: refuse it without an API key."""
    if not is_loopback(host) and not api_key:
        raise ValueError(
            f"refusing to bind {host}: it is not a loopback address, so other machines could reach the "
            "model and the stored sessions; set --api-key (or COMPACTD_API_KEY), or bind 127.0.0.1"
        )


def backend_factory(settings: Settings) -> Callable[[], Backend]:
    def load() -> Backend:
        if settings.engine == "openai":
            from backends.openai_http import OpenAIHttpBackend

            url = settings.engine_url or settings.model
            if not url:
                raise BackendError("--engine openai needs --engine-url (the engine's base URL)")
            return OpenAIHttpBackend(url)
        from backends import load_backend

        options: dict[str, Any] = {}
        if settings.ctx:
            options["n_ctx"] = settings.ctx
        if settings.threads:
            options["n_threads"] = settings.threads
        if settings.tokenizer != "auto":
            options["tokenizer"] = settings.tokenizer
        backend = load_backend(settings.model, engine=settings.engine, **options)
        loader = getattr(backend, "load", None)
        if callable(loader):
            loader()  # weights now, so that 200 on /health means generation is ready
        return backend

    return load


# ----------------------------------------------------------------------------- request models


class TokenizeRequest(BaseModel):
    """llama-server's /tokenize body."""

    content: str
    add_special: bool = False
    parse_special: bool = True  # compactd always parses special tokens (the engine does)
    with_pieces: bool = False


class TokenizeResponse(BaseModel):
    tokens: list[int]


class ApplyTemplateRequest(BaseModel):
    messages: list[dict[str, Any]]
    add_generation_prompt: bool = True  # an extension; llama-server always adds it


class ApplyTemplateResponse(BaseModel):
    prompt: str


class V1TokenizeRequest(BaseModel):
    text: str


class V1TokenizeResponse(BaseModel):
    model: str
    tokens: list[int]
    count: int


class CountRequest(BaseModel):
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True


class CountResponse(BaseModel):
    model: str
    tokens: int
    kind: Literal["text", "messages"]


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # tools, top_p, ...: accepted, not used

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # compaction wants deterministic output
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    stop: str | list[str] | None = None


class TokenStatus(BaseModel):
    session_id: str
    tokens: int
    context_limit: int
    reserved: int
    usable: int
    overflow: bool
    pre_threshold: int
    rolling_ready: bool
    messages: int
    context_messages: int
    checkpoint_version: int | None
    counted_now: int


class JobView(BaseModel):
    id: str
    kind: str
    lane: str
    session_id: str | None
    status: str
    created: float
    started: float | None
    finished: float | None
    error: str | None
    result: Any = None


def _chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI request messages as the engine's template takes them (content parts flattened)."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m.get("role"), str):
            raise ApiError(400, "invalid_request", f"messages[{i}] has no role")
        msg = {k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
        msg["content"] = block_text(m.get("content"))
        out.append(msg)
    return out


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _json_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return response_format.get("schema") or {"type": "object"}
    if kind == "json_schema":
        # OpenAI nests it as json_schema.schema; llama-server also takes a top-level schema.
        schema = (response_format.get("json_schema") or {}).get("schema") or response_format.get("schema")
        if not isinstance(schema, dict):
            raise ApiError(400, "invalid_request", "response_format json_schema needs a schema object")
        return schema
    raise ApiError(400, "invalid_request", f"unsupported response_format type {kind!r}")


def _timings(stats: GenerationStats) -> dict[str, Any]:
    prompt_n = max(0, stats.prompt_tokens - stats.cached_prompt_tokens)
    return {
        "cache_n": stats.cached_prompt_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": round(stats.prompt_ms, 3),
        "prompt_per_token_ms": round(stats.prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(stats.prompt_tps, 3),
        "predicted_n": stats.decode_tokens,
        "predicted_ms": round(stats.decode_ms, 3),
        "predicted_per_token_ms": round(stats.decode_ms / stats.decode_tokens, 3) if stats.decode_tokens else 0.0,
        "predicted_per_second": round(stats.decode_tps, 3),
    }


def _usage(stats: GenerationStats) -> dict[str, Any]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.decode_tokens,
        "total_tokens": stats.prompt_tokens + stats.decode_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.cached_prompt_tokens},
    }


# ----------------------------------------------------------------------------- ASGI guards


class BodyLimitMiddleware:
    """413 for a body over the limit: by Content-Length up front, else while reading it here;
    408 for a body not received within `timeout_s`. The body is read here and replayed to the
    app, which then never sees an oversized body nor waits on a stalled upload."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float = DEFAULT_BODY_TIMEOUT_S):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = ApiError(413, "body_too_large",
                           f"request body exceeds the limit of {self.max_bytes} bytes (--max-body-bytes)")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _send_error(send, too_big)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks: list[bytes] = []
        seen = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return await _send_error(send, ApiError(
                    408, "request_timeout", f"request body not received within {self.timeout_s:g}s",
                    headers={"Connection": "close"}))
            if message["type"] != "http.request":
                return  # the client went away before finishing its upload
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                return await _send_error(send, too_big)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # later calls: disconnect detection

        await self.app(scope, replay, send)


class ApiKeyMiddleware:
    """`Authorization: Bearer KEY` on everything but /health, compared in constant time."""

    def __init__(self, app: Any, api_key: str):
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = auth.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
            return await _send_error(send, ApiError(401, "invalid_api_key", "missing or wrong API key "
                                                    "(Authorization: Bearer KEY)", "authentication_error",
                                                    {"WWW-Authenticate": "Bearer"}))
        await self.app(scope, receive, send)


def header_timeout_protocol(timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline on each request's line and headers: uvicorn
    waits forever on a connection that sends nothing, or half a request line (a slowloris);
    this one closes it after `timeout_s`. The body has its own deadline (BodyLimitMiddleware)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            self._arm()  # a kept-alive connection's next request gets the same deadline
            super().on_response_complete()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # this request's headers are in

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            idle = self.cycle is None or self.cycle.response_complete
            if idle and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> Any:
    """The uvicorn config `compactd serve` runs with (tests start real servers with it too)."""
    import uvicorn

    options: dict[str, Any] = {"host": settings.host, "port": settings.port, "log_level": settings.log_level,
                               "lifespan": "on", "timeout_graceful_shutdown": 10,
                               "http": header_timeout_protocol(settings.header_timeout_s)}
    return uvicorn.Config(app, **{**options, **overrides})


async def _send_error(send: Callable, err: ApiError) -> None:
    body = json.dumps(error_body(err.code, err.message, err.type)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- the app


async def wait_for_job(request: Any, service: CompactdService, job: Job) -> Any:
    """The job's result; if the client goes away first, the job is cancelled (dropped when
    queued, stopped at its next token when running)."""
    assert job.future is not None
    while True:
        done, _ = await asyncio.wait({job.future}, timeout=DISCONNECT_POLL_S)
        if done:
            return job.future.result()
        if await request.is_disconnected():
            service.scheduler.cancel(job, "client disconnected")
            raise ApiError(499, "client_closed", "client disconnected")


def create_app(
    settings: Settings,
    *,
    backend_loader: Callable[[], Backend] | None = None,
    store: Store | None = None,
) -> Any:
    from fastapi import FastAPI, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from .formats.export import to_anthropic, to_openai

    loader = backend_loader or backend_factory(settings)
    own_store = store is None
    store = store or Store(settings.db)
    from .scheduler import Scheduler

    service = CompactdService(
        store,
        ServiceConfig(context_limit=settings.context_limit, pre_threshold=settings.pre_threshold,
                      rolling=settings.rolling),
        scheduler=Scheduler(queue_size=settings.queue_size),
    )

    def load_in_background() -> None:
        try:
            service.set_backend(loader())
            log.info("model ready: %s", service.backend.info().model_name if service.backend else "?")
        except Exception as exc:  # noqa: BLE001 - reported by /health and every model endpoint
            service.load_error = f"model failed to load: {exc}"
            log.error("%s", service.load_error)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await service.start()
        threading.Thread(target=load_in_background, name="compactd-load", daemon=True).start()
        try:
            yield
        finally:
            await service.stop()
            if service.backend is not None:
                await asyncio.to_thread(service.backend.close)
            if own_store:
                store.close()

    app = FastAPI(title="compactd", version="0.1.0", lifespan=lifespan,
                  description="Local-model context compaction for coding agents.")
    app.state.service = service

    def error_response(err: ApiError) -> Any:
        return JSONResponse(error_body(err.code, err.message, err.type), status_code=err.status, headers=err.headers)

    @app.exception_handler(Exception)
    async def any_error(request: Request, exc: Exception) -> Any:
        err = api_error_for(exc)
        if err.status >= 500 and not isinstance(exc, (ModelNotReady, BackendError)):
            log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        if isinstance(exc, Overloaded):
            service.overloaded(exc)
        return error_response(err)

    for exc_type in (ApiError, NotFound, Conflict, CompactionRefused, FormatError, Overloaded, ModelNotReady,
                     JobCancelled, BackendError, StoreError, ValueError):
        app.add_exception_handler(exc_type, any_error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Any:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(ApiError(400, "invalid_json", "request body is not valid JSON"))
        detail = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in errors[:5])
        return error_response(ApiError(400, "invalid_request", detail or "invalid request"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ApiError(exc.status_code, code, str(exc.detail), "invalid_request_error"))

    def model_name() -> str:
        return service.require_backend().info().model_name

    async def json_body(request: Request) -> Any:
        raw = await request.body()
        ctype = request.headers.get("content-type", "")
        if "ndjson" in ctype or "jsonl" in ctype:
            return raw  # JSONL transcripts (Claude Code, pi, codex) go to the importers as bytes
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
        except RecursionError:
            raise ApiError(400, "invalid_json", "request body is nested too deeply to parse") from None

    # -- health and metrics ----------------------------------------------------------

    @app.get("/health")
    async def health() -> Any:
        if service.ready:
            return {"status": "ok"}
        message = service.load_error or "Loading model"
        return JSONResponse(error_body(503, message, "unavailable_error"), status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Any:
        return PlainTextResponse(service.render_metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- sessions --------------------------------------------------------------------

    transcript_body = {"requestBody": {"required": True, "description": "messages in any supported transcript "
                                       "format (OpenAI, Anthropic, Claude Code, pi, codex, SWE-agent, opencode)",
                                       "content": {"application/json": {"schema": {}},
                                                   "application/x-ndjson": {"schema": {"type": "string"}}}}}

    @app.post("/v1/sessions/{session_id}/messages", openapi_extra=transcript_body)
    async def append_messages(
        session_id: str, request: Request,
        format: str = Query("auto", description="transcript format, or auto to detect"),
        mode: Literal["append", "sync"] = Query(
            "append", description="append: the body holds new messages only (position-numbered ids continue "
                                  "after the stored ones); sync: the body is the whole transcript so far"),
        context_limit: int | None = Query(None, ge=256, le=MAX_CONTEXT_LIMIT, description="the agent model's context window"),
    ) -> Any:
        payload = await json_body(request)
        return await service.append(session_id, payload, fmt=format, mode=mode, context_limit=context_limit)

    @app.get("/v1/sessions/{session_id}")
    async def session_info(session_id: str) -> Any:
        info = store.session_info(session_id)
        return {"id": info.id, "created": info.created, "source_format": info.source_format,
                "context_limit": info.context_limit or settings.context_limit, "messages": info.message_count,
                "checkpoint_version": info.latest_checkpoint}

    @app.get("/v1/sessions/{session_id}/tokens", response_model=TokenStatus)
    async def session_tokens(session_id: str) -> Any:
        return await service.tokens(session_id)

    @app.post("/v1/sessions/{session_id}/compact")
    async def compact_session(
        session_id: str, request: Request,
        wait: bool = Query(True, description="wait for the checkpoint; false: 202 with a job to poll"),
        context_limit: int | None = Query(None, ge=256, le=MAX_CONTEXT_LIMIT),
    ) -> Any:
        job, extra = await service.submit_compaction(session_id, context_limit)
        if not wait:
            return JSONResponse({"job": service.job_view(job.id), **extra}, status_code=202)
        result = await wait_for_job(request, service, job)
        return {**result, **extra, "job_id": job.id, "checkpoint": checkpoint_view(session_id, "openai")}

    def checkpoint_view(session_id: str, fmt: str) -> dict[str, Any]:
        stored = store.latest_checkpoint(session_id)
        if stored is None:
            store.session_info(session_id)  # unknown session -> 404 first
            raise ApiError(404, "no_checkpoint", f"session {session_id!r} has no checkpoint yet", "not_found_error")
        data = stored.data
        out: dict[str, Any] = {"session_id": session_id, "version": stored.version, "format": fmt,
                               "boundary_message_id": stored.boundary_message_id, "tokens": data.get("tokens"),
                               "summary_text": data.get("summary_text"), "mode": data.get("audit", {}).get("mode")}
        if fmt == "anthropic":
            out.update(to_anthropic(data["messages"]))
        else:
            out["messages"] = to_openai(data["messages"])
        return out

    @app.get("/v1/sessions/{session_id}/checkpoint")
    async def get_checkpoint(session_id: str, format: Literal["openai", "anthropic"] = "openai") -> Any:
        return checkpoint_view(session_id, format)

    @app.get("/v1/sessions/{session_id}/history/search")
    async def history_search(session_id: str, q: str = Query(..., min_length=1),
                             limit: int = Query(20, ge=1, le=100)) -> Any:
        return await asyncio.to_thread(store.search, session_id, q, limit)

    @app.get("/v1/sessions/{session_id}/history/around")
    async def history_around(session_id: str, message_id: str = Query(..., min_length=1),
                             radius: int = Query(3, ge=0, le=50)) -> Any:
        return await asyncio.to_thread(store.around, session_id, message_id, radius)

    # -- jobs ------------------------------------------------------------------------

    @app.get("/v1/jobs/{job_id}", response_model=JobView)
    async def get_job(job_id: str) -> Any:
        return service.job_view(job_id)

    @app.delete("/v1/jobs/{job_id}", response_model=JobView)
    async def cancel_job(job_id: str) -> Any:
        job = service.scheduler.get(job_id)
        if job is None:
            service.job_view(job_id)  # 404 when unknown
            raise ApiError(409, "job_finished", f"job {job_id!r} has already finished", "conflict_error")
        service.scheduler.cancel(job, "cancelled by request")
        return service.job_view(job_id)

    # -- tokenizer -------------------------------------------------------------------

    @app.post("/v1/tokenize", response_model=V1TokenizeResponse)
    async def v1_tokenize(body: V1TokenizeRequest) -> Any:
        backend = service.require_backend()
        tokens = await asyncio.to_thread(backend.tokenize, body.text)
        return {"model": model_name(), "tokens": tokens, "count": len(tokens)}

    @app.post("/v1/count", response_model=CountResponse)
    async def v1_count(body: CountRequest) -> Any:
        backend = service.require_backend()
        if (body.text is None) == (body.messages is None):
            raise ApiError(400, "invalid_request", "give exactly one of text or messages")
        if body.messages is not None:
            msgs = _chat_messages(body.messages)
            n = await asyncio.to_thread(backend.count_messages, msgs, body.add_generation_prompt)
            return {"model": model_name(), "tokens": n, "kind": "messages"}
        n = await asyncio.to_thread(backend.count, body.text or "")
        return {"model": model_name(), "tokens": n, "kind": "text"}

    @app.post("/tokenize", response_model=TokenizeResponse)
    async def llama_tokenize(body: TokenizeRequest) -> Any:
        backend = service.require_backend()
        if body.with_pieces:
            raise ApiError(400, "invalid_request", "with_pieces is not supported")
        text = body.content
        meta = getattr(backend, "meta", None)
        if body.add_special and meta is not None and getattr(meta, "add_bos", False):
            text = getattr(meta, "bos_token", "") + text
        return {"tokens": await asyncio.to_thread(backend.tokenize, text)}

    @app.post("/apply-template", response_model=ApplyTemplateResponse)
    async def apply_template(body: ApplyTemplateRequest) -> Any:
        backend = service.require_backend()
        prompt = await asyncio.to_thread(backend.render_messages, _chat_messages(body.messages),
                                         body.add_generation_prompt)
        return {"prompt": prompt}

    # -- OpenAI-compatible -----------------------------------------------------------

    @app.get("/v1/models")
    async def models() -> Any:
        info = service.require_backend().info()
        return {"object": "list", "data": [{
            "id": info.model_name, "object": "model", "created": 0, "owned_by": "compactd",
            "meta": {"n_ctx": info.context_size, "n_ctx_train": info.trained_context, "n_vocab": info.vocab_size,
                     "engine": info.engine, "architecture": info.architecture, "quantization": info.quantization},
        }]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        backend = service.require_backend()
        messages = _chat_messages(body.messages)
        schema = _json_schema(body.response_format)
        prompt_tokens = await asyncio.to_thread(backend.count_messages, messages)
        ctx = backend.info().context_size
        wanted = body.max_completion_tokens or body.max_tokens
        max_tokens = wanted or min(DEFAULT_CHAT_MAX_TOKENS, max(0, ctx - prompt_tokens))
        if ctx and prompt_tokens + max_tokens > ctx:
            raise ApiError(400, "context_length_exceeded",
                           f"prompt of {prompt_tokens} tokens + {max_tokens} to generate exceeds the context of {ctx}")
        if max_tokens < 1:
            raise ApiError(400, "context_length_exceeded", f"prompt of {prompt_tokens} tokens fills the context of {ctx}")
        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": body.temperature, "json_schema": schema,
                                  "isolated": False}
        if body.stop and _accepts(backend.generate, "stop"):
            kwargs["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        name = body.model or model_name()
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()

        if not body.stream:
            def run(job: Job) -> tuple[str, GenerationStats]:
                return collect(JobBackend(backend, job, service.scheduler).generate(messages, **kwargs))

            job = service.scheduler.submit("chat", run, preemptible=False)
            text, stats = await wait_for_job(request, service, job)
            service.metrics.observe("compactd_chat_completion_seconds", time.perf_counter() - t0)
            return {
                "id": cid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": stats.finish_reason or "stop"}],
                "usage": _usage(stats), "timings": _timings(stats),
            }

        queue: asyncio.Queue = asyncio.Queue()
        end = object()

        def produce(job: Job) -> None:
            try:
                for item in JobBackend(backend, job, service.scheduler).generate(messages, **kwargs):
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except BaseException as exc:  # noqa: BLE001 - handed to the SSE stream
                loop.call_soon_threadsafe(queue.put_nowait, exc)
                raise
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, end)

        job = service.scheduler.submit("chat", produce, preemptible=False)

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            payload = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def events() -> AsyncIterator[str]:
            stats = GenerationStats()
            finished = False
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    item = await queue.get()
                    if item is end:
                        finished = True
                        break
                    if isinstance(item, BaseException):
                        finished = True
                        err = api_error_for(item)
                        yield f"data: {json.dumps(error_body(err.code, err.message, err.type))}\n\n"
                        return
                    if isinstance(item, GenerationStats):
                        stats = item
                        continue
                    yield chunk({"content": item})
                yield chunk({}, stats.finish_reason or "stop", usage=_usage(stats), timings=_timings(stats))
                yield "data: [DONE]\n\n"
                service.metrics.observe("compactd_chat_completion_seconds", time.perf_counter() - t0)
            finally:
                if not finished:  # the client went away: stop the generation at its next token
                    service.scheduler.cancel(job, "client disconnected")

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # Outermost first: the size limit applies before authentication reads anything.
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    return app


# ----------------------------------------------------------------------------- CLI


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(f"COMPACTD_{name}", default)


def _env_bool(name: str, default: bool) -> bool:
    value = _env(name)
    return default if value is None else value.strip().lower() in ("1", "true", "yes", "on")


def add_service_commands(sub: Any) -> None:
    """`compactd serve` and `compactd history`; every serve flag has a COMPACTD_* mirror
    (the flag wins)."""
    p = sub.add_parser("serve", help="serve compactions, counts and summaries to local agents over HTTP")
    p.add_argument("--host", default=_env("HOST", DEFAULT_HOST),
                   help="bind address (loopback by default; any other needs --api-key)")
    p.add_argument("--port", type=int, default=int(_env("PORT", DEFAULT_PORT)))
    p.add_argument("--model", default=_env("MODEL"), help="bundled model name, .gguf file or MLX dir")
    p.add_argument("--engine", choices=["auto", "llama", "mlx", "openai"], default=_env("ENGINE", "auto"),
                   help="openai: a running OpenAI-compatible engine at --engine-url (llama-server...)")
    p.add_argument("--engine-url", default=_env("ENGINE_URL"))
    p.add_argument("--ctx", type=int, default=int(_env("CTX", 0)) or None, help="engine context size")
    p.add_argument("--threads", type=int, default=int(_env("THREADS", 0)) or None)
    p.add_argument("--tokenizer", choices=["auto", "engine", "tokenizers"], default=_env("TOKENIZER", "auto"))
    p.add_argument("--db", default=_env("DB"), help="SQLite store (default: the user data dir)")
    p.add_argument("--api-key", default=_env("API_KEY"), help="require Authorization: Bearer KEY")
    p.add_argument("--context-limit", type=int, default=int(_env("CONTEXT_LIMIT", DEFAULT_CONTEXT_LIMIT)),
                   help="the agent model's context window when a session names none")
    p.add_argument("--pre-threshold", type=float, default=float(_env("PRE_THRESHOLD", DEFAULT_PRE_THRESHOLD)),
                   help="share of usable tokens at which rolling summaries start")
    p.add_argument("--queue-size", type=int, default=int(_env("QUEUE_SIZE", MAX_QUEUE_DEPTH)),
                   help="waiting jobs per lane before 429")
    p.add_argument("--max-body-bytes", type=int, default=int(_env("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)))
    p.add_argument("--body-timeout", type=float, default=float(_env("BODY_TIMEOUT", DEFAULT_BODY_TIMEOUT_S)),
                   help="seconds a client has to send a request body (408 after)")
    p.add_argument("--no-rolling", action="store_true", default=not _env_bool("ROLLING", True),
                   help="no background rolling summaries")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "info"),
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)

    h = sub.add_parser("history", help="search a session's stored history")
    hsub = h.add_subparsers(dest="history_command", required=True)
    s = hsub.add_parser("search", help="full-text search (BM25) over one session, tool outputs included")
    s.add_argument("session")
    s.add_argument("query")
    s.add_argument("--db", default=_env("DB"))
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_history_search)


def settings_from_args(args: argparse.Namespace) -> Settings:
    if not 0 < args.pre_threshold < 1:
        raise ValueError(f"--pre-threshold must be between 0 and 1, got {args.pre_threshold}")
    if args.queue_size < 1 or args.max_body_bytes < 1024:
        raise ValueError("--queue-size must be >= 1 and --max-body-bytes >= 1024")
    if not args.body_timeout > 0:
        raise ValueError(f"--body-timeout must be > 0, got {args.body_timeout}")
    check_bind(args.host, args.api_key)
    return Settings(
        host=args.host, port=args.port, model=args.model, engine=args.engine, engine_url=args.engine_url,
        ctx=args.ctx, threads=args.threads, tokenizer=args.tokenizer, db=args.db, api_key=args.api_key,
        context_limit=args.context_limit, pre_threshold=args.pre_threshold, queue_size=args.queue_size,
        max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout, rolling=not args.no_rolling,
        log_level=args.log_level,
    )


def _usage_error(message: str) -> int:
    # Printed here rather than raised as cli.CliError: under `python -m worker.cli` that class
    # is __main__'s, not the one this module would import.
    print(f"compactd: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def preflight(settings: Settings) -> None:
    """What would otherwise only show later as a 503 fails the start instead (one line, exit 2):
    a missing, truncated or corrupt model file, and a database that cannot be opened. (Weights
    that pass the header and size checks but fail in llama.cpp still load in the background,
    and /health reports that error.)"""
    if settings.engine != "openai":
        from backends.models import resolve

        resolved = resolve(settings.model)
        if resolved.kind == "gguf":
            from backends.gguf_meta import read_meta

            read_meta(resolved.path)  # header, vocabulary, tensor extents: a cut file shows here
    Store(settings.db).close()


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        preflight(settings)
    except (ValueError, BackendError, StoreError) as exc:
        return _usage_error(str(exc))
    import uvicorn

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    server = uvicorn.Server(uvicorn_config(app, settings))
    # uvicorn re-raises SIGTERM once its graceful shutdown is done; a requested stop of a
    # service is a clean exit, so the re-raised signal lands here and run() returns (exit 0).
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    print(f"compactd serving on http://{settings.host}:{settings.port} (model loads in the background; "
          f"GET /health turns 200 when ready)", file=sys.stderr)
    server.run()
    return 0 if server.started else 1


def cmd_history_search(args: argparse.Namespace) -> int:
    try:
        with Store(args.db) as store:
            result = store.search(args.session, args.query, args.limit)
    except StoreError as exc:
        return _usage_error(str(exc))
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    print(f"{len(result['hits'])} hit(s) for {args.query!r} in {args.session} ({result['mode']})"
          + (f"; {result['note']}" if result["note"] else ""))
    for hit in result["hits"]:
        print(f"- {hit['message_id']} [{hit['role']}] score {hit['score']:.2f}: {hit['snippet']}")
    return 0
