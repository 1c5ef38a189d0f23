"""`POST /v1/responses`: Codex's provider endpoint, its compaction answered by compactd.

Codex speaks only the Responses API and sends its compaction to the same provider as every
turn (verified with codex 0.171.0). So compactd stands in front of the real provider:

- a **compaction request** (`"request_kind":"compaction"` in `client_metadata
  ["x-codex-turn-metadata"]` or in that header, or Codex's compaction prompt as the last input
  item) is answered here: the structured `input` items become a Session (message items,
  function_call / function_call_output pairs, reasoning: the rollout importer's own item
  parser), the verified pipeline runs over the whole received head (no verbatim tail and no
  reference prefix: Codex keeps its own recent turns and prefixes the summary itself), and the
  summary streams back in the events Codex's SSE reader needs (by default, `agent_wait`
  instant, at once: the deterministic checkpoint, the model's narrative refined in the
  background and carried into the session's next compaction, as for opencode and pi, whose
  rolling state per session this door shares: worker/agents/compactor.py): `response.created`,
  `response.output_item.added`, `response.output_text.delta`, `response.output_item.done` (a
  message item), `response.completed` with usage;
- **every other request** is forwarded to `--upstream` (a Responses base URL, e.g.
  `https://api.openai.com/v1`), its body and answer streamed through unchanged, headers passed
  both ways except the hop-by-hop ones. Headers carry the user's credentials: never logged.
  Without `--upstream`, a non-compaction request is a 400 `no_upstream`.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ..agents import AgentCompaction, AgentRequest, NothingToCompact, recognize
from ..agents.profiles import turn_metadata
from ..service.scheduler import Job
from ..service.service import CompactdService
from . import chat
from .errors import ApiError, api_error_for
from .routes import DISCONNECT_POLL_S, get_service

# Per RFC 9110 §7.6.1 plus what the transport recomputes (length, host, encoding of the hop).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
UPSTREAM_CONNECT_S = 10.0  # a provider that does not accept a connection by then is down
UPSTREAM_READ_S = 600.0  # between two chunks: a reasoning model can think silently for minutes
# While the summary is computed, `response.in_progress` this often: an event (not an SSE comment,
# which an EventSource reader drops) resets the client's idle timer (Codex: 300 s by default).
KEEPALIVE_S = 10.0


responses = APIRouter(tags=["codex"])


# ----------------------------------------------------------------------------- events


def event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


def completion_events(response: dict[str, Any], text: str, usage: dict[str, Any]) -> list[str]:
    """One assistant message item, its text in one delta, then the completed response."""
    item_id = f"msg_{uuid.uuid4().hex}"
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": [part]}
    return [
        event("response.output_item.added", output_index=0, item={**item, "status": "in_progress", "content": []}),
        event("response.content_part.added", item_id=item_id, output_index=0, content_index=0,
              part={**part, "text": ""}),
        event("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=text),
        event("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=text),
        event("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=part),
        event("response.output_item.done", output_index=0, item=item),
        event("response.completed", response={**response, "status": "completed", "output": [item], "usage": usage}),
    ]


def usage_of(service: CompactdService, req: AgentRequest, body: dict[str, Any], result: AgentCompaction) -> dict[str, Any]:
    """The history compactd read, and the text Codex gets (ids stripped: not the checkpoint's summary)."""
    before, summary = service.agent_usage(req, body, result)
    return {"input_tokens": before, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": summary, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": before + summary}


# ----------------------------------------------------------------------------- compaction


async def compaction_stream(request: Request, service: CompactdService, job: Job, req: AgentRequest,
                            body: dict[str, Any]) -> AsyncIterator[str]:
    """The service's agent compaction (rolling state under Codex's session id: a re-injected
    summary that holds our last reply is an update of that session; no loop guard, since Codex
    decided to compact and replaces its whole history with the reply; no tail of our own, since
    Codex keeps none beyond what it re-sends; no message id cited) as Codex's events."""
    model = str(body.get("model") or service.model_name())
    response = {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()),
                "model": model, "status": "in_progress", "output": []}
    yield event("response.created", response=response)
    yield event("response.in_progress", response=response)
    assert job.future is not None
    waited = 0.0
    while not job.future.done():
        await asyncio.wait({job.future}, timeout=DISCONNECT_POLL_S)
        waited += DISCONNECT_POLL_S
        if await request.is_disconnected():
            service.cancel(job, "client disconnected")
            return
        if waited >= KEEPALIVE_S:
            waited = 0.0
            yield event("response.in_progress", response=response)
    try:
        result: AgentCompaction = job.future.result()
    except Exception as exc:  # noqa: BLE001 - the stream has started: the error is an event
        err = api_error_for(exc)
        yield event("response.failed", response={**response, "status": "failed",
                                                 "error": {"code": err.code, "message": err.message}})
        return
    usage = await asyncio.to_thread(usage_of, service, req, body, result)
    for chunk in completion_events(response, result.text, usage):
        yield chunk


# ----------------------------------------------------------------------------- forwarding


def passed_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


async def forward(request: Request, raw: bytes, upstream: str) -> StreamingResponse:
    url = upstream.rstrip("/") + "/responses" + (f"?{request.url.query}" if request.url.query else "")
    return await forward_to(request, raw, upstream, url)


async def forward_to(request: Request, raw: bytes, upstream: str, url: str) -> StreamingResponse:
    """`request` (its method, headers less the hop-by-hop ones, and `raw` body) sent to `url`
    on `upstream`, the answer streamed back unchanged; 502 when the upstream does not answer.
    Nothing of it is logged: headers and the query carry credentials."""
    import httpx

    client = httpx.AsyncClient(timeout=httpx.Timeout(UPSTREAM_READ_S, connect=UPSTREAM_CONNECT_S))
    try:
        upstream_response = await client.send(
            client.build_request(request.method, url, headers=passed_headers(request.headers), content=raw),
            stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise ApiError(502, "upstream_unreachable", f"upstream {upstream} did not answer: {type(exc).__name__}",
                       type_="server_error") from None

    async def close() -> None:
        await upstream_response.aclose()
        await client.aclose()

    return StreamingResponse(upstream_response.aiter_raw(), status_code=upstream_response.status_code,
                             headers=passed_headers(upstream_response.headers), background=BackgroundTask(close))


# ----------------------------------------------------------------------------- route


def _decoded(raw: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return raw
    if encoding == "gzip":
        return gzip.decompress(raw)
    raise ApiError(415, "unsupported_encoding", f"Content-Encoding {encoding!r} is not supported",
                   param="content-encoding")


@responses.post("/v1/responses")
async def create_response(request: Request) -> Any:
    service = get_service(request)
    raw = await request.body()
    upstream: str | None = getattr(request.app.state, "upstream", None)
    marked = turn_metadata({}, request.headers).get("request_kind") == "compaction"
    try:
        body = json.loads(_decoded(raw, request.headers.get("content-encoding", "").lower()))
    except ApiError:
        if upstream and not marked:
            return await forward(request, raw, upstream)
        raise
    except (UnicodeDecodeError, ValueError, OSError):
        raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    req = recognize(body, {k.lower(): v for k, v in request.headers.items()}, door="responses")
    if req is None:
        if not upstream:
            raise ApiError(400, "no_upstream", "compactd answers only Codex's compaction requests at /v1/responses; "
                                               "start it with --upstream URL to forward every other request")
        return await forward(request, raw, upstream)
    if req.session_key is None:
        req.session_key = f"codex-{uuid.uuid4().hex}"
    try:
        job = service.agent_compaction(req, body)
    except (NothingToCompact, ValueError) as exc:
        raise ApiError(400, "invalid_request", str(exc), param="input") from None
    stream = compaction_stream(request, service, job, req, body)
    if body.get("stream") is False:
        return await _collect(stream)
    return chat.event_stream(stream)


async def _collect(stream: AsyncIterator[str]) -> Any:
    """A non-streaming request gets the completed response object (or the failure)."""
    last: dict[str, Any] | None = None
    async for chunk in stream:
        if chunk.startswith("event: "):
            last = json.loads(chunk.split("data: ", 1)[1])
    if last is None:
        raise ApiError(499, "client_closed", "client disconnected")
    if last["type"] == "response.failed":
        err = last["response"]["error"]
        raise ApiError(409 if err["code"] == "compaction_refused" else 500, err["code"], err["message"])
    return last["response"]


__all__ = ["responses"]
