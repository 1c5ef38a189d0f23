"""Prune and tail selection on exact counts from the bundled model's tokenizer (no weights)."""

from __future__ import annotations

import pytest

from tests.fakes import SessionBuilder
from worker.pipeline.prune import PRUNE_MINIMUM, prune_tool_outputs
from worker.pipeline.tail import safe_cuts, select_tail
from worker.tokens import TokenCounter, make_budget


@pytest.fixture(scope="module")
def counter(llama_backend):
    return TokenCounter(llama_backend)


def big_output(k: int, lines: int = 900) -> str:
    return "\n".join(f"src/pkg/module_{k}.py:{i}: value_{i} = compute({i}, {k})" for i in range(lines))


def long_session(turns: int = 6, per_turn_tools: int = 2, lines: int = 900):
    b = SessionBuilder().system("You are a coding agent.")
    for t in range(turns):
        b.user(f"Turn {t}: please inspect module {t} and keep the public API unchanged.")
        for k in range(per_turn_tools):
            b.tool("read_file", {"path": f"src/pkg/module_{t}_{k}.py"}, big_output(t * 10 + k, lines))
        b.assistant(f"Module {t} inspected.")
    return b.build()


def test_budget_formula():
    b = make_budget(128_000, max_output_tokens=32_000)
    assert b.reserved == 20_000 and b.usable == 108_000
    assert make_budget(128_000, max_output_tokens=8_000).usable == 120_000
    with pytest.raises(ValueError):
        make_budget(1000, reserved=1000)


def test_prune_marks_old_outputs_and_keeps_tool_names_and_arguments(counter):
    session = long_session()
    result = prune_tool_outputs(session, counter)
    assert result.committed and result.freed_tokens > PRUNE_MINIMUM
    # Non-destructive: the input is untouched, the copy keeps every output, only marked.
    assert all(p.compacted_at is None for m in session.messages for p in m.tool_results)
    pruned_parts = [p for m in result.session.messages for p in m.tool_results if p.compacted_at is not None]
    assert pruned_parts and all(p.output for p in pruned_parts)
    rendered = result.session.to_chat()
    text = "\n".join(str(m) for m in rendered)
    for m in session.messages:
        for call in m.tool_calls:
            assert call.name in text and call.arguments["path"] in text
    placeholder = next(m for m in rendered if "Old tool result content cleared" in (m.get("content") or ""))
    assert "message m" in placeholder["content"] and "tokens" in placeholder["content"]
    # The two most recent turns are never pruned.
    starts = result.session.turn_starts()
    for m in result.session.messages[starts[-2]:]:
        assert all(p.compacted_at is None for p in m.tool_results)


def test_prune_that_frees_too_little_changes_nothing(counter):
    session = long_session(turns=4, per_turn_tools=1, lines=60)
    result = prune_tool_outputs(session, counter, protect_tokens=100)
    assert not result.committed
    assert result.session is session
    assert result.freed_tokens == 0 and "nothing changed" in result.reason
    assert all(p.compacted_at is None for m in session.messages for p in m.tool_results)


def test_prune_is_idempotent_and_stops_at_pruned_part(counter):
    first = prune_tool_outputs(long_session(), counter)
    second = prune_tool_outputs(first.session, counter)
    assert not second.committed
    assert second.session.model_dump() == first.session.model_dump()


def test_protected_tools_are_never_pruned(counter):
    b = SessionBuilder()
    for t in range(5):
        b.user(f"turn {t}")
        b.tool("skill", {"name": f"s{t}"}, big_output(t))
    result = prune_tool_outputs(b.build(), counter, protect_tokens=0, minimum=0)
    assert not any(p.compacted_at for m in result.session.messages for p in m.tool_results)


def test_cut_between_call_and_result_moves_to_safe_place(counter):
    b = SessionBuilder().user("first request")
    b.assistant("ok")
    b.user("second request: run the tests")
    b.tool("bash", {"command": "pytest -x"}, big_output(1, 300))
    b.tool("bash", {"command": "pytest -x -k slow"}, "1 passed")
    b.assistant("All green.")
    session = b.build()
    per = counter.per_message(session)
    tool_idx = next(i for i, m in enumerate(session.messages) if m.role == "tool")
    assert tool_idx not in safe_cuts(session)
    # Budget so small that the naive cut would land on the big tool result.
    budget = sum(per[tool_idx:]) - 1
    sel = select_tail(session, per, budget)
    assert sel.cut in safe_cuts(session)
    assert sel.cut > tool_idx and sel.tail_tokens <= budget
    assert sel.split_turn_start == 2  # the split turn's prefix goes to the head
    for k in safe_cuts(session):
        assert session.messages[k].role != "tool" if k < len(session.messages) else True


def test_tail_keeps_last_two_turns_when_they_fit(counter):
    session = long_session(turns=4, per_turn_tools=1, lines=5)
    per = counter.per_message(session)
    sel = select_tail(session, per, 8000)
    assert sel.cut == session.turn_starts()[-2]
    assert sel.split_turn_start is None


def test_per_message_counts_sum_to_the_exact_total(counter, llama_backend):
    b = SessionBuilder().system("sys").user("你好，请修复 tests/test_x.py")
    b.tool("bash", {"command": "pytest"}, "E   AssertionError: 1 == 2")
    b.assistant("fixed")
    session = b.build()
    total = counter.total(session)
    assert total == llama_backend.count_messages(session.to_chat())
    generation_prompt = llama_backend.count_messages([{"role": "system", "content": "."}]) - llama_backend.count_messages(
        [{"role": "system", "content": "."}], add_generation_prompt=False)
    per = counter.per_message(session)
    anchor = llama_backend.count_messages([{"role": "system", "content": "."}], add_generation_prompt=False)
    sys_alone = llama_backend.count_messages([session.messages[0].to_chat()], add_generation_prompt=False)
    assert sys_alone - anchor + sum(per) + generation_prompt == total


def test_appending_one_message_counts_only_that_message(llama_backend, monkeypatch):
    counter = TokenCounter(llama_backend)  # its own memo: what other tests counted does not count here
    session = long_session(turns=3, per_turn_tools=1, lines=50)
    counter.per_message(session)
    calls = []
    real = counter.backend.count_messages
    monkeypatch.setattr(counter.backend, "count_messages", lambda *a, **k: calls.append(1) or real(*a, **k))
    session.messages.append(session.messages[1].model_copy(update={"id": "new"}))
    counter.per_message(session)
    # Two counts: [anchor, previous] (the previous message was never a predecessor before) and
    # [anchor, previous, new]; nothing else is counted again.
    assert len(calls) == 2


def test_a_tail_larger_than_the_context_shrinks_and_below_the_floor_it_is_refused(llama_backend):
    """The tail alone is over usable: the tail shrinks (below its floor), there is a checkpoint;
    only where not even MIN_CHECKPOINT_SUMMARY fits is it refused, in one line with the numbers."""
    from worker.pipeline import MIN_CHECKPOINT_SUMMARY, CompactionConfig, CompactionRefused, compact

    b = SessionBuilder().user("first request")
    b.tool("read_file", {"path": "a.py"}, big_output(1, 300))
    b.user("second request")
    b.tool("read_file", {"path": "b.py"}, big_output(2, 70))  # the tail alone: ~1.5k tokens
    session = b.build()
    usable = MIN_CHECKPOINT_SUMMARY + 76
    cp = compact(session, llama_backend, CompactionConfig(context_limit=usable + 100, reserved=100,
                                                          use_model=False)).checkpoint
    assert cp.tokens.after <= cp.budget.usable == usable
    assert cp.tokens.tail < 1_500
    with pytest.raises(CompactionRefused) as refused:
        compact(session, llama_backend, CompactionConfig(context_limit=MIN_CHECKPOINT_SUMMARY, reserved=100,
                                                         use_model=False))
    message = str(refused.value)
    assert "\n" not in message and "raise the context limit" in message
    assert f"context limit {MIN_CHECKPOINT_SUMMARY} leaves only {MIN_CHECKPOINT_SUMMARY - 100} usable" in message
