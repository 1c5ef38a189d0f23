"""A streaming client that goes away: its generation stops at the next token (real uvicorn)."""

from __future__ import annotations

import httpx

from tests.fakes import ScriptedBackend, ServerThread, wait_until
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store


def test_client_disconnect_stops_the_stream_at_its_next_token():
    backend = ScriptedBackend(token_delay=0.05)
    app = create_app(Settings(rolling=False), backend_loader=lambda: backend, store=Store(":memory:"))
    service = app.state.service
    with ServerThread(app) as server:
        assert wait_until(lambda: httpx.get(server.url + "/health").status_code == 200)
        body = {"messages": [{"role": "user", "content": "long answer"}], "stream": True, "max_tokens": 100}
        with httpx.Client(timeout=10) as client, client.stream("POST", server.url + "/v1/chat/completions",
                                                                json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            seen = 0
            for line in lines:
                if line.startswith("data: "):
                    seen += 1
                if seen == 3:
                    break  # leaving the block closes the connection mid-stream
        assert wait_until(lambda: any(tag == "long answer" for tag, _n, _c in backend.finished))
        tag, produced, complete = next(f for f in backend.finished if f[0] == "long answer")
        assert not complete and produced < len(backend.reply.split())
        assert wait_until(lambda: service.metrics.value("compactd_jobs_total", kind="chat", status="cancelled") == 1)
    backend.close()
