"""Every error the API answers, in one place: ONE table from exception to status, code and
type, and the one envelope `{"error": {"code", "message", "param", "type"}}` (OpenAI's error
object: `param` names the offending request field, null when there is none).

4xx for bad input, 429 with Retry-After on overload, 503 while the model loads, 502 when the
engine fails; anything unexpected is a 500 that names the exception class, never a traceback.

Under the Gemini API's prefix (`/v1beta/`, Gemini CLI's door: worker/http/gemini.py) the same
errors answer in Gemini's envelope, `{"error": {"code": <HTTP status>, "message", "status"}}`
(google.rpc.Status: `status` is the canonical code name of the HTTP status, GEMINI_STATUS),
which Gemini's SDK reads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from backends.base import BackendError

from ..formats import FormatError
from ..service.records import Conflict, NotFound, StoreError
from ..service.scheduler import JobCancelled, Overloaded
from ..service.service import CompactionRefused, JobFinished, ModelNotReady, NoCheckpoint

log = logging.getLogger("compactd.server")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, type_: str = "invalid_request_error",
                 headers: dict[str, str] | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.type, self.headers = status, code, message, type_, headers
        self.param = param


# exception -> (status, code, type); the first match wins, so subclasses come first.
ERRORS: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (NoCheckpoint, 404, "no_checkpoint", "not_found_error"),
    (NotFound, 404, "not_found", "not_found_error"),
    (JobFinished, 409, "job_finished", "conflict_error"),
    (Conflict, 409, "conflict", "conflict_error"),
    (CompactionRefused, 409, "compaction_refused", "conflict_error"),
    (FormatError, 400, "unsupported_format", "invalid_request_error"),
    (Overloaded, 429, "overloaded", "rate_limit_error"),
    (ModelNotReady, 503, "model_loading", "unavailable_error"),
    (JobCancelled, 409, "cancelled", "conflict_error"),
    (BackendError, 502, "backend_error", "server_error"),
    (StoreError, 400, "store_error", "invalid_request_error"),
    (ValueError, 400, "invalid_request", "invalid_request_error"),
)
MODEL_LOADING_RETRY_S = 5  # Retry-After while the model loads: loading takes seconds, not minutes


def error_body(code: str | int, message: str, type_: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "param": param, "type": type_}}


GEMINI_PREFIX = "/v1beta/"
# HTTP status -> google.rpc.Code name (google/rpc/code.proto's HTTP mapping); others by class.
GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 405: "UNIMPLEMENTED", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT",
                 415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def is_gemini_path(path: str) -> bool:
    return path.startswith(GEMINI_PREFIX)


def gemini_error_body(err: ApiError) -> dict[str, Any]:
    status = GEMINI_STATUS.get(err.status) or ("INTERNAL" if err.status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": err.status, "message": err.message, "status": status}}


def body_for(err: ApiError, path: str = "") -> dict[str, Any]:
    """The envelope of `err` as the API under `path` answers it."""
    if is_gemini_path(path):
        return gemini_error_body(err)
    return error_body(err.code, err.message, err.type, err.param)


def _headers(exc: BaseException) -> dict[str, str] | None:
    if isinstance(exc, Overloaded):
        return {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, ModelNotReady):
        return {"Retry-After": str(MODEL_LOADING_RETRY_S)}
    return None


def api_error_for(exc: BaseException) -> ApiError:
    """Map every exception the service raises to its HTTP answer."""
    if isinstance(exc, ApiError):
        return exc
    for exc_type, status, code, type_ in ERRORS:
        if isinstance(exc, exc_type):
            message = f"job cancelled: {exc}" if isinstance(exc, JobCancelled) else str(exc)
            return ApiError(status, code, message, type_, _headers(exc))
    return ApiError(500, "internal_error", f"internal error ({type(exc).__name__}); see the server log", "server_error")


async def send_error(send: Callable, err: ApiError, path: str = "") -> None:
    """The envelope straight on ASGI `send`, for the guards that answer before the app runs
    (`path`: the request's, for its API's envelope)."""
    body = json.dumps(body_for(err, path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _param(errors: list[dict[str, Any]]) -> str | None:
    """The first invalid field as OpenAI names it (`messages.0.role`), without FastAPI's
    leading `body`/`query` location; None when the whole body is at fault."""
    for e in errors:
        loc = [str(x) for x in e.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path", "header"):
            loc = loc[1:]
        if loc:
            return ".".join(loc)
    return None


def install_error_handlers(app: Any, html: Callable[[Any, ApiError], Any] | None = None) -> None:
    """Every error a route can raise, request validation and unknown paths included, answered
    with the envelope; `html(request, err)`: the page's error page for a browser, or None."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def response(err: ApiError, request: Request | None = None) -> Any:
        page = html(request, err) if html is not None and request is not None else None
        if page is not None:
            return page
        path = request.url.path if request is not None else ""
        return JSONResponse(body_for(err, path), status_code=err.status, headers=err.headers)

    async def any_error(request: Request, exc: Exception) -> Any:
        err = api_error_for(exc)
        if err.status >= 500 and not isinstance(exc, (ModelNotReady, BackendError)):
            log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        if isinstance(exc, Overloaded):
            request.app.state.service.overloaded(exc)
        return response(err, request)

    async def invalid_request(request: Request, exc: RequestValidationError) -> Any:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return response(ApiError(400, "invalid_json", "request body is not valid JSON"), request)
        detail = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in errors[:5])
        return response(ApiError(400, "invalid_request", detail or "invalid request", param=_param(errors)), request)

    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return response(ApiError(exc.status_code, code, str(exc.detail), "invalid_request_error"), request)

    app.add_exception_handler(Exception, any_error)
    for exc_type in (ApiError, *(row[0] for row in ERRORS)):
        app.add_exception_handler(exc_type, any_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
