"""Harness noise is never the user: each importer's table, on records taken from the real
transcripts in tests/fixtures (see NOTICE.md). Injected content is not a request, goal or
constraint, but its facts (an error a `!cmd` printed) are still mined."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from worker.facts.actions import scan_actions
from worker.facts.ledger import extract_ledger, user_requests
from worker.formats import claude_code, codex, load, opencode, pi
from worker.formats._common import INJECTED, split_harness_noise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CIPHERBOX = FIXTURES / "cc-cipherbox_2095544c-fa50-4027-b664-c37e578957ce.jsonl"
MEOW = FIXTURES / "cc-meow-ja_fc996c60-fb21-4123-b967-4f406da4bc25.jsonl"
CONTEXT_EVALUATOR = FIXTURES / "cc-contextevaluator_8ecab05f-4481-43d6-9428-a6b177981877.jsonl"
MEOW_ARTICLES = FIXTURES / "cc-meow-ja_f29a7049-fb97-4c4d-927d-9dea6a6e9f2a.jsonl"
SPOTTER = FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
CODEX_CLI = FIXTURES / "codex-cli-sessionbridge_019d6cca-56cc-7850-9ca0-e841d6382a98.jsonl"
NOMOS = FIXTURES / "cc-nomos_763eeec5-648e-4d0e-9a0d-75867b918b75.jsonl"


def records(path: Path, *lines: int | range) -> list[dict]:
    """The records at these 1-based line numbers of a fixture, in order."""
    raw = path.read_text(encoding="utf-8").split("\n")
    wanted = [n for x in lines for n in (x if isinstance(x, range) else [x])]
    return [json.loads(raw[n - 1]) for n in wanted]


def test_claude_code_slash_command_wrappers_and_caveats_are_not_the_user():
    # cipherbox lines 3-5, 7: the local-command caveat, `/clear` and its stdout, `/gsd:progress`;
    # line 34 is the first thing the user typed.
    s = claude_code.load(records(CIPHERBOX, 3, 4, 5, 7, 34))
    assert [m.starts_turn for m in s.messages] == [False, False, False, False, True]
    assert s.messages[1].meta["harness"] == ["command-name", "command-message", "command-args"]
    assert s.messages[2].meta["harness"] == ["local-command-stdout"]
    assert [m.user_text for _, m in user_requests(s.messages)] == ["switch to the phase 12 branch"]
    # the text the agent's model was sent is kept whole
    assert s.messages[1].text.startswith("<command-name>/clear</command-name>")


def test_claude_code_task_notification_is_not_the_user():
    s = claude_code.load(records(SPOTTER, 6, 1588))  # the first prompt, then a background task's notice
    assert [m.starts_turn for m in s.messages] == [True, False]
    assert s.messages[1].meta["harness"] == ["task-notification"]
    ledger = extract_ledger(s.messages)
    assert [u.text for u in ledger.user_instructions] == [s.messages[0].text]


def test_claude_code_pull_request_monitor_event_is_not_the_user():
    # nomos (Claude Code 2.1.229, desktop app): the user's words (line 356), then the pull-request
    # monitor's prompts (lines 461, 483), sent as "human"/"sdk" prompts wrapped in their tag.
    s = claude_code.load(records(NOMOS, 356, 461, 483))
    monitor = [m for m in s.messages if m.text.startswith("<ci-monitor-event>")]
    assert len(monitor) == 2 and all(m.meta["harness"] == ["ci-monitor-event"] for m in monitor)
    assert [m.user_text for _, m in user_requests(s.messages)] == [s.messages[0].user_text]
    assert [u.text for u in extract_ledger(s.messages).user_instructions] == [s.messages[0].user_text]


def test_claude_code_queued_task_notification_and_its_transcript_pointer_are_not_the_user():
    # meow-ja (Claude Code 2.1.63): the plan (line 3), then five background agents' notices queued
    # as `queue-operation` records (enqueued at 42, 67, 70, 77, 78, delivered by the removes at 47,
    # 80-83), each with `Full transcript available at: <path>` after the tag.
    s = claude_code.load(records(MEOW_ARTICLES, 3, 42, 47, 67, 70, 77, 78, range(80, 84)))
    assert [m.meta.get("harness") for m in s.messages[1:]] == [["task-notification"]] * 5
    ledger = extract_ledger(s.messages)
    assert not [u for u in ledger.user_instructions if "Full transcript available at" in u.text]
    assert [m.user_text for _, m in user_requests(s.messages)] == [s.messages[0].user_text]


def test_claude_code_queued_task_notice_without_tool_use_id_is_not_the_user_nor_takes_their_place():
    # contextevaluator (Claude Code 2.1.45): line 48 queues a background task's JSON notice (no
    # `tool_use_id`, no removal logged), 438 the user's typed-ahead words, 442 their `remove`.
    s = claude_code.load(records(CONTEXT_EVALUATOR, 48, 438, 442))
    assert [m.text for m in s.messages] == ['and "Linked" should appear as "Linked docs"']


def test_claude_code_user_shell_is_mined_but_not_an_instruction():
    # meow lines 983-985: caveat, `!git co feat/code-of-conduct`, its stdout/stderr; then "create pr"
    s = claude_code.load(records(MEOW, 983, 984, 985, 995))
    assert [m.starts_turn for m in s.messages] == [False, False, False, True]
    ledger = extract_ledger(s.messages)
    assert [u.text for u in ledger.user_instructions] == ["create pr"]
    assert [(c.command, c.status) for c in ledger.commands] == [("git co feat/code-of-conduct", "failed")]
    assert [e.text for e in ledger.unresolved_errors()] == [
        "error: pathspec 'feat/code-of-conduct' did not match any file(s) known to git"]


def test_an_error_in_injected_text_is_an_error():
    # A hook's output reaches the model inside a <system-reminder>; the error line in it counts.
    # The record is cipherbox line 34, its text replaced by such a reminder carrying the exact
    # golangci-lint error of meow line 350.
    rec = records(CIPHERBOX, 34)[0]
    error = ("Error: can't load config: the Go language version (go1.24) used to build golangci-lint is lower "
             "than the targeted Go version (1.26.0)")
    rec["message"]["content"] = f"<system-reminder>\nPostToolUse:Edit hook additional context:\n{error}\n</system-reminder>"
    s = claude_code.load([rec])
    assert not s.messages[0].starts_turn
    actions = scan_actions(s.messages)
    assert [(a.tool, a.status) for a in actions] == [("harness", "failed")]
    assert [e.text for e in extract_ledger(s.messages, actions=actions).unresolved_errors()] == [error]


def test_claude_code_queued_messages_are_the_users_words():
    # cipherbox 183-239: three messages typed while a tool ran, removed from the queue when they
    # were handed to the model; the assistant answers them at line 240.
    s = claude_code.load(records(CIPHERBOX, range(183, 241)))
    queued = [m for m in s.messages if m.meta.get("queued")]
    assert [m.user_text for m in queued] == [
        "did we not go through this before, you dont have access to docker  here",
        "docker is running on your host.",
        "why do you need docker for the api logs?",
    ]
    assert all(m.starts_turn for m in queued)
    # placed after the tool result in flight, before the answer: no call is separated from its result
    first = s.messages.index(queued[0])
    assert s.messages[first - 1].role == "tool" and s.messages[first + 3].role == "assistant"
    assert s.meta["records"]["queued"] == 3


def test_claude_code_dequeued_message_is_not_imported_twice():
    s = claude_code.load(records(CIPHERBOX, range(366, 372)))  # enqueue "yeah", dequeue, the user record
    assert [m.user_text for m in s.messages if m.role == "user" and m.user_text] == ["yeah"]


def test_an_answered_question_is_kept_as_asked():
    # cipherbox 486-497: "ok did you catch the otp there?" (queued, then sent), answered by the assistant
    s = claude_code.load(records(CIPHERBOX, range(486, 498)))
    question = next(m for m in s.messages if m.user_text == "ok did you catch the otp there?")
    assert question.starts_turn
    assert [(u.text, u.asked) for u in extract_ledger(s.messages).user_instructions] == [
        ("ok did you catch the otp there?", True)]
    # the same words with no answer yet are the user's open request
    unanswered = s.messages[: s.messages.index(question) + 1]
    assert [(u.text, u.asked) for u in extract_ledger(unanswered).user_instructions] == [
        ("ok did you catch the otp there?", False)]


def test_codex_agents_md_environment_and_image_placeholders():
    # codex-cli line 4: AGENTS.md + <environment_context>; line 582: a pasted image and the user's words
    s = codex.load(records(CODEX_CLI, 1, 4, 6, 582))
    users = [m for m in s.messages if m.role == "user"]
    assert [m.starts_turn for m in users] == [False, True, True]
    assert users[0].meta["harness"] == ["agents-md", "environment-context"]
    assert users[2].meta["harness"] == ["image"]
    assert users[2].user_text == "Messate/text should be aligned in the middle of the avatar and time"


def test_claude_code_plan_handoff_wrapper_is_not_the_user():
    # agent-stuff-ko line 3: a plan approved with "clear context" (the record's `planContent`):
    # Claude Code wraps it in "Implement the following plan:" and a pointer to the old transcript.
    ko = FIXTURES / "cc-agentstuff-ko_2b3756eb-8c69-4980-ac0a-8d2c534931d8.jsonl"
    rec = records(ko, 3)[0]
    s = claude_code.load([rec])
    msg = s.messages[0]
    assert msg.meta["harness"] == ["plan-handoff"] and msg.starts_turn
    assert msg.user_text == rec["planContent"].strip()
    assert msg.text.startswith("Implement the following plan:")  # what the model was sent stays whole


# ---------------------------------------------------------------------------- every fixture
TRANSCRIPTS = sorted(p for p in FIXTURES.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
# Each importer's table of what its harness injects (SWE-agent and opencode have theirs in
# structure: observations, `synthetic` parts), for the check below.
NOISE_TABLES = {"claude_code": claude_code.HARNESS_NOISE, "codex": codex.HARNESS_NOISE, "pi": pi.HARNESS_NOISE,
                "opencode": opencode.HARNESS_NOISE}
LONG_OUTPUT = 40  # shorter outputs ("ok", a path) may well be words the user typed
# A tool output making up this share of a user message means it was taken as the user's; a
# smaller one is the user pasting a log line into what they wrote (pi fixture line 836).
OUTPUT_SHARE = 0.5
# A message that is one `<kebab-case-tag>…</kebab-case-tag>` element is how Claude Code wraps what
# it injects (system-reminder, task-notification, ci-monitor-event): one its table lacks shows here.
WRAPPED_WHOLE = re.compile(r"\A\s*<([a-z]+(?:-[a-z]+)+)>.*</\1>\s*\Z", re.S)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
def test_no_tool_output_or_harness_text_is_the_users_words(path):
    s = load(path)
    # (message index, output): a run printing later what the user typed earlier (a URL they gave,
    # echoed by `gh issue edit`) is not the user's words taken from it
    outputs = [(k, r.output.strip()) for k, m in enumerate(s.messages) for r in m.tool_results
               if len(r.output.strip()) >= LONG_OUTPUT]
    table = NOISE_TABLES.get(s.source_format, ())
    requests = user_requests(s.messages)
    assert requests, "every fixture has at least one instruction"
    for i, m in requests:
        words = m.user_text
        assert m.role == "user" and not m.tool_results and not m.is_summary and not m.meta.get(INJECTED)
        assert split_harness_noise(words, table)[1] == [], f"{m.id}: harness text in the user's words"
        assert not WRAPPED_WHOLE.match(words), f"{m.id}: a harness's tagged message taken as the user's words"
        taken = [o for k, o in outputs if k < i and o in words and len(o) >= OUTPUT_SHARE * len(words.strip())]
        assert not taken, f"{m.id}: a tool output taken as the user's words"
    if s.source_format == "swe_agent":
        # SWE-agent runs unattended: its one user input is the instance template (the issue),
        # added before the first step (sweagent/agent/agents.py setup); what follows is observations.
        first_action = next(i for i, m in enumerate(s.messages) if m.role == "assistant")
        assert [i for i, _ in requests if i > first_action] == []
    # ... and the ledger's user instructions are exactly those messages' words
    by_id = {m.id: m.user_text for _, m in requests}
    for u in extract_ledger(s.messages).user_instructions:
        assert u.message_id in by_id
