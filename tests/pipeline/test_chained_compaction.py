"""Chained compactions on a real long transcript: five checkpoints in a row, each made at
overflow from the previous checkpoint plus the turns that came after it, and the fifth still
holds what the first one's ledger knew and is still true. Deterministic: no model call
(`use_model=False`), the bundled model's tokenizer only (no weights are loaded).

The transcript is pi_large-session (tests/fixtures, see NOTICE.md): 914 messages, ~153k tokens,
no in-session compaction, so every token of it counts against the window.

"Still true", from the ledger itself (worker/facts/ledger.py):
- errors: every error line of the first ledger. One resolved later is still listed (under
  resolved), so every one must still be there.
- paths: every file of the first ledger (a file deleted later is still listed, as deleted).
- user instructions: every one (a long one may be cut in the middle: matched by its start).
- commands: every command of the first ledger except the look-only runs (`find`, `grep`,
  `git status`, ...: `only_looks`). The ledger itself ages those out first once it holds
  MAX_COMMANDS runs, because what they printed described the tree at that moment, not what
  was done. The figure with them is recorded too (`RAW`), and is lower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backends.models import resolve
from worker.facts.shell import only_looks
from worker.formats import load
from worker.pipeline import CompactionConfig, compact
from worker.session import Session
from worker.tokens import TokenCounter

PI_LARGE = Path(__file__).resolve().parents[1] / "fixtures" / "pi_large-session.jsonl"
CONTEXT_LIMIT = 24_000  # five overflows fit in the transcript at this window
CHAIN = 5
GOAL = 0.99
INSTRUCTION_PREFIX = 60  # a cut instruction keeps its start verbatim


@pytest.fixture(scope="module")
def counting_backend():
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(resolve("qwen2.5-coder-0.5b").path)  # tokenizer only: no weights are loaded
    yield backend
    backend.close()


def chain(session: Session, backend: Any) -> tuple[list[Any], list[int]]:
    """Compact at each overflow: append whole turns after the previous checkpoint until what the
    agent holds (that checkpoint plus the new messages) passes the window, then compact the
    transcript so far with previous = that checkpoint."""
    counter = TokenCounter(backend)
    shares = counter.per_message(session)
    starts = [*session.turn_starts(), len(session.messages)]
    checkpoints: list[Any] = []
    ends: list[int] = []
    end = 0
    while len(checkpoints) < CHAIN:
        held = checkpoints[-1].tokens.after if checkpoints else 0
        end = next(e for e in starts if e > end and held + sum(shares[end:e]) > CONTEXT_LIMIT)
        sliced = Session(id=session.id, messages=session.messages[:end], source_format=session.source_format,
                         meta=session.meta)
        result = compact(sliced, backend, CompactionConfig(context_limit=CONTEXT_LIMIT, use_model=False),
                         previous=checkpoints[-1] if checkpoints else None, counter=counter)
        checkpoints.append(result.checkpoint)
        ends.append(end)
    return checkpoints, ends


def ledger_facts(ledger: dict[str, Any], look_only: bool = False) -> dict[str, set[str]]:
    return {
        "error": {e["text"] for e in ledger["errors"]},
        "path": {f["path"] for f in ledger["files"]},
        "command": {c["command"] for c in ledger["commands"] if look_only or not only_looks(c["command"])},
        "instruction": {u["text"][:INSTRUCTION_PREFIX] for u in ledger["user_instructions"]},
    }


def held(first: dict[str, set[str]], last: dict[str, set[str]]) -> tuple[int, int, list[str]]:
    kept = sum(len(first[k] & last[k]) for k in first)
    total = sum(len(v) for v in first.values())
    return kept, total, [f"{k}: {x}" for k in first for x in sorted(first[k] - last[k])]


def test_fifth_chained_checkpoint_keeps_the_first_ledgers_true_facts(counting_backend, record_property):
    session = load(PI_LARGE)
    checkpoints, ends = chain(session, counting_backend)
    assert len(checkpoints) == CHAIN and ends == sorted(set(ends))  # five real compactions, each later
    for cp in checkpoints:
        assert cp.tokens.after <= CONTEXT_LIMIT  # each fits the window it was made for
    first, fifth = checkpoints[0].ledger, checkpoints[-1].ledger
    kept, total, lost = held(ledger_facts(first), ledger_facts(fifth))
    raw_kept, raw_total, raw_lost = held(ledger_facts(first, look_only=True), ledger_facts(fifth, look_only=True))
    # an error the first ledger held unresolved and a later run fixed is listed as resolved, not dropped
    later = {e["text"]: e for e in fifth["errors"]}
    assert all(e["text"] in later for e in first["errors"])
    record_property("chained_held", f"{kept}/{total}")
    record_property("chained_held_with_look_only_commands", f"{raw_kept}/{raw_total}")
    print(f"5th checkpoint holds {kept}/{total} of the 1st ledger's still-true facts; "
          f"{raw_kept}/{raw_total} counting look-only commands (lost: {raw_lost})")
    assert total >= 8  # enough facts for the figure to mean something
    assert kept >= GOAL * total, lost
