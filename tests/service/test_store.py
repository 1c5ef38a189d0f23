from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import worker.service.store as store_module
from worker.service.history import RESPONSE_CAP_BYTES, around, search
from worker.service.records import INTERRUPTED, Audit, Conflict, JobStatus, NotFound, PruneMarker, StoreError
from worker.service.store import Store
from worker.session import Message, TextPart, ToolCallPart, ToolResultPart, cited_ids


def text(mid: str, role: str, body: str) -> Message:
    return Message(id=mid, role=role, parts=[TextPart(text=body)])


def call(mid: str, call_id: str, name: str, args: dict) -> Message:
    return Message(id=mid, role="assistant", parts=[ToolCallPart(id=call_id, name=name, arguments=args)])


def result(mid: str, call_id: str, name: str, output: str) -> Message:
    return Message(id=mid, role="tool", parts=[ToolResultPart(call_id=call_id, name=name, output=output)])


PYTEST_FAIL = (
    "============================= FAILURES =============================\n"
    "    def test_round():\n"
    ">       assert Decimal('58.4730') == Decimal('58.47')\n"
    "E       AssertionError: assert Decimal('58.4730') == Decimal('58.47')\n"
    "src/marshmallow/fields.py:1474: AssertionError\n"
)


def conversation() -> list[Message]:
    return [
        text("m0", "system", "You are a coding agent."),
        text("m1", "user", "Fix the rounding bug in marshmallow fields, then run the tests."),
        call("m2", "c1", "bash", {"command": "pytest tests/test_fields.py -x"}),
        result("m3", "c1", "bash", PYTEST_FAIL),
        text("m4", "assistant", "The failure mentions Decimal places; the rounding helper truncates."),
        text("m5", "user", "上下文压缩后旧对话被替换，请保留原始错误信息。"),
        text("m6", "assistant", "コンテキスト圧縮の後でも元のエラーメッセージを検索できます。"),
        call("m7", "c2", "read", {"path": "src/marshmallow/fields.py"}),
        result("m8", "c2", "read", "class Decimal(Number):\n    num_type = decimal.Decimal\n"),
    ]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "compactd.sqlite3")
    yield s
    s.close()


@pytest.fixture
def session(store):
    sid = store.create_session("s1", context_limit=32_768, source_format="openai", meta={"agent": "test"})
    store.append_messages(sid, conversation())
    return sid


def test_wal_mode_and_schema(store, tmp_path):
    assert store.journal_mode == "wal"
    assert store.schema_version == 1
    conn = sqlite3.connect(tmp_path / "compactd.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    assert store.fts_tokenizer == ("trigram" if sqlite3.sqlite_version_info >= (3, 34) else "unicode61")


def test_memory_store():
    with Store(":memory:") as s:
        sid = s.create_session()
        assert s.append_messages(sid, [text("a", "user", "hello")]) == ["a"]
        assert s.get_session(sid).messages[0].text == "hello"


def test_messages_are_append_only(store, session, tmp_path):
    # Even a raw connection that bypasses the Store cannot rewrite or delete history.
    conn = sqlite3.connect(tmp_path / "compactd.sqlite3")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE messages SET body = '{}' WHERE message_id = 'm3'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM messages WHERE message_id = 'm3'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE messages SET role = 'user'")
    # The derived token count is the one column that may change.
    conn.execute("UPDATE messages SET tokens = 7 WHERE message_id = 'm3'")
    conn.commit()
    conn.close()
    assert store.get_session(session).messages[3].tool_results[0].output == PYTEST_FAIL


def test_idempotent_append(store, session):
    msgs = conversation()
    assert store.append_messages(session, msgs) == []
    new = text("m9", "user", "next")
    assert store.append_messages(session, [*msgs[-2:], new]) == ["m9"]
    assert [m.id for m in store.get_session(session).messages] == [f"m{i}" for i in range(10)]


def test_conflicting_reappend_errors_and_rolls_back(store, session):
    changed = text("m1", "user", "Something else entirely.")
    with pytest.raises(Conflict, match="m1"):
        store.append_messages(session, [text("m10", "user", "new"), changed])
    stored = store.get_session(session)
    assert len(stored.messages) == 9  # m10 was not half-written
    assert stored.messages[1].text.startswith("Fix the rounding bug")
    with pytest.raises(Conflict):
        store.append_messages(session, [text("x", "user", "a"), text("x", "user", "b")])


def test_append_to_unknown_session(store):
    with pytest.raises(NotFound):
        store.append_messages("nope", [text("a", "user", "hi")])
    assert issubclass(NotFound, StoreError) and issubclass(Conflict, StoreError)


def test_prune_markers_applied_without_rewriting(store, session, tmp_path):
    added = store.mark_pruned(session, [PruneMarker("m3", "c1", tokens=120)], at=1000.0)
    assert added == [PruneMarker("m3", "c1", 120, 1000.0)]
    assert store.mark_pruned(session, [PruneMarker("m3", "c1")], at=2000.0) == []  # first mark wins
    s = store.get_session(session)
    part = s.messages[3].tool_results[0]
    assert part.compacted_at == 1000.0 and part.compacted_tokens == 120 and part.output == PYTEST_FAIL
    assert "Old tool result content cleared" in s.messages[3].to_chat()["content"]
    assert "120 tokens" in s.messages[3].to_chat()["content"]
    assert s.messages[8].tool_results[0].compacted_at is None
    # The stored body is untouched.
    conn = sqlite3.connect(tmp_path / "compactd.sqlite3")
    body = json.loads(conn.execute("SELECT body FROM messages WHERE message_id = 'm3'").fetchone()[0])
    conn.close()
    assert body["parts"][0]["compacted_at"] is None and body["parts"][0]["compacted_tokens"] is None
    # Echoing back the pruned view is not a content change.
    assert store.append_messages(session, s.messages) == []
    with pytest.raises(StoreError):
        store.mark_pruned(session, [PruneMarker("m3", "no-such-call")])
    with pytest.raises(NotFound):
        store.mark_pruned(session, [PruneMarker("m99", "c1")])
    assert store.prune_markers(session) == [PruneMarker("m3", "c1", 120, 1000.0)]


def test_incoming_compacted_at_becomes_marker(store):
    sid = store.create_session()
    m = Message(id="t", role="tool", parts=[ToolResultPart(call_id="c", output="big", compacted_at=5.0,
                                                          compacted_tokens=9)])
    store.append_messages(sid, [m])
    assert store.prune_markers(sid) == [PruneMarker("t", "c", 9, 5.0)]
    assert store.get_session(sid).messages[0] == m


def test_checkpoint_chain(store, session):
    assert store.latest_checkpoint(session) is None
    v1 = store.add_checkpoint(session, {"summary": "first"}, None, summary_tokens=50, boundary_message_id="m4")
    assert v1 == 1
    audit = Audit(dropped_message_ids=["m1", "m2"], tokens_before=9000, tokens_after=1200,
                  removed_by_verification=["timezone"], timings={"summarize_s": 3.5})
    v2 = store.add_checkpoint(session, {"summary": "second"}, v1, boundary_message_id="m6", audit=audit)
    assert v2 == 2
    with pytest.raises(Conflict):  # built on a stale parent
        store.add_checkpoint(session, {"summary": "fork"}, v1)
    with pytest.raises(Conflict):
        store.add_checkpoint(session, {"summary": "restart"}, None)
    with pytest.raises(StoreError):  # boundary must be a stored message
        store.add_checkpoint(session, {"summary": "x"}, v2, boundary_message_id="missing")
    latest = store.latest_checkpoint(session)
    assert latest is not None and latest.version == 2 and latest.parent_version == 1
    assert latest.data == {"summary": "second"} and latest.boundary_message_id == "m6"
    assert [c.version for c in store.checkpoints(session)] == [1, 2]
    (rec,) = store.audits(session)
    assert rec.checkpoint_version == 2 and rec.audit == audit
    assert store.session_info(session).latest_checkpoint == 2


def test_search_chinese_japanese_and_tool_output(store, session):
    r = search(store, session, "旧对话")
    assert r["mode"] == "bm25" and r["hits"][0]["message_id"] == "m5"
    assert "«旧对话»" in r["hits"][0]["snippet"]

    r = search(store, session, "元のエラー")
    assert [h["message_id"] for h in r["hits"]] == ["m6"]

    # The error string sits in a tool output; query syntax characters are literal.
    r = search(store, session, "AssertionError: assert Decimal('58.4730')")
    assert r["hits"][0]["message_id"] == "m3"
    for q in ["Decimal('58.47')", "fields.py:1474", 'say "hi" OR NOT (x*) ^col: -', "NEAR(a b)"]:
        search(store, session, q)  # never a syntax error
    assert search(store, session, "fields.py:1474")["hits"][0]["message_id"] == "m3"


def test_search_ranking(store, session):
    # Case-insensitive; found in text, tool output and tool output again.
    assert {h["message_id"] for h in search(store, session, "decimal")["hits"]} == {"m3", "m4", "m8"}
    # Same length, more occurrences of the error: bm25 ranks it first.
    sid = store.create_session()
    pad = "x" * 200
    store.append_messages(sid, [
        result("once", "a", "bash", f"ValueError: bad {pad} ok ok ok"),
        result("none", "b", "bash", f"all good {pad} ok ok ok ok ok"),
        result("thrice", "c", "bash", f"ValueError {pad} ValueError ValueError"),
    ])
    r = search(store, sid, "valueerror")
    assert [h["message_id"] for h in r["hits"]] == ["thrice", "once"]
    assert r["hits"][0]["score"] > r["hits"][1]["score"]
    # Tool call arguments are indexed too.
    assert search(store, session, "test_fields.py")["hits"][0]["message_id"] == "m2"
    # No message holds all the terms: any-term fallback, said so.
    r = search(store, session, "rounding 元のエラー")
    assert r["mode"] == "bm25-any" and {h["message_id"] for h in r["hits"]} >= {"m1", "m6"}


def test_short_query_fallback(store, session):
    r = search(store, session, "对话")
    assert r["mode"] == "like" and r["note"] and [h["message_id"] for h in r["hits"]] == ["m5"]
    r = search(store, session, "E")
    assert r["mode"] == "like" and r["hits"]
    # A short term next to a long one narrows the indexed match.
    r = search(store, session, "decimal 圧縮")
    assert r["mode"] == "bm25-any"
    r = search(store, session, "decimal 58")
    assert r["mode"] == "bm25" and [h["message_id"] for h in r["hits"]] == ["m3"]
    assert search(store, session, "   ")["hits"] == []
    assert search(store, session, "%")["hits"] == []  # LIKE wildcards are literal


def test_search_and_around_capped(store):
    sid = store.create_session()
    huge = "".join(f"line {i}: nothing to see here 上下文 \n" for i in range(20_000))
    msgs = [text(f"u{i}", "user", f"question {i} needle") for i in range(3)]
    msgs.append(result("big", "c9", "bash", huge + "AssertionError: needle at the end\n"))
    msgs += [result(f"r{i}", f"k{i}", "bash", huge[: 2000 + 50 * i] + " needle") for i in range(90)]
    store.append_messages(sid, msgs)

    r = search(store, sid, "needle", limit=100)
    size = len(json.dumps(r, ensure_ascii=False).encode())
    assert size <= RESPONSE_CAP_BYTES and r["hits"]
    r = search(store, sid, "nothing to see here", limit=100)
    assert len(json.dumps(r, ensure_ascii=False).encode()) <= RESPONSE_CAP_BYTES
    assert r["truncated"] is True

    a = around(store, sid, "big", radius=3)
    assert len(json.dumps(a, ensure_ascii=False).encode()) <= RESPONSE_CAP_BYTES
    assert a["truncated"] is True
    target = next(m for m in a["messages"] if m["id"] == "big")
    output = target["parts"][0]["output"]
    assert target["truncated"] and "chars truncated" in output
    assert output.startswith("line 0:") and output.endswith("needle at the end\n")  # head and tail kept
    assert [m["seq"] for m in a["messages"]] == sorted(m["seq"] for m in a["messages"])
    assert {"u2", "big", "r0"} <= {m["id"] for m in a["messages"]}  # neighbours not starved


def test_around(store, session):
    store.mark_pruned(session, [PruneMarker("m3", "c1")])
    a = around(store, session, "m3", radius=2)
    assert [m["id"] for m in a["messages"]] == ["m1", "m2", "m3", "m4", "m5"]
    assert a["truncated"] is False
    m3 = a["messages"][2]
    # A pruned output comes back verbatim, flagged as pruned.
    assert m3["parts"][0]["output"] == PYTEST_FAIL and m3["parts"][0]["compacted_at"] is not None
    assert [m["id"] for m in around(store, session, "m0", radius=1)["messages"]] == ["m0", "m1"]
    assert [m["id"] for m in around(store, session, "m8", radius=1)["messages"]] == ["m7", "m8"]
    with pytest.raises(NotFound):
        around(store, session, "zzz")


def test_around_takes_the_cited_prefix_of_an_id(store):
    # Claude Code's message ids are UUIDs (~35 tokens each); a checkpoint cites the shortest
    # unique prefix of 8+ chars, and `around` finds the message by it.
    ids = ["8463c716-a2ea-4c14-9efa-87158ebd9f20", "8463c716-b2ea-4c14-9efa-87158ebd9f20",
           "1222edee-cc4f-4057-bae0-1e8e3347379a"]
    sid = store.create_session("uuids")
    store.append_messages(sid, [text(mid, "user", f"message {i}") for i, mid in enumerate(ids)])
    cite = cited_ids(ids)
    assert cite == {ids[0]: "8463c716-a", ids[1]: "8463c716-b", ids[2]: "1222edee"}
    for mid, short in cite.items():
        found = around(store, sid, short, radius=0)
        assert found["message_id"] == mid and [m["id"] for m in found["messages"]] == [mid]
    with pytest.raises(StoreError, match="ambiguous"):
        around(store, sid, "8463c716")
    with pytest.raises(NotFound):
        around(store, sid, "1222edef")
    assert cited_ids(["m00012", "line00992"]) == {"m00012": "m00012", "line00992": "line00992"}  # short stay whole


def test_jobs_and_interrupted_restart(tmp_path):
    path = tmp_path / "jobs.sqlite3"
    s = Store(path)
    sid = s.create_session("s")
    running = s.create_job("compact", session_id=sid, lane="interactive")
    assert running.status == "queued" and running.lane == "interactive"
    s.update_job(running.id, "running")
    queued = s.create_job("count", session_id=sid)
    done = s.create_job("count", session_id=sid)
    s.update_job(done.id, "running")
    d = s.update_job(done.id, JobStatus.DONE, result={"tokens": 42})
    assert d.result == {"tokens": 42} and d.started is not None and d.finished is not None
    assert d.status is JobStatus.DONE and d.status.terminal and f"{d.status}" == "done"
    with pytest.raises(StoreError):
        s.update_job(queued.id, "paused")
    with pytest.raises(Conflict):
        s.update_job(done.id, "running")
    with pytest.raises(NotFound):
        s.get_job("missing")
    s.close()  # the "crash": a job was left running

    s = Store(path)
    assert s.fail_interrupted_jobs() == [running.id]
    j = s.get_job(running.id)
    assert j.status == "failed" and j.error == INTERRUPTED and j.finished is not None
    assert s.get_job(queued.id).status == "queued"
    assert [j.id for j in s.list_jobs(status="queued")] == [queued.id]
    assert s.fail_interrupted_jobs() == []
    s.close()


def test_token_cache(store, session):
    m = conversation()[3]
    assert store.token_cache_get_many([m.content_key()], "qwen2.5-0.5b") == {}
    store.token_cache_put(m.content_key(), "qwen2.5-0.5b", 321)
    assert store.token_cache_get_many([m.content_key()], "other-model") == {}
    keys = [x.content_key() for x in conversation()]
    assert store.token_cache_get_many(keys, "qwen2.5-0.5b") == {m.content_key(): 321}


def test_reopen_keeps_everything(tmp_path):
    path = tmp_path / "data" / "compactd.sqlite3"
    s = Store(path)
    sid = s.create_session("keep", context_limit=8192, meta={"k": "v"})
    s.append_messages(sid, conversation())
    s.mark_pruned(sid, [PruneMarker("m3", "c1", 99)], at=1.5)
    s.add_checkpoint(sid, {"summary": "s"}, None, boundary_message_id="m4")
    s.token_cache_put("h", "m", 5)
    job = s.create_job("compact", session_id=sid)
    before = s.get_session(sid)
    s.close()

    s = Store(path)
    assert s.get_session(sid) == before
    info = s.session_info(sid)
    assert info.context_limit == 8192 and info.meta == {"k": "v"} and info.message_count == 9
    assert s.latest_checkpoint(sid).data == {"summary": "s"}
    assert s.token_cache_get_many(["h"], "m") == {"h": 5}
    assert s.get_job(job.id).status == "queued"
    assert search(s, sid, "旧对话")["hits"][0]["message_id"] == "m5"
    assert s.list_sessions() == ["keep"]
    s.close()


def test_concurrent_appends_from_threads(store):
    sid = store.create_session()
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(20):
                store.append_messages(sid, [text(f"t{k}-{i}", "user", f"thread {k} message {i}")])
                search(store, sid, f"thread {k}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store.get_session(sid).messages) == 80


def test_newer_schema_refused(tmp_path):
    path = tmp_path / "x.sqlite3"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        Store(path)


def test_kill_mid_append_leaves_nothing_half_written(tmp_path):
    # A child process dies (os._exit: no cleanup, no rollback) in the middle of a batch.
    path = tmp_path / "kill.sqlite3"
    s = Store(path)
    sid = s.create_session("k")
    s.append_messages(sid, [text("before", "user", "kept")])
    s.close()
    child = textwrap.dedent(f"""
        import os
        from worker.session import Message, TextPart
        from worker.service.store import Store
        store = Store({str(path)!r})
        def batch():
            for i in range(50):
                if i == 25:
                    os._exit(9)
                yield Message(id=f"half{{i}}", role="user", parts=[TextPart(text="lost")])
        store.append_messages("k", batch())
    """)
    proc = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).parents[2], timeout=60)
    assert proc.returncode == 9
    s = Store(path)
    assert [m.id for m in s.get_session(sid).messages] == ["before"]
    assert search(s, sid, "lost")["hits"] == []
    assert s.append_messages(sid, [text("after", "user", "fine")]) == ["after"]
    s.close()


def test_unicode61_fallback_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "fts_tokenizer_available", lambda: "unicode61")
    with Store(tmp_path / "u.sqlite3") as s:
        assert s.fts_tokenizer == "unicode61"
        sid = s.create_session()
        s.append_messages(sid, conversation())
        r = search(s, sid, "Decimal('58.4730')")
        assert r["note"] and "trigram" in r["note"]
        assert r["hits"][0]["message_id"] == "m3"
        assert search(s, sid, "E")["mode"] == "bm25"  # no 3-character minimum here
