"""Gemini CLI's door (worker/http/gemini.py) on its captured requests (tests/fixtures/agents/,
Gemini CLI 0.61.0): both compaction requests recognized by structure whatever the model, the
draft answered with only the `<state_snapshot>` and its 7 tags keeping the conversation's exact
error line, path, command and user constraint, the verify pass answered by repeating the draft
with no pipeline run, near-misses forwarded to the upstream verbatim, Gemini's error envelope,
countTokens, and the answer's latency by default. The scripted backend: no model."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend
from worker.agents.profiles import GEMINI_TAGS, gemini_verify_draft, recognize
from worker.config import Settings
from worker.formats import detect, load
from worker.formats.gemini import load_contents
from worker.http.app import create_app
from worker.service.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/agents"
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"
COMMAND = "python3 test_foo.py"
PATH = "/tmp/capture-gemini-l8b8245i/work/test_foo.py"
CONSTRAINT = "Keep the function signature unchanged."
SLOW = 0.05  # seconds per scripted token: the model would take many seconds


def captured(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"gemini-{name}.json").read_text())


def text_of(response: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in response["candidates"][0]["content"]["parts"])


class Upstream:
    """A loopback Gemini API: logs every request, answers a fixed reply."""

    REPLY = {"candidates": [{"content": {"role": "model", "parts": [{"text": "UPSTREAM"}]}, "finishReason": "STOP"}]}

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream.log.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                     "body": raw})
                data = json.dumps(upstream.REPLY).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def slow() -> Iterator[ScriptedBackend]:
    backend = ScriptedBackend(token_delay=SLOW)
    yield backend
    backend.hold.set()


def client_for(backend: ScriptedBackend, **settings: Any) -> TestClient:
    app = create_app(Settings(rolling=False, **settings), backend_loader=lambda: backend, store=Store(":memory:"))
    return TestClient(app)


def ready(client: TestClient) -> None:
    deadline = time.monotonic() + 10
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline, "the scripted backend did not load"
        time.sleep(0.02)


# ----------------------------------------------------------------------------- recognition


def test_both_captured_requests_are_recognized_whatever_the_model():
    for name in ("compaction-request", "compaction-verify-request"):
        body = captured(name)["body"]
        req = recognize(body, {}, door="gemini")
        assert req is not None and req.agent == "gemini-cli" and req.kind == "history"
        assert recognize(body, {}, door="chat") is None  # the Gemini door's only
    assert gemini_verify_draft(captured("compaction-verify-request")["body"]).startswith("<state_snapshot>")
    assert gemini_verify_draft(captured("compaction-request")["body"]) is None  # the draft is not a verify pass


def near_misses() -> list[tuple[str, dict[str, Any]]]:
    draft = captured("compaction-request")["body"]
    misses = [("main turn", captured("after-compaction")["body"])]
    other_system = json.loads(json.dumps(draft))
    other_system["systemInstruction"]["parts"][0]["text"] = "You are a helpful assistant. " + \
        other_system["systemInstruction"]["parts"][0]["text"]
    misses.append(("prompt not first", other_system))
    other_ask = json.loads(json.dumps(draft))
    other_ask["contents"][-1]["parts"][0]["text"] = "What does <state_snapshot> mean?"
    misses.append(("another question", other_ask))
    model_last = json.loads(json.dumps(draft))
    model_last["contents"].append({"role": "model", "parts": [{"text": "ok"}]})
    misses.append(("model turn last", model_last))
    no_system = {k: v for k, v in draft.items() if k != "systemInstruction"}
    misses.append(("no system instruction", no_system))
    return misses


@pytest.mark.parametrize("label,body", near_misses(), ids=[m[0] for m in near_misses()])
def test_near_misses_pass_through_to_the_upstream(label, body):
    assert recognize(body, {}, door="gemini") is None and gemini_verify_draft(body) is None
    with Upstream() as upstream, client_for(ScriptedBackend(), gemini_upstream=upstream.url) as client:
        ready(client)
        raw = json.dumps(body).encode()
        r = client.post("/v1beta/models/gemini-2.5-flash:generateContent?key=secret", content=raw,
                        headers={"x-goog-api-key": "user-key", "content-type": "application/json"})
    assert r.status_code == 200 and text_of(r.json()) == "UPSTREAM"
    (seen,) = upstream.log
    assert seen["path"] == "/v1beta/models/gemini-2.5-flash:generateContent?key=secret"
    assert seen["body"] == raw and seen["headers"].get("x-goog-api-key") == "user-key"


def test_other_paths_and_streams_are_forwarded_with_their_method():
    with Upstream() as upstream, client_for(ScriptedBackend(), gemini_upstream=upstream.url) as client:
        ready(client)
        assert client.get("/v1beta/models?pageSize=5").status_code == 200
        body = captured("after-compaction")["body"]
        r = client.post("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", json=body)
        assert r.status_code == 200
        assert client.post("/v1beta/models/gemini-2.5-flash:countTokens", json=body).status_code == 200
    assert [(e["method"], e["path"]) for e in upstream.log] == [
        ("GET", "/v1beta/models?pageSize=5"),
        ("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
        ("POST", "/v1beta/models/gemini-2.5-flash:countTokens")]


# ----------------------------------------------------------------------------- the importer


def test_the_importer_pairs_calls_and_drops_the_resumed_duplicate():
    body = captured("compaction-request")["body"]
    assert detect(body) == "gemini"
    session = load_contents(body["contents"][:-1])
    calls = [c for m in session.messages for c in m.tool_calls]
    results = [r for m in session.messages for r in m.tool_results]
    assert len(calls) == 1 and len(results) == 1 and results[0].call_id == calls[0].id
    assert ERROR_LINE in results[0].output and calls[0].arguments["command"] == COMMAND
    assert session.meta["skipped"] == {"duplicate_function_response": 1}
    (user,) = [m for m in session.messages if m.role == "user"]
    assert user.user_text.startswith("Run python3") and "<session_context>" not in user.user_text
    after = load(captured("after-compaction")["body"])  # a whole request: its system instruction too
    assert after.messages[0].role == "system"
    assert any(m.is_summary for m in after.messages)  # the re-injected <state_snapshot>


def test_calls_without_ids_pair_by_name_in_order():
    contents = [{"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
                                            {"functionCall": {"name": "read_file", "args": {"path": "b.py"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "A"}}},
                                           {"functionResponse": {"name": "read_file",
                                                                 "response": {"error": "no b.py"}}}]}]
    session = load_contents(contents)
    calls = [c.id for m in session.messages for c in m.tool_calls]
    results = [r for m in session.messages for r in m.tool_results]
    assert [r.call_id for r in results] == calls and results[1].is_error and results[1].output == "no b.py"


# ----------------------------------------------------------------------------- answers


def test_the_draft_is_only_the_snapshot_with_its_seven_tags_and_every_fact(slow):
    request = captured("compaction-request")
    with client_for(slow) as client:
        ready(client)
        r = client.post(request["path"], json=request["body"], headers={"x-goog-api-key": "k"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["candidates"][0]["finishReason"] == "STOP" and answer["candidates"][0]["content"]["role"] == "model"
    usage = answer["usageMetadata"]
    assert usage["promptTokenCount"] > 0 and usage["candidatesTokenCount"] > 0
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    text = text_of(answer)
    assert text.startswith("<state_snapshot>\n") and text.endswith("\n</state_snapshot>")
    assert re.findall(r"^<(\w+)>$", text, re.M) == ["state_snapshot", *GEMINI_TAGS]
    for tag in GEMINI_TAGS:
        assert text.count(f"<{tag}>") == 1 and text.count(f"</{tag}>") == 1
    knowledge = re.search(r"<key_knowledge>(.*?)</key_knowledge>", text, re.S).group(1)
    assert f"`{ERROR_LINE}`" in knowledge and PATH in knowledge and f"`{COMMAND}`" in knowledge
    constraints = re.search(r"<active_constraints>(.*?)</active_constraints>", text, re.S).group(1)
    assert CONSTRAINT in constraints
    assert "<session_context>" not in text and "m0000" not in text  # no harness text, no message id
    assert not any(complete for _tag, _n, complete in slow.finished)  # answered before the model finished


def test_the_verify_pass_repeats_the_draft_without_a_pipeline_run(slow):
    draft_req, verify_req = captured("compaction-request"), captured("compaction-verify-request")
    with client_for(slow) as client:
        ready(client)
        draft = text_of(client.post(draft_req["path"], json=draft_req["body"]).json())
        body = json.loads(json.dumps(verify_req["body"]))
        body["contents"][-2]["parts"] = [{"text": draft}]
        service = client.app.state.service
        calls: list[Any] = []
        compaction = service.agent_compaction
        service.agent_compaction = lambda *a, **k: calls.append(a) or compaction(*a, **k)
        r = client.post(verify_req["path"], json=body)
        assert r.status_code == 200, r.text
        assert text_of(r.json()) == draft and not calls  # repeated, no pipeline run
        # The captured verify request (another stub's draft): repeated the same way.
        r = client.post(verify_req["path"], json=verify_req["body"])
        assert text_of(r.json()) == verify_req["body"]["contents"][-2]["parts"][0]["text"]


def test_a_streamed_compaction_is_one_sse_chunk_or_a_json_array(slow):
    request = captured("compaction-request")
    path = request["path"].replace(":generateContent", ":streamGenerateContent")
    with client_for(slow) as client:
        ready(client)
        sse = client.post(path + "?alt=sse", json=request["body"])
        array = client.post(path, json=request["body"])
    assert sse.status_code == 200 and sse.headers["content-type"].startswith("text/event-stream")
    (chunk,) = [line for line in sse.text.splitlines() if line.startswith("data: ")]
    assert text_of(json.loads(chunk[len("data: "):])).startswith("<state_snapshot>")
    assert array.status_code == 200 and text_of(array.json()[0]).startswith("<state_snapshot>")


def grown(rounds: int) -> dict[str, Any]:
    """The captured draft with its tool round repeated `rounds` times (new ids, new outputs)."""
    body = json.loads(json.dumps(captured("compaction-request")["body"]))
    head, call, response, reply, ask = body["contents"]
    contents = [head]
    for k in range(rounds):
        c, r = json.loads(json.dumps(call)), json.loads(json.dumps(response))
        cid = f"run_shell_command_{k}"
        c["parts"][0]["functionCall"]["id"] = cid
        r["parts"] = [r["parts"][0]]
        r["parts"][0]["functionResponse"]["id"] = cid
        r["parts"][0]["functionResponse"]["response"]["output"] += f"\nrun {k}\n" + "log line\n" * 40
        contents += [c, r, {"role": "model", "parts": [{"text": f"Attempt {k} still fails."}]}]
    body["contents"] = [*contents, reply, ask]
    return body


def test_a_long_history_is_answered_without_waiting_for_the_model(slow):
    """The answer path makes no model call, whatever the history's length (its latency is a
    figure: benchmarks/agent_paths --latency, the gemini door)."""
    with client_for(slow) as client:
        ready(client)
        r = client.post("/v1beta/models/gemini-2.5-flash:generateContent", json=grown(60))
    assert r.status_code == 200, r.text
    assert f"`{ERROR_LINE}`" in text_of(r.json())
    assert not any(complete for _tag, _n, complete in slow.finished)


# ----------------------------------------------------------------------------- errors, counting


@pytest.mark.parametrize("content,status", [
    (b"{not json", 400), (b"[1, 2]", 400), (b'{"contents": []}', 400), (b'{"contents": "x"}', 400)])
def test_bad_requests_get_geminis_error_envelope(content, status):
    with client_for(ScriptedBackend()) as client:
        ready(client)
        r = client.post("/v1beta/models/gemini-2.5-flash:generateContent", content=content,
                        headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert set(r.json()) == {"error"} and set(error) == {"code", "message", "status"}
    assert error["code"] == status and error["status"] == "INVALID_ARGUMENT" and error["message"]


def test_a_compaction_with_unreadable_contents_is_a_gemini_400():
    body = captured("compaction-request")["body"]
    body = {**body, "contents": [{"role": "user", "parts": "not a list"}, body["contents"][-1]]}
    with client_for(ScriptedBackend()) as client:
        ready(client)
        r = client.post("/v1beta/models/m:generateContent", json=body)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_other_paths_without_an_upstream_say_how_to_set_one():
    with client_for(ScriptedBackend()) as client:
        ready(client)
        for r in (client.get("/v1beta/models"),
                  client.post("/v1beta/models/m:generateContent", json=captured("after-compaction")["body"])):
            assert r.status_code == 400 and "--gemini-upstream" in r.json()["error"]["message"]
        assert client.post("/v1/chat/completions", content=b"{").json()["error"]["type"]  # OpenAI's shape stays


def test_count_tokens_uses_compactds_tokenizer_without_an_upstream():
    backend = ScriptedBackend()
    body = captured("compaction-request")["body"]
    with client_for(backend) as client:
        ready(client)
        r = client.post("/v1beta/models/m:countTokens", json={"contents": body["contents"]})
        wrapped = client.post("/v1beta/models/m:countTokens", json={"generateContentRequest": body})
        bad = client.post("/v1beta/models/m:countTokens", json={"contents": 3})
        counter = client.app.state.service.counter
        expected = counter.total(load_contents(body["contents"]), None, False)
    assert r.status_code == 200 and r.json() == {"totalTokens": expected} and expected > 0
    assert wrapped.json() == {"totalTokens": expected}
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_second_compaction_over_our_snapshot_is_an_update(slow):
    """Gemini's next compaction carries our snapshot as its first user content and asks with
    "A previous <state_snapshot> exists": compactd continues the session it answered."""
    from worker.agents.compactor import _fingerprint

    request = captured("compaction-request")
    with client_for(slow) as client:
        ready(client)
        first = text_of(client.post(request["path"], json=request["body"]).json())
        later = captured("after-compaction")["body"]
        contents = [c for c in later["contents"] if isinstance(c, dict)]
        contents[0]["parts"][1] = {"text": first}  # what Gemini stored: our reply, verbatim
        ask = {"role": "user", "parts": [{"text": "A previous <state_snapshot> exists in the history. You MUST "
                                                  "integrate all still-relevant information.\n\nFirst, reason in "
                                                  "your scratchpad. Then, generate the updated <state_snapshot>."}]}
        body = {**request["body"], "contents": [*contents, ask]}
        r = client.post(request["path"], json=body)
        assert r.status_code == 200, r.text
        second = text_of(r.json())
        state = client.app.state.service.agents.state_of(_fingerprint(second))
    # An update, answered at once; its background refinement may already have replaced it (a race
    # with the slow backend that a loaded machine can lose either way).
    assert state is not None and state.checkpoint.audit.mode in ("agent:gemini-cli:update",
                                                                 "agent:gemini-cli:update:refined")
    assert f"`{ERROR_LINE}`" in second and second.count("<state_snapshot>") == 1
