"""What stands between the network and the app: the request-body limit and deadline, the API
key, a deadline on request headers (a subclass of uvicorn's h11 protocol), and the refusal
to bind anything but loopback without a key.

Pure ASGI (no FastAPI): the guards answer with the error envelope before the app reads
anything, and the header deadline works below ASGI, in the connection itself.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from .errors import ApiError, send_error

LOOPBACK_NAMES = ("localhost",)


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


class BodyLimitMiddleware:
    """413 for a body over the limit: by Content-Length up front, else while reading it here;
    408 for a body not received within `timeout_s`. The body is read here and replayed to the
    app, which then never sees an oversized body nor waits on a stalled upload."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = ApiError(413, "body_too_large",
                           f"request body exceeds the limit of {self.max_bytes} bytes (--max-body-bytes)")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await send_error(send, too_big, scope.get("path", ""))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks: list[bytes] = []
        seen = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return await send_error(send, ApiError(
                    408, "request_timeout", f"request body not received within {self.timeout_s:g}s",
                    headers={"Connection": "close"}), scope.get("path", ""))
            if message["type"] != "http.request":
                return  # the client went away before finishing its upload
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                return await send_error(send, too_big, scope.get("path", ""))
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
    """`Authorization: Bearer KEY` on everything but /health, compared in constant time. A
    browser cannot send a bearer token, so HTTP Basic with the key as the password (any user
    name) is accepted too, and a request that asks for text/html is challenged with Basic: the
    browser then prompts for it, and the page works under the API's key with no login form."""

    def __init__(self, app: Any, api_key: str):
        self.app, self.key = app, api_key.encode()

    def _authorized(self, auth: bytes) -> bool:
        scheme, _, token = auth.partition(b" ")
        if scheme.lower() == b"basic":
            try:
                _user, _, token = base64.b64decode(token.strip(), validate=True).partition(b":")
            except ValueError:
                return False
        elif scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(token.strip(), self.key)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not self._authorized(headers.get(b"authorization", b"")):
            browser = b"text/html" in headers.get(b"accept", b"")
            challenge = 'Basic realm="compactd", charset="UTF-8"' if browser else "Bearer"
            return await send_error(send, ApiError(401, "invalid_api_key", "missing or wrong API key "
                                                   "(Authorization: Bearer KEY; in a browser, the key as "
                                                   "the password)", "authentication_error",
                                                   {"WWW-Authenticate": challenge}), scope.get("path", ""))
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
