"""A synchronous compaction over real HTTP with the real model: the app on uvicorn (127.0.0.1,
port 0), the bundled 0.5B through the `llama_backend` fixture, the SQLite file store. The
coding session is appended, POST /compact runs the model in the foreground (no rolling
summary), and GET /checkpoint returns what the agent takes. The session overflows through its
tool outputs while its head's narrative stays about 1.4k prompt tokens, so one summary fits a
busy 2-core CPU. Its count is checked against an
independent reference (transformers' rendering, llama.cpp's tokens)."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes import Borrowed, ServerThread, wait_until, work_session
from worker.config import Settings
from worker.formats.export import to_openai
from worker.http.app import create_app
from worker.service.store import Store

pytestmark = pytest.mark.model

CONTEXT_LIMIT = 6000  # usable 4500: the session below (~30k tokens) overflows it
TURNS, OUTPUT_WORDS = 5, 500
MODEL_WAIT_S = 900  # a generous bound for one summary on a busy 2-core CPU


def test_synchronous_compaction_over_http_with_the_model(llama_backend, reference, tmp_path):
    backend = Borrowed(llama_backend)
    settings = Settings(context_limit=CONTEXT_LIMIT, rolling=False)
    store = Store(tmp_path / "compactd.sqlite3")
    app = create_app(settings, backend_loader=lambda: backend, store=store)
    try:
        with ServerThread(app, settings) as srv, httpx.Client(base_url=srv.url, timeout=MODEL_WAIT_S) as client:
            assert wait_until(lambda: client.get("/health").status_code == 200, timeout=60)
            session = work_session(turns=TURNS, words=OUTPUT_WORDS, sid="swe")
            original = to_openai(session)
            r = client.post("/v1/sessions/swe/messages", json=original)
            assert r.status_code == 200, r.text
            status = r.json()["tokens"]
            assert r.json()["added"] == len(session.messages)
            assert status["overflow"] and status["usable"] == CONTEXT_LIMIT * 3 // 4
            assert status["tokens"] == reference.chat_tokens(original)
            assert backend.generations == 0  # rolling is off: nothing ran in the background

            r = client.post("/v1/sessions/swe/compact", params={"wait": "model"})  # waits for the model
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["mode"] == "sync" and body["checkpoint_version"] == 1
            assert body["model_calls"] == backend.generations and body["model_calls"] > 0
            assert body["fallback"] == ""  # the model's narrative, not the deterministic fallback

            cp = client.get("/v1/sessions/swe/checkpoint").json()
            assert cp["version"] == 1 and cp["mode"] == "sync"
            assert cp["tokens"] == body["tokens"]
            messages = cp["messages"]
            assert messages[0]["role"] == "system" and cp["summary_text"] in [m["content"] for m in messages]
            # The tail is the end of the transcript, verbatim.
            tail = [m for m in messages if m["content"] != cp["summary_text"]][1:]
            assert tail and tail == original[len(original) - len(tail):]
            # The checkpoint's count is what transformers + llama.cpp count for it.
            assert body["tokens"]["after"] == reference.chat_tokens(messages)
            assert body["tokens"]["after"] <= status["usable"] < body["tokens"]["before"]
            tokens = client.get("/v1/sessions/swe/tokens").json()
            assert tokens["checkpoint_version"] == 1 and tokens["tokens"] == body["tokens"]["after"]
            assert not tokens["overflow"]
            assert 'compactd_compactions_total{mode="sync"} 1.0' in client.get("/metrics").text
    finally:
        store.close()
