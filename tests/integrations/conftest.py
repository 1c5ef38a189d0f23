"""compactd for the real agents: the real app with the bundled 0.5B, on a loopback port."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.test_server_fakes import ServerThread, wait_until
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store

HEALTH_WAIT_S = 60  # the backend is already loaded: the app only wraps it


class SharedBackend:
    """The session's llama_backend, which the app must not close when it stops."""

    def __init__(self, backend: Any):
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def compactd_url(llama_backend):
    app = create_app(Settings(rolling=False), backend_loader=lambda: SharedBackend(llama_backend),
                     store=Store(":memory:"))
    with ServerThread(app) as server:
        assert wait_until(lambda: httpx.get(server.url + "/health").status_code == 200, timeout=HEALTH_WAIT_S)
        yield server.url
