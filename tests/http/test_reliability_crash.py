"""Crash safety (issue 7.2): a real `compactd serve` (bundled 0.5B, temp DB, 127.0.0.1) is
SIGKILLed in the middle of a model-backed compaction, with a second compaction waiting on the
engine and a third queued, then restarted on the same database:

- the kill lands on the server's own signal that the engine started evaluating the prompt
  (the scheduler's "generation started" log line), not after a guessed sleep;
- every appended message is there, byte for byte, tool-call ids and argument strings included
  (compared with the raw transcript file, not with another import of it);
- the last complete checkpoint is intact and no half-written one exists;
- the interrupted jobs (running and queued) are reported failed, "interrupted by restart";
- the SQLite file passes its integrity check.
"""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from backends.models import resolve
from tests.fakes import wait_until
from tests.test_reliability_common import ROOT, ServeProcess, record
from worker.formats import load
from worker.pipeline import CompactionConfig, compact
from worker.service.records import INTERRUPTED
from worker.service.scheduler import GENERATION_STARTED
from worker.service.store import Store

pytestmark = pytest.mark.model

TRAJ = ROOT / "tests/fixtures/sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
CONTEXT_LIMIT = 6000  # usable 4500: the ~8.9k-token transcript overflows it
SEEDED_SHARE = 0.7  # the part of the transcript stored (and checkpointed) before the server starts
JOB_START_S = 120  # bound on a compaction job reaching `running`
IN_MODEL_S = 120  # bound on the running job's generation starting (its prompt counted first)
REQUEST_TIMEOUT_S = 60


def seed(db, counting_backend) -> tuple[int, dict]:
    """Store the first part of the transcript and a complete checkpoint of it (no model)."""
    session = load(TRAJ)
    head = session.model_copy(update={"messages": session.messages[: int(len(session.messages) * SEEDED_SHARE)]})
    result = compact(head, counting_backend, CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False))
    cp = result.checkpoint
    with Store(db) as store:
        store.create_session("crash", context_limit=CONTEXT_LIMIT, source_format=session.source_format)
        store.append_messages("crash", head.messages)
        store.add_checkpoint("crash", cp.to_dict(), None, summary_tokens=cp.tokens.summary,
                             boundary_message_id=cp.boundary_message_id)
        stored = store.latest_checkpoint("crash")
    assert stored is not None
    return len(session.messages), stored.data


def test_sigkill_mid_compaction_loses_nothing(tmp_path):
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    counting = LlamaCppBackend(resolve("qwen2.5-coder-0.5b").path)
    try:
        total, checkpoint_before = seed(tmp_path / "compactd.sqlite3", counting)
    finally:
        counting.close()
    db = tmp_path / "compactd.sqlite3"
    doc = json.loads(TRAJ.read_text())
    serve = ServeProcess(db, "--no-rolling", "--ctx", "8192", log_level="info").start()
    try:
        serve.wait_healthy()
        with httpx.Client(base_url=serve.url, timeout=REQUEST_TIMEOUT_S) as client:
            r = client.post("/v1/sessions/crash/messages", json=doc, params={"mode": "sync"})
            assert r.status_code == 200 and r.json()["added"] == total - int(total * SEEDED_SHARE), r.text
            for sid in ("q1", "q2"):
                r = client.post(f"/v1/sessions/{sid}/messages", json=doc,
                                params={"mode": "sync", "context_limit": CONTEXT_LIMIT})
                assert r.status_code == 200
            jobs = {}
            for sid in ("crash", "q1", "q2"):  # two foreground runners: the third job waits in the queue
                r = client.post(f"/v1/sessions/{sid}/compact", params={"wait": "false"})
                assert r.status_code == 202, r.text
                jobs[sid] = r.json()["job"]["id"]

            def status(sid: str) -> str:
                return client.get(f"/v1/jobs/{jobs[sid]}").json()["status"]

            assert wait_until(lambda: status("crash") == "running" and status("q1") == "running",
                              timeout=JOB_START_S, interval=0.2)
            # The server's own signal: the engine is evaluating the crash job's prompt.
            assert serve.wait_log(GENERATION_STARTED % jobs["crash"], timeout=IN_MODEL_S), serve.log()
            before_kill = {sid: status(sid) for sid in jobs}
            assert before_kill == {"crash": "running", "q1": "running", "q2": "queued"}, before_kill
        serve.kill()
        assert serve.proc is not None and serve.proc.returncode == -9

        restarted = ServeProcess(db, "--no-rolling", "--ctx", "8192").start()
        try:
            restarted.wait_healthy()
            with httpx.Client(base_url=restarted.url, timeout=REQUEST_TIMEOUT_S) as client:
                for sid in ("crash", "q1", "q2"):
                    assert client.get(f"/v1/sessions/{sid}").json()["messages"] == total
                    job = client.get(f"/v1/jobs/{jobs[sid]}").json()
                    assert job["status"] == "failed" and job["error"] == INTERRUPTED, job
                    assert job["finished"] is not None
                cp = client.get("/v1/sessions/crash/checkpoint").json()
                assert cp["version"] == 1 and cp["summary_text"] == checkpoint_before["summary_text"]
                for sid in ("q1", "q2"):
                    assert client.get(f"/v1/sessions/{sid}/checkpoint").json()["error"]["code"] == "no_checkpoint"
            with Store(db) as store:
                chain = store.checkpoints("crash")
                assert [c.version for c in chain] == [1] and chain[0].data == checkpoint_before
                stored = store.get_session("crash").messages
                original = load(TRAJ).messages
                assert [m.model_dump(exclude={"parts"}) for m in stored] == [m.model_dump(exclude={"parts"})
                                                                               for m in original]
                assert [[getattr(p, "text", None) or getattr(p, "output", None) for p in m.parts] for m in stored] == \
                       [[getattr(p, "text", None) or getattr(p, "output", None) for p in m.parts] for m in original]
                # Tool calls: ids and argument strings exactly as the agent wrote them in the file.
                raw_calls = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                             for entry in doc["history"] for c in entry.get("tool_calls") or []]
                stored_calls = [(c.id, c.name, c.arguments_json()) for m in stored for c in m.tool_calls]
                assert len(raw_calls) == 13
                assert [tuple(x.encode() for x in c) for c in stored_calls] == \
                       [tuple(x.encode() for x in c) for c in raw_calls]
                assert [p.call_id for m in stored for p in m.tool_results] == [c[0] for c in raw_calls]
            conn = sqlite3.connect(db)
            try:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                conn.close()
        finally:
            restarted.stop()
    finally:
        serve.kill()
    record("crash", {"messages": total, "jobs_interrupted": len(jobs), "checkpoint_versions_after": 1,
                     "integrity_check": "ok"})
