"""Bad input (issue 7.4): each is a clear error, over HTTP a 4xx in the documented shape, on the
command line one line and exit code 2; never a 5xx, a traceback or a lost message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend, openai_messages, wait_until, work_session
from tests.test_reliability_common import ROOT, assert_error_shape
from worker.cli import main
from worker.config import DEFAULT_MAX_BODY_BYTES, Settings
from worker.http.app import create_app
from worker.service.store import Store

CONTEXT = 8000
HUGE_MESSAGE_BYTES = 50 * 1024 * 1024  # the 50 MB message, over the 32 MiB default limit
NESTING = 100_000  # far past Python's recursion limit
SMALL_CONTEXT = 256  # the smallest context_limit the API takes: its usable 192 cannot hold a 1024-token summary
TRAJ = ROOT / "tests/fixtures/sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"


@pytest.fixture(scope="module")
def client():
    backend = ScriptedBackend()
    app = create_app(Settings(context_limit=CONTEXT, rolling=False), backend_loader=lambda: backend,
                     store=Store(":memory:"))
    with TestClient(app, raise_server_exceptions=False) as c:
        assert wait_until(lambda: c.get("/health").status_code == 200)
        yield c
    backend.close()


def post_raw(client, path: str, body: bytes, ctype: str = "application/json", **params):
    return client.post(path, content=body, headers={"content-type": ctype}, params=params)


def test_invalid_utf8(client):
    bad = b'[{"role": "user", "content": "caf\xe9 \xff\xfe"}]'
    assert_error_shape(post_raw(client, "/v1/sessions/u/messages", bad), 400, "invalid_json")
    assert_error_shape(post_raw(client, "/v1/sessions/u/messages", bad.replace(b"[", b"").replace(b"]", b"") + b"\n",
                                "application/x-ndjson"), 400, "unsupported_format")
    assert_error_shape(post_raw(client, "/v1/count", b'{"text": "\xff"}'), 400)
    assert_error_shape(client.get("/v1/sessions/u"), 404, "not_found")  # nothing half-imported


def test_a_50mb_message_is_413(client):
    body = json.dumps([{"role": "user", "content": "x" * HUGE_MESSAGE_BYTES}]).encode()
    assert len(body) > DEFAULT_MAX_BODY_BYTES
    err = assert_error_shape(post_raw(client, "/v1/sessions/big/messages", body), 413, "body_too_large")
    assert str(DEFAULT_MAX_BODY_BYTES) in err["message"]

    def chunked():  # no Content-Length: counted while read, stopped at the limit
        piece = b"x" * (1024 * 1024)
        for _ in range(HUGE_MESSAGE_BYTES // len(piece)):
            yield piece

    assert_error_shape(client.post("/v1/sessions/big/messages", content=chunked()), 413, "body_too_large")
    assert_error_shape(client.get("/v1/sessions/big"), 404, "not_found")


def test_deeply_nested_json(client):
    deep = b"[" * NESTING + b"]" * NESTING
    err = assert_error_shape(post_raw(client, "/v1/sessions/d/messages", deep), 400, "invalid_json")
    assert "nested" in err["message"]
    for path in ("/v1/count", "/v1/chat/completions", "/apply-template"):
        assert_error_shape(post_raw(client, path, b'{"messages": ' + deep + b"}"), 400)
    # Nesting that parses but means nothing: the content is read as text, nothing breaks.
    odd = [{"role": "user", "content": json.loads("[" * 500 + "]" * 500)}, {"role": "user", "content": "hi"}]
    r = client.post("/v1/sessions/d2/messages", json=odd)
    assert r.status_code == 200 and r.json()["added"] == 2


def test_unknown_roles(client):
    err = assert_error_shape(client.post("/v1/sessions/r/messages", json=[{"role": "wizard", "content": "hi"}]),
                             400, "unsupported_format")
    assert "wizard" in err["message"]
    mixed = [{"role": "user", "content": "hello"}, {"role": "wizard", "content": "abracadabra"},
             {"role": "assistant", "content": "hi"}]
    body = client.post("/v1/sessions/r/messages", json=mixed).json()
    assert body["added"] == 2 and any("wizard" in w for w in body["warnings"])


def test_a_tool_result_without_its_call_is_kept_and_flagged(client):
    """Agents append incrementally (a call in one request, its result in the next), so an
    unmatched result is stored with a warning, not refused; compaction must still cope."""
    session = work_session(turns=12, words=150)
    chat = openai_messages(session)
    orphan = {"role": "tool", "tool_call_id": "call_nobody_made", "content": "stray output"}
    chat.insert(3, orphan)
    r = client.post("/v1/sessions/orphan/messages", json=chat)
    assert r.status_code == 200, r.text
    assert r.json()["added"] == len(chat)
    assert any("call_nobody_made" in w for w in r.json()["warnings"])
    r = client.post("/v1/sessions/orphan/compact")
    assert r.status_code == 200, r.text
    cp = r.json()["checkpoint"]["messages"]
    calls = {c["id"] for m in cp for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in calls for m in cp if m["role"] == "tool")  # the tail starts on no orphan


def test_empty_sessions_and_bodies(client):
    for body in (b"", b"[]", b'{"messages": []}', b"{}", b"null", b'""', b"0"):
        assert_error_shape(post_raw(client, "/v1/sessions/e/messages", body), 400)
    assert_error_shape(post_raw(client, "/v1/sessions/e/messages", b"\n\n", "application/x-ndjson"), 400)
    assert_error_shape(client.post("/v1/sessions/e/compact"), 404, "not_found")
    assert_error_shape(client.get("/v1/sessions/e/tokens"), 404, "not_found")
    client.post("/v1/sessions/one/messages", json=[{"role": "user", "content": "only this"}])
    assert_error_shape(client.post("/v1/sessions/one/compact"), 409, "compaction_refused")


def test_a_context_limit_smaller_than_the_tail_is_refused(client):
    client.post("/v1/sessions/tiny/messages", json=openai_messages(work_session(turns=12, words=150)))
    r = client.post("/v1/sessions/tiny/compact", params={"context_limit": SMALL_CONTEXT})
    err = assert_error_shape(r, 409, "compaction_refused")
    assert "context limit" in err["message"].replace("_", " ") and str(SMALL_CONTEXT) in err["message"]
    assert_error_shape(client.get("/v1/sessions/tiny/checkpoint"), 404, "no_checkpoint")  # nothing stored
    assert_error_shape(client.post("/v1/sessions/tiny/compact", params={"context_limit": 10}), 400)


def test_cli_refuses_a_context_limit_smaller_than_the_tail(capsys, tmp_path):
    out = tmp_path / "cp.json"
    code = main(["compact", str(TRAJ), "--context-limit", "300", "--no-model", "--model", "qwen2.5-coder-0.5b",
                 "--quiet", "--json", "--out", str(out)])
    _one_line(code, capsys.readouterr().err, "context limit 300")
    assert not out.exists()


def _one_line(code: int, err: str, *needles: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("compactd: error:"), (code, err)
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


def test_serve_refuses_a_corrupt_model_at_start(capsys, tmp_path, gguf_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 64)  # the right magic, nothing behind it
    cut = tmp_path / "cut.gguf"
    with open(gguf_path, "rb") as src:
        cut.write_bytes(src.read(12 * 1024 * 1024))
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a model" * 10)
    db = str(tmp_path / "db.sqlite3")
    for model, needle in ((garbage, "corrupt"), (cut, "truncated"), (not_gguf, "not a GGUF"),
                          (tmp_path / "missing.gguf", "not found")):
        code = main(["serve", "--model", str(model), "--port", "1", "--db", db])
        _one_line(code, capsys.readouterr().err, needle)
    # The real process too: exit status 2, no server left behind.
    proc = subprocess.run([sys.executable, "-m", "worker.cli", "serve", "--model", str(garbage), "--port", "1",
                           "--db", db], cwd=ROOT, capture_output=True, text=True, timeout=120)
    _one_line(proc.returncode, proc.stderr, "corrupt")


def test_values_schemathesis_found_are_4xx_or_handled(client):
    """Two 500s the full schemathesis run found: a context_limit past SQLite's 64-bit INTEGER
    (OverflowError), and a NUL inside a search term (FTS5 "unterminated string")."""
    client.post("/v1/sessions/sx/messages", json=[{"role": "user", "content": "hello abc def"}])
    for path in ("/v1/sessions/sx/compact", "/v1/sessions/sx/messages"):
        r = client.post(path, params={"context_limit": 2**63 + 1}, json=[{"role": "user", "content": "x"}])
        assert_error_shape(r, 400, "invalid_request")
    r = client.get("/v1/sessions/sx/history/search", params={"q": "abc\x00def"})
    assert r.status_code == 200 and r.json()["hits"], r.text
