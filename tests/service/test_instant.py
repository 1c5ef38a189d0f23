"""The instant answer at overflow (issue 15): without a ready rolling summary, a compaction
request is answered with the deterministic checkpoint and no model call on the request path;
the model's narrative follows in the background as the next checkpoint version, with the same
facts as the synchronous path. On the ScriptedBackend (logic only): it records every prompt
and the priority each generation ran at, and `hold` stalls every generation at its next token,
so a model call on the request path would keep the request from returning."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend, openai_messages, wait_until, work_session
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store

CONTEXT = 8000  # usable 6000: a 12-turn work_session overflows it
TOKEN_DELAY_S = 0.02  # a model call costs ~1 s of scripted decoding: it cannot hide in a fast answer
REQUEST_TIMEOUT_S = 20.0  # an instant answer that blocked on the stalled model would never come back
REFINE_WAIT_S = 30.0  # bounded wait for the background refinement once the model is released
FACT_SECTIONS = ("Constraints & Preferences", "Progress", "Critical Context", "Relevant Files")
BACKGROUND_PRIORITY = 10  # backends.engine_thread.BACKGROUND


@pytest.fixture
def client_and_backend():
    backend = ScriptedBackend(token_delay=TOKEN_DELAY_S)
    settings = Settings(context_limit=CONTEXT, rolling=False)  # no rolling summary: the instant path
    app = create_app(settings, backend_loader=lambda: backend, store=Store(":memory:"))
    client = TestClient(app)
    client.__enter__()
    assert wait_until(lambda: client.get("/health").status_code == 200)
    yield client, backend
    backend.hold.set()
    client.__exit__(None, None, None)
    backend.close()


def post_bounded(client: TestClient, url: str, **params) -> dict:
    """POST in a thread: the test fails (instead of hanging) when the answer does not come."""
    out: dict = {}

    def run() -> None:
        out["response"] = client.post(url, params=params)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(REQUEST_TIMEOUT_S)
    assert "response" in out, f"no answer within {REQUEST_TIMEOUT_S}s: the request waited on the model"
    r = out["response"]
    assert r.status_code == 200, r.text
    return r.json()


def stored(client: TestClient, sid: str) -> dict[int, dict]:
    store = client.app.state.service.store
    return {c.version: c.data for c in store.checkpoints(sid)}


def test_instant_answer_makes_no_model_call_and_the_refined_narrative_follows(client_and_backend):
    client, backend = client_and_backend
    client.post("/v1/sessions/a/messages", json=openai_messages(work_session(turns=12, words=150)))
    assert client.get("/v1/sessions/a/tokens").json()["overflow"]
    backend.hold.clear()  # every generation stalls at its first token from now on
    body = post_bounded(client, "/v1/sessions/a/compact")  # the default: wait=instant
    assert body["wait"] == "instant" and body["mode"] == "instant" and body["model_calls"] == 0
    assert body["checkpoint_version"] == 1 and body["checkpoint"]["version"] == 1
    assert body["checkpoint"]["mode"] == "instant"
    assert body["tokens"]["after"] < body["tokens"]["before"]
    assert body["refinement"]["version"] == 2 and body["refinement"]["refines"] == 1
    assert body["refinement"]["job_id"]
    # Whatever generation ran, it is the refinement, in the background lane: none on the request path.
    assert all(prio == BACKGROUND_PRIORITY for prio, _tag in backend.started)
    assert backend.generate_calls <= 1
    assert client.get("/v1/sessions/a/checkpoint").json()["version"] == 1  # the model is still stalled
    instant_text = body["checkpoint"]["summary_text"]
    assert "Keep the public API unchanged" not in instant_text  # no model narrative yet
    # The refinement's prompt is the summarizer's, over the same conversation.
    assert wait_until(lambda: backend.generate_calls == 1, timeout=REFINE_WAIT_S)
    assert "Module 0: the handler returns the wrong value" in str(backend.prompts[0])

    backend.hold.set()
    assert wait_until(lambda: client.get("/v1/sessions/a/checkpoint").json()["version"] == 2,
                      timeout=REFINE_WAIT_S, interval=0.1)
    refined = client.get("/v1/sessions/a/checkpoint").json()
    assert refined["mode"] == "refined" and refined["refines"] == 1
    assert "Keep the public API unchanged" in refined["summary_text"]  # the model's decision
    assert refined["boundary_message_id"] == body["checkpoint"]["boundary_message_id"]
    # Same tail (everything after the summary message) as the instant checkpoint.
    assert refined["messages"][2:] == body["checkpoint"]["messages"][2:]
    chain = stored(client, "a")
    assert sorted(chain) == [1, 2]
    for name in FACT_SECTIONS:  # no fact lost, either way
        assert chain[2]["sections"][name] == chain[1]["sections"][name], name
        assert chain[1]["sections"][name].strip()
    job = client.get(f"/v1/jobs/{body['refinement']['job_id']}").json()
    assert job["kind"] == "refine" and job["lane"] == "background" and job["status"] == "done"
    assert job["result"]["status"] == "done" and job["result"]["checkpoint_version"] == 2
    metrics = client.get("/metrics").text
    assert 'compactd_compactions_total{mode="instant"} 1.0' in metrics
    assert 'compactd_compactions_total{mode="refined"} 1.0' in metrics
    assert 'compactd_refinements_total{status="done"} 1.0' in metrics


def test_the_refined_checkpoint_equals_the_synchronous_one(client_and_backend):
    client, backend = client_and_backend
    session = openai_messages(work_session(turns=12, words=150))
    for sid in ("instant", "sync"):
        client.post(f"/v1/sessions/{sid}/messages", json=session)
    post_bounded(client, "/v1/sessions/instant/compact", wait="instant")
    assert wait_until(lambda: 2 in stored(client, "instant"), timeout=REFINE_WAIT_S, interval=0.1)
    sync = post_bounded(client, "/v1/sessions/sync/compact", wait="model")
    assert sync["mode"] == "sync" and sync["model_calls"] >= 1 and "refinement" not in sync
    refined, synced = stored(client, "instant")[2], stored(client, "sync")[1]
    assert refined["sections"] == synced["sections"]
    assert refined["summary_text"] == synced["summary_text"]
    assert refined["messages"] == synced["messages"]
    assert refined["ledger"] == synced["ledger"] and refined["work_state"] == synced["work_state"]
    # The instant one holds the very same fact sections.
    instant = stored(client, "instant")[1]
    assert {k: instant["sections"][k] for k in FACT_SECTIONS} == {k: synced["sections"][k] for k in FACT_SECTIONS}


def test_a_newer_compaction_supersedes_a_pending_refinement(client_and_backend):
    client, backend = client_and_backend
    first = work_session(turns=12, words=150)
    client.post("/v1/sessions/s/messages", json=openai_messages(first))
    backend.hold.clear()
    one = post_bounded(client, "/v1/sessions/s/compact")
    assert one["mode"] == "instant" and one["checkpoint_version"] == 1
    more = [{"role": "user", "content": f"Turn {t}: also fix src/app/extra_{t}.py " + "word " * 300}
            for t in range(12)]
    for m in more:
        client.post("/v1/sessions/s/messages", json=[m, {"role": "assistant", "content": "On it."}])
    two = post_bounded(client, "/v1/sessions/s/compact")
    assert two["mode"] == "instant" and two["checkpoint_version"] == 2
    assert two["refinement"]["refines"] == 2
    backend.hold.set()  # the first refinement, flagged, stops at its next token
    job_url = f"/v1/jobs/{one['refinement']['job_id']}"
    assert wait_until(lambda: client.get(job_url).json()["status"] == "cancelled", timeout=REFINE_WAIT_S)
    assert "superseded" in client.get(job_url).json()["error"]
    assert wait_until(lambda: client.get("/v1/sessions/s/checkpoint").json()["version"] == 3,
                      timeout=REFINE_WAIT_S, interval=0.1)
    cp = client.get("/v1/sessions/s/checkpoint").json()
    assert cp["mode"] == "refined" and cp["refines"] == 2
    assert sorted(stored(client, "s")) == [1, 2, 3]  # one chain, no fork


def test_wait_modes_and_a_bad_value(client_and_backend):
    client, backend = client_and_backend
    client.post("/v1/sessions/j/messages", json=openai_messages(work_session(turns=12, words=150)))
    r = client.post("/v1/sessions/j/compact", params={"wait": "nope"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert r.json()["error"]["param"] == "wait"
    r = client.post("/v1/sessions/j/compact", params={"wait": "job"})
    assert r.status_code == 202 and r.json()["wait"] == "job"
    job_id = r.json()["job"]["id"]
    assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "done", timeout=REFINE_WAIT_S)
    result = client.get(f"/v1/jobs/{job_id}").json()["result"]
    assert result["mode"] == "sync" and result["model_calls"] == backend.generate_calls >= 1
    assert all(prio == 0 for prio, _tag in backend.started)  # an agent polls it: foreground
