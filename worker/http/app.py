"""`create_app`: the FastAPI app of `compactd serve`, wired from its parts: the service (built
here from the Settings), the routes, the error handlers, the guards, the request-latency
metric, and the model loading in the background (/health is 503 until it is ready).

Also the uvicorn config the server runs with, so tests start real servers exactly as
`compactd serve` does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from backends.base import Backend

from ..config import Settings
from ..service.metrics import HTTP_REQUEST_SECONDS, Metrics
from ..service.scheduler import Scheduler
from ..service.service import CompactdService, ServiceConfig
from ..service.store import Store
from .errors import install_error_handlers
from .gemini import gemini
from .guards import ApiKeyMiddleware, BodyLimitMiddleware, header_timeout_protocol
from .page import html_error, page
from .responses import responses
from .routes import ROUTERS

log = logging.getLogger("compactd.server")

GRACEFUL_SHUTDOWN_S = 10  # running generations stop at their next token; this is plenty


def backend_factory(settings: Settings) -> Callable[[], Backend]:
    """What loads the model named by the settings (called in a background thread)."""

    def load() -> Backend:
        if settings.engine == "openai":
            from backends.openai_http import connect

            return connect(settings.engine_url, model=settings.model, n_ctx=settings.ctx)
        from backends import load_backend

        options: dict[str, Any] = {}
        if settings.ctx:
            options["n_ctx"] = settings.ctx
        if settings.threads:
            options["n_threads"] = settings.threads
        if settings.tokenizer != "auto":
            options["tokenizer"] = settings.tokenizer
        backend = load_backend(settings.model, engine=settings.engine, **options)
        backend.load()  # weights now, so that 200 on /health means generation is ready
        return backend

    return load


class RequestMetricsMiddleware:
    """Observes every HTTP request's latency by method, route template (never the raw path:
    session ids would make a series each) and status code."""

    def __init__(self, app: Any, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(HTTP_REQUEST_SECONDS, time.perf_counter() - t0, method=scope.get("method", ""),
                                 route=route, status=str(status))


def create_app(
    settings: Settings,
    *,
    backend_loader: Callable[[], Backend] | None = None,
    store: Store | None = None,
) -> Any:
    from fastapi import FastAPI

    loader = backend_loader or backend_factory(settings)
    own_store = store is None
    store = store or Store(settings.store_path())
    service = CompactdService(
        store,
        ServiceConfig(context_limit=settings.context_limit, pre_threshold=settings.pre_threshold,
                      rolling=settings.rolling, agent_wait=settings.agent_wait),
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
    install_error_handlers(app, html=html_error)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(page)  # the page a person reads (worker/http/page.py)
    app.include_router(responses)  # Codex's provider endpoint (worker/http/responses.py)
    app.state.upstream = settings.upstream
    app.include_router(gemini)  # Gemini CLI's endpoint (worker/http/gemini.py)
    app.state.gemini_upstream = settings.gemini_upstream
    # Outermost last: the size limit applies before authentication reads anything, and the
    # latency metric sees every answer, the guards' included.
    api_key = settings.api_key_value()
    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout)
    app.add_middleware(RequestMetricsMiddleware, metrics=service.metrics)
    return app


def bound_url(server: Any) -> str:
    """The address a started uvicorn server listens on: the real port when it was asked for
    port 0 (so a test server never races another process for a "free" port)."""
    for listener in server.servers:
        for sock in listener.sockets:
            host, port = sock.getsockname()[:2]
            return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    raise RuntimeError("the server has no listening socket")


def announcing_server(config: Any, announce: Callable[[str], None]) -> Any:
    """A uvicorn server that calls `announce(bound_url)` once its sockets are bound."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                announce(bound_url(self))

    return AnnouncingServer(config)


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> Any:
    """The uvicorn config `compactd serve` runs with (tests start real servers with it too)."""
    import uvicorn

    options: dict[str, Any] = {"host": settings.host, "port": settings.port, "log_level": settings.log_level,
                               "lifespan": "on", "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
                               "http": header_timeout_protocol(settings.header_timeout)}
    return uvicorn.Config(app, **{**options, **overrides})
