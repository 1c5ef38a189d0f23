"""Summarizer logic: a bounded input (one call, the user first, gaps marked), junk falls back.

A scripted backend stands in for the model here only to drive the control flow (what happens
on an echo or on a repeated line, what prompt it receives); where the bound is asserted, tokens
are counted with the real model's tokenizer. The real model runs in test_pipeline_model.py."""

from __future__ import annotations

import json

from backends.base import GenerationStats
from tests.fakes import SessionBuilder
from worker.pipeline import CompactionConfig, compact
from worker.pipeline.summarize import (
    GAP_MARK,
    PROMPT_MAX_TOKENS,
    _junk,
    narrative_lines,
    select_narrative,
    summarize_narrative,
)


def words(text: str) -> int:
    return len(text.split())


def test_selection_puts_users_first_then_newest_assistant_text_and_marks_gaps():
    b = SessionBuilder().user("Port the parser to Rust.")
    for k in range(30):
        b.assistant(f"Step {k}: reading module {k} " + "detail " * 40)
        b.tool("bash", {"command": f"cargo build -p m{k}"}, f"compiled m{k}\n" + "warning\n" * 50)
    b.user("Keep the public API unchanged.")
    b.assistant("Now wiring the last module.")
    messages = b.build().messages
    text, left_out = select_narrative(messages, 400, words)
    assert words(text) <= 400
    lines = text.splitlines()
    # Both user messages, verbatim, in order; the newest assistant text; old steps left out.
    assert lines[0] == "[user] Port the parser to Rust."
    assert "[user] Keep the public API unchanged." in lines
    assert lines[-1] == "[assistant] Now wiring the last module."
    assert "Step 29: reading module 29" in text and "Step 0: reading" not in text
    assert left_out > 0
    first_gap = GAP_MARK.split("{n}")[0]
    assert text.split("\n\n")[1].startswith(first_gap)  # the skipped middle is said, never silent
    # Shown items keep their order in the history.
    assert text.index("Step 28") < text.index("Step 29") < text.index("Keep the public API")


def test_selection_shows_everything_when_it_fits():
    b = SessionBuilder().user("fix it").assistant("on it")
    b.tool("bash", {"command": "pytest -x"}, "1 passed")
    messages = b.build().messages
    text, left_out = select_narrative(messages, 10_000, words)
    assert left_out == 0
    assert text.split("\n\n") == narrative_lines(messages)


def test_long_user_message_is_cut_in_the_middle_with_a_marker():
    pasted = "Implement the spec below.\n" + "spec line\n" * 2000 + "Do not touch the CLI."
    messages = SessionBuilder().user(pasted).build().messages
    text, _ = select_narrative(messages, 3000, words)
    assert text.startswith("[user] Implement the spec below.")
    assert text.endswith("Do not touch the CLI.") and "chars cut" in text


def test_narrative_shows_calls_with_arguments_and_one_line_per_result():
    b = SessionBuilder().user("fix it")
    b.tool("bash", {"command": "pytest -x"}, "E   AssertionError: 1 == 2\n" + "noise\n" * 500, is_error=True)
    blocks = narrative_lines(b.build().messages)
    text = "\n".join(blocks)
    assert '[tool call bash] {"command": "pytest -x"}' in text
    assert "ERROR: E   AssertionError: 1 == 2 (+500 lines)" in text
    assert "noise\nnoise" not in text


class ScriptedBackend:
    """Counts with a word split and answers with a fixed script: enough to drive the summarizer's
    control flow, nothing more."""

    supports_json_schema = True

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.prompts: list[list[dict]] = []

    def tokenize(self, text: str) -> list[int]:
        return list(range(words(text)))

    def count(self, text: str) -> int:
        return words(text)

    def render_messages(self, messages, add_generation_prompt=True) -> str:
        return "\n".join(f"<{m['role']}> {m.get('content') or ''}" for m in messages)

    def count_messages(self, messages, add_generation_prompt=True) -> int:
        return words(self.render_messages(messages)) + 3 * len(messages)

    def generate(self, messages, *, max_tokens, temperature=0.0, json_schema=None, priority=0,
                 isolated=True, cache_key=None):
        self.prompts.append(messages)
        yield self.replies.pop(0)
        yield GenerationStats(prompt_tokens=self.count_messages(messages), decode_tokens=5)

    def info(self):
        from backends.base import ModelInfo

        return ModelInfo("scripted", "0", "scripted", "-", "none", "none", 4096, 100, 4096)

    def close(self) -> None:
        pass


def big_session():
    b = SessionBuilder().system("sys").user("Fix src/app.py so the tests pass.")
    for k in range(6):
        b.tool("bash", {"command": f"make step{k}"}, "ok\n" + "log line here\n" * 400)
    b.user("Then update the docs.")
    b.assistant("Working on it.")
    return b.build()


def test_echoed_prompt_falls_back_to_the_deterministic_checkpoint():
    backend = ScriptedBackend(["You write part of a handoff note for a coding agent <conversation> ..."])
    cp = compact(big_session(), backend, CompactionConfig(context_limit=4000, reserved=500)).checkpoint
    assert "echoed its prompt" in cp.verification.fallback
    assert cp.sections["Goal"].startswith("Fix src/app.py")  # the user's own words, not junk
    assert "<conversation>" not in cp.summary_text


def test_repeated_lines_are_junk():
    looping = json.dumps({"goal": "g", "key_decisions": [], "next_steps": ["do the same thing again"] * 4})
    backend = ScriptedBackend([looping])
    cp = compact(big_session(), backend, CompactionConfig(context_limit=4000, reserved=500)).checkpoint
    assert "repeated itself" in cp.verification.fallback


def test_a_step_named_three_times_in_a_real_answer_is_not_junk():
    # The 0.5B's answer on the cc-spotter trace, which the first version of the check threw away.
    answer = json.dumps({
        "goal": "Work on bead spotter-fum. Run bd show spotter-fum to see the issue details and bd ready "
                "to find available subtasks. Start with the first ready task.",
        "key_decisions": [{"decision": "Update issue: spotter-fum.1", "reason": "Claim spotter-fum.1"},
                          {"decision": "Find ready subtasks", "reason": "Find ready subtasks"}],
        "next_steps": ["Start exploring the codebase.", "Claim spotter-fum.1", "Find ready subtasks"]})
    assert _junk(answer, []) is None
    assert _junk(json.dumps({"goal": "g", "next_steps": ["do the same thing again"] * 4}), []) is not None


def test_update_sends_previous_summary_and_only_new_messages():
    first = ScriptedBackend([json.dumps({"goal": "Fix src/app.py", "key_decisions": [], "next_steps": []})])
    session = big_session()
    cp1 = compact(session, first, CompactionConfig(context_limit=4000, reserved=500)).checkpoint
    more = SessionBuilder("s2")
    for k in range(6, 12):
        more.tool("bash", {"command": f"make later{k}"}, "ok\n" + "log line here\n" * 400)
    more.user("And the changelog.")
    for m in more.build().messages:
        session.messages.append(m.model_copy(update={"id": "new-" + m.id}))
    second = ScriptedBackend([json.dumps({"goal": "Fix src/app.py", "key_decisions": [], "next_steps": []})])
    compact(session, second, CompactionConfig(context_limit=4000, reserved=500), previous=cp1)
    prompt = second.prompts[0][1]["content"]
    assert "<previous-summary>" in prompt and "Fix src/app.py" in prompt
    conversation = prompt.split("<conversation>")[1].split("</conversation>")[0]
    boundary = [m.id for m in session.messages].index(cp1.boundary_message_id)
    summarized_calls = [c.arguments["command"] for m in session.messages[: boundary + 1] for c in m.tool_calls]
    assert '"make later6"' in conversation
    assert summarized_calls and not any(f'"{c}"' in conversation for c in summarized_calls)
    assert "Then update the docs." in conversation  # the previous tail is summarized now


def test_summarize_makes_one_call_whatever_the_history():
    backend = ScriptedBackend([json.dumps({"goal": "a", "key_decisions": [], "next_steps": []})] * 20)
    session = big_session()
    for k in range(200):
        session.messages.append(session.messages[3].model_copy(update={"id": f"more-{k}"}))
    result = summarize_narrative(backend, session.messages, facts="", previous=None, lang="en", window=1400,
                                 max_new_tokens=100)
    assert len(backend.prompts) == 1
    assert backend.count_messages(backend.prompts[0]) <= 1400 - 100
    assert result.left_out > 0 and result.narrative.goal == "a"


class RecordingBackend(ScriptedBackend):
    """The scripted answers, counted with the real model's tokenizer (no weights loaded)."""

    def __init__(self, real, replies):
        super().__init__(replies)
        self.real = real

    def tokenize(self, text):
        return self.real.tokenize(text)

    def count(self, text):
        return self.real.count(text)

    def render_messages(self, messages, add_generation_prompt=True):
        return self.real.render_messages(messages, add_generation_prompt)

    def count_messages(self, messages, add_generation_prompt=True):
        return self.real.count_messages(messages, add_generation_prompt)


def test_prompt_stays_within_the_bound_on_a_100k_token_session(llama_backend):
    from worker.formats import load
    from worker.tokens import TokenCounter

    session = load("tests/fixtures/pi_large-session.jsonl")
    counter = TokenCounter(llama_backend)
    per_message = counter.per_message(session)
    # The first ~100k tokens of the real pi session (its agent summaries included).
    total, cut = 0, len(session.messages)
    for i, n in enumerate(per_message):
        total += n
        if total >= 100_000:
            cut = i + 1
            break
    assert total >= 100_000
    session.messages = session.messages[:cut]
    backend = RecordingBackend(llama_backend, [json.dumps({"goal": "g", "key_decisions": [], "next_steps": []})])
    cp = compact(session, backend, CompactionConfig(context_limit=32_768), counter=counter).checkpoint
    assert len(backend.prompts) == 1
    sent = llama_backend.count_messages(backend.prompts[0])
    assert 0.75 * PROMPT_MAX_TOKENS < sent <= PROMPT_MAX_TOKENS
    assert cp.timings.narrative_left_out > 0
