"""Version drift: each agent's compaction request as its earlier releases send it, built from the
prompt texts vendored in tests/fixtures/agents/drift/ (see its README), is recognized; a request
that is almost a compaction, but is not one, passes through as plain generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from worker.agents import profiles
from worker.agents.blob import parse_conversation
from worker.agents.profiles import SUMMARY_PREFIX, is_compaction


def recognize(messages: list[dict[str, Any]], headers: dict[str, str]) -> Any:
    """The chat door's recognition of a request with these messages."""
    return profiles.recognize({"messages": messages}, headers)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
DRIFT = FIXTURES / "drift"
ENTRIES = '[User]: Read foo.py and fix the bug: foo() must return 2.\n\n[Assistant]: Done: foo() returns 2.'
SUMMARY = "## Objective\n- Fix foo()."


def vendored(agent: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(DRIFT.glob(f"{agent}-*.json"))]


def ids(versions: list[dict[str, Any]]) -> list[str]:
    return [v["version"] for v in versions]


OPENCODE, PI, CODEX = vendored("opencode"), vendored("pi"), vendored("codex")


def chat(system: str | None, *users: str) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": u} for u in users]


def opencode_user(v: dict[str, Any], prior: str | None) -> str:
    p = v["prompts"]
    if v["layout"] == "opencode-tagged":
        convo = f"{p['conversation_intro']}\n\n<conversation>\n{ENTRIES}\n</conversation>"
        if prior is None:
            return "\n\n".join([convo, p["create"], p["template"]])
        prior_block = f"{p['prior_intro']}\n\n<prior-summary>\n{prior}\n</prior-summary>"
        return "\n\n".join([convo, prior_block, p["update"], p["template"]])
    head = p["create"] if prior is None else f"{p['update']}\n<previous-summary>\n{prior}\n</previous-summary>"
    return "\n\n".join([head, p["template"], ENTRIES])


def pi_user(p: dict[str, str], prior: str | None = None, focus: str | None = None) -> str:
    text = f"<conversation>\n{ENTRIES}\n</conversation>\n\n"
    if prior is not None:
        text += f"<previous-summary>\n{prior}\n</previous-summary>\n\n"
    text += p["update" if prior is not None else "history"]
    return text + (f"\n\nAdditional focus: {focus}" if focus else "")


def codex_body(prompt: str, *history: str) -> dict[str, Any]:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]}
             for t in (*history, prompt)]
    return {"model": "gpt-5", "input": items, "stream": True}


def test_every_version_is_vendored_with_source_and_licence():
    assert (len(OPENCODE), len(PI), len(CODEX)) == (3, 3, 3)
    licences = {"opencode": "MIT", "pi": "MIT", "codex": "Apache-2.0"}
    for v in OPENCODE + PI + CODEX:
        assert v["licence"] == licences[v["agent"]] and " @ " in v["source"] and v["prompts"], v["version"]
        assert v["version"] in (DRIFT / "README.md").read_text()


def test_the_newest_vendored_texts_are_what_the_captured_requests_carry():
    captured = {f: json.loads((FIXTURES / f).read_text())["body"] for f in
                ("opencode-compaction-request.json", "pi-compaction-request.json", "pi-turnprefix-request.json",
                 "codex-compaction-request.json")}
    oc = next(v for v in OPENCODE if v["version"] == "1.18.33")["prompts"]
    oc_user = captured["opencode-compaction-request.json"]["messages"][1]["content"]
    assert captured["opencode-compaction-request.json"]["messages"][0]["content"] == oc["system"]
    assert oc_user.endswith("\n\n".join([oc["create"], oc["template"]]))
    pi = next(v for v in PI if v["version"] == "0.46.0")["prompts"]
    assert captured["pi-compaction-request.json"]["messages"][0]["content"] == pi["system"]
    assert captured["pi-compaction-request.json"]["messages"][1]["content"][0]["text"].endswith(pi["history"])
    assert captured["pi-turnprefix-request.json"]["messages"][1]["content"][0]["text"].endswith(pi["turn_prefix"])
    cx = next(v for v in CODEX if v["version"] == "0.171.0")["prompts"]
    assert captured["codex-compaction-request.json"]["input"][-1]["content"][0]["text"] == cx["compact_prompt"]
    assert cx["summary_prefix"].startswith(SUMMARY_PREFIX)


@pytest.mark.parametrize("prior", [None, SUMMARY], ids=["new", "update"])
@pytest.mark.parametrize("v", OPENCODE, ids=ids(OPENCODE))
def test_opencode_versions_are_recognized(v, prior):
    req = recognize(chat(v["prompts"]["system"], opencode_user(v, prior)), {"x-session-id": "ses_1"})
    assert req is not None and (req.agent, req.kind, req.session_key) == ("opencode", "history", "ses_1")
    assert req.conversation == ENTRIES and req.prior_summary == prior
    assert [m.role for m in parse_conversation(req.conversation).messages] == ["user", "assistant"]


@pytest.mark.parametrize("v", PI, ids=ids(PI))
def test_pi_versions(v):
    p = v["prompts"]
    raw = [{"role": "user", "content": "Read foo.py and fix the bug."}, {"role": "assistant", "content": "Done."}]
    if v["layout"] == "pi-raw":  # 0.30 and before: no system prompt, no blob, the messages themselves
        for prompt, kind in ((p["history"], "history"), (p["turn_prefix"], "turn_prefix")):
            req = recognize(raw + chat(None, prompt + "\n\nAdditional focus: the tests"), {})
            assert req is not None and (req.agent, req.kind, req.conversation, req.focus) == \
                ("pi", kind, None, "the tests")
            body = {"messages": raw + chat(None, prompt)}
            session = profiles.get("pi").read(req, body).session
            assert [m.text for m in session.messages] == ["Read foo.py and fix the bug.", "Done."]  # no prompt
        return
    for prior, focus in ((None, None), (SUMMARY, None), (None, "the tests")):
        req = recognize(chat(p["system"], pi_user(p, prior, focus)), {})
        assert req is not None and (req.agent, req.kind) == ("pi", "history")
        assert (req.conversation, req.prior_summary, req.focus) == (ENTRIES, prior, focus)
    turn = recognize(raw + chat(None, p["turn_prefix"]), {})  # 0.45 and before: the turn's own messages
    if v["layout"] == "pi-raw-turn-prefix":  # the turn's own messages, then the prompt alone
        assert turn is not None and (turn.agent, turn.kind, turn.conversation) == ("pi", "turn_prefix", None)
    else:
        req = recognize(chat(p["system"], f"<conversation>\n{ENTRIES}\n</conversation>\n\n{p['turn_prefix']}"), {})
        assert req is not None and (req.agent, req.kind, req.conversation) == ("pi", "turn_prefix", ENTRIES)


@pytest.mark.parametrize("v", CODEX, ids=ids(CODEX))
def test_codex_versions_are_marked_by_their_prompt_alone(v):
    p = v["prompts"]
    assert is_compaction(codex_body(p["compact_prompt"], "Read foo.py and fix the bug."), {})
    if "summary_prefix" in p:  # a second compaction: the earlier summary re-injected, the prompt last again
        assert is_compaction(codex_body(p["compact_prompt"], f"{p['summary_prefix']}\n{SUMMARY}"), {})
    quoted = f"Why does Codex send this?\n\n{p['compact_prompt']}"  # quoted by the user, not the prompt item
    assert not is_compaction(codex_body(quoted), {})
    assert not is_compaction(codex_body("Thanks!", p["compact_prompt"]), {})  # an earlier item, not the last


OC = OPENCODE[-1]["prompts"]
PI_NOW = next(v for v in PI if v["version"] == "0.46.0")["prompts"]
NEAR_MISSES = {
    "chat about conversation tags": chat("You are a helpful coding assistant.",
                                         "What do the <conversation> and </conversation> tags do in my prompt?"),
    "system prompt that mentions summarization": chat("You can summarize conversations when asked.",
                                                      f"<conversation>\n{ENTRIES}\n</conversation>\n\nSummarize."),
    "other system prompt with a blob": chat("You are a coding agent.", pi_user(PI_NOW)),
    "no system prompt with a blob": chat(None, pi_user(PI_NOW)),
    "pi blob among several user messages": chat(PI_NOW["system"], "Hello", pi_user(PI_NOW)),
    "opencode blob among several user messages": chat(OC["system"], "Hello", opencode_user(OPENCODE[-1], None)),
    "opencode system without its markers": chat(OC["system"], f"<conversation>\n{ENTRIES}\n</conversation>"),
    "opencode system, template quoted later": chat(OC["system"], "Please fix this.\n\n" + opencode_user(OPENCODE[0], None)),
    "opencode system, no blob": chat(OC["system"], "Create a new anchored summary of our chat."),
    "pi turn prefix quoted in chat": chat("You are a coding agent.", f"Is this right? {PI_NOW['turn_prefix']}"),
}


@pytest.mark.parametrize("messages", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_near_misses_pass_through(messages):
    assert recognize(messages, {}) is None
    forced = recognize(messages, {"x-compactd-mode": "compact"})  # the header alone still forces it
    assert forced is not None and forced.agent == "generic"
