"""What the page shows, as typed records read from the store and the live service state.

The page (worker/http/page.py) renders these records and nothing else: each session's exact
count against its context limit with the chars/4 estimate beside it (so the undercount on
Chinese text is in plain view), what fills the window message by message, every checkpoint
version with what it kept, left out and removed, the refusals, the timings, and the worker's
lanes and jobs. Building a view never writes: the page is a reader of the same store the API
serves.
"""

from __future__ import annotations

import difflib
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..estimate import chars4
from ..pipeline.checkpoint import MORE_NOT_SHOWN, SECTIONS, Checkpoint, label
from ..pipeline.stats import DroppedMessage, ModelCall, PrunedOutput, Removal
from ..session import Message, Session, boundary_index, cited_ids
from ..tokens import make_budget
from .records import JobStatus
from .scheduler import LANES

if TYPE_CHECKING:
    from .service import CompactdService

STRIP_MAX_SEGMENTS = 240  # a strip wider than this is one pixel a segment: neighbours merge
PLOT_MAX_POINTS = 600  # token use over time: more points than pixels draws nothing new
RECENT_JOBS = 20  # the worker panel's latency list: the last minutes, not the whole history
# What the left-out note and a shrunk list say (checkpoint.LEFT_OUT, MORE_NOT_SHOWN): the lines a
# reader wants under "left out" rather than buried in Critical Context.
LEFT_OUT_RE = re.compile(r"^\s*-?\s*(Left out to fit the budget:|为适应预算省略了|"
                         + re.escape(MORE_NOT_SHOWN.split("{n}")[0]) + r"\d+)")
REFUSED = "refused"


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Gauge:
    """The context the agent sends now, counted exactly, against its window; chars/4 beside it."""

    tokens: int
    usable: int
    context_limit: int
    chars: int
    chars4: int

    @property
    def share(self) -> float:
        return self.tokens / self.usable if self.usable else 0.0

    @property
    def chars4_error(self) -> float:
        """chars/4's error against the exact count, in percent (negative: it undercounts)."""
        return (self.chars4 - self.tokens) / self.tokens * 100 if self.tokens else 0.0


@dataclass(frozen=True)
class Activity:
    """idle, rolling (a background summary is being kept up to date) or compacting."""

    state: str
    job_id: str | None = None
    job_kind: str | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None  # from the lane's average job time; None before any job finished


@dataclass(frozen=True)
class SessionRow:
    id: str
    source_format: str
    created: float
    messages: int
    gauge: Gauge | None  # None while the model (its tokenizer) loads
    last: CompactionView | None
    activity: Activity


@dataclass(frozen=True)
class StripSegment:
    """Consecutive messages of one kind: what part of the session they fill."""

    kind: str  # system | text | tool_output | pruned | summarized
    first_index: int
    first_id: str
    count: int
    tokens: int


@dataclass(frozen=True)
class SectionView:
    name: str
    label: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class CompactionView:
    """One checkpoint version: its counts, what it kept, what it left out and why."""

    version: int
    created: float
    mode: str
    refines: int | None
    before: int
    after: int
    summary_tokens: int
    tail_tokens: int
    usable: int
    boundary_message_id: str | None
    sections: tuple[SectionView, ...]
    dropped: tuple[DroppedMessage, ...]  # summarized, no longer verbatim
    pruned: tuple[PrunedOutput, ...]  # tool outputs cleared from the context, still stored
    prune_reason: str
    left_out: tuple[str, ...]  # what the budget left out of the summary (the summary says so too)
    narrative_left_out: int  # messages the model's input had no room for
    removed: tuple[Removal, ...]  # what verification removed from the model's text
    fallback: str
    model_calls: tuple[ModelCall, ...]
    stages_ms: tuple[tuple[str, float], ...]

    @property
    def dropped_tokens(self) -> int:
        return sum(d.tokens for d in self.dropped)

    @property
    def pruned_tokens(self) -> int:
        return sum(p.tokens for p in self.pruned)


@dataclass(frozen=True)
class Refusal:
    when: float
    kind: str
    reason: str


@dataclass(frozen=True)
class UsagePlot:
    """Tokens the agent's context held after each message, and where compactions cut it."""

    points: tuple[tuple[int, int], ...]  # (message index, tokens)
    marks: tuple[tuple[int, int, int, int], ...]  # (message index, version, before, after)
    usable: int
    messages: int

    @property
    def top(self) -> int:
        return max([self.usable, *(t for _, t in self.points), *(b for _, _, b, _ in self.marks)] or [1])


@dataclass(frozen=True)
class SessionDetail:
    row: SessionRow
    strip: tuple[StripSegment, ...]
    compactions: tuple[CompactionView, ...]  # newest first
    refusals: tuple[Refusal, ...]
    plot: UsagePlot | None
    cites: dict[str, str]  # how a checkpoint cites a message (prefix) -> its full id


@dataclass(frozen=True)
class MessageRow:
    index: int
    id: str
    role: str
    kind: str
    tokens: int
    preview: str


@dataclass(frozen=True)
class SectionDiff:
    name: str
    label: str
    changed: bool
    lines: tuple[tuple[str, str], ...]  # ("+" | "-" | " ", text)


@dataclass(frozen=True)
class CheckpointDiff:
    session_id: str
    a: int
    b: int
    sections: tuple[SectionDiff, ...]


@dataclass(frozen=True)
class LaneView:
    name: str
    queued: int
    running: int
    avg_job_s: float


@dataclass(frozen=True)
class JobRow:
    id: str
    kind: str
    lane: str
    session_id: str | None
    status: str
    created: float
    finished: float | None
    seconds: float | None  # run time so far (running) or in all (finished)
    eta_s: float | None
    error: str | None


@dataclass(frozen=True)
class WorkerView:
    ready: bool
    load_error: str | None
    model: dict[str, Any]  # ModelInfo.to_dict(), empty while loading
    lanes: tuple[LaneView, ...]
    running: tuple[JobRow, ...]
    recent: tuple[JobRow, ...]


# ----------------------------------------------------------------------------- builders


def chat_text(chat: Iterable[dict[str, Any]]) -> str:
    """The text an agent's chars/4 guess sees: every content string and tool call."""
    out: list[str] = []
    for m in chat:
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            out += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
    return "".join(out)


def message_kind(message: Message) -> str:
    if message.role == "system":
        return "system"
    results = message.tool_results
    if results:
        return "pruned" if all(r.compacted_at is not None for r in results) else "tool_output"
    return "text"


def compaction_view(created: float, cp: Checkpoint) -> CompactionView:
    sections = tuple(SectionView(name, label(name, cp.lang), tuple(cp.sections.get(name, "").splitlines()))
                     for name in SECTIONS if name in cp.sections)
    left_out = tuple(line.strip(" -") for s in sections for line in s.lines if LEFT_OUT_RE.match(line))
    return CompactionView(
        version=cp.version, created=created, mode=cp.audit.mode or "", refines=cp.audit.refines,
        before=cp.tokens.before, after=cp.tokens.after, summary_tokens=cp.tokens.summary,
        tail_tokens=cp.tokens.tail, usable=cp.budget.usable, boundary_message_id=cp.boundary_message_id,
        sections=sections, dropped=cp.audit.dropped, pruned=cp.audit.pruned, prune_reason=cp.audit.prune,
        left_out=left_out, narrative_left_out=cp.timings.narrative_left_out, removed=cp.verification.removed,
        fallback=cp.verification.fallback, model_calls=cp.timings.model,
        stages_ms=tuple(cp.timings.stages_ms.items()),
    )


def _activity(service: CompactdService, session_id: str) -> Activity:
    st = service.sessions.get(session_id)
    if st is None:
        return Activity("idle")
    for job, state in ((st.compact_job, "compacting"), (service.refiner.pending(session_id), "compacting"),
                       (st.rolling_job, "rolling")):
        if job is not None and not job.status.terminal:
            elapsed = time.time() - job.started if job.started else None
            expected = service.scheduler.expected_seconds(job.lane)
            eta = max(0.0, expected - (elapsed or 0.0)) if expected else None
            return Activity(state, job.id, job.kind, elapsed, eta)
    return Activity("idle")


def _gauge(service: CompactdService, session_id: str, session: Session | None, committed: Checkpoint | None,
           version: int | None, limit: int, messages: int) -> Gauge | None:
    """The gauge, counted once per state of the session: appends, compactions and a new limit
    change its key, so `/` over many long sessions reads none of them back until they change."""
    from .service import context_chat

    if service.counter is None:
        return None
    st = service.state(session_id)
    key = (messages, version, limit)
    if st.gauge is not None and st.gauge[0] == key:
        return st.gauge[1]
    chat = context_chat(session or service.store.get_session(session_id), committed)
    total, _ = service.counter.count(chat)
    text = chat_text(chat)
    budget = make_budget(limit)
    gauge = Gauge(tokens=total, usable=budget.usable, context_limit=limit, chars=len(text), chars4=chars4(text))
    st.gauge = (key, gauge)
    return gauge


def session_row(service: CompactdService, session_id: str, session: Session | None = None) -> SessionRow:
    info = service.store.session_info(session_id)
    stored = service.store.latest_checkpoint(session_id)
    committed = Checkpoint.from_dict(stored.data) if stored is not None else None
    limit = info.context_limit or service.config.context_limit
    return SessionRow(
        id=info.id, source_format=info.source_format, created=info.created, messages=info.message_count,
        gauge=_gauge(service, session_id, session, committed, stored.version if stored else None, limit,
                     info.message_count),
        last=compaction_view(stored.created, committed) if stored is not None and committed is not None else None,
        activity=_activity(service, session_id),
    )


def session_rows(service: CompactdService, offset: int, limit: int) -> tuple[tuple[SessionRow, ...], int]:
    """One page of sessions, newest first, and how many there are."""
    ids = list(reversed(service.store.list_sessions()))
    return tuple(session_row(service, sid) for sid in ids[offset:offset + limit]), len(ids)


def _strip(session: Session, tokens: list[int], boundary: int) -> tuple[StripSegment, ...]:
    segments: list[StripSegment] = []
    for i, m in enumerate(session.messages):
        kind = "summarized" if i < boundary and m.role != "system" else message_kind(m)
        last = segments[-1] if segments else None
        if last is not None and last.kind == kind:
            segments[-1] = StripSegment(kind, last.first_index, last.first_id, last.count + 1, last.tokens + tokens[i])
        else:
            segments.append(StripSegment(kind, i, m.id, 1, tokens[i]))
    if len(segments) <= STRIP_MAX_SEGMENTS:
        return tuple(segments)
    # Too many to see: merge neighbours into runs named by the kind that holds most of their tokens.
    size = math.ceil(len(segments) / STRIP_MAX_SEGMENTS)
    merged = []
    for k in range(0, len(segments), size):
        run = segments[k:k + size]
        kind = max(run, key=lambda s: s.tokens).kind
        merged.append(StripSegment(kind, run[0].first_index, run[0].first_id, sum(s.count for s in run),
                                   sum(s.tokens for s in run)))
    return tuple(merged)


def _plot(session: Session, tokens: list[int], compactions: list[CompactionView], cps: list[Checkpoint],
          usable: int) -> UsagePlot | None:
    if not session.messages:
        return None
    index = {m.id: i for i, m in enumerate(session.messages)}
    cuts: dict[int, CompactionView] = {}
    for view, cp in zip(compactions, cps, strict=True):
        # A compaction happened after the last message it saw: its tail's end, else its boundary.
        at = next((index[m] for m in reversed(cp.tail_message_ids) if m in index), None)
        if at is None:
            at = index.get(cp.boundary_message_id or "", None)
        if at is not None and view.mode != "refined" and view.refines is None:
            cuts[at] = view
    held, points = 0, []
    for i, n in enumerate(tokens):
        held += n
        points.append((i, held))
        if i in cuts:
            held = cuts[i].after
            points.append((i, held))
    step = max(1, math.ceil(len(points) / PLOT_MAX_POINTS))
    kept = points[::step] + ([points[-1]] if (len(points) - 1) % step else [])
    marks = tuple((i, v.version, v.before, v.after) for i, v in sorted(cuts.items()))
    return UsagePlot(tuple(kept), marks, usable, len(session.messages))


def _refusals(service: CompactdService, session_id: str) -> tuple[Refusal, ...]:
    out = []
    for job in service.store.list_jobs(session_id=session_id):
        result = job.result if isinstance(job.result, dict) else {}
        if job.status == JobStatus.FAILED and job.error:
            out.append(Refusal(job.finished or job.created, job.kind, job.error))
        elif result.get("status") == REFUSED:
            out.append(Refusal(job.finished or job.created, job.kind, str(result.get("reason", ""))))
    return tuple(reversed(out))


def session_detail(service: CompactdService, session_id: str) -> SessionDetail:
    session = service.store.get_session(session_id)
    row = session_row(service, session_id, session)
    stored = service.store.checkpoints(session_id)
    cps = [Checkpoint.from_dict(s.data) for s in stored]
    views = [compaction_view(s.created, cp) for s, cp in zip(stored, cps, strict=True)]
    tokens = service.counter.per_message(session) if service.counter is not None else [0] * len(session.messages)
    boundary = boundary_index(session, cps[-1].boundary_message_id if cps else None)
    usable = row.gauge.usable if row.gauge else make_budget(service.session_limit(session_id)).usable
    return SessionDetail(
        row=row, strip=_strip(session, tokens, boundary), compactions=tuple(reversed(views)),
        refusals=_refusals(service, session_id),
        plot=_plot(session, tokens, views, cps, usable) if service.counter is not None else None,
        cites={short: full for full, short in cited_ids([m.id for m in session.messages]).items()},
    )


def message_rows(service: CompactdService, session_id: str, offset: int, limit: int,
                 preview_chars: int) -> tuple[tuple[MessageRow, ...], int]:
    session = service.store.get_session(session_id)
    tokens = service.counter.per_message(session) if service.counter is not None else [0] * len(session.messages)
    rows = []
    for i in range(offset, min(offset + limit, len(session.messages))):
        m = session.messages[i]
        text = m.text or "\n".join(r.output for r in m.tool_results) or " ".join(
            f"{c.name}({c.arguments_json()})" for c in m.tool_calls)
        rows.append(MessageRow(i, m.id, m.role, message_kind(m), tokens[i], text[:preview_chars]))
    return tuple(rows), len(session.messages)


def checkpoint_diff(service: CompactdService, session_id: str, a: int, b: int) -> CheckpointDiff:
    by_version = {s.version: Checkpoint.from_dict(s.data) for s in service.store.checkpoints(session_id)}
    for v in (a, b):
        if v not in by_version:
            from .service import NoCheckpoint

            raise NoCheckpoint(f"session {session_id!r} has no checkpoint v{v}")
    old, new = by_version[a], by_version[b]
    sections = []
    for name in SECTIONS:
        before = old.sections.get(name, "").splitlines()
        after = new.sections.get(name, "").splitlines()
        lines = tuple((d[0], d[2:]) for d in difflib.ndiff(before, after) if d[0] in "+- ")
        sections.append(SectionDiff(name, label(name, new.lang), before != after, lines))
    return CheckpointDiff(session_id, a, b, tuple(sections))


def _job_row(job: Any, expected: float, now: float) -> JobRow:
    status = JobStatus(job.status)
    if status == JobStatus.RUNNING and job.started:
        seconds: float | None = now - job.started
    elif job.started and job.finished:
        seconds = job.finished - job.started
    else:
        seconds = None
    eta = max(0.0, expected - (seconds or 0.0)) if expected and not status.terminal else None
    return JobRow(job.id, job.kind, job.lane, job.session_id, status.value, job.created, job.finished, seconds, eta,
                  job.error)


def worker_view(service: CompactdService) -> WorkerView:
    now = time.time()
    scheduler = service.scheduler
    lanes = tuple(LaneView(lane, scheduler.depth(lane), scheduler.running(lane), scheduler.expected_seconds(lane))
                  for lane in LANES)
    live = [j for j in scheduler.jobs() if not j.status.terminal]
    running = tuple(_job_row(j, scheduler.expected_seconds(j.lane), now) for j in live)
    stored = [j for j in service.store.list_jobs() if JobStatus(j.status).terminal]
    recent = tuple(_job_row(j, 0.0, now) for j in reversed(stored[-RECENT_JOBS:]))
    return WorkerView(ready=service.ready, load_error=service.load_error,
                      model=service.backend.info().to_dict() if service.backend is not None else {},
                      lanes=lanes, running=running, recent=recent)
