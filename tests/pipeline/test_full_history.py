"""The ledger reads the whole raw transcript, the agent's in-session summaries included: facts from
before an agent's own compaction come back, and without a model the agent's summary is carried
into the checkpoint instead of dropped. Built on records of the real cipherbox Claude Code
session (tests/fixtures, see NOTICE.md): lines 1-60 precede its auto-compaction at line 762.
Counting uses the bundled model's tokenizer only (no weights are loaded, no model call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.models import resolve
from worker.formats import claude_code, load
from worker.pipeline import CompactionConfig, compact

CIPHERBOX = Path(__file__).resolve().parents[1] / "fixtures/cc-cipherbox_2095544c-fa50-4027-b664-c37e578957ce.jsonl"
SUMMARY_ID = "3fbda60d-c19b-4315-b139-dc190288373f"  # line 762, isCompactSummary
BRANCH_ERROR = "fatal: a branch named 'feat/phase-12-multi-factor' already exists"  # line 43
USER_CORRECTION = "thats not the branch I was looking for - its called feat/phase-12-multi-factor"  # line 41
CONTEXT_LIMIT = 32_768


@pytest.fixture(scope="module")
def counting_backend():
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(resolve("qwen2.5-coder-0.5b").path)  # tokenizer only
    yield backend
    backend.close()


def excerpt(*spans: range):
    raw = CIPHERBOX.read_text(encoding="utf-8").split("\n")
    return claude_code.load([json.loads(raw[n - 1]) for span in spans for n in span])


@pytest.fixture(scope="module")
def session():
    # before the agent's compaction: /clear, the branch mix-up; then the summary and what followed
    s = excerpt(range(1, 61), range(762, 843))
    assert s.messages[s.last_summary_index()].id == SUMMARY_ID
    return s


def test_pre_boundary_facts_come_back(counting_backend, session):
    cp = compact(session, counting_backend, CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False)).checkpoint
    ledger = cp.ledger
    assert BRANCH_ERROR in [e["text"] for e in ledger["errors"]]
    assert USER_CORRECTION in [u["text"] for u in ledger["user_instructions"]]
    assert ("git checkout main && git branch -D feat/phase-12-mfa && git checkout -b feat/phase-12-multi-factor"
            in [c["command"] for c in ledger["commands"]])  # line 42, the run that printed the error
    assert USER_CORRECTION in cp.summary_text
    # the narrative still starts after the agent's summary: nothing before it is summarized again
    assert cp.boundary_message_id not in {m.id for m in session.messages[: session.last_summary_index()]}


def test_no_model_carries_the_agents_summary(counting_backend, session):
    cp = compact(session, counting_backend, CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False)).checkpoint
    assert cp.narrative["agent_summary_id"] == SUMMARY_ID
    goal = cp.sections["Goal"]
    # the goal is what the user typed first (not the /clear wrapper), then the agent's summary
    assert goal.startswith("switch to the phase 12 branch\n\nThe agent's own summary of the earlier turns "
                           f"({SUMMARY_ID}), carried as written:\n> Summary:\n> 1. Primary Request and Intent:")
    assert "This session is being continued" not in goal and "Please continue the conversation" not in goal
    assert goal in cp.summary_text


def test_a_rolling_update_keeps_the_carried_summary_and_the_old_facts(counting_backend):
    first = compact(excerpt(range(1, 61), range(762, 811)), counting_backend,
                    CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False)).checkpoint
    later = excerpt(range(1, 61), range(762, 843))
    cp = compact(later, counting_backend, CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False),
                 previous=first).checkpoint
    assert cp.version == 2
    assert cp.narrative["agent_summary"] == first.narrative["agent_summary"]
    assert BRANCH_ERROR in [e["text"] for e in cp.ledger["errors"]]
    assert [u["text"] for u in cp.ledger["user_instructions"]].count(USER_CORRECTION) == 1


def test_at_8k_the_ledger_keeps_the_room_and_the_quote_is_left_out(counting_backend, session):
    """An 8k window: a 3k summary plus what the tail's whole messages left of its share, too little
    above LEDGER_FLOOR_TOKENS for a quote: no quote, and no fragment of one; the pre-boundary facts
    are still there."""
    from worker.pipeline.anchor import AGENT_SUMMARY_MIN_TOKENS, LEDGER_FLOOR_TOKENS, agent_summary_limit

    cp = compact(session, counting_backend, CompactionConfig(context_limit=8_000, use_model=False)).checkpoint
    spare = cp.budget.tail_budget - cp.tokens.tail
    assert spare > 0 and cp.budget.summary_limit == cp.budget.usable // 2 + spare
    wide = compact(session, counting_backend, CompactionConfig(context_limit=32_000, use_model=False)).checkpoint
    assert wide.budget.tail_budget > wide.tokens.tail  # room left by the tail, yet the summary keeps its own bound
    assert wide.budget.summary_limit <= CompactionConfig(context_limit=32_000).summary_max_tokens
    assert agent_summary_limit(cp.budget.summary_limit) == 0
    assert "carried as written" not in cp.summary_text and "agent_summary" not in cp.narrative
    assert cp.sections["Goal"].startswith("switch to the phase 12 branch")
    assert BRANCH_ERROR in cp.summary_text
    assert agent_summary_limit(LEDGER_FLOOR_TOKENS - 1) == 0
    assert agent_summary_limit(LEDGER_FLOOR_TOKENS + AGENT_SUMMARY_MIN_TOKENS - 1) == 0
    assert agent_summary_limit(LEDGER_FLOOR_TOKENS + AGENT_SUMMARY_MIN_TOKENS) == AGENT_SUMMARY_MIN_TOKENS
    assert agent_summary_limit(6_000) == 2_100  # 16k: the share (35 %), below the floor's bound


def test_a_fact_the_tail_carries_whole_is_not_said_again_where_the_summary_is_cut(counting_backend):
    """At 16k the whole cipherbox session's summary cannot hold every fact: the one fact whose
    every message is in the verbatim tail is read there, and its room goes to a fact of the head."""
    cp = compact(load(CIPHERBOX), counting_backend, CompactionConfig(context_limit=16_384, use_model=False)).checkpoint
    tail = set(cp.tail_message_ids)
    facts = ([(e["text"], e["message_ids"]) for e in cp.ledger["errors"]]
             + [(c["command"], c["message_ids"]) for c in cp.ledger["commands"]]
             + [(f["path"], f["message_ids"]) for f in cp.ledger["files"]])
    in_tail = [key for key, mids in facts if mids and set(mids) <= tail]
    carried = json.dumps([m for m in cp.messages if m.get("content") != cp.summary_text], ensure_ascii=False)
    assert "Left out to fit the budget" in cp.summary_text and in_tail
    for key in in_tail:
        assert f"`{key}" not in cp.summary_text and json.dumps(key, ensure_ascii=False)[1:-1] in carried


def test_an_approved_plan_outlives_the_checkpoint_that_saw_it(counting_backend):
    """cc-ccbackend's user approves a plan early on; a second checkpoint reads only what came after
    the first one's boundary, and still quotes that plan (the design both agreed on)."""
    session = load(CIPHERBOX.parent / "cc-ccbackend_e301df65-155e-4d0f-b250-3476f2f15115.jsonl")
    at = next(i for i, m in enumerate(session.messages) for c in m.tool_calls if c.name == "ExitPlanMode") + 40
    first = session.model_copy(update={"messages": session.messages[:at + 80]})
    config = CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False)
    cp1 = compact(first, counting_backend, config).checkpoint
    assert [p["text"].splitlines()[0] for p in cp1.work_state["plans"]] == ["# Fix Shutdown Timeout & Add Shutdown Logging"]
    cp2 = compact(session, counting_backend, config, previous=cp1).checkpoint
    index = {m.id: i for i, m in enumerate(session.messages)}
    assert index[cp1.work_state["plans"][0]["message_id"]] < index[cp1.boundary_message_id]  # not read again
    assert cp2.work_state["plans"][-1] == cp1.work_state["plans"][-1]
    assert "# Fix Shutdown Timeout & Add Shutdown Logging" in cp2.summary_text
