"""The HTTP API on the deterministic ScriptedBackend: sessions, counts, compactions (swap vs
synchronous), errors, limits, auth, chat completions, metrics."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend, openai_messages, wait_until, work_session
from worker.config import Settings
from worker.http.app import create_app
from worker.http.guards import check_bind
from worker.service.scheduler import FOREGROUND_LANE
from worker.service.store import Store

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 8000  # usable 6000, pre-threshold 3600: a 12-turn work_session is past it


@pytest.fixture
def make_client():
    made: list[tuple[TestClient, ScriptedBackend]] = []

    def make(backend: ScriptedBackend | None = None, *, wait_ready: bool = True, loader=None, **overrides):
        backend = backend or ScriptedBackend()
        settings = Settings(context_limit=CONTEXT, **overrides)
        app = create_app(settings, backend_loader=loader or (lambda: backend), store=Store(":memory:"))
        client = TestClient(app)
        client.__enter__()
        made.append((client, backend))
        if wait_ready:
            assert wait_until(lambda: client.get("/health").status_code == 200)
        return client, backend, app

    yield make
    for client, backend in made:
        backend.hold.set()
        client.__exit__(None, None, None)
        backend.close()


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "param", "type"}
    assert body["error"]["code"] == code and body["error"]["message"]
    assert "Traceback" not in response.text
    return body["error"]


def append(client, sid: str, session, **params):
    r = client.post(f"/v1/sessions/{sid}/messages", json=openai_messages(session), params=params)
    assert r.status_code == 200, r.text
    return r.json()


# -- compaction: swap vs synchronous ----------------------------------------------------


def test_rolling_summary_makes_the_overflow_compaction_a_swap_without_model_call(make_client):
    client, backend, _app = make_client(backend=ScriptedBackend())
    app_service = client.app.state.service
    app_service.config.debounce_s = 0.05
    status = append(client, "a", work_session(turns=12, words=150))["tokens"]
    assert status["overflow"] and status["tokens"] >= status["pre_threshold"]
    assert wait_until(lambda: client.get("/v1/sessions/a/tokens").json()["rolling_ready"])
    calls_before = backend.generate_calls
    assert calls_before >= 1  # the rolling summary itself used the model, in the background lane
    r = client.post("/v1/sessions/a/compact")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "swap" and body["model_calls"] == 0
    assert backend.generate_calls == calls_before  # nothing on the critical path
    assert body["tokens"]["after"] < body["tokens"]["before"]
    cp = body["checkpoint"]
    assert cp["version"] == 1 and cp["messages"][0]["role"] == "system"
    assert cp["summary_text"] in [m["content"] for m in cp["messages"]]
    # The narrative of the rolling summary is carried into the swapped checkpoint.
    assert "Keep the public API unchanged" in cp["summary_text"]
    after = client.get("/v1/sessions/a/tokens").json()
    assert after["checkpoint_version"] == 1 and after["tokens"] == body["tokens"]["after"]
    metrics = client.get("/metrics").text
    assert 'compactd_compactions_total{mode="swap"} 1' in metrics
    assert 'compactd_compactions_total{mode="sync"}' not in metrics


def test_without_a_rolling_summary_the_compaction_calls_the_model_in_the_foreground(make_client):
    client, backend, _app = make_client(rolling=False)
    append(client, "b", work_session(turns=12, words=150))
    r = client.post("/v1/sessions/b/compact", params={"wait": "false"})
    assert r.status_code == 202
    job_id = r.json()["job"]["id"]
    assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "done")
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["result"]["mode"] == "sync" and job["result"]["model_calls"] >= 1
    assert backend.generate_calls == job["result"]["model_calls"]
    assert all(prio == 0 for prio, _tag in backend.started)  # foreground priority
    assert 'compactd_compactions_total{mode="sync"} 1' in client.get("/metrics").text
    # A second compaction right away has nothing outside the tail: refused with the reason, 409.
    err = assert_error(client.post("/v1/sessions/b/compact"), 409, "compaction_refused")
    assert "nothing to compact" in err["message"]


def test_an_explicit_compaction_of_an_agent_compacted_transcript_is_the_full_history(make_client):
    """opencode compacted this session itself (its summary is the last message): POST compact
    is a client asking, so it gets the checkpoint of the whole history, no larger than the
    live context; compacting again on top of it finds nothing new."""
    client, backend, _app = make_client(rolling=False)
    body = (ROOT / "tests/fixtures/opencode-darkfactory_ses_39b7f9e89ffe7J0WzLzYrUt4eW.json").read_bytes()
    r = client.post("/v1/sessions/oc/messages", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    r = client.post("/v1/sessions/oc/compact", params={"wait": "model"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_calls"] == 0 and "agent's summary" in out["fallback"]
    assert out["tokens"]["after"] <= out["tokens"]["before"]
    summary = next(m["content"] for m in out["checkpoint"]["messages"] if (m["content"] or "").startswith("[CONTEXT"))
    # The agent's summary is quoted where the summary has room above the ledger's floor
    # (pipeline/anchor.py; test_refusal_rules checks which), else left out whole, never a fragment.
    goal = summary.split("## Goal", 1)[1].split("\n## ", 1)[0]
    head = "The agent's own summary of the earlier turns"
    assert head not in goal or len(goal.split(head, 1)[1]) > 200
    err = assert_error(client.post("/v1/sessions/oc/compact", params={"wait": "model"}), 409, "compaction_refused")
    assert "nothing to compact" in err["message"]


def test_a_summary_for_an_agent_keeping_its_own_tail_cites_no_message_id(make_client):
    """pi's extension (tail=false) hands compactd's summary text to pi's model, which cannot look
    compactd's message ids up (issue 23): the user's words are labelled "User:" and no id is cited;
    the stored record keeps them (the page links facts to their messages)."""
    client, _backend, app = make_client(rolling=False)
    session = work_session(turns=6, words=40)
    append(client, "pi-x", session)
    r = client.post("/v1/sessions/pi-x/compact", params={"tail": "false", "wait": "model"})
    assert r.status_code == 200, r.text
    text = r.json()["checkpoint"]["summary_text"]
    constraints = text.split("## Constraints & Preferences\n")[1].split("\n## ")[0]
    assert "- User:" in constraints and "keep the public API unchanged" in constraints
    assert "- Agent:" in text.split("## Progress\n")[1].split("\n## ")[0]  # its turn-end reports, by the same rule
    service = app.state.service
    ids = [m.id for m in service.store.get_session("pi-x").messages]
    assert len(ids) >= 6 and not [i for i in ids if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text)]
    _version, stored = service.committed("pi-x")
    assert stored.summary_text == text
    assert re.search(r"^- [\w-]+:$", stored.sections["Constraints & Preferences"], re.M)
    assert "- User:" not in stored.sections["Constraints & Preferences"]


# -- counts -----------------------------------------------------------------------------


def test_token_count_is_exact_and_an_append_counts_only_the_new_message(make_client):
    client, backend, _app = make_client(rolling=False)
    session = work_session(turns=3)
    chat = openai_messages(session)
    first = append(client, "c", session)["tokens"]
    assert first["tokens"] == backend.count_messages(chat)
    assert first["counted_now"] == len(chat)
    extra = {"role": "user", "content": "one more request about src/app/extra.py"}
    second = client.post("/v1/sessions/c/messages", json=[extra]).json()
    assert second["added_ids"] == [f"m{len(chat):05d}"]  # position ids continue after the stored ones
    assert second["tokens"]["counted_now"] == 1
    assert second["tokens"]["tokens"] == backend.count_messages(chat + [extra])
    # Re-reading costs nothing: every share comes from the store's token cache.
    assert client.get("/v1/sessions/c/tokens").json()["counted_now"] == 0


# -- errors and limits ------------------------------------------------------------------


def test_errors_are_openai_shaped_4xx(make_client):
    client, _backend, _app = make_client(rolling=False, max_body_bytes=4096)
    assert_error(client.post("/v1/sessions/x/messages", content=b"{not json",
                             headers={"content-type": "application/json"}), 400, "invalid_json")
    assert_error(client.post("/v1/sessions/x/messages", json={"hello": "world"}), 400, "unsupported_format")
    assert_error(client.get("/v1/sessions/nope/tokens"), 404, "not_found")
    assert_error(client.get("/v1/sessions/nope/checkpoint"), 404, "not_found")
    assert_error(client.get("/v1/sessions/nope/history/search", params={"q": "x"}), 404, "not_found")
    assert_error(client.get("/v1/jobs/nope"), 404, "not_found")
    assert_error(client.get("/no/such/route"), 404, "not_found")
    assert_error(client.post("/v1/count", json={"text": 3}), 400, "invalid_request")
    assert_error(client.post("/v1/count", json={}), 400, "invalid_request")
    big = json.dumps([{"role": "user", "content": "x" * 5000}]).encode()
    err = assert_error(client.post("/v1/sessions/x/messages", content=big,
                                   headers={"content-type": "application/json"}), 413, "body_too_large")
    assert "4096" in err["message"]

    def chunks():  # no Content-Length: counted while read
        for _ in range(5):
            yield b"x" * 1000

    assert_error(client.post("/v1/sessions/x/messages", content=chunks()), 413, "body_too_large")
    client.post("/v1/sessions/y/messages", json=[{"role": "user", "content": "hello"}], params={"mode": "sync"})
    # The same id with other content: append-only store refuses, 409.
    assert_error(client.post("/v1/sessions/y/messages", json=[{"role": "user", "content": "changed"}],
                             params={"mode": "sync"}), 409, "conflict")
    assert_error(client.post("/v1/sessions/y/compact"), 409, "compaction_refused")
    assert_error(client.get("/v1/sessions/y/checkpoint"), 404, "no_checkpoint")


def test_health_is_503_while_the_model_loads(make_client):
    release = threading.Event()
    backend = ScriptedBackend()

    def slow_loader():
        release.wait(20)
        return backend

    client, _backend, _app = make_client(backend=backend, wait_ready=False, loader=slow_loader)
    r = client.get("/health")
    assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable_error"
    assert_error(client.post("/v1/tokenize", json={"text": "hi"}), 503, "model_loading")
    # The store works without the model: messages can be appended while it loads.
    assert client.post("/v1/sessions/z/messages", json=[{"role": "user", "content": "hi"}]).status_code == 200
    release.set()
    assert wait_until(lambda: client.get("/health").status_code == 200)
    assert client.get("/health").json() == {"status": "ok"}


def test_overload_is_429_with_retry_after(make_client):
    backend = ScriptedBackend(token_delay=0.01)
    client, _backend, app = make_client(backend=backend, queue_size=1, rolling=False)
    scheduler = app.state.service.scheduler
    backend.hold.clear()

    def hold_one():  # runs on the app's event loop
        return scheduler.submit("chat", lambda job: backend.hold.wait(20), lane=FOREGROUND_LANE)

    jobs = []
    for _ in range(2):  # both foreground runners busy...
        jobs.append(client.portal.call(hold_one))
        assert wait_until(lambda: jobs[-1].status == "running")
    jobs.append(client.portal.call(hold_one))  # ...and one job waiting fills the queue of 1
    assert scheduler.depth(FOREGROUND_LANE) == 1
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert_error(r, 429, "overloaded")
    assert int(r.headers["retry-after"]) >= 1
    backend.hold.set()
    assert wait_until(lambda: all(j.status == "done" for j in jobs))
    assert 'compactd_overload_rejections_total{lane="foreground"} 1' in client.get("/metrics").text


# -- safety -----------------------------------------------------------------------------


def test_non_loopback_bind_needs_an_api_key(capsys):
    from worker.cli import main

    with pytest.raises(ValueError, match="refusing to bind 0.0.0.0"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", "secret")
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.5"):
        check_bind(host, None)
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "refusing to bind 0.0.0.0" in capsys.readouterr().err


def test_api_key_is_required_when_set(make_client):
    client, _backend, _app = make_client(api_key="s3cret", wait_ready=False)
    assert wait_until(lambda: client.get("/health").status_code == 200)  # health stays open
    assert_error(client.post("/v1/tokenize", json={"text": "hi"}), 401, "invalid_api_key")
    assert_error(client.post("/v1/tokenize", json={"text": "hi"}, headers={"Authorization": "Bearer wrong"}),
                 401, "invalid_api_key")
    ok = client.post("/v1/tokenize", json={"text": "hi"}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["count"] == 1


# -- tokenizer, chat, retrieval ---------------------------------------------------------


def test_tokenizer_endpoints_use_the_backend(make_client):
    client, backend, _app = make_client(rolling=False)
    text = "def f(x): return x + 1"
    assert client.post("/tokenize", json={"content": text}).json() == {"tokens": backend.tokenize(text)}
    assert client.post("/v1/tokenize", json={"text": text}).json()["tokens"] == backend.tokenize(text)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    prompt = client.post("/apply-template", json={"messages": msgs}).json()["prompt"]
    assert prompt == backend.render_messages([{"role": "user", "content": "hello"}])
    counted = client.post("/v1/count", json={"messages": msgs}).json()
    assert counted == {"model": "scripted", "tokens": backend.count(prompt), "kind": "messages"}
    assert client.post("/v1/count", json={"text": text}).json()["tokens"] == backend.count(text)
    assert client.get("/v1/models").json()["data"][0]["id"] == "scripted"
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/sessions/{session_id}/messages", "/v1/chat/completions", "/tokenize", "/metrics"} <= set(paths)


def test_chat_completions_plain_stream_and_json_schema(make_client):
    client, backend, _app = make_client(rolling=False)
    schema = {"type": "object", "properties": {"goal": {"type": "string"}}}
    body = {"messages": [{"role": "user", "content": "summarize"}], "max_tokens": 200,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["choices"][0]["message"]["content"] == backend.reply
    assert data["usage"]["completion_tokens"] == len(backend.reply.split())
    assert set(data["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n"}
    assert backend.schemas[-1] == schema
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as s:
        events = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == backend.reply
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "timings" in chunks[-1]
    too_long = {"messages": [{"role": "user", "content": "x " * 100}], "max_tokens": 8190}
    assert_error(client.post("/v1/chat/completions", json=too_long), 400, "context_length_exceeded")


def test_checkpoint_formats_and_history_retrieval(make_client):
    client, _backend, _app = make_client(rolling=False)
    session = work_session(turns=12, words=150)
    session.messages[5].parts[0].output += "\n数据库连接失败：超时"
    append(client, "h", session)
    assert client.post("/v1/sessions/h/compact").status_code == 200
    openai_cp = client.get("/v1/sessions/h/checkpoint").json()
    anthropic_cp = client.get("/v1/sessions/h/checkpoint", params={"format": "anthropic"}).json()
    assert openai_cp["messages"][0]["role"] == "system"
    assert anthropic_cp["system"] and anthropic_cp["messages"][0]["role"] == "user"
    assert all(m["role"] in ("user", "assistant") for m in anthropic_cp["messages"])
    hits = client.get("/v1/sessions/h/history/search", params={"q": "连接失败"}).json()["hits"]
    # Posted as an OpenAI message list: ids are positions (m00005 is the 6th message).
    assert hits and hits[0]["message_id"] == "m00005"
    err = client.get("/v1/sessions/h/history/search", params={"q": "AssertionError: expected 7"}).json()
    plain = [h["snippet"].replace("«", "").replace("»", "") for h in err["hits"]]
    assert any("AssertionError: expected 7" in p for p in plain)
    around = client.get("/v1/sessions/h/history/around",
                        params={"message_id": "m00005", "radius": 2}).json()
    assert len(json.dumps(around, ensure_ascii=False).encode()) <= 20 * 1024
    assert [m["id"] for m in around["messages"]] == [f"m{i:05d}" for i in range(3, 8)]


# -- metrics ----------------------------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse_prometheus(text: str) -> dict[str, list[tuple[str, float]]]:
    """A strict reader of the text format: every line is HELP, TYPE or a sample of a declared family."""
    types: dict[str, str] = {}
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        family = name if name in types else re.sub(r"_(bucket|sum|count|total|created|info)$", "", name)
        assert family in types, f"sample of an undeclared family: {line!r}"
        samples.setdefault(name, []).append((labels, value))
    return samples


def test_metrics_text_parses(make_client):
    client, _backend, _app = make_client()
    client.app.state.service.config.debounce_s = 0.05
    append(client, "m", work_session(turns=12, words=150))
    assert wait_until(lambda: client.get("/v1/sessions/m/tokens").json()["rolling_ready"])
    client.post("/v1/sessions/m/compact")
    client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    samples = parse_prometheus(client.get("/metrics").text)
    assert {labels for labels, _ in samples["compactd_queue_depth"]} == {'{lane="background"}', '{lane="foreground"}'}
    assert samples["compactd_decode_tokens_total"][0][1] > 0
    buckets = [v for labels, v in samples["compactd_time_to_first_token_seconds_bucket"] if 'lane="background"' in labels]
    assert buckets == sorted(buckets) and buckets[-1] >= 1  # cumulative, +Inf last
    count = dict(samples["compactd_time_to_first_token_seconds_count"])['{lane="background"}']
    assert buckets[-1] == count
    assert dict(samples["compactd_compactions_total"]) == {'{mode="swap"}': 1.0}
    assert samples["compactd_compaction_tokens_before_total"][0][1] > samples["compactd_compaction_tokens_after_total"][0][1]
    # Process metrics come from prometheus-client's collectors; every request's latency is
    # observed under its route template, never the raw path.
    assert "python_gc_objects_collected_total" in samples
    latency = dict(samples["compactd_http_request_duration_seconds_count"])
    assert latency['{method="POST",route="/v1/sessions/{session_id}/messages",status="200"}'] == 1.0
    assert latency['{method="POST",route="/v1/chat/completions",status="200"}'] == 1.0
    assert not any("/v1/sessions/m/" in labels for labels in latency)


def test_each_app_has_its_own_metrics_registry(make_client):
    first, _b1, _app1 = make_client()
    second, _b2, _app2 = make_client()
    first.post("/v1/tokenize", json={"text": "hi"})
    one = first.app.state.service.metrics
    two = second.app.state.service.metrics
    assert one.registry is not two.registry
    route = {"method": "POST", "route": "/v1/tokenize", "status": "200"}
    assert one.registry.get_sample_value("compactd_http_request_duration_seconds_count", route) == 1.0
    assert two.registry.get_sample_value("compactd_http_request_duration_seconds_count", route) is None


def test_a_deeply_nested_transcript_is_400_as_json_and_as_jsonl(make_client):
    client, _backend, _app = make_client(rolling=False)
    deep = ("[" * 5000 + "]" * 5000).encode()
    for ctype, code in (("application/json", "invalid_json"), ("application/x-ndjson", "unsupported_format")):
        r = client.post("/v1/sessions/deep/messages", content=deep, headers={"content-type": ctype})
        assert "nested too deeply to parse" in assert_error(r, 400, code)["message"]
