"""Kilo, Aider and Qwen Code compaction requests, as their pinned releases sent them
(tests/fixtures/agents/README.md): recognized by their profiles, answered in their shapes with
the conversation's exact facts, and the requests that are not compactions (Aider's commit
message) left to plain generation. Scripted model (logic only); tests/integrations/ drive the
real agents against the real model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.agents.test_agent_requests import OPENCODE_HEADINGS, client, headings, stream  # noqa: F401
from worker.agents import profiles
from worker.agents.profiles import QWEN_TAGS
from worker.http.chat import check_messages

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/agents"
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"  # what each captured session's test run printed
CONSTRAINT = "Keep the function signature unchanged."


def captured(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def recognized(name: str):
    req = captured(name)
    headers = {k.lower(): v for k, v in req["headers"].items()}
    return profiles.recognize({"messages": check_messages(req["body"]["messages"])}, headers)


@pytest.mark.parametrize("name, agent", [
    ("kilo-compaction-request", "kilo"),
    ("aider-compaction-request", "aider"),
    ("qwen-code-compaction-request", "qwen-code"),
])
def test_each_agents_request_is_its_profiles(name, agent):
    assert recognized(name).agent == agent


@pytest.mark.parametrize("name", ["aider-commit-message-request", "kilo-after-compaction",
                                  "qwen-code-after-compaction", "aider-after-compaction"])
def test_their_other_requests_are_plain_generation(name):
    assert recognized(name) is None


def test_kilo_gets_opencodes_sections_with_the_facts(client):  # noqa: F811
    text, _ = stream(client, captured("kilo-compaction-request")["body"])
    assert headings(text) == OPENCODE_HEADINGS
    assert ERROR_LINE in text and "python3 test_foo.py" in text and CONSTRAINT in text


def test_qwen_gets_its_snapshot_with_honest_usage(client):  # noqa: F811
    body = captured("qwen-code-compaction-request")["body"]
    text, events = stream(client, body)
    assert text.startswith("<state_snapshot>") and text.rstrip().endswith("</state_snapshot>")
    assert re.findall(r"^<(\w+)>$", text, re.M) == ["state_snapshot", *QWEN_TAGS]
    assert "<analysis>" not in text
    assert ERROR_LINE in text and "python3 test_foo.py` → exit 1" in text and CONSTRAINT in text
    assert "Error: (none)" not in text  # Qwen's shell envelope says no error there
    usage = events[-1]["usage"]
    assert 0 < usage["completion_tokens"] < body["max_tokens"] and usage["prompt_tokens"] > usage["completion_tokens"]


def test_aider_gets_first_person_prose_with_the_facts(client):  # noqa: F811
    text, _ = stream(client, {**captured("aider-compaction-request")["body"], "stream": True})
    assert text.startswith("I asked you") and not headings(text) and "```" not in text
    assert ERROR_LINE in text and CONSTRAINT in text


def test_aiders_commit_message_request_is_a_normal_generation(client):  # noqa: F811
    body = captured("aider-commit-message-request")["body"]
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "compactd" not in answer  # no agent compaction: the model's own generation
    assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] > 0
    assert "I asked you" not in answer["choices"][0]["message"]["content"]
