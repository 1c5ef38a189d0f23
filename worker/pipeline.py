"""prune → tail → ledger → summarize → verify → checkpoint, for one session.

Data flows one way. Nothing here knows an engine beyond the backend protocol, and nothing
mutates the caller's session: prune returns a marked copy, the stored history stays whole.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.base import Backend
from backends.engine_thread import FOREGROUND

from . import ledger as ledger_mod
from . import workstate as workstate_mod
from .checkpoint import Checkpoint, render_summary, shrink_bullets, split_markdown_sections
from .prune import PRUNE_MINIMUM, PRUNE_PROTECT, prune_tool_outputs
from .session import Session
from .summarize import (
    MAX_NEW_TOKENS,
    Narrative,
    SummarizeResult,
    detect_language,
    previous_text,
    summarize_narrative,
)
from .tail import TAIL_TURNS, preserve_recent_budget, select_tail
from .tokens import Budget, TokenCounter, make_budget
from .verify import DoneEvidence, verify_narrative

MIN_FREE_SHARE = 0.10  # a compaction that frees less than this share of usable would loop
SUMMARY_MAX_TOKENS = 4_000  # the summary's own bound, whatever the window: keeps it from growing
SUMMARY_SHARE = 0.35  # ... and at most this share of usable, so the tail and new turns fit
SHRINK_STEPS = (40, 24, 16, 10, 6, 3, 1)  # bullets kept per deterministic section when over budget


class CompactionRefused(Exception):
    """The loop guard said no (the compaction would not free enough); the reason is the message."""


@dataclass
class CompactionConfig:
    context_limit: int
    reserved: int | None = None
    max_output_tokens: int | None = None
    tail_turns: int = TAIL_TURNS
    prune_protect: int = PRUNE_PROTECT
    prune_minimum: int = PRUNE_MINIMUM
    min_free_share: float = MIN_FREE_SHARE
    summary_max_tokens: int = SUMMARY_MAX_TOKENS
    summarizer_window: int | None = None  # default: the backend's context size
    max_new_tokens: int = MAX_NEW_TOKENS
    use_model: bool = True  # False: deterministic checkpoint only
    priority: int = FOREGROUND
    # A rolling-summary swap: `previous` is a ready checkpoint the agent has not received yet, so
    # it frees everything it covers even when no message is left between it and the tail.
    swap: bool = False
    # Keep the summarizer's KV prefix per session between updates (engines that support it).
    prefix_cache: bool = True

    def budget(self) -> Budget:
        return make_budget(self.context_limit, self.max_output_tokens, self.reserved)


@dataclass
class CompactionResult:
    checkpoint: Checkpoint
    pruned_session: Session
    summarize: SummarizeResult | None
    stage_ms: dict[str, float] = field(default_factory=dict)


def _head_start(session: Session, previous: Checkpoint | None) -> int:
    """First message not covered by a summary (ours or one the agent wrote in-session)."""
    start = 0
    if previous is not None and previous.boundary_message_id:
        ids = [m.id for m in session.messages]
        if previous.boundary_message_id in ids:
            start = ids.index(previous.boundary_message_id) + 1
    summary = session.last_summary_index()
    if summary is not None:
        start = max(start, summary + 1)
    return start


def _with_boundary(session: Session, head_start: int) -> Session:
    """Messages before the boundary are compacted: never summarized or counted again."""
    if head_start == 0:
        return session
    s = session.model_copy(deep=True)
    for m in s.messages[:head_start]:
        if not m.is_summary and m.role != "system":
            m.compacted = True
    return s


def _fit_sections(
    sections: dict[str, str], lang: str, limit: int, counter: TokenCounter
) -> tuple[dict[str, str], str, int]:
    text = render_summary(sections, lang)
    n = counter.text(text)
    for keep in SHRINK_STEPS:
        if n <= limit:
            break
        sections = {
            k: (shrink_bullets(v, keep) if k in ("Critical Context", "Relevant Files", "Constraints & Preferences", "Progress") else v)
            for k, v in sections.items()
        }
        text = render_summary(sections, lang)
        n = counter.text(text)
    return sections, text, n


def compact(
    session: Session,
    backend: Backend,
    config: CompactionConfig,
    *,
    previous: Checkpoint | None = None,
    counter: TokenCounter | None = None,
    held_tokens: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompactionResult:
    """held_tokens: what the agent's context holds now, when the caller knows it better than
    `previous` does (a rolling summary the agent has not received yet is not what it holds)."""
    say = progress or (lambda _msg: None)
    stage: dict[str, float] = {}
    t_all = time.perf_counter()
    counter = counter or TokenCounter(backend)
    budget = config.budget()

    t = time.perf_counter()
    head_start = _head_start(session, previous)
    working = _with_boundary(session, head_start)
    if held_tokens is not None:
        before = held_tokens
    elif previous is not None and head_start > 0:
        # What the agent holds now: the previous checkpoint's system + summary, then every
        # message since its boundary (its tail included), not the whole stored history.
        held = previous.messages[: len(previous.messages) - len(previous.tail_message_ids)]
        before = counter.messages(held + [m.to_chat() for m in session.messages[head_start:]])
    else:
        before = counter.total(session)
    stage["count_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    pruned = prune_tool_outputs(
        working, counter, protect_tokens=config.prune_protect, minimum=config.prune_minimum
    )
    working = pruned.session
    stage["prune_ms"] = (time.perf_counter() - t) * 1000
    say(pruned.reason)

    t = time.perf_counter()
    per_message = counter.per_message(working)
    tail_budget = preserve_recent_budget(budget.usable)
    tail = select_tail(working, per_message, tail_budget, config.tail_turns, head_start=head_start)
    head = [m for m in working.messages[head_start : tail.cut] if not m.compacted and m.role != "system"]
    tail_msgs = working.messages[tail.cut :]
    system_msgs = [m for m in working.messages[:head_start] + working.messages[: tail.cut] if m.role == "system"]
    system_msgs = list({m.id: m for m in system_msgs}.values())[:1]
    stage["tail_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    since_boundary = [m for m in working.messages[head_start:] if not m.compacted]
    prev_ledger = ledger_mod.Ledger.from_dict(previous.ledger) if previous is not None else None
    cwd = session.meta.get("cwd") if isinstance(session.meta.get("cwd"), str) else None
    ledger = ledger_mod.extract_ledger(since_boundary, previous=prev_ledger, cwd=cwd)
    state = workstate_mod.derive_work_state(since_boundary, ledger, cwd=cwd)
    lang = detect_language(since_boundary + ([] if previous is None else []))
    if previous is not None and not any(m.role == "user" and m.text for m in since_boundary):
        lang = previous.lang
    det_sections = split_markdown_sections(ledger_mod.render_markdown(ledger, lang=lang))
    det_sections.update(split_markdown_sections(workstate_mod.render_markdown(state, lang=lang)))
    sections = {
        "Constraints & Preferences": _pick(det_sections, "Constraints & Preferences", lang),
        "Progress": _pick(det_sections, "Progress", lang),
        "Critical Context": _pick(det_sections, "Critical Context", lang),
        "Relevant Files": _pick(det_sections, "Relevant Files", lang),
    }
    stage["ledger_ms"] = (time.perf_counter() - t) * 1000

    # Loop guard: project the result before spending a model call on it.
    system_tokens = counter.messages([m.to_chat() for m in system_msgs]) if system_msgs else 0
    summary_limit = min(config.summary_max_tokens, int(budget.usable * SUMMARY_SHARE))
    deterministic = counter.text(render_summary(sections, lang))
    narrative_bound = config.max_new_tokens if config.use_model else 0
    projected = system_tokens + min(summary_limit, deterministic + narrative_bound) + tail.tail_tokens
    if not head and not config.swap:
        raise CompactionRefused("nothing to compact: every message since the last summary is in the recent tail")
    if before - projected < config.min_free_share * budget.usable:
        raise CompactionRefused(
            f"compaction would free only {max(0, before - projected)} of {before} tokens "
            f"(< {config.min_free_share:.0%} of usable {budget.usable}): refusing, it would loop"
        )

    t = time.perf_counter()
    result: SummarizeResult | None = None
    prev_narr = Narrative.from_dict(previous.narrative) if previous is not None else None
    prev_summary_text = session.messages[head_start - 1].text if head_start and session.messages[head_start - 1].is_summary else None
    previous_for_model = previous_text(prev_narr, prev_summary_text)
    narrative = Narrative()
    removed: list[dict] = []
    fallback = ""
    user_texts = [m.text for m in since_boundary if m.role == "user" and m.text.strip()]
    first_request = (user_texts[-1] if user_texts else "") if previous is not None else (user_texts[0] if user_texts else "")
    fallback_goal = (prev_narr.goal if prev_narr and prev_narr.goal else first_request)[:600]
    if config.use_model and head:
        window = config.summarizer_window or backend.info().context_size or 8192
        say(f"summarizing {len(head)} messages with the model")
        ids = {m.id for m in session.messages}
        result = summarize_narrative(
            backend, head, facts=strip_message_ids(render_summary(sections, lang, reference_prefix=False), ids),
            previous=previous_for_model, lang=lang,
            window=window, max_new_tokens=config.max_new_tokens, priority=config.priority,
            cache_key=session.id if config.prefix_cache else None,
            progress=lambda k, n: say(f"chunk {k + 1}/{n}"),
        )
        if result.problems and not (result.narrative.goal or result.narrative.next_steps):
            fallback = "; ".join(result.problems) + ": deterministic checkpoint used"
        else:
            done = done_evidence(ledger, state)
            constraints = list(getattr(ledger, "user_instructions", []) or [])
            source = result.model_input
            narrative, removals = verify_narrative(
                result.narrative, source, done=done,
                constraints=[c if isinstance(c, str) else getattr(c, "text", str(c)) for c in constraints],
                fallback_goal=fallback_goal,
            )
            removed = [r.to_dict() for r in removals]
    elif not config.use_model:
        fallback = "model disabled: deterministic checkpoint" + (
            ", narrative carried from the previous checkpoint" if prev_narr is not None else ""
        )
    if not narrative.goal:
        narrative.goal = fallback_goal
    if prev_narr is not None and not result:
        # No model call (a swap): the previous narrative is carried whole, decisions included.
        narrative.next_steps = narrative.next_steps or prev_narr.next_steps
        narrative.key_decisions = narrative.key_decisions or prev_narr.key_decisions
    stage["summarize_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    sections["Goal"] = narrative.goal
    sections["Key Decisions"] = "\n".join(
        f"- {d['decision']}" + (f" — {d['reason']}" if d.get("reason") else "") for d in narrative.key_decisions
    )
    sections["Next Steps"] = "\n".join(f"- {s}" for s in narrative.next_steps)
    sections, summary_text, summary_tokens = _fit_sections(sections, lang, summary_limit, counter)
    summary_msg = {"role": "user", "content": summary_text}
    checkpoint_messages = [m.to_chat() for m in system_msgs] + [summary_msg] + [
        m.to_chat() for m in tail_msgs if not m.compacted
    ]
    after = counter.messages(checkpoint_messages)
    if after > budget.usable:
        # The tail has a floor (TAIL_MIN_TOKENS) that a tiny context cannot hold: storing this
        # checkpoint would overflow the agent's very next request.
        raise CompactionRefused(
            f"the checkpoint would hold {after} tokens (tail {tail.tail_tokens}, summary {summary_tokens}) "
            f"but context limit {budget.context_limit} leaves only {budget.usable} usable: raise the context limit"
        )
    stage["checkpoint_ms"] = (time.perf_counter() - t) * 1000
    stage["total_ms"] = (time.perf_counter() - t_all) * 1000

    boundary = head[-1].id if head else (previous.boundary_message_id if previous else None)
    dropped = [
        {"id": m.id, "tokens": per_message[i]}
        for i, m in enumerate(working.messages[head_start : tail.cut], start=head_start)
        if not m.compacted and m.role != "system"
    ]
    checkpoint = Checkpoint(
        session_id=session.id,
        version=(previous.version + 1) if previous is not None else 1,
        lang=lang,
        sections=sections,
        summary_text=summary_text,
        narrative=narrative.to_dict(),
        ledger=ledger.to_dict(),
        work_state=state.to_dict() if hasattr(state, "to_dict") else {},
        boundary_message_id=boundary,
        tail_message_ids=[m.id for m in tail_msgs],
        messages=checkpoint_messages,
        tokens={"before": before, "after": after, "summary": summary_tokens, "tail": tail.tail_tokens,
                "system": system_tokens, "projected": projected},
        budget={"context_limit": budget.context_limit, "reserved": budget.reserved, "usable": budget.usable,
                "summary_limit": summary_limit, "tail_budget": tail_budget},
        verification={"removed": removed, "fallback": fallback,
                      "problems": result.problems if result else []},
        timings={
            "stages_ms": {k: round(v, 1) for k, v in stage.items()},
            "model": [s.to_dict() for s in result.stats] if result else [],
            "chunks": result.chunks if result else 0,
        },
        audit={
            "dropped": dropped,
            "pruned": [vars(p) for p in pruned.candidates] if pruned.committed else [],
            "prune": pruned.reason,
            "split_turn_start": working.messages[tail.split_turn_start].id if tail.split_turn_start is not None else None,
            "summary_version": (previous.version + 1) if previous is not None else 1,
        },
    )
    return CompactionResult(checkpoint, working, result, stage)


def done_evidence(ledger: ledger_mod.Ledger, state: workstate_mod.WorkState) -> DoneEvidence:
    """Finished work as the evidence shows it; only when nothing is pending does an edit or a
    run the model proposes count as a repeat."""
    items = [f"{i.text} {' '.join(i.evidence)}" for i in state.done]
    settled = state.last_green is not None and not state.changed_since_green and not state.in_progress
    if not settled:
        return DoneEvidence(items, [], [])
    # A removed scratch file is cleanup, not a change the runs must come after.
    changed = [f for f in ledger.changed_files() if f.last_action != "deleted"]
    last_change = max((f.last_seq for f in changed), default=0)
    passed = [c.command for c in ledger.commands if c.status == "ok" and c.last_seq > last_change]
    return DoneEvidence(items, [f.path for f in changed], passed)


_ID_LIST = re.compile(r" ?\(([^()\s,]+(?:, [^()\s,]+)*)\)")


def strip_message_ids(text: str, ids: set[str]) -> str:
    """Drop '(m00012, m00015)' evidence pointers: useful to the agent, noise to the model,
    which otherwise copies them into its own sentences."""
    return _ID_LIST.sub(lambda m: "" if all(x in ids for x in m.group(1).split(", ")) else m.group(0), text)


def _pick(sections: dict[str, str], name: str, lang: str) -> str:
    from .checkpoint import label

    return sections.get(name) or sections.get(label(name, lang)) or ""
