"""The API's routes, on FastAPI routers; each reaches the service through `Depends`.

Sessions, exact counts and compactions under /v1/sessions and /v1/jobs; the model's own
tokenizer under /v1/tokenize and /v1/count (and llama-server's /tokenize and
/apply-template, so the remote backend can be tested against compactd itself); an
OpenAI-compatible /v1/chat/completions so an agent that takes a separate compaction model
can point at compactd; /health (503 while the model loads) and /metrics.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from backends.base import GenerationStats

from ..agents import NothingToCompact, recognize
from ..formats._common import block_text
from ..service.metrics import CONTENT_TYPE
from ..service.scheduler import Job
from ..service.service import WAIT_INSTANT, WAIT_JOB, WAIT_MODEL, CompactdService
from . import chat
from .agent_chat import agent_completion
from .errors import ApiError, error_body
from .schemas import (
    MAX_CONTEXT_LIMIT,
    MIN_CONTEXT_LIMIT,
    ApplyTemplateRequest,
    ApplyTemplateResponse,
    ChatCompletionRequest,
    CountRequest,
    CountResponse,
    JobView,
    SessionTokensRequest,
    TokenizeRequest,
    TokenizeResponse,
    TokenStatus,
    V1TokenizeRequest,
    V1TokenizeResponse,
)

DEFAULT_CHAT_MAX_TOKENS = 1024  # when a request names no max_tokens (and the context allows it)
DISCONNECT_POLL_S = 0.25  # how often a waiting request checks whether its client went away


def get_service(request: Request) -> CompactdService:
    return request.app.state.service


Service = Annotated[CompactdService, Depends(get_service)]

ops = APIRouter(tags=["operations"])
sessions = APIRouter(tags=["sessions"])
tokenizer = APIRouter(tags=["tokenizer"])
openai = APIRouter(tags=["openai"])
ROUTERS = (ops, sessions, tokenizer, openai)


# ----------------------------------------------------------------------------- helpers


async def wait_for_job(request: Request, service: CompactdService, job: Job) -> Any:
    """The job's result; if the client goes away first, the job is cancelled (dropped when
    queued, stopped at its next token when running)."""
    assert job.future is not None
    while True:
        done, _ = await asyncio.wait({job.future}, timeout=DISCONNECT_POLL_S)
        if done:
            return job.future.result()
        if await request.is_disconnected():
            service.cancel(job, "client disconnected")
            raise ApiError(499, "client_closed", "client disconnected")


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


# ----------------------------------------------------------------------------- health and metrics


@ops.get("/health")
async def health(service: Service) -> Any:
    if service.ready:
        return {"status": "ok"}
    message = service.load_error or "Loading model"
    return JSONResponse(error_body(503, message, "unavailable_error"), status_code=503)


@ops.get("/metrics", response_class=PlainTextResponse)
async def metrics(service: Service) -> Any:
    return PlainTextResponse(service.render_metrics(), media_type=CONTENT_TYPE)


# ----------------------------------------------------------------------------- sessions

TRANSCRIPT_BODY = {"requestBody": {"required": True, "description": "messages in any supported transcript "
                                   "format (OpenAI, Anthropic, Claude Code, pi, codex, SWE-agent, opencode)",
                                   "content": {"application/json": {"schema": {}},
                                               "application/x-ndjson": {"schema": {"type": "string"}}}}}


@sessions.post("/v1/sessions/{session_id}/messages", openapi_extra=TRANSCRIPT_BODY)
async def append_messages(
    session_id: str, request: Request, service: Service,
    format: str = Query("auto", description="transcript format, or auto to detect"),
    mode: Literal["append", "sync"] = Query(
        "append", description="append: the body holds new messages only (position-numbered ids continue "
                              "after the stored ones); sync: the body is the whole transcript so far"),
    context_limit: int | None = Query(None, ge=MIN_CONTEXT_LIMIT, le=MAX_CONTEXT_LIMIT,
                                      description="the agent model's context window"),
) -> Any:
    payload = await json_body(request)
    return await service.append(session_id, payload, fmt=format, mode=mode, context_limit=context_limit)


@sessions.get("/v1/sessions/{session_id}")
async def session_info(session_id: str, service: Service) -> Any:
    return service.session_view(session_id)


@sessions.get("/v1/sessions/{session_id}/tokens", response_model=TokenStatus)
async def session_tokens(session_id: str, service: Service) -> Any:
    return await service.tokens(session_id)


@sessions.post("/v1/sessions/{session_id}/tokens", response_model=TokenStatus)
async def session_tokens_with_tools(session_id: str, body: SessionTokensRequest, service: Service) -> Any:
    """The GET's count, with the tool definitions the agent sends counted too."""
    return await service.tokens(session_id, body.tools)


# `?wait=` values: the service's WAIT_MODES plus the boolean spellings clients used before
# (`false`: a job to poll; `true`: wait for the model, as the route always did when asked to wait).
WAIT_ALIASES = {"false": WAIT_JOB, "0": WAIT_JOB, "true": WAIT_MODEL, "1": WAIT_MODEL}


@sessions.post("/v1/sessions/{session_id}/compact")
async def compact_session(
    session_id: str, request: Request, service: Service,
    wait: Literal["instant", "model", "job", "true", "false", "1", "0"] = Query(
        WAIT_INSTANT, description="instant: answer now from the ready rolling summary or the deterministic "
                                  "checkpoint, the model's narrative follows as the next checkpoint version; "
                                  "model (or true): wait for the model; job (or false): 202 with a job to poll"),
    context_limit: int | None = Query(None, ge=MIN_CONTEXT_LIMIT, le=MAX_CONTEXT_LIMIT),
    tail: bool = Query(True, description="false: the agent keeps its own recent turns (pi's extension): "
                                         "every message is summarized, no verbatim tail, no reference prefix"),
) -> Any:
    mode = WAIT_ALIASES.get(wait, wait)
    job, extra = await service.submit_compaction(session_id, context_limit, wait=mode, keep_tail=tail)
    if mode == WAIT_JOB:
        return JSONResponse({"job": service.job_view(job.id), **extra}, status_code=202)
    result = await wait_for_job(request, service, job)
    checkpoint = service.checkpoint_view(session_id, "openai", version=result.get("checkpoint_version"))
    return {**result, **extra, "job_id": job.id, "checkpoint": checkpoint}


@sessions.get("/v1/sessions/{session_id}/checkpoint")
async def get_checkpoint(session_id: str, service: Service,
                         format: Literal["openai", "anthropic"] = "openai",
                         version: int | None = Query(None, ge=1)) -> Any:
    return service.checkpoint_view(session_id, format, version)


@sessions.get("/v1/sessions/{session_id}/history/search")
async def history_search(session_id: str, service: Service, q: str = Query(..., min_length=1),
                         limit: int = Query(20, ge=1, le=100)) -> Any:
    return await asyncio.to_thread(service.search, session_id, q, limit)


@sessions.get("/v1/sessions/{session_id}/history/around")
async def history_around(session_id: str, service: Service, message_id: str = Query(..., min_length=1, description="a message id, or the prefix a checkpoint cites"),
                         radius: int = Query(3, ge=0, le=50)) -> Any:
    return await asyncio.to_thread(service.around, session_id, message_id, radius)


@sessions.get("/v1/jobs/{job_id}", response_model=JobView)
async def get_job(job_id: str, service: Service) -> Any:
    return service.job_view(job_id)


@sessions.delete("/v1/jobs/{job_id}", response_model=JobView)
async def cancel_job(job_id: str, service: Service) -> Any:
    return service.cancel_job(job_id)


# ----------------------------------------------------------------------------- tokenizer


@tokenizer.post("/v1/tokenize", response_model=V1TokenizeResponse)
async def v1_tokenize(body: V1TokenizeRequest, service: Service) -> Any:
    backend = service.require_backend()
    tokens = await asyncio.to_thread(backend.tokenize, body.text)
    return {"model": service.model_name(), "tokens": tokens, "count": len(tokens)}


@tokenizer.post("/v1/count", response_model=CountResponse)
async def v1_count(body: CountRequest, service: Service) -> Any:
    backend = service.require_backend()
    if (body.text is None) == (body.messages is None):
        raise ApiError(400, "invalid_request", "give exactly one of text or messages")
    if body.messages is not None:
        msgs = _chat_messages(body.messages)
        n = await asyncio.to_thread(backend.count_messages, msgs, body.add_generation_prompt, body.tools)
        return {"model": service.model_name(), "tokens": n, "kind": "messages"}
    if body.tools is not None:
        raise ApiError(400, "invalid_request", "tools are counted with messages, not with text")
    n = await asyncio.to_thread(backend.count, body.text or "")
    return {"model": service.model_name(), "tokens": n, "kind": "text"}


@tokenizer.post("/tokenize", response_model=TokenizeResponse)
async def llama_tokenize(body: TokenizeRequest, service: Service) -> Any:
    backend = service.require_backend()
    if body.with_pieces:
        raise ApiError(400, "invalid_request", "with_pieces is not supported")
    text = body.content
    meta = backend.meta
    if body.add_special and meta is not None and meta.add_bos:
        text = meta.bos_token + text
    return {"tokens": await asyncio.to_thread(backend.tokenize, text)}


@tokenizer.post("/apply-template", response_model=ApplyTemplateResponse)
async def apply_template(body: ApplyTemplateRequest, service: Service) -> Any:
    backend = service.require_backend()
    prompt = await asyncio.to_thread(backend.render_messages, _chat_messages(body.messages),
                                     body.add_generation_prompt, body.tools)
    return {"prompt": prompt}


# ----------------------------------------------------------------------------- OpenAI-compatible


@openai.get("/v1/models")
async def models(service: Service) -> Any:
    info = service.require_backend().info()
    return {"object": "list", "data": [{
        "id": info.model_name, "object": "model", "created": 0, "owned_by": "compactd",
        "meta": {"n_ctx": info.context_size, "n_ctx_train": info.trained_context, "n_vocab": info.vocab_size,
                 "engine": info.engine, "architecture": info.architecture, "quantization": info.quantization},
    }]}


@openai.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request, service: Service) -> Any:
    backend = service.require_backend()
    chat.check_parameters(body.model_extra or {}, body.temperature, body.stream, body.stream_options)
    messages = _chat_messages(chat.check_messages(body.messages))
    schema = chat.json_schema(body.response_format, backend.supports_json_schema)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
            "model": body.model or service.model_name()}
    # An agent's compaction request (its profile's, or X-Compactd-Mode: compact) goes through the
    # pipeline whatever its length; everything else is plain generation.
    agent_request = recognize({"messages": messages}, dict(request.headers))
    if agent_request is not None:
        try:
            return await agent_completion(
                agent_request, request, service, messages, head, body.stream,
                bool((body.stream_options or {}).get("include_usage")),
                body.max_completion_tokens or body.max_tokens)
        except NothingToCompact:
            pass  # no conversation in it: generate as asked
    prompt_tokens = await asyncio.to_thread(backend.count_messages, messages)
    ctx = backend.info().context_size
    wanted = body.max_completion_tokens or body.max_tokens
    max_tokens = wanted or min(DEFAULT_CHAT_MAX_TOKENS, max(0, ctx - prompt_tokens))
    if ctx and prompt_tokens + max_tokens > ctx:
        raise ApiError(400, "context_length_exceeded",
                       f"prompt of {prompt_tokens} tokens + {max_tokens} to generate exceeds the context of {ctx}",
                       param="max_completion_tokens" if body.max_completion_tokens else
                       "max_tokens" if body.max_tokens else "messages")
    if max_tokens < 1:
        raise ApiError(400, "context_length_exceeded", f"prompt of {prompt_tokens} tokens fills the context of {ctx}",
                       param="messages")
    options: dict[str, Any] = {"max_tokens": max_tokens, "temperature": body.temperature, "json_schema": schema,
                               "isolated": False}
    if body.stop:
        options["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
    t0 = time.perf_counter()

    if not body.stream:
        job = service.submit_chat(messages, options)
        text, stats = await wait_for_job(request, service, job)
        service.chat_done(time.perf_counter() - t0)
        return {
            **head, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": stats.finish_reason or "stop"}],
            "usage": _usage(stats), "timings": _timings(stats),
        }

    include_usage = bool((body.stream_options or {}).get("include_usage"))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    job = service.submit_chat(messages, options, sink=lambda item: loop.call_soon_threadsafe(queue.put_nowait, item))

    async def events() -> AsyncIterator[str]:
        stats = GenerationStats()
        finished = False
        try:
            yield chat.chunk(head, {"role": "assistant", "content": ""})
            while True:
                item = await queue.get()
                if item is None:  # the end of the stream
                    finished = True
                    break
                if isinstance(item, BaseException):
                    finished = True
                    yield chat.error_event(item)
                    return
                if isinstance(item, GenerationStats):
                    stats = item
                    continue
                yield chat.chunk(head, {"content": item})
            yield chat.chunk(head, {}, stats.finish_reason or "stop", timings=_timings(stats))
            if include_usage:
                yield chat.usage_chunk(head, _usage(stats))
            yield "data: [DONE]\n\n"
            service.chat_done(time.perf_counter() - t0)
        finally:
            if not finished:  # the client went away: stop the generation at its next token
                service.cancel(job, "client disconnected")

    return chat.event_stream(events())
