"""Access (issue 7.6): loopback by default, no non-loopback bind without a key, the key compared
in constant time, no request or path option that reaches a file it should not, and bounded
request size and time (a stalled or silent client is cut off). All on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend, wait_until
from tests.test_reliability_common import LOOPBACK, LoopbackServer, assert_error_shape
from worker.cli import build_parser, main
from worker.config import DEFAULT_HOST, Settings
from worker.http.app import create_app
from worker.service.store import Store

NON_LOOPBACK = ("0.0.0.0", "::", "[::]", "", "192.168.1.10", "10.0.0.1", "example.com",
                "localhost.example.com", "127.0.0.1.nip.io")
PATH_BODIES = ("/etc/passwd", "../../etc/passwd", "~/.ssh/id_rsa", "C:\\Windows\\win.ini")
# Session ids as they travel in the URL (percent-encoded), and what the server must store.
PATH_LIKE_IDS = {
    "%2E%2E": "..",
    "..%5C..%5Cwindows": "..\\..\\windows",
    "~root": "~root",
    "NUL": "NUL",
    "etc%00passwd": "etc\x00passwd",
    "%E2%80%AEtxt.exe": "\u202etxt.exe",
}
SHORT_TIMEOUT_S = 1.0  # body and header deadlines of the slow-client test
SOCKET_WAIT_S = 15.0  # how long the test waits for the server to act: a bound, not a measurement


@pytest.fixture
def client_factory(tmp_path):
    made: list[tuple[TestClient, ScriptedBackend]] = []

    def make(db: Path | None = None, **overrides) -> TestClient:
        backend = ScriptedBackend()
        store = Store(db or ":memory:")
        app = create_app(Settings(context_limit=8000, rolling=False, **overrides), backend_loader=lambda: backend,
                         store=store)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        made.append((client, backend))
        assert wait_until(lambda: client.get("/health").status_code == 200
                          or client.get("/health").status_code == 401)
        return client

    yield make
    for client, backend in made:
        client.__exit__(None, None, None)
        backend.close()


def test_loopback_is_the_default_bind(monkeypatch):
    monkeypatch.delenv("COMPACTD_HOST", raising=False)
    args = build_parser().parse_args(["serve"])
    assert args.host == DEFAULT_HOST == Settings().host == LOOPBACK


@pytest.mark.parametrize("host", NON_LOOPBACK)
def test_a_non_loopback_bind_refuses_to_start_without_a_key(host, capsys, monkeypatch):
    monkeypatch.setenv("COMPACTD_API_KEY", "")  # an empty key is no key
    assert main(["serve", "--host", host, "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("compactd: error: refusing to bind")


def test_the_api_key_is_compared_in_constant_time(client_factory, monkeypatch):
    import worker.http.guards as guards

    seen: list[tuple[bytes, bytes]] = []
    real = guards.hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(guards.hmac, "compare_digest", spy)
    client = client_factory(api_key="s3cret-key")
    for token in ("wrong", "s3cret-ke", "s3cret-keyy", ""):
        r = client.post("/v1/tokenize", json={"text": "hi"}, headers={"Authorization": f"Bearer {token}"})
        err = assert_error_shape(r, 401, "invalid_api_key")
        assert "s3cret" not in json.dumps(err)  # the key never appears in an answer
    assert assert_error_shape(client.get("/openapi.json"), 401)  # the spec is not public either
    ok = client.post("/v1/tokenize", json={"text": "hi"}, headers={"Authorization": "Bearer s3cret-key"})
    assert ok.status_code == 200
    assert (b"s3cret-key", b"s3cret-key") in seen and (b"wrong", b"s3cret-key") in seen


def test_a_json_string_body_is_never_read_as_a_server_file(client_factory, tmp_path):
    """The importers read a str that is not JSON as a path; a request body must not reach that."""
    secret = tmp_path / "other-session.json"
    secret.write_text(json.dumps([{"role": "user", "content": "SECRET-ON-THE-SERVER"}]))
    client = client_factory()
    for body in (str(secret), *PATH_BODIES):
        for fmt in ("auto", "openai", "claude_code"):
            r = client.post("/v1/sessions/probe/messages", json=body, params={"format": fmt})
            assert_error_shape(r, 400, "unsupported_format")
            assert "SECRET" not in r.text
    assert_error_shape(client.get("/v1/sessions/probe"), 404, "not_found")  # nothing was imported


def test_path_like_session_ids_are_plain_ids_and_touch_no_file(client_factory, tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    db = tmp_path / "db" / "compactd.sqlite3"
    client = client_factory(db=db)
    for encoded, raw in PATH_LIKE_IDS.items():
        r = client.post(f"/v1/sessions/{encoded}/messages", json=[{"role": "user", "content": f"id {raw!r}"}])
        assert r.status_code == 200, (raw, r.text)
        assert r.json()["session_id"] == raw
        info = client.get(f"/v1/sessions/{encoded}")
        assert info.status_code == 200 and info.json()["id"] == raw and info.json()["messages"] == 1
        assert_error_shape(client.get(f"/v1/sessions/{encoded}/history/around",
                                      params={"message_id": "../../etc/passwd"}), 404, "not_found")
    # A slash, even encoded, never reaches an id: the route does not match (404, error shape).
    assert_error_shape(client.post("/v1/sessions/..%2F..%2Fetc%2Fpasswd/messages",
                                   json=[{"role": "user", "content": "x"}]), 404, "not_found")
    assert list(work.iterdir()) == []
    assert {p.name for p in db.parent.iterdir()} <= {"compactd.sqlite3", "compactd.sqlite3-wal",
                                                     "compactd.sqlite3-shm"}
    assert set(Store(db).list_sessions()) == set(PATH_LIKE_IDS.values())


def test_db_path_options_fail_with_one_line_and_leave_files_alone(capsys, tmp_path):
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("my notes, not a database\n")
    for argv in (["history", "search", "s", "q", "--db", str(not_a_db)],
                 ["history", "search", "s", "q", "--db", str(tmp_path)],
                 ["serve", "--model", "qwen2.5-coder-0.5b", "--port", "1", "--db", str(not_a_db)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("compactd: error: cannot open the database"), err
    assert not_a_db.read_text() == "my notes, not a database\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _recv_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or SOCKET_WAIT_S passes)."""
    sock.settimeout(SOCKET_WAIT_S)
    data = b""
    deadline = time.monotonic() + SOCKET_WAIT_S
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            return data + b"<closed>"
        data += chunk
    return data


def test_silent_and_stalled_clients_are_cut_off():
    backend = ScriptedBackend()
    settings = Settings(rolling=False, body_timeout=SHORT_TIMEOUT_S, header_timeout=SHORT_TIMEOUT_S)
    app = create_app(settings, backend_loader=lambda: backend, store=Store(":memory:"))
    try:
        with LoopbackServer(app, settings) as srv:
            silent = socket.create_connection((LOOPBACK, srv.port))
            half_headers = socket.create_connection((LOOPBACK, srv.port))
            half_headers.sendall(b"POST /v1/count HTTP/1.1\r\nHost: x\r\n")
            stalled = socket.create_connection((LOOPBACK, srv.port))
            stalled.sendall(b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 100\r\n\r\n{\"te")
            kept_alive = socket.create_connection((LOOPBACK, srv.port))
            kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            kept_alive.settimeout(SOCKET_WAIT_S)
            assert kept_alive.recv(65536).startswith(b"HTTP/1.1 ")
            kept_alive.sendall(b"GET /hea")  # a second request that never finishes its line

            assert _recv_all(silent) == b"<closed>"
            assert _recv_all(half_headers) == b"<closed>"
            assert _recv_all(kept_alive).endswith(b"<closed>")
            answer = _recv_all(stalled)
            assert answer.startswith(b"HTTP/1.1 408 ") and answer.endswith(b"<closed>")
            body = json.loads(answer.split(b"\r\n\r\n", 1)[1].removesuffix(b"<closed>"))
            assert body["error"]["code"] == "request_timeout" and set(body["error"]) == {"code", "message", "param", "type"}
            for s in (silent, half_headers, stalled, kept_alive):
                s.close()
    finally:
        backend.close()
