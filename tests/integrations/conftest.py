"""compactd for the real agents: the real app with the bundled 0.5B, on a loopback port."""

from __future__ import annotations

import pytest

from tests.fakes import served_app

HEALTH_WAIT_S = 60  # the backend is already loaded: the app only wraps it


@pytest.fixture(scope="module")
def compactd_url(llama_backend):
    with served_app(llama_backend) as server:
        yield server.url
