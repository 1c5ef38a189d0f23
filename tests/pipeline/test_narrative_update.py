"""A rolling update moves the narrative on (issue 23): the model is asked to rewrite the goal
and the next steps from the previous summary, not to repeat them, and a next step the evidence
since shows done is dropped, whether the model repeats it or the deterministic carry would.

Logic only, on the scripted backend (tests/fakes.py): the prompt the update sends, and what
verification and the carry keep."""

from __future__ import annotations

import json

from tests.fakes import ScriptedBackend, SessionBuilder
from worker.pipeline import CompactionConfig, compact
from worker.pipeline.summarize import UPDATE_ASK, UPDATE_NOTE

# An agent-style compaction (no verbatim tail, no loop guard): every message is summarized.
CONFIG = dict(context_limit=32_768, verbatim_tail=False, reference_prefix=False, loop_guard=False)
STEPS = ["Read `src/api/orders.ts`", "Fix the rounding in `src/app.py`", "Run `pytest -q`",
         "Document the rounding rule in README.md"]
FIRST = {"goal": "Make order totals round to cents in src/app.py.",
         "key_decisions": [{"decision": "Round with Decimal.quantize", "reason": "floats drift"}],
         "next_steps": STEPS}


def first_turns() -> SessionBuilder:
    b = SessionBuilder("roll").user(
        "Order totals are off by a cent. Fix the rounding in src/app.py; the totals come from "
        "src/api/orders.ts. Run `pytest -q` when done and document the rounding rule in README.md.")
    b.assistant("I will read src/api/orders.ts first, then fix the rounding in src/app.py with "
                "Decimal.quantize because floats drift, and run `pytest -q`.")
    return b


def first_checkpoint(b: SessionBuilder):
    backend = ScriptedBackend(json.dumps(FIRST))
    try:
        cp = compact(b.build(), backend, CompactionConfig(**CONFIG)).checkpoint
    finally:
        backend.close()
    assert cp.narrative["next_steps"] == STEPS  # all four verified at the first checkpoint
    return cp


def work_since(b: SessionBuilder) -> None:
    """The agent reads the file, makes the fix and runs the tests green."""
    b.call("Read", {"file_path": "src/api/orders.ts"}, "export function total(o) { return o.sum }")
    b.edit("src/app.py")
    b.bash("pytest -q", "5 passed in 0.12s")


def test_the_update_prompt_carries_the_previous_narrative_and_asks_to_rewrite_it():
    b = first_turns()
    cp1 = first_checkpoint(b)
    work_since(b)
    repeat = ScriptedBackend(json.dumps(FIRST))  # a model that copies the previous summary
    try:
        result = compact(b.build(), repeat, CompactionConfig(**CONFIG), previous=cp1)
    finally:
        repeat.close()
    prompt = repeat.prompts[0][1]["content"]
    previous = prompt.split("<previous-summary>\n")[1].split("\n</previous-summary>")[0]
    assert json.loads(previous)["goal"] == FIRST["goal"] and json.loads(previous)["next_steps"] == STEPS
    assert UPDATE_NOTE in prompt and "Rewrite the goal and the next steps" in UPDATE_NOTE
    assert "do not copy them" in UPDATE_NOTE and UPDATE_ASK in prompt.rsplit("\n\n", 1)[1]
    conversation = prompt.split("<conversation>")[1]
    assert "src/api/orders.ts" in conversation and "pytest -q" in conversation  # the new turns
    # The steps it repeated word for word are checked against the evidence since: all but the docs are done.
    assert result.checkpoint.narrative["next_steps"] == ["Document the rounding rule in README.md"]
    gone = {r.text: r.reason for r in result.checkpoint.verification.removed}
    assert "read already" in gone["Read `src/api/orders.ts`"]
    assert "src/app.py was changed" in gone["Fix the rounding in `src/app.py`"]
    assert "already passed after the last edit" in gone["Run `pytest -q`"]


def test_a_first_summary_is_not_asked_to_rewrite_anything():
    b = first_turns()
    backend = ScriptedBackend(json.dumps(FIRST))
    try:
        compact(b.build(), backend, CompactionConfig(**CONFIG))
    finally:
        backend.close()
    prompt = backend.prompts[0][1]["content"]
    assert UPDATE_NOTE not in prompt and UPDATE_ASK not in prompt


def test_the_deterministic_carry_drops_the_steps_the_evidence_since_shows_done():
    b = first_turns()
    cp1 = first_checkpoint(b)
    work_since(b)
    backend = ScriptedBackend()
    try:
        cp2 = compact(b.build(), backend, CompactionConfig(**CONFIG, use_model=False), previous=cp1).checkpoint
    finally:
        backend.close()
    assert backend.generate_calls == 0
    assert cp2.narrative["next_steps"] == ["Document the rounding rule in README.md"]
    assert cp2.narrative["goal"] == FIRST["goal"] and cp2.narrative["key_decisions"] == FIRST["key_decisions"]
    removed = cp2.verification.removed
    assert {r.text for r in removed} == set(STEPS[:3])
    assert all(r.reason.startswith("carried from the previous checkpoint") for r in removed)
    assert "Read `src/api/orders.ts`" not in cp2.summary_text.split("## Next Steps")[1]


def test_the_carry_keeps_steps_nothing_since_has_done():
    b = first_turns()
    cp1 = first_checkpoint(b)
    b.call("Read", {"file_path": "src/other.ts"}, "x")  # unrelated work: nothing above is done
    b.bash("pytest -q", "1 failed, 4 passed", is_error=True)
    backend = ScriptedBackend()
    try:
        cp2 = compact(b.build(), backend, CompactionConfig(**CONFIG, use_model=False), previous=cp1).checkpoint
    finally:
        backend.close()
    assert cp2.narrative["next_steps"] == STEPS


def test_a_carried_edit_is_done_once_the_file_changed_unless_a_run_fails_since():
    b = first_turns()
    cp1 = first_checkpoint(b)
    b.edit("src/app.py")  # the fix, not yet tested
    backend = ScriptedBackend()
    try:
        cp2 = compact(b.build(), backend, CompactionConfig(**CONFIG, use_model=False), previous=cp1).checkpoint
        assert cp2.narrative["next_steps"] == [STEPS[0], STEPS[2], STEPS[3]]  # the tests still have to run
        assert "src/app.py was changed after this step was written" in cp2.verification.removed[0].reason
        b.bash("pytest -q", "FAILED tests/test_app.py::test_total - assert 10.01 == 10.0\n1 failed", is_error=True)
        cp3 = compact(b.build(), backend, CompactionConfig(**CONFIG, use_model=False), previous=cp1).checkpoint
    finally:
        backend.close()
    assert cp3.narrative["next_steps"] == STEPS  # an open error: the edit may not be the whole fix
