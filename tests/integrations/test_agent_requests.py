"""The agent-facing pieces without a real agent or model: the Claude Code hook command on a
real transcript and on bad input, and /v1/responses on Codex's captured compaction request
(tests/fixtures/agents) and on plain turns (forwarded to a loopback stub, or 400 without
--upstream). Model output comes from the ScriptedBackend: these test the wiring, the real model
runs in test_codex.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.fakes import ScriptedBackend, served_app
from tests.integrations.loopback import STUB_REPLY, StubModel
from worker.agents.claude_code import CHECKPOINT_HEADER, MAX_OUTPUT_BYTES, PRECOMPACT_HEADER, run_hook
from worker.agents.profiles import COMPACT_PROMPT_START, is_compaction, session_from_input
from worker.facts.ledger import extract_ledger
from worker.formats import claude_code
from worker.session import id_forms

REPO = Path(__file__).resolve().parents[2]
CODEX_REQUEST = json.loads((REPO / "tests/fixtures/agents/codex-compaction-request.json").read_text())
CC_TRANSCRIPT = REPO / "tests/fixtures/cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
# An exact error line of that transcript (tests/fixtures, the ledger tests read it too).
CC_ERROR = "fatal: The current branch spotter-fum has no upstream branch."


def hook_input(event: str, path: Path, **extra: str) -> str:
    return json.dumps({"hook_event_name": event, "transcript_path": str(path), "session_id": "s", **extra})


def test_precompact_prints_the_facts_within_budget():
    out = run_hook(hook_input("PreCompact", CC_TRANSCRIPT, trigger="manual"))
    assert out.startswith(PRECOMPACT_HEADER)
    assert f"`{CC_ERROR}` — from `git push 2>&1`" in out
    assert "## Critical Context" in out and "## Constraints & Preferences" in out
    assert len(out.encode()) <= MAX_OUTPUT_BYTES
    # Fitted by importance like a checkpoint: every open error stays, and the cut is counted.
    session = claude_code.load(CC_TRANSCRIPT)
    ledger = extract_ledger(session.messages, cwd=session.meta["cwd"])
    assert ledger.unresolved_errors() and all(f"`{e.text}`" in out for e in ledger.unresolved_errors())
    assert "Left out to fit this hook's output limit: " in out


def test_session_start_adds_the_checkpoint_only_after_a_compaction():
    out = json.loads(run_hook(hook_input("SessionStart", CC_TRANSCRIPT, source="compact")))
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert context.startswith(CHECKPOINT_HEADER) and f"`{CC_ERROR}`" in context
    assert len(context.encode()) <= MAX_OUTPUT_BYTES
    assert run_hook(hook_input("SessionStart", CC_TRANSCRIPT, source="startup")) == ""


@pytest.mark.parametrize("event, extra", [("PreCompact", {"trigger": "manual"}), ("SessionStart", {"source": "compact"})])
def test_the_hook_labels_the_users_words_as_the_users_and_cites_no_record_id(event, extra):
    """Claude Code cannot look a transcript record id up (issue 23: `c1796151200189-0:` before the
    user's constraint): the user's words are "User:", and no id is cited anywhere."""
    out = run_hook(hook_input(event, CC_TRANSCRIPT, **extra))
    text = out if event == "PreCompact" else json.loads(out)["hookSpecificOutput"]["additionalContext"]
    constraints = text.split("## Constraints & Preferences\n")[1].split("\n## ")[0]
    labels = [line for line in constraints.splitlines() if line.startswith("- ")]
    assert labels and set(labels) <= {"- User:"} | {x for x in labels if re.match(r"- … \d+ more$", x) or "omitted" in x}
    session = claude_code.load(CC_TRANSCRIPT)
    cited = id_forms([m.id for m in session.messages])
    assert not [x for x in cited if x in text]


def test_a_transcript_with_no_conversation_yet_adds_nothing(tmp_path):
    """Session metadata only (as claude-code 2.1.197 writes it before a session's first message):
    no facts to add, so empty output and exit 0, not a fail-open error."""
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (
        {"type": "custom-title", "customTitle": "Website redesign", "sessionId": "s"},
        {"type": "mode", "mode": "normal", "sessionId": "s"},
        {"type": "permission-mode", "permissionMode": "default", "sessionId": "s"})) + "\n")
    for event, extra in (("PreCompact", {"trigger": "manual"}), ("SessionStart", {"source": "compact"})):
        done = subprocess.run([sys.executable, "-m", "worker.cli", "hook", "claude-code"], cwd=REPO, timeout=60,
                              input=hook_input(event, path, **extra), capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("stdin, message", [
    ("not json", "compactd: hook: hook input on stdin is not JSON\n"),
    ('{"hook_event_name": "Stop", "transcript_path": "x"}',
     "compactd: hook: unsupported hook_event_name 'Stop' (PreCompact or SessionStart)\n"),
    ('{"hook_event_name": "PreCompact", "transcript_path": "/nonexistent.jsonl"}',
     "compactd: hook: transcript not found: /nonexistent.jsonl\n"),
])
def test_hook_fails_open_with_one_line(stdin, message):
    done = subprocess.run([sys.executable, "-m", "worker.cli", "hook", "claude-code"], input=stdin, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", message)


def test_codex_compaction_request_is_recognized_and_parsed():
    body, headers = CODEX_REQUEST["body"], CODEX_REQUEST["headers"]
    assert is_compaction(body, {})  # client_metadata
    assert is_compaction({"input": body["input"]}, headers)  # the header
    assert is_compaction({"input": body["input"]}, {})  # the prompt text
    assert not is_compaction({"input": body["input"][:-1]}, {})
    session = session_from_input(body, "s1")
    assert [m.role for m in session.messages] == ["system", "system", "user", "user", "assistant"]
    assert session.messages[3].user_text == "Read foo.py and fix the bug: foo() must return 2."
    assert not any(COMPACT_PROMPT_START in m.text for m in session.messages)


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_responses_compaction_stream_and_forwarding():
    backend = ScriptedBackend()
    body = CODEX_REQUEST["body"]
    with StubModel() as stub, served_app(backend, upstream=stub.url) as cd:
        answer = httpx.post(cd.url + "/v1/responses", json=body, timeout=60)
        plain = {**body, "client_metadata": {}, "input": body["input"][:-1]}
        forwarded = httpx.post(cd.url + "/v1/responses", json=plain, timeout=60,
                               headers={"authorization": "Bearer secret-for-upstream", "x-custom": "kept"})
        logged = stub.log
        metrics = httpx.get(cd.url + "/metrics", timeout=30).text
    backend.close()
    # The same job kind as opencode's and pi's door (tests/agents): one name in the metrics.
    assert 'compactd_jobs_total{kind="agent_compaction",status="done"} 1.0' in metrics
    events = sse_events(answer.text)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-5:] == ["response.output_text.delta", "response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    item = events[-2]["item"]
    text = item["content"][0]["text"]
    assert item["type"] == "message" and item["role"] == "assistant"
    assert text.startswith("## Goal\n") and "## Critical Context" in text and "## Relevant Files" in text
    assert "REFERENCE ONLY" not in text
    # Codex replaces its history with this text: no compactd message id it could not look up.
    ids = [m.id for m in session_from_input(body, "s1").messages]
    cited = "|".join(map(re.escape, ids))
    assert "foo.py" in text and not re.search(rf"\((?:{cited})\b", text)
    assert events[-1]["response"]["usage"]["output_tokens"] > 0
    assert len(logged) == 1  # only the plain turn reached the upstream
    assert forwarded.status_code == 200
    assert [e["type"] for e in sse_events(forwarded.text)][-1] == "response.completed"
    assert STUB_REPLY in forwarded.text


def test_responses_without_upstream_is_400():
    backend = ScriptedBackend()
    with served_app(backend) as cd:
        plain = httpx.post(cd.url + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=30)
    backend.close()
    assert plain.status_code == 400
    assert plain.json()["error"]["code"] == "no_upstream"
