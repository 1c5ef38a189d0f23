"""No agent waits for the model (issue 23, item 2): every agent door answers with the
deterministic checkpoint while a slow model is still busy, queues one background refinement
per agent session, and the session's next compaction carries the refined narrative; the
`agent_wait=model` setting still waits for the model. Logic only, on the scripted backend
(token_delay makes the model slow): the assertions are about what the model had finished when
the answer came, never wall time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend
from worker.agents.profiles import COMPACT_PROMPT_START, SUMMARY_PREFIX
from worker.config import Settings
from worker.http.app import create_app
from worker.service.service import AGENT_KEY
from worker.service.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/agents"
NARRATIVE = "Keep the public API unchanged"  # the scripted model's key decision (tests/fakes.REPLY)
OPENCODE_FACT = "`/tmp/agent-test/ocwork/foo.py` — read"
SLOW = 0.02  # seconds per scripted token: a compaction's model calls take seconds


def captured(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def model_finished(backend: ScriptedBackend) -> bool:
    return any(complete for _tag, _n, complete in backend.finished)


def wait_until(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture()
def slow():
    backend = ScriptedBackend(token_delay=SLOW)
    yield backend
    backend.hold.set()


def app_client(backend: ScriptedBackend, **settings) -> TestClient:
    app = create_app(Settings(rolling=False, **settings), backend_loader=lambda: backend, store=Store(":memory:"))
    return TestClient(app)


@contextmanager
def started(client: TestClient) -> Iterator[TestClient]:
    with client:
        wait_until(lambda: client.get("/health").status_code == 200, 10)
        yield client


def chat(client: TestClient, body: dict, headers: dict | None = None) -> tuple[str, dict]:
    body = {k: v for k, v in body.items() if k != "stream_options"}
    r = client.post("/v1/chat/completions", json={**body, "stream": False}, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], r.json()["compactd"]["agent_compaction"]


def responses(client: TestClient, body: dict) -> str:
    r = client.post("/v1/responses", json={**body, "stream": False})
    assert r.status_code == 200, r.text
    return r.json()["output"][0]["content"][0]["text"]


def pending(client: TestClient, key: str):
    """The agent session's pending refinement job, or None."""
    return client.app.state.service.refiner.pending(AGENT_KEY + key)


def refined(client: TestClient, key: str) -> None:
    """Wait for the agent session's background refinement to be kept as its checkpoint."""
    compactor = client.app.state.service.agents

    def done() -> bool:
        state = compactor.state_of(key)
        return pending(client, key) is None and state is not None and state.checkpoint.audit.mode.endswith(":refined")

    wait_until(done)


def opencode_update(summary: str) -> dict:
    update = captured("opencode-compaction-update-request")["body"]
    user = update["messages"][1]["content"]
    start = user.index("<prior-summary>\n") + len("<prior-summary>\n")
    update["messages"][1]["content"] = user[:start] + summary.strip() + user[user.index("\n</prior-summary>"):]
    return update


def test_opencode_is_answered_before_the_model_and_the_next_compaction_carries_its_narrative(slow):
    with started(app_client(slow)) as client:
        headers = {"x-session-id": "ses_nowait"}
        text, meta = chat(client, captured("opencode-compaction-request")["body"], headers)
        assert not model_finished(slow)  # answered while the model had not finished anything
        assert meta["model_calls"] == 0 and OPENCODE_FACT in text and NARRATIVE not in text
        assert pending(client, "ses_nowait") is not None  # the refinement is queued
        refined(client, "ses_nowait")
        assert model_finished(slow)
        again, meta = chat(client, opencode_update(text), headers)
        assert meta["mode"] == "update" and meta["model_calls"] == 0
        assert NARRATIVE in again and OPENCODE_FACT in again  # the refined narrative, the facts kept


def test_pi_chat_is_answered_before_the_model_and_refined_under_its_reply(slow):
    with started(app_client(slow)) as client:
        body = captured("pi-compaction-request")["body"]
        text, meta = chat(client, body)
        assert not model_finished(slow) and meta["model_calls"] == 0
        assert "## Goal" in text and NARRATIVE not in text
        (key,) = client.app.state.service.refiner.pending_keys(AGENT_KEY)  # pi names no session: keyed by the reply
        key = key.removeprefix(AGENT_KEY)
        refined(client, key)
        # pi's update request: its previous summary is our reply (pi appends its file lists).
        update = json.loads(json.dumps(body))
        block = update["messages"][-1]["content"][0]
        cut = block["text"].index("</conversation>") + len("</conversation>")
        block["text"] = (block["text"][:cut] + f"\n\n<previous-summary>\n{text}\n<read-files>\nx.py\n"
                         "</read-files>\n</previous-summary>" + block["text"][cut:])
        again, meta = chat(client, update)
        assert meta["mode"] == "update" and NARRATIVE in again


def test_a_newer_compaction_supersedes_a_pending_refinement(slow):
    slow.hold.clear()  # the model stalls: the refinement cannot end on its own
    with started(app_client(slow)) as client:
        headers = {"x-session-id": "ses_super"}
        text, _ = chat(client, captured("opencode-compaction-request")["body"], headers)
        first = pending(client, "ses_super")
        chat(client, opencode_update(text), headers)
        slow.hold.set()  # a running job stops at its next token
        wait_until(lambda: first.status.terminal)
        assert str(first.status) == "cancelled"


def test_codex_is_answered_before_the_model_and_the_next_compaction_carries_its_narrative(slow):
    body = captured("codex-compaction-request")["body"]
    key = json.loads(body["client_metadata"]["x-codex-turn-metadata"])["session_id"]
    with started(app_client(slow)) as client:
        text = responses(client, body)
        assert not model_finished(slow)
        assert "foo.py" in text and NARRATIVE not in text
        assert pending(client, key) is not None
        refined(client, key)
        # Codex's next compaction: its kept user messages, our summary behind its prefix, new turns.
        items = body["input"][:-1] + [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{SUMMARY_PREFIX}\n{text}"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now run the tests."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "They pass."}]},
            body["input"][-1],
        ]
        assert body["input"][-1]["content"][0]["text"].startswith(COMPACT_PROMPT_START)
        again = responses(client, {**body, "input": items})
        assert NARRATIVE in again and "foo.py" in again
        state = client.app.state.service.agents.state_of(key)
        assert state.checkpoint.audit.mode.startswith("agent:codex:update")


def test_the_pi_extension_door_answers_at_once(slow):
    records = [{"type": "message", "id": "c0-0", "parentId": None,
                "message": {"role": "user", "content": "Fix foo.py: foo() must return 2.", "timestamp": 1}},
               {"type": "message", "id": "c0-1", "parentId": "c0-0",
                "message": {"role": "assistant", "content": [{"type": "text", "text": "Reading foo.py."}],
                            "timestamp": 2}}]
    with started(app_client(slow)) as client:
        assert client.post("/v1/sessions/pi-x/messages", params={"format": "pi"}, json=records).status_code == 200
        r = client.post("/v1/sessions/pi-x/compact", params={"tail": "false", "wait": "instant"})
        assert r.status_code == 200, r.text
        assert not model_finished(slow)
        out = r.json()
        assert out["mode"] == "instant" and out["refinement"]["job_id"] and "foo.py" in out["checkpoint"]["summary_text"]
        # The extension knows its instant summary once refined: the version the latest refines.
        wait_until(lambda: client.get("/v1/sessions/pi-x/checkpoint").json()["version"] == 2)
        latest = client.get("/v1/sessions/pi-x/checkpoint").json()
        assert latest["refines"] == 1 and latest["mode"] == "refined"
        first = client.get("/v1/sessions/pi-x/checkpoint", params={"version": 1}).json()
        assert first["summary_text"] == out["checkpoint"]["summary_text"]


def test_agent_wait_model_waits_for_the_models_narrative(slow):
    with started(app_client(slow, agent_wait="model")) as client:
        text, meta = chat(client, captured("opencode-compaction-request")["body"], {"x-session-id": "ses_model"})
        assert meta["model_calls"] > 0 and NARRATIVE in text and OPENCODE_FACT in text
        assert client.app.state.service.refiner.pending_keys() == []
        assert NARRATIVE in responses(client, captured("codex-compaction-request")["body"])


def test_the_setting_is_documented_and_read_from_the_environment(monkeypatch):
    assert Settings().agent_wait == "instant"
    monkeypatch.setenv("COMPACTD_AGENT_WAIT", "model")
    assert Settings().agent_wait == "model"
