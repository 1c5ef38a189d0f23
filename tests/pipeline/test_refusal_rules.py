"""No refusal where a checkpoint fits (issue 22, item 3), on real transcripts and the bundled
tokenizer (no weights: `use_model=False`, the deterministic path):

- an explicit compaction of a transcript the agent already compacted, with every message since
  its summary in the tail, gives the full-history checkpoint, no larger than the live context
  it replaces (the agent's summary plus what follows); the automatic path still refuses it;
- a ~10k-token system prompt at a 16,384 context: the tail shrinks, the summary shrinks, a
  checkpoint is made and fits usable;
- below the system prompt plus MIN_CHECKPOINT_SUMMARY the refusal is one line with the numbers;
- the CLI: exit 0 with a checkpoint on such input, one line on stderr and exit 2 on a true refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.cli import main
from worker.formats import load
from worker.pipeline import MIN_CHECKPOINT_SUMMARY, CompactionConfig, CompactionRefused, compact
from worker.pipeline.anchor import agent_summary_limit
from worker.session import Message, Session, TextPart
from worker.tokens import TokenCounter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CIPHERBOX = FIXTURES / "cc-cipherbox_2095544c-fa50-4027-b664-c37e578957ce.jsonl"  # Claude Code, isCompactSummary
SPOTTER = FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
OPENCODE = FIXTURES / "opencode-darkfactory_ses_39b7f9e89ffe7J0WzLzYrUt4eW.json"  # its summary is its last message
MODEL = "qwen2.5-coder-0.5b"
CONTEXT = 16_384  # the measured window: usable 12,288
TAIL_FITS = 2_500  # under the tail's budget at CONTEXT (a quarter of usable, 3,072)
SYSTEM_WORDS = 620  # rules of ~16 tokens each: a ~10k-token system prompt


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import resolve

    b = LlamaCppBackend(resolve(MODEL).path)  # tokenizer only: no weights are loaded
    yield b
    b.close()


def since_summary_in_tail(path: Path, counter: TokenCounter) -> tuple[Session, int]:
    """The real transcript cut where what follows the agent's in-session summary still fits
    the recent tail (TAIL_FITS tokens; cipherbox is one long agent turn after it). Returns the
    session and the summary's index."""
    session = load(path)
    summary = session.last_summary_index()
    assert summary is not None
    per = counter.per_message(session)
    end = summary + 1
    while end < len(session.messages) and sum(per[summary + 1 : end + 1]) <= TAIL_FITS:
        end += 1
    assert end > summary + 4  # a few real messages after the summary
    return session.model_copy(update={"messages": session.messages[:end]}), summary


def live_context(session: Session, summary: int, counter: TokenCounter) -> int:
    """What the agent holds: every message its own compaction did not drop (the importer marks
    those compacted): its system prompt, its summary, what follows, and what the agent keeps with
    the summary (opencode keeps its compaction request, "What did we do so far?", before it)."""
    assert all(m.compacted for m in session.messages[:summary] if m.role != "system" and not m.meta.get("injected"))
    return counter.messages([m.to_chat() for m in session.messages if not m.compacted])


@pytest.mark.parametrize("path", [CIPHERBOX, OPENCODE], ids=["claude-code", "opencode"])
def test_explicit_compaction_of_an_agent_compacted_transcript_gives_the_full_history(backend, path):
    counter = TokenCounter(backend)
    session, summary = (since_summary_in_tail(path, counter) if path == CIPHERBOX
                        else (load(path), load(path).last_summary_index()))
    live = live_context(session, summary, counter)
    with pytest.raises(CompactionRefused, match="nothing to compact"):  # the automatic path: its loop guard
        compact(session, backend, CompactionConfig(context_limit=CONTEXT, use_model=False), counter=counter)
    cp = compact(session, backend, CompactionConfig(context_limit=CONTEXT, use_model=False, explicit=True),
                 counter=counter).checkpoint
    assert cp.tokens.after <= live and cp.tokens.after <= cp.budget.usable
    assert cp.tokens.after == counter.messages(cp.messages)
    # The full history: facts cite messages from before the agent's summary ...
    before_summary = [m.id for m in session.messages[:summary] if m.role != "system"]
    cited = [mid for mid in before_summary if mid[:8] in cp.summary_text]
    assert cited, "no fact from before the agent's summary"
    # ... and it replaces the agent's summary, whose words are carried.
    # (When our summary needs more room than the agent's, the tail shrinks first: its older
    # messages are then the head, and the boundary is the last of them.)
    dropped = [d.id for d in cp.audit.dropped]
    assert cp.boundary_message_id == (dropped[-1] if dropped else session.messages[summary].id)
    # Its words are quoted where the summary has room above the ledger's floor (anchor.py); a
    # checkpoint capped at a small live context keeps the facts instead, and no fragment.
    quoted = "The agent's own summary of the earlier turns" in cp.summary_text
    assert quoted == (agent_summary_limit(cp.budget.summary_limit) > 0)
    tail = [m.id for m in session.messages[summary + 1:]]
    assert tail[len(tail) - len(cp.tail_message_ids):] == cp.tail_message_ids  # the tail, verbatim, at the end
    assert {d.id for d in cp.audit.dropped} | set(cp.tail_message_ids) == set(tail)


def test_a_second_explicit_compaction_of_it_has_nothing_left_to_recover(backend):
    """The full-history checkpoint covers the agent's summary: compacting again on top of it
    finds nothing new (no loop of upgrades)."""
    session = load(OPENCODE)
    config = CompactionConfig(context_limit=CONTEXT, use_model=False, explicit=True)
    first = compact(session, backend, config).checkpoint
    assert not first.audit.dropped and first.boundary_message_id == session.messages[-1].id
    with pytest.raises(CompactionRefused, match="nothing to compact"):
        compact(session, backend, config, previous=first)


def with_system_prompt(path: Path, words: int) -> Session:
    session = load(path)
    rules = " ".join(f"rule {i}: keep file{i}.py tidy and tested." for i in range(words))
    system = Message(id="system-prompt", role="system", parts=[TextPart(text=rules)])
    return session.model_copy(update={"messages": [system] + session.messages})


def test_a_10k_system_prompt_at_16384_gets_a_checkpoint_that_fits(backend):
    session = with_system_prompt(SPOTTER, SYSTEM_WORDS)
    counter = TokenCounter(backend)
    system_tokens = counter.messages([session.messages[0].to_chat()])
    assert 9_000 < system_tokens < 11_000
    cp = compact(session, backend, CompactionConfig(context_limit=CONTEXT, use_model=False),
                 counter=counter).checkpoint
    assert cp.budget.usable == 12_288
    assert cp.tokens.after <= cp.budget.usable and cp.tokens.after == counter.messages(cp.messages)
    assert cp.messages[0] == session.messages[0].to_chat()  # the system prompt, whole
    assert cp.messages[1]["content"] == cp.summary_text and cp.tokens.summary >= MIN_CHECKPOINT_SUMMARY
    assert cp.summary_text.startswith("[CONTEXT COMPACTION")
    for section in ("## Goal", "## Progress", "## Critical Context", "## Relevant Files"):
        assert section in cp.summary_text


def test_below_the_system_prompt_plus_1024_the_refusal_is_one_line_with_the_numbers(backend):
    session = with_system_prompt(SPOTTER, SYSTEM_WORDS)
    counter = TokenCounter(backend)
    system_tokens = counter.messages([session.messages[0].to_chat()])
    limit = (system_tokens + MIN_CHECKPOINT_SUMMARY) * 4 // 3 - 8  # usable a few tokens short of the bound
    for explicit in (False, True):
        with pytest.raises(CompactionRefused) as refused:
            compact(session, backend, CompactionConfig(context_limit=limit, use_model=False, explicit=explicit),
                    counter=counter)
        message = str(refused.value)
        usable = limit - limit // 4
        assert "\n" not in message
        for number in (system_tokens, system_tokens + MIN_CHECKPOINT_SUMMARY, limit, usable):
            assert str(number) in message, message
    # At the bound itself there is a checkpoint.
    limit = (system_tokens + MIN_CHECKPOINT_SUMMARY) * 4 // 3 + 4
    cp = compact(session, backend, CompactionConfig(context_limit=limit, use_model=False), counter=counter).checkpoint
    assert cp.tokens.after <= cp.budget.usable


def test_cli_compacts_an_agent_compacted_transcript_and_refuses_in_one_line(capsys, tmp_path):
    out = tmp_path / "cp.json"
    assert main(["compact", "--model", MODEL, "--no-model", "--quiet", "--context-limit", str(CONTEXT),
                 "--json", "--out", str(out), str(OPENCODE)]) == 0
    data = json.loads(out.read_text())
    assert data["tokens"]["after"] <= data["tokens"]["before"]
    assert data["checkpoint_messages"][0]["content"].startswith("[CONTEXT COMPACTION")
    capsys.readouterr()
    # A true refusal: the system prompt leaves no room for a summary.
    chat = tmp_path / "chat.json"
    rules = " ".join(f"rule {i}: keep file{i}.py tidy and tested." for i in range(SYSTEM_WORDS))
    chat.write_text(json.dumps([{"role": "system", "content": rules}, {"role": "user", "content": "fix the bug"},
                                {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]))
    code = main(["compact", "--model", MODEL, "--no-model", "--quiet", "--context-limit", "12000",
                 "--json", "--out", str(tmp_path / "refused.json"), str(chat)])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("compactd: error: no checkpoint fits: the system prompt holds")
    assert "context limit 12000 leaves only 9000 usable" in err[0]
    assert not (tmp_path / "refused.json").exists()
