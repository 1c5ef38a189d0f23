"""prune → tail → facts → summarize → verify → checkpoint, for one session.

`compact()` only orchestrates: each stage is a named step below, and each stage's rules live in
its own module (prune.py, tail.py, worker.facts, summarize.py, verify.py, checkpoint.py). Data
flows one way. Nothing here knows an engine beyond the backend protocol, and nothing mutates
the caller's session: prune returns a marked copy, the stored history stays whole.

When a compaction is refused (`CompactionRefused`, one line with its numbers):
- the loop guard, on the automatic paths only (rolling summaries, refinements): a compaction
  that frees under MIN_FREE_SHARE of usable, or has nothing outside the recent tail, would be
  triggered again at once;
- an explicit one (`explicit`: `compactd compact`, `POST /v1/sessions/{id}/compact`) is never
  refused for freeing little, and never grows what the agent holds: its checkpoint is capped
  at the live context it replaces. When the agent compacted in-session and everything since
  its summary fits the tail, it is the full-history checkpoint (the facts from before the
  agent's summary are what compactd recovers), no larger than that summary plus what follows;
- no path refuses where the system prompt plus MIN_CHECKPOINT_SUMMARY fits the usable budget:
  the tail shrinks first (below its floor, to nothing if need be), then the summary, then the
  summary is rendered more densely (checkpoint.fit_dense). Below that bound the refusal says
  what the system prompt holds and what the context limit leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from backends.base import Backend
from backends.engine_thread import FOREGROUND

from ..facts.actions import scan_actions
from ..facts.ledger import Ledger, answered_question, extract_ledger, user_requests
from ..facts.text import cut_end
from ..facts.workstate import MAX_REPORTS, WorkState, derive_work_state
from ..session import Message, Session, boundary_index, cited_ids, id_forms
from ..tokens import Budget, TokenCounter, make_budget
from .anchor import agent_summary, agent_summary_limit, bounded, summary_body
from .checkpoint import (
    Checkpoint,
    Section,
    bullets,
    fact_labels,
    fit_dense,
    ledger_sections,
    progress_section,
    render_summary,
    user_labelled,
)
from .prune import PRUNE_MINIMUM, PRUNE_PROTECT, PruneResult, prune_tool_outputs
from .stats import (
    CheckpointAudit,
    CheckpointBudget,
    CheckpointTokens,
    DroppedMessage,
    ModelCall,
    Removal,
    Timings,
    Verification,
)
from .summarize import (
    MAX_NEW_TOKENS,
    Narrative,
    SummarizeResult,
    detect_language,
    previous_text,
    strip_message_ids,
    summarize_narrative,
)
from .tail import TAIL_TURNS, TailSelection, preserve_recent_budget, select_tail
from .verify import done_evidence, open_steps, verify_narrative

FALLBACK_GOAL_MAX_CHARS = 600  # the user's words as the goal: a request, not a pasted log
DENSE_GOAL_MAX_CHARS = 160  # a tight checkpoint names the goal in one line where Constraints quote it whole
DENSE_GOAL_PROBE_CHARS = 200  # the goal's start that must open a quoted message to count as quoted
MIN_FREE_SHARE = 0.10  # a compaction that frees less than this share of usable would loop
MIN_CHECKPOINT_SUMMARY = 1_024  # the least room a summary needs beside the system prompt to say what the history held
FIT_ROUNDS = 4  # re-fits of the summary when the checkpoint's exact count (template markup included) is over its cap
# The summary's own bound, whatever the window: keeps it from growing. Half of usable up to a
# 32k window (issue 22: "up to half of usable"); tune half, no model, 32k: 8k kept 554, 12k 558.
SUMMARY_MAX_TOKENS = 12_000
SUMMARY_SHARE = 0.5  # ... and half of usable (plus what the tail leaves of its share): new turns keep the rest (issue 22)


class CompactionRefused(Exception):
    """No checkpoint: the loop guard said no, or none fits the context; the reason is the message."""


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
    # An agent that keeps its own recent tail and wraps the summary itself (opencode, pi) hands
    # over only what it drops: then everything received is summarized (no verbatim tail), the
    # summary has no reference prefix, and the agent's own trigger is its loop guard.
    verbatim_tail: bool = True
    reference_prefix: bool = True
    loop_guard: bool = True
    # False: the reader cannot look compactd's message ids up (pi's extension gets the summary
    # text itself): the user's words are labelled as the user's and no message id is shown.
    cite_ids: bool = True
    # A user or client asked for this compaction (`compactd compact`, POST .../compact): no loop
    # guard, the checkpoint never larger than the live context, and an agent-compacted transcript
    # with nothing outside the tail since its summary gives the full-history checkpoint.
    explicit: bool = False

    def budget(self) -> Budget:
        return make_budget(self.context_limit, self.max_output_tokens, self.reserved)


@dataclass
class CompactionResult:
    checkpoint: Checkpoint
    pruned_session: Session
    summarize: SummarizeResult | None
    stage_ms: dict[str, float] = field(default_factory=dict)
    # The summary's sections as typed values (after the fit), for renderers of other templates.
    sections: dict[str, Section] = field(default_factory=dict)


def _head_start(session: Session, previous: Checkpoint | None) -> int:
    """First message not covered by a summary (ours or one the agent wrote in-session)."""
    start = boundary_index(session, previous.boundary_message_id if previous is not None else None)
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


@dataclass
class _Split:
    """The working session cut into system, head (to summarize) and verbatim tail."""

    per_message: list[int]
    tail_budget: int
    tail: TailSelection
    head: list[Message]
    tail_msgs: list[Message]
    system_msgs: list[Message]


@dataclass
class _Facts:
    """What rules say about the messages since our own previous checkpoint (the whole raw
    transcript when there is none, in-session summaries of the agent's included), and the
    sections built from it."""

    since_boundary: list[Message]
    ledger: Ledger
    state: WorkState
    lang: str
    sections: dict[str, Section]
    changed_since: list[str] = field(default_factory=list)  # files created or modified since the boundary
    cite: dict[str, str] = field(default_factory=dict)  # message id -> how the sections cite it
    # A poll's message (TaskOutput, write_stdin, an end notice) -> the message whose call started its run.
    polls: dict[str, str] = field(default_factory=dict)


@dataclass
class _Story:
    """The narrative sections' source: the verified model output, or the fallback."""

    narrative: Narrative
    result: SummarizeResult | None
    removed: tuple[Removal, ...]
    fallback: str


def _count_before(session: Session, previous: Checkpoint | None, head_start: int, counter: TokenCounter,
                  held_tokens: int | None) -> int:
    """What the agent's context holds now."""
    if held_tokens is not None:
        return held_tokens
    if previous is not None and head_start > 0:
        # What the agent holds now: the previous checkpoint's system + summary, then every
        # message since its boundary (its tail included), not the whole stored history.
        held = previous.messages[: len(previous.messages) - len(previous.tail_message_ids)]
        return counter.messages(held + [m.to_chat() for m in session.messages[head_start:]])
    return counter.total(session)


def _split(working: Session, head_start: int, counter: TokenCounter, budget: Budget, config: CompactionConfig,
           tail_budget: int | None = None) -> _Split:
    """tail_budget: a smaller tail than preserve_recent_budget gives (its floor included), when
    the checkpoint would not fit otherwise."""
    per_message = counter.per_message(working)
    tail_budget = preserve_recent_budget(budget.usable) if tail_budget is None else tail_budget
    if config.verbatim_tail:
        tail = select_tail(working, per_message, tail_budget, config.tail_turns, head_start=head_start)
    else:
        tail = TailSelection(len(working.messages), head_start, 0, 0, None)
    head = [m for m in working.messages[head_start : tail.cut] if not m.compacted and m.role != "system"]
    system_msgs = [m for m in working.messages[:head_start] + working.messages[: tail.cut] if m.role == "system"]
    system_msgs = list({m.id: m for m in system_msgs}.values())[:1]
    return _Split(per_message, tail_budget, tail, head, working.messages[tail.cut :], system_msgs)


def _facts(session: Session, previous: Checkpoint | None) -> _Facts:
    """Ledger and work state from ONE scan of the actions since our previous checkpoint (whose
    ledger carries what came before), else of the whole raw transcript: an agent's in-session
    summary cuts the narrative, never the facts; their sections."""
    start = boundary_index(session, previous.boundary_message_id) if previous is not None else 0
    since_boundary = session.messages[start:]
    prev_ledger = Ledger.from_dict(previous.ledger) if previous is not None else None
    cwd = session.meta.get("cwd") if isinstance(session.meta.get("cwd"), str) else None
    actions = scan_actions(since_boundary, cwd=cwd, running=prev_ledger.running_runs() if prev_ledger else None)
    ledger = extract_ledger(since_boundary, previous=prev_ledger, cwd=cwd, actions=actions)
    cite = cited_ids([m.id for m in session.messages])  # over the whole session: each prefix is unique in it
    state = derive_work_state(since_boundary, ledger, cwd=cwd, actions=actions, cite=cite)
    if previous is not None:  # an approved plan outlives the checkpoint that saw it: the design still holds
        seen = {p.message_id for p in state.plans}
        state.plans = (state.plans + [p for p in WorkState.from_dict(previous.work_state).plans
                                      if p.message_id not in seen])[:MAX_REPORTS]
    lang = detect_language(since_boundary)
    if previous is not None and not any(m.role == "user" and m.text for m in since_boundary):
        lang = previous.lang
    facts = ledger_sections(ledger, lang, cite)
    sections = {
        "Constraints & Preferences": facts["Constraints & Preferences"],
        "Progress": progress_section(state, lang, cite),
        "Critical Context": facts["Critical Context"],
        "Relevant Files": facts["Relevant Files"],
    }
    changed = [path for a in actions for path, what in a.files if what in ("created", "modified")]
    polls = {a.message_id: a.started_by for a in actions if a.started_by}
    return _Facts(since_boundary, ledger, state, lang, sections, list(dict.fromkeys(changed)), cite, polls)


@dataclass
class _Plan:
    """What the checkpoint may hold, decided before any model call."""

    system_tokens: int
    summary_limit: int
    projected: int
    cap: int  # usable; for an explicit compaction never more than the live context it replaces
    before: int


def _agent_compacted(session: Session, head_start: int, previous: Checkpoint | None) -> bool:
    """The head starts right after an agent's in-session summary that our previous checkpoint
    (if any) does not already cover: everything before it is what a checkpoint can recover."""
    summary = session.last_summary_index()
    covered = boundary_index(session, previous.boundary_message_id) if previous is not None else 0
    return summary is not None and summary == head_start - 1 and summary >= covered


def _plan(session: Session, working: Session, head_start: int, previous: Checkpoint | None, before: int,
          split: _Split, facts: _Facts, counter: TokenCounter, budget: Budget,
          config: CompactionConfig) -> tuple[_Split, _Plan]:
    """The refusals (see the module docstring), then the budget: project the result before
    spending a model call on it, and shrink the tail when the projected summary would not fit
    beside it. Returns the (possibly re-cut) split and the plan."""
    system_tokens = counter.messages([m.to_chat() for m in split.system_msgs]) if split.system_msgs else 0
    summary_limit = min(config.summary_max_tokens, int(budget.usable * SUMMARY_SHARE))
    deterministic = counter.text(render_summary(facts.sections, facts.lang))
    narrative_bound = config.max_new_tokens if config.use_model else 0
    need = min(summary_limit, deterministic + narrative_bound)
    if system_tokens + MIN_CHECKPOINT_SUMMARY > budget.usable:
        raise CompactionRefused(
            f"no checkpoint fits: the system prompt holds {system_tokens} tokens, a checkpoint needs it plus "
            f"{MIN_CHECKPOINT_SUMMARY} ({system_tokens + MIN_CHECKPOINT_SUMMARY}), but context limit "
            f"{budget.context_limit} leaves only {budget.usable} usable (reserved {budget.reserved}): "
            f"raise the context limit"
        )
    if not split.head and not config.swap and not (config.explicit and _agent_compacted(session, head_start, previous)):
        raise CompactionRefused(
            f"nothing to compact: every message since the last summary is in the recent tail "
            f"({len(split.tail_msgs)} messages, {split.tail.tail_tokens} tokens)"
        )
    projected = system_tokens + need + split.tail.tail_tokens
    if config.loop_guard and not config.explicit and before - projected < config.min_free_share * budget.usable:
        raise CompactionRefused(
            f"compaction would free only {max(0, before - projected)} of {before} tokens "
            f"(< {config.min_free_share:.0%} of usable {budget.usable}): refusing, it would loop"
        )
    cap = min(budget.usable, before) if config.explicit else budget.usable
    room = cap - system_tokens
    if split.tail.tail_tokens and split.tail.tail_tokens + need > room:
        # The tail first: its older messages join the head (summarized, their facts in the ledger).
        split = _split(working, head_start, counter, budget, config, tail_budget=max(0, room - need))
    # The tail's share that its whole messages left unused goes to the summary: the checkpoint
    # stays within the two shares together, however they split them, and the summary within its own bound.
    spare = max(0, split.tail_budget - split.tail.tail_tokens)
    summary_limit = max(0, min(summary_limit + spare, config.summary_max_tokens, room - split.tail.tail_tokens))
    projected = system_tokens + min(need, summary_limit) + split.tail.tail_tokens
    return split, _Plan(system_tokens, summary_limit, projected, cap, before)


def _fit(sections: dict[str, Section], lang: str, split: _Split, plan: _Plan, counter: TokenCounter,
         budget: Budget, session_id: str, reference_prefix: bool,
         dense: dict[str, Section] | None = None, cite_ids: bool = True,
         ) -> tuple[dict[str, Section], str, int, list[dict], int]:
    """The summary fitted so the whole checkpoint, counted exactly, is within the plan's cap:
    the summary's limit lowered by what the template's markup added, rendered more densely
    (`dense`, the facts without repeats, where the normal rendering does not fit whole; then
    fit_dense's shrinks) when the ranked fit cannot get under it. Refused, with the numbers,
    only if nothing fits."""
    system = [m.to_chat() for m in split.system_msgs]
    tail = [m.to_chat() for m in split.tail_msgs if not m.compacted]
    limit = plan.summary_limit
    after = summary_tokens = 0
    for _ in range(FIT_ROUNDS):
        fitted, text, summary_tokens = fit_dense(sections, lang, limit, counter.text, session_id,
                                                 reference_prefix=reference_prefix, dense=dense, cite_ids=cite_ids)
        messages = system + [{"role": "user", "content": text}] + tail
        after = counter.messages(messages)
        if after <= plan.cap:
            return fitted, text, summary_tokens, messages, after
        limit = min(limit, summary_tokens) - (after - plan.cap)
        if limit <= 0:
            break
    where = (f"context limit {budget.context_limit} leaves only {budget.usable} usable: raise the context limit"
             if plan.cap == budget.usable else f"the live context it replaces holds only {plan.before}")
    raise CompactionRefused(
        f"the checkpoint would hold {after} tokens (system {plan.system_tokens}, tail {split.tail.tail_tokens}, "
        f"summary {summary_tokens}) but {where}"
    )


def _narrate(session: Session, backend: Backend, config: CompactionConfig, previous: Checkpoint | None,
             head_start: int, head: list[Message], facts: _Facts, say: Callable[[str], None]) -> _Story:
    """Goal, Key Decisions and Next Steps: the model's, verified, or carried / the user's words."""
    result: SummarizeResult | None = None
    prev_narr = Narrative.from_dict(previous.narrative) if previous is not None else None
    prev_summary_text = session.messages[head_start - 1].text if head_start and session.messages[head_start - 1].is_summary else None
    previous_for_model = previous_text(prev_narr, prev_summary_text)
    narrative = Narrative()
    removed: tuple[Removal, ...] = ()
    fallback = ""
    # The goal comes from what the user typed: requests first (a question only where it opened
    # the session: "why is this PR failing?" is the task), any typed turn otherwise.
    requests = user_requests(facts.since_boundary)
    user_texts = ([m.user_text for k, (i, m) in enumerate(requests)
                   if (k == 0 and previous is None) or not answered_question(facts.since_boundary, i)]
                  or [m.user_text for m in facts.since_boundary if m.starts_turn])
    first_request = (user_texts[-1] if user_texts else "") if previous is not None else (user_texts[0] if user_texts else "")
    fallback_goal = cut_end(prev_narr.goal if prev_narr and prev_narr.goal else first_request, FALLBACK_GOAL_MAX_CHARS)
    done = done_evidence(facts.ledger, facts.state, facts.changed_since)
    if config.use_model and head:
        window = config.summarizer_window or backend.info().context_size or 8192
        say(f"summarizing {len(head)} messages with the model")
        ids = id_forms([m.id for m in session.messages])
        # The model reads the turns themselves: the agent's quoted reports would only repeat them.
        shown = {**facts.sections, "Progress": progress_section(replace(facts.state, reports=[], plans=[]), facts.lang, facts.cite)}
        result = summarize_narrative(
            backend, head,
            facts=strip_message_ids(render_summary(user_labelled(shown, ids, fact_labels(facts.lang)["user"] + ":"),
                                                   facts.lang, reference_prefix=False), ids),
            previous=previous_for_model, lang=facts.lang,
            window=window, max_new_tokens=config.max_new_tokens, priority=config.priority,
            cache_key=session.id if config.prefix_cache else None,
        )
        if result.problems and not (result.narrative.goal or result.narrative.next_steps):
            fallback = "; ".join(result.problems) + ": deterministic checkpoint used"
        else:
            narrative, removals = verify_narrative(
                result.narrative, result.model_input, done=done,
                constraints=[u.text for u in facts.ledger.user_instructions],
                fallback_goal=fallback_goal, carried=prev_narr.next_steps if prev_narr is not None else None,
            )
            removed = tuple(removals)
    elif not config.use_model:
        fallback = "model disabled: deterministic checkpoint" + (
            ", narrative carried from the previous checkpoint" if prev_narr is not None else ""
        )
    elif not head:
        # An explicit compaction of an agent-compacted transcript: nothing new for the model.
        fallback = ("nothing after the agent's summary is outside the recent tail: facts from the whole history, "
                    "the agent's summary quoted where the budget has room for it")
    if not narrative.goal:
        narrative.goal = fallback_goal
    if prev_narr is not None and (not result or fallback):
        # No model narrative (a swap, an instant checkpoint): the previous narrative is carried,
        # decisions whole, next steps less those the evidence since shows done.
        carried, dropped = open_steps(prev_narr.next_steps, done, carried=True)
        removed += tuple(dropped)
        narrative.next_steps = narrative.next_steps or carried
        narrative.key_decisions = narrative.key_decisions or prev_narr.key_decisions
    if fallback:
        # No model narrative: the agent's own summary is carried rather than dropped (a newer one
        # replaces the one a previous checkpoint carried).
        anchor = agent_summary(session, head_start)
        if anchor is not None and summary_body(anchor.text):
            narrative.agent_summary, narrative.agent_summary_id = summary_body(anchor.text), anchor.id
        elif prev_narr is not None:
            narrative.agent_summary, narrative.agent_summary_id = prev_narr.agent_summary, prev_narr.agent_summary_id
    return _Story(narrative, result, removed, fallback)


def _dense_goal(narrative: Narrative, ledger: Ledger) -> Narrative:
    """The dense rendering's narrative: where the goal is the user's request and that message is
    quoted under Constraints & Preferences, the goal is its first line (said once, not twice)."""
    head = narrative.goal.rstrip("…").strip()[:DENSE_GOAL_PROBE_CHARS]
    if not head or not any(u.text.startswith(head) for u in ledger.user_instructions):
        return narrative
    return replace(narrative, goal=cut_end(narrative.goal.strip().splitlines()[0], DENSE_GOAL_MAX_CHARS))


def _narrative_sections(narrative: Narrative, lang: str) -> dict[str, Section]:
    goal = narrative.goal
    if narrative.agent_summary:
        head = fact_labels(lang)["agent_summary"].format(id=narrative.agent_summary_id)
        quoted = "\n".join(f"> {line}" if line.strip() else ">" for line in narrative.agent_summary.splitlines())
        goal = f"{goal}\n\n{head}\n{quoted}".strip()
    return {
        "Goal": Section(text=goal),
        "Key Decisions": bullets([d["decision"] + (f" — {d['reason']}" if d.get("reason") else "")
                                  for d in narrative.key_decisions]),
        "Next Steps": bullets(list(narrative.next_steps)),
    }


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
    before = _count_before(session, previous, head_start, counter, held_tokens)
    stage["count_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    pruned = prune_tool_outputs(working, counter, protect_tokens=config.prune_protect, minimum=config.prune_minimum)
    working = pruned.session
    stage["prune_ms"] = (time.perf_counter() - t) * 1000
    say(pruned.reason)

    t = time.perf_counter()
    split = _split(working, head_start, counter, budget, config)
    stage["tail_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    facts = _facts(session, previous)
    stage["ledger_ms"] = (time.perf_counter() - t) * 1000

    split, plan = _plan(session, working, head_start, previous, before, split, facts, counter, budget, config)
    system_tokens, summary_limit, projected = plan.system_tokens, plan.summary_limit, plan.projected

    t = time.perf_counter()
    story = _narrate(session, backend, config, previous, head_start, split.head, facts, say)
    if story.narrative.agent_summary:
        story.narrative.agent_summary = bounded(story.narrative.agent_summary, agent_summary_limit(summary_limit),
                                                counter.text)  # "" where it has no room (it stays in the history)
    stage["summarize_ms"] = (time.perf_counter() - t) * 1000

    t = time.perf_counter()
    narrative = _narrative_sections(story.narrative, facts.lang)
    tail_ids = _shown_whole(split.tail_msgs, facts.polls)
    sections, summary_text, summary_tokens, checkpoint_messages, after = _fit(
        {**ledger_sections(facts.ledger, facts.lang, facts.cite, shown=tail_ids),
         "Progress": progress_section(facts.state, facts.lang, facts.cite, tail_ids), **narrative},
        facts.lang, split, plan, counter, budget, session.id, config.reference_prefix,
        # the same facts without repeats, for a tight budget: the user's messages cut to their share of it
        dense={**ledger_sections(facts.ledger, facts.lang, facts.cite, dense=True,
                                 summary_limit=summary_limit, shown=tail_ids),
               "Progress": progress_section(facts.state, facts.lang, facts.cite, tail_ids),
               **_narrative_sections(_dense_goal(story.narrative, facts.ledger), facts.lang)},
        cite_ids=config.cite_ids)
    if not config.cite_ids:
        # The record keeps its ids (the page links facts to messages); the agent's text has none.
        ids = id_forms([m.id for m in session.messages])
        labels = fact_labels(facts.lang)
        plain = user_labelled(sections, ids, labels["user"] + ":", labels["agent"] + ":")
        stripped = strip_message_ids(render_summary(plain, facts.lang, reference_prefix=config.reference_prefix), ids)
        checkpoint_messages = [{**m, "content": stripped} if m.get("content") == summary_text else m
                               for m in checkpoint_messages]
        summary_text, summary_tokens = stripped, counter.text(stripped)
        after = counter.messages(checkpoint_messages)
    stage["checkpoint_ms"] = (time.perf_counter() - t) * 1000
    stage["total_ms"] = (time.perf_counter() - t_all) * 1000

    checkpoint = _record(
        session, working, previous, head_start, split, facts, story, pruned, sections, summary_text,
        checkpoint_messages, stage,
        tokens=CheckpointTokens(before=before, after=after, summary=summary_tokens, tail=split.tail.tail_tokens,
                                system=system_tokens, projected=projected),
        budget=CheckpointBudget(context_limit=budget.context_limit, reserved=budget.reserved, usable=budget.usable,
                                summary_limit=summary_limit, tail_budget=split.tail_budget),
    )
    return CompactionResult(checkpoint, working, story.result, stage, sections)


def _shown_whole(tail: list[Message], polls: dict[str, str]) -> frozenset[str]:
    """The tail messages whose facts the reader sees there (checkpoint.SHOWN_BELOW): not pruned, and
    not the poll of a run the tail does not start (its outcome is there, the command is not)."""
    ids = {m.id for m in tail if not m.compacted and all(r.compacted_at is None for r in m.tool_results)}
    return frozenset(i for i in ids if polls.get(i, i) in ids)


def _covered_until(working: Session, head_start: int, previous: Checkpoint | None) -> str | None:
    """With no head, the last message the summary covers: the agent's summary the full-history
    checkpoint replaces, else the previous checkpoint's boundary (a swap)."""
    if head_start and working.messages[head_start - 1].is_summary:
        return working.messages[head_start - 1].id
    return previous.boundary_message_id if previous else None


def _record(session: Session, working: Session, previous: Checkpoint | None, head_start: int, split: _Split,
            facts: _Facts, story: _Story, pruned: PruneResult, sections: dict[str, Section], summary_text: str,
            messages: list[dict], stage: dict[str, float], *, tokens: CheckpointTokens,
            budget: CheckpointBudget) -> Checkpoint:
    """The Checkpoint record: sections rendered to markdown here, once."""
    head, tail, result = split.head, split.tail, story.result
    version = (previous.version + 1) if previous is not None else 1
    return Checkpoint(
        session_id=session.id,
        version=version,
        lang=facts.lang,
        sections={name: section.body() for name, section in sections.items()},
        summary_text=summary_text,
        narrative=story.narrative.to_dict(),
        ledger=facts.ledger.to_dict(),
        work_state=facts.state.to_dict(),
        boundary_message_id=head[-1].id if head else _covered_until(working, head_start, previous),
        tail_message_ids=[m.id for m in split.tail_msgs],
        messages=messages,
        tokens=tokens,
        budget=budget,
        verification=Verification(removed=story.removed, fallback=story.fallback,
                                  problems=tuple(result.problems) if result else ()),
        timings=Timings(
            stages_ms={k: round(v, 1) for k, v in stage.items()},
            model=tuple(ModelCall.of(s) for s in result.stats) if result else (),
            narrative_left_out=result.left_out if result else 0,
        ),
        audit=CheckpointAudit(
            dropped=tuple(
                DroppedMessage(m.id, split.per_message[i])
                for i, m in enumerate(working.messages[head_start : tail.cut], start=head_start)
                if not m.compacted and m.role != "system"
            ),
            pruned=tuple(pruned.candidates) if pruned.committed else (),
            prune=pruned.reason,
            split_turn_start=working.messages[tail.split_turn_start].id if tail.split_turn_start is not None else None,
            summary_version=version,
        ),
    )


__all__ = ["MIN_CHECKPOINT_SUMMARY", "SUMMARY_SHARE", "CompactionConfig", "CompactionRefused", "CompactionResult", "compact"]
