"""`/v1beta/models/{model}:generateContent` and its kin: Gemini CLI's endpoint, its compaction
answered by compactd.

Gemini CLI (0.61.x) speaks only the Gemini API, on one base URL (`GOOGLE_GEMINI_BASE_URL`) for
its turns and for its compaction, so compactd stands in front of the real Gemini API, as it
does for Codex (worker/http/responses.py):

- a **compaction request** (Gemini CLI's compression prompt as the system instruction, its
  draft or update instruction as the last user text; recognized by that structure under any
  model name or `chat-compression-*` alias: the `gemini-cli` profile in
  worker/agents/profiles.py) is answered here: its `contents` become a Session (the Gemini
  importer, worker/formats/gemini.py), the service's agent compaction runs over all of it
  (Gemini keeps its own recent ~30%), and the reply is the `<state_snapshot>` with its 7 tags
  and nothing else, at once by default (`agent_wait` instant: the deterministic checkpoint, the
  model's narrative refined in the background for the next compaction);
- Gemini CLI's **verify pass** (the same contents, the draft as a model turn, "Critically
  evaluate the <state_snapshot> you just generated") is answered by repeating the draft, with
  no pipeline run: the draft already holds every fact compactd found;
- **every other request** under `/v1beta/` is forwarded to `--gemini-upstream` (the base URL
  Gemini CLI would otherwise use, e.g. `https://generativelanguage.googleapis.com`): same
  method, path and query, body and answer streamed through unchanged, headers both ways less
  the hop-by-hop ones. Headers and the query (`?key=`) carry the user's key: never logged.
  Without `--gemini-upstream` such a request is a 400 saying to set it.

`:countTokens` is forwarded when an upstream is set (the main model's tokenizer is the one its
window is measured in); without one it is answered with compactd's own tokenizer over the
contents (`{"totalTokens": N}`).

Replies: `:generateContent` a `GenerateContentResponse`; `:streamGenerateContent` the same as
one chunk, as SSE (`?alt=sse`: `data: {...}\\n\\n`) or as a JSON array (Gemini's default
stream framing). Errors anywhere under `/v1beta/` are Gemini's envelope
`{"error": {"code", "message", "status"}}` (worker/http/errors.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..agents import AgentCompaction, AgentRequest, NothingToCompact, recognize
from ..agents.profiles import gemini_verify_draft
from ..formats import FormatError
from ..formats import gemini as gemini_format
from ..service.scheduler import Job
from ..service.service import CompactdService
from .errors import ApiError
from .responses import _decoded, forward_to
from .routes import DISCONNECT_POLL_S, get_service

# The request body the compaction endpoints read (the OpenAPI spec, so the API fuzz suite
# generates Gemini-shaped and broken bodies); any other field is passed through or ignored.
CONTENTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "contents": {"type": "array", "items": {"type": "object", "properties": {
            "role": {"type": "string"}, "parts": {"type": "array", "items": {"type": "object"}}}}},
        "systemInstruction": {"type": "object"},
        "generationConfig": {"type": "object"},
    },
}
BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": CONTENTS_SCHEMA}}}}

gemini = APIRouter(prefix="/v1beta", tags=["gemini"])


# ----------------------------------------------------------------------------- replies


def response_object(text: str, model: str, prompt: int, completion: int) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                              "totalTokenCount": prompt + completion},
            "modelVersion": model}


def reply(request: Request, obj: dict[str, Any], stream: bool) -> Response:
    if not stream:
        return JSONResponse(obj)
    if request.query_params.get("alt") == "sse":
        return StreamingResponse(iter([f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"]),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    return JSONResponse([obj])


# ----------------------------------------------------------------------------- reading


def no_upstream() -> ApiError:
    return ApiError(400, "no_upstream", "compactd answers only Gemini CLI's compaction requests under /v1beta/; "
                                        "start it with --gemini-upstream URL to forward every other request")


async def read_body(request: Request) -> tuple[bytes, dict[str, Any] | None]:
    """(raw body, its JSON object); None: not for compactd to read (an encoding it does not
    decode, with an upstream to forward it to). 400 for a body that is not a JSON object."""
    raw = await request.body()
    try:
        body = json.loads(_decoded(raw, request.headers.get("content-encoding", "").lower()))
    except ApiError:
        if upstream_of(request):
            return raw, None
        raise
    except RecursionError:
        raise ApiError(400, "invalid_json", "request body is nested too deeply to parse") from None
    except (UnicodeDecodeError, ValueError, OSError):
        raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    return raw, body


def upstream_of(request: Request) -> str | None:
    return getattr(request.app.state, "gemini_upstream", None)


async def forward(request: Request, raw: bytes) -> Response:
    upstream = upstream_of(request)
    if not upstream:
        raise no_upstream()
    url = upstream.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return await forward_to(request, raw, upstream, url)


# ----------------------------------------------------------------------------- compaction


async def finished(request: Request, service: CompactdService, job: Job) -> AgentCompaction:
    assert job.future is not None
    while not job.future.done():
        await asyncio.wait({job.future}, timeout=DISCONNECT_POLL_S)
        if not job.future.done() and await request.is_disconnected():
            service.cancel(job, "client disconnected")
            raise ApiError(499, "client_closed", "client disconnected")
    return job.future.result()


def history_tokens(service: CompactdService, contents: list[Any]) -> int:
    """The contents with the model's tokenizer (the draft's history: its counts are cached)."""
    service.require_backend()
    assert service.counter is not None
    try:
        session = gemini_format.load_contents(contents)
    except FormatError:
        return 0
    return service.counter.total(session)


async def compaction(request: Request, service: CompactdService, req: AgentRequest, body: dict[str, Any],
                     model: str, stream: bool) -> Response:
    max_tokens = (body.get("generationConfig") or {}).get("maxOutputTokens") if isinstance(
        body.get("generationConfig"), dict) else None
    try:
        job = service.agent_compaction(req, body, max_tokens=max_tokens if isinstance(max_tokens, int) and
                                       max_tokens > 0 else None)
    except (NothingToCompact, ValueError) as exc:
        raise ApiError(400, "invalid_request", str(exc), param="contents") from None
    result = await finished(request, service, job)
    prompt, completion = await asyncio.to_thread(service.agent_usage, req, body, result)
    return reply(request, response_object(result.text, model, prompt, completion), stream)


async def generate(request: Request, model: str, stream: bool) -> Response:
    service = get_service(request)
    raw, body = await read_body(request)
    if body is None:
        return await forward(request, raw)
    draft = gemini_verify_draft(body)
    if draft is not None:
        # The verify pass: the draft repeated, as Gemini's prompt allows ("repeat the exact same").
        prompt = await asyncio.to_thread(history_tokens, service, body["contents"][:-2])
        completion = await asyncio.to_thread(service.require_backend().count, draft)
        return reply(request, response_object(draft, model, prompt, completion), stream)
    req = recognize(body, {k.lower(): v for k, v in request.headers.items()}, door="gemini")
    if req is None:
        return await forward(request, raw)
    if not isinstance(body.get("contents"), list):
        raise ApiError(400, "invalid_request", "contents must be a list of {role, parts}", param="contents")
    return await compaction(request, service, req, body, model, stream)


# ----------------------------------------------------------------------------- routes


@gemini.post("/models/{model}:generateContent", openapi_extra=BODY)
async def generate_content(model: str, request: Request) -> Any:
    return await generate(request, model, stream=False)


@gemini.post("/models/{model}:streamGenerateContent", openapi_extra=BODY)
async def stream_generate_content(model: str, request: Request) -> Any:
    return await generate(request, model, stream=True)


@gemini.post("/models/{model}:countTokens", openapi_extra=BODY)
async def count_tokens(model: str, request: Request) -> Any:
    raw, body = await read_body(request)
    if body is None or upstream_of(request):
        return await forward(request, raw)
    inner = body.get("generateContentRequest")
    contents = (inner if isinstance(inner, dict) else body).get("contents")
    if not isinstance(contents, list):
        raise ApiError(400, "invalid_request", "contents must be a list of {role, parts}", param="contents")
    service = get_service(request)
    service.require_backend()
    assert service.counter is not None
    counter = service.counter
    try:
        session = await asyncio.to_thread(gemini_format.load_contents, contents)
    except FormatError as exc:
        raise ApiError(400, "invalid_request", str(exc), param="contents") from None
    return {"totalTokens": await asyncio.to_thread(counter.total, session, None, False)}


@gemini.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def other(rest: str, request: Request) -> Any:
    """Everything else under /v1beta/ (model listing, embeddings, files...): the upstream's."""
    return await forward(request, await request.body())


__all__ = ["gemini"]
