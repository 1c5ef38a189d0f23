"""Agents' compaction requests (captured from opencode 1.18.33 and pi 0.73.1, see
tests/fixtures/agents/README.md): recognized, parsed back into paired messages, answered in the
agent's template through the pipeline, with rolling state per session. The model is scripted
here (logic only); tests/integrations/ run the real agents against the real model."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes import ScriptedBackend
from worker.agents import recognize
from worker.agents.blob import parse_conversation, parse_pi_calls
from worker.config import Settings
from worker.http.app import create_app
from worker.pipeline.summarize import strip_message_ids
from worker.service.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/agents"
OPENCODE_HEADINGS = ["## Objective", "## Important Details", "## Work State", "### Completed", "### Active",
                     "### Blocked", "## Next Move", "## Relevant Files"]
PI_HEADINGS = ["## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress",
               "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context"]
TURN_PREFIX_HEADINGS = ["## Original Request", "## Early Progress", "## Context for Suffix"]


def captured(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def flat(messages: list[dict]) -> list[dict]:
    from worker.formats._common import block_text

    return [{**m, "content": block_text(m["content"])} for m in messages]


def headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("name, agent, kind, prior", [
    ("opencode-compaction-request", "opencode", "history", None),
    ("opencode-compaction-update-request", "opencode", "history",
     "## Goal\nSTUB-SUMMARY: fix the bug in foo.py\n\n## Next Steps\n1. run the tests"),
    ("pi-compaction-request", "pi", "history", None),
    ("pi-turnprefix-request", "pi", "turn_prefix", None),
])
def test_captured_requests_are_recognized(name, agent, kind, prior):
    req = captured(name)
    headers = {k.lower(): v for k, v in req["headers"].items()}
    found = recognize({"messages": flat(req["body"]["messages"])}, headers)
    assert (found.agent, found.kind, found.prior_summary) == (agent, kind, prior)
    assert found.session_key == headers.get("x-session-id")


def test_plain_requests_stay_generation_unless_the_header_says_compact():
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Summarize this."}]
    assert recognize({"messages": messages}, {}) is None
    forced = recognize({"messages": messages}, {"x-compactd-mode": "compact"})
    assert (forced.agent, forced.conversation) == ("generic", None)


def test_opencode_blob_pairs_each_call_with_its_result():
    blob = ('[User]: fix it\n\n[Assistant tool call]: read({"filePath":"/w/foo.py"})\n[Tool result]: 1: x\n'
            '[Assistant tool call]: bash({"command":"pytest"})\n[Tool error]: exit 1\n[Assistant]: done')
    s = parse_conversation(blob)
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    calls = [c for m in s.messages for c in m.tool_calls]
    results = [r for m in s.messages for r in m.tool_results]
    assert [(c.name, c.arguments) for c in calls] == [("read", {"filePath": "/w/foo.py"}), ("bash", {"command": "pytest"})]
    assert [(r.call_id, r.output, r.is_error) for r in results] == [
        (calls[0].id, "1: x", False), (calls[1].id, "exit 1", True)]


def test_pi_calls_with_json_values_and_several_calls():
    assert parse_pi_calls('read(path="a; b.py", limit=5); bash(command="ls -la")') == [
        ("read", {"path": "a; b.py", "limit": 5}), ("bash", {"command": "ls -la"})]


def test_opencode_synthetic_continue_is_not_the_users_words():
    s = parse_conversation("[User]: Continue if you have next steps, or stop and ask for clarification if you "
                           "are unsure how to proceed.\n\n[Assistant]: ok")
    assert not s.messages[0].starts_turn


@pytest.fixture()
def client():
    backend = ScriptedBackend()
    app = create_app(Settings(rolling=False), backend_loader=lambda: backend, store=Store(":memory:"))
    with TestClient(app) as c:
        deadline = time.monotonic() + 10
        while c.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        yield c


def stream(client: TestClient, body: dict, headers: dict | None = None) -> tuple[str, list[dict]]:
    r = client.post("/v1/chat/completions", json=body, headers=headers or {})
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert r.text.rstrip().endswith("data: [DONE]")
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    return text, events


@pytest.mark.parametrize("name, expected", [
    ("opencode-compaction-request", OPENCODE_HEADINGS),
    ("pi-compaction-request", PI_HEADINGS),
    ("pi-turnprefix-request", TURN_PREFIX_HEADINGS),
])
def test_reply_is_the_agents_template_streamed_as_openai_does(client, name, expected):
    text, events = stream(client, captured(name)["body"])
    assert headings(text) == expected
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]] == [None, None, "stop"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0
    assert "[CONTEXT COMPACTION" not in text


def test_an_agent_compaction_job_has_one_kind_whatever_the_door(client):
    """opencode's door (chat completions) counts the job under the kind Codex's door
    (/v1/responses, tests/integrations) uses: `agent_compaction`, the JobKind's value."""
    stream(client, captured("opencode-compaction-request")["body"], {"x-session-id": "ses_kind"})
    metrics = client.get("/metrics").text
    assert 'compactd_jobs_total{kind="agent_compaction",status="done"} 1.0' in metrics
    assert 'kind="agent_compact"' not in metrics and "JobKind" not in metrics


@pytest.mark.parametrize("name", ["opencode-compaction-request", "pi-compaction-request"])
def test_the_users_words_are_the_users_and_no_message_id_is_cited(client, name):
    """Neither agent can look compactd's ids up (issue 23): a constraint is "User:", not `m00000:`."""
    text, _ = stream(client, captured(name)["body"])
    assert "- User:" in text and not re.search(r"\bm\d{5}\b", text)


def test_ids_before_a_note_go_and_the_note_stays():
    ids = {"m00012", "m00015"}
    assert strip_message_ids("`E1` (m00012, m00015, 3 attempts)", ids) == "`E1` (3 attempts)"
    assert strip_message_ids("done (m00012); `Invoice.total()` (see m00012)", ids) == (
        "done; `Invoice.total()` (see m00012)")


def test_second_compaction_of_a_session_updates_the_first(client):
    first = captured("opencode-compaction-request")
    headers = {"x-session-id": "ses_test"}
    summary, events = stream(client, first["body"], headers)
    assert events[2]["compactd"]["agent_compaction"]["mode"] == "fresh"
    assert "`/tmp/agent-test/ocwork/foo.py` — read" in summary
    update = captured("opencode-compaction-update-request")["body"]
    user = update["messages"][1]["content"]
    start = user.index("<prior-summary>\n") + len("<prior-summary>\n")
    end = user.index("\n</prior-summary>")
    update["messages"][1]["content"] = user[:start] + summary.strip() + user[end:]
    text, events = stream(client, update, headers)
    meta = events[2]["compactd"]["agent_compaction"]
    assert (meta["mode"], meta["version"], meta["messages"]) == ("update", 2, 2)
    assert "`/tmp/agent-test/ocwork/foo.py` — read" in text  # carried by the ledger, not re-sent
