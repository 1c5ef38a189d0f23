"""The service behind the HTTP API: sessions in the store, exact context counts, compaction
jobs on the scheduler, rolling summaries, metrics. No HTTP here (see worker/http/): this is
the only object the routes call.

Rolling summaries: once a session's context passes `pre_threshold` of its usable budget, each
burst of appended turns (debounced) queues a background `compact()` that updates the
session's anchored summary (the previous rolling summary, or the last committed checkpoint,
is the `previous`). It is kept in memory, not in the checkpoint chain: the agent has not
received it. A compaction at overflow then *swaps*: `compact(..., use_model=False,
swap=True, previous=rolling)` carries the ready narrative, recomputes the ledger and work
state for the messages since, and cuts the current tail: no model call on the critical path.

Without a ready rolling summary, what the agent gets depends on how it waits (WAIT_MODES):
- `instant` (the default): the deterministic checkpoint (`use_model=False`: every fact section,
  the goal from the user's words, the previous narrative carried) is committed at once, with
  no model call on the request path; a *refinement* job in the background lane then runs the
  synchronous path on the same snapshot and commits its result as the next version (same
  boundary, same tail, same fact sections, the model's narrative). A later compaction, or a
  newer version, makes a pending refinement stale: it is cancelled or dropped, never forked.
- `model`: the compaction runs with the model in the foreground lane, and the request waits.
- `job`: as `model`, but the request returns the job at once to poll.
A restart loses the rolling summary and a pending refinement (the deterministic checkpoint
stays the latest), nothing else.

Agents' own compaction requests (worker/agents/) come through one method, `agent_compaction`,
whatever the door: recognized by the agent's profile, answered by the AgentCompactor (rolling
state per agent session) as one foreground job, never preempted; by default (`agent_wait`
instant) that job is the deterministic checkpoint and the model's narrative follows as a
refinement, carried into that agent session's next compaction. Refinements of both kinds are
one collaborator, the Refiner (refine.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from backends.base import Backend, GenerationStats, collect

from ..agents import AgentCompaction, AgentCompactor, AgentRequest, Refinement, profiles
from ..config import DEFAULT_CONTEXT_LIMIT, DEFAULT_PRE_THRESHOLD
from ..formats.export import to_anthropic
from ..pipeline import CompactionConfig, CompactionRefused, CompactionResult, compact
from ..pipeline.checkpoint import Checkpoint
from ..pipeline.prune import prune_tool_outputs
from ..session import Session, boundary_index
from ..tokens import TokenCounter, make_budget
from . import history, views
from .history import AroundResponse, SearchResponse
from .intake import import_messages, offset_index_ids
from .metrics import Metrics
from .records import (
    INTERRUPTED,
    PERSISTED_KINDS,
    Audit,
    Conflict,
    JobKind,
    JobRecord,
    JobStatus,
    NotFound,
    PruneMarker,
)
from .refine import Refiner
from .scheduler import (
    BACKGROUND_LANE,
    FOREGROUND_LANE,
    LANES,
    Job,
    JobBackend,
    Overloaded,
    Scheduler,
)
from .store import Store

ROLLING_DEBOUNCE_S = 2.0  # turns arrive in bursts (a call, its result, the reply): summarize after the burst
JOB_WAIT_POLL_S = 0.2  # how often a job waiting on another one checks its own cancellation
SUBMIT_FROM_JOB_S = 5.0  # a job thread queueing a follow-up on the event loop: the loop answers in ms
# How a compaction request waits (see the module docstring): answered at once, after the model,
# or not at all (a job to poll).
WAIT_INSTANT, WAIT_MODEL, WAIT_JOB = "instant", "model", "job"
WAIT_MODES = (WAIT_INSTANT, WAIT_MODEL, WAIT_JOB)
# What GET /v1/jobs shows of a job, live (scheduler.Job) or stored (JobRecord) alike.
AGENT_KEY = "agent:"  # an agent session's refinement key: never a sessions-API session id
JOB_VIEW_FIELDS = ("id", "kind", "lane", "session_id", "status", "created", "started", "finished", "error", "result")


class ModelNotReady(Exception):
    """The backend is still loading (or failed to load): 503."""


class NoCheckpoint(NotFound):
    """The session exists but has no checkpoint yet: 404."""


class JobFinished(Conflict):
    """A cancel of a job that has already ended: 409."""


def context_chat(session: Session, committed: Checkpoint | None) -> list[dict[str, Any]]:
    """What the agent sends now: the last checkpoint's system + summary, then every message
    after its boundary (its tail included); the whole session when there is no checkpoint."""
    start = boundary_index(session, committed.boundary_message_id if committed is not None else None)
    if committed is None or start == 0:
        return session.to_chat()
    after = session.messages[start:]
    summary_at = next(
        (i for i, m in enumerate(committed.messages) if m.get("content") == committed.summary_text), None
    )
    prefix = committed.messages[: summary_at + 1] if summary_at is not None else []
    return prefix + [m.to_chat() for m in after if not m.compacted]


def store_compaction(store: Store, session_id: str, result: CompactionResult, version: int | None, mode: str,
                     job_ms: float, extra_audit: dict[str, Any] | None = None) -> int:
    """Store a compaction's checkpoint as the version after `version` (Conflict when that is no
    longer the latest), with its prune markers and its audit; returns the stored version. The
    service's compactions and the CLI's `compact --save` are stored alike."""
    cp = result.checkpoint
    cp.version = (version or 0) + 1
    cp.audit = replace(cp.audit, mode=mode, summary_version=cp.version, **(extra_audit or {}))
    markers = [PruneMarker(m.id, p.call_id, p.compacted_tokens)
               for m in result.pruned_session.messages for p in m.tool_results
               if p.compacted_at is not None and not m.compacted]
    if markers:
        store.mark_pruned(session_id, markers)
    audit = Audit(
        dropped_message_ids=[d.id for d in cp.audit.dropped],
        tokens_before=cp.tokens.before, tokens_after=cp.tokens.after,
        removed_by_verification=[r.to_dict() for r in cp.verification.removed],
        timings={**cp.timings.stages_ms, "job_ms": round(job_ms, 1)},
    )
    return store.add_checkpoint(session_id, cp.to_dict(), version, summary_tokens=cp.tokens.summary,
                                boundary_message_id=cp.boundary_message_id, audit=audit)


# ----------------------------------------------------------------------------- service


@dataclass
class ServiceConfig:
    context_limit: int = DEFAULT_CONTEXT_LIMIT
    pre_threshold: float = DEFAULT_PRE_THRESHOLD
    rolling: bool = True
    debounce_s: float = ROLLING_DEBOUNCE_S
    # How agents' compaction requests wait: "instant" answers with the deterministic checkpoint
    # and refines in the background; "model" waits for the model; "none" never calls it (the
    # agent-paths benchmark's --no-model).
    agent_wait: str = "instant"


@dataclass
class SessionState:
    """In-memory per-session state (the store holds everything durable)."""

    rolling: Checkpoint | None = None
    rolling_base: int | None = None  # committed version the rolling summary builds on
    rolling_job: Job | None = None
    compact_job: Job | None = None
    timer: asyncio.TimerHandle | None = None
    dirty: bool = False  # turns arrived while a rolling update ran
    gauge: tuple[tuple[int, int | None, int], Any] | None = None  # the page's last count: (its key, the Gauge)


class CompactdService:
    """Sessions, counts, compactions, rolling summaries, chat generations and the views the
    HTTP routes return; the routes call nothing else."""

    def __init__(self, store: Store, config: ServiceConfig | None = None, *, scheduler: Scheduler | None = None,
                 metrics: Metrics | None = None):
        self.store = store
        self.config = config or ServiceConfig()
        self.metrics = metrics or Metrics()
        self.scheduler = scheduler or Scheduler()
        self.scheduler._on_change = self._job_changed
        self.scheduler._on_generation = self._generation_done
        self.backend: Backend | None = None
        self.load_error: str | None = None
        self.counter: TokenCounter | None = None
        self.sessions: dict[str, SessionState] = {}
        self._persisted: set[str] = set()
        self.refiner = Refiner(self.scheduler, self.metrics)
        self.agents = AgentCompactor()  # agents' rolling states, by agent session

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        await self.scheduler.start()
        # Jobs cut off by a previous crash are failed, never silently retried. Queued ones too:
        # the scheduler's queue lived in memory, so nothing would ever run them.
        self.store.fail_interrupted_jobs()
        for stale in self.store.list_jobs(status=JobStatus.QUEUED):
            self.store.update_job(stale.id, JobStatus.FAILED, error=INTERRUPTED)

    async def stop(self) -> None:
        for st in self.sessions.values():
            if st.timer is not None:
                st.timer.cancel()
        await self.scheduler.stop()

    def set_backend(self, backend: Backend) -> None:
        """Called once the model has loaded (in the background at start-up)."""
        self.counter = TokenCounter(backend, self.store)
        self.backend = backend
        self.metrics.set("compactd_model_ready", 1)

    @property
    def ready(self) -> bool:
        return self.backend is not None

    def require_backend(self) -> Backend:
        if self.backend is None:
            raise ModelNotReady(self.load_error or "the model is still loading")
        return self.backend

    def state(self, session_id: str) -> SessionState:
        return self.sessions.setdefault(session_id, SessionState())

    # -- sessions and counts -------------------------------------------------------------

    def session_limit(self, session_id: str) -> int:
        return self.store.session_info(session_id).context_limit or self.config.context_limit

    def committed(self, session_id: str) -> tuple[int | None, Checkpoint | None]:
        stored = self.store.latest_checkpoint(session_id)
        if stored is None:
            return None, None
        return stored.version, Checkpoint.from_dict(stored.data)

    async def append(self, session_id: str, payload: Any, *, fmt: str = "auto", mode: str = "append",
                     context_limit: int | None = None) -> dict[str, Any]:
        imported = await asyncio.to_thread(import_messages, payload, fmt)
        self.store.create_session(session_id, context_limit=context_limit, source_format=imported.source_format,
                                  exist_ok=True)
        if context_limit is not None:
            self.store.update_session(session_id, context_limit=context_limit)
        if mode == "append":
            offset_index_ids(imported, self.store.session_info(session_id).message_count)
        added = await asyncio.to_thread(self.store.append_messages, session_id, imported.messages)
        out: dict[str, Any] = {
            "session_id": session_id, "format": imported.source_format, "received": len(imported.messages),
            "added": len(added), "added_ids": added, "warnings": imported.warnings,
        }
        if self.ready:
            status = await self.tokens(session_id)
            out["tokens"] = status
            self._maybe_roll(session_id, status)
        return out

    async def tokens(self, session_id: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The session's token status; `tools`: the agent's tool definitions, counted too."""
        self.require_backend()
        return await asyncio.to_thread(self._tokens_sync, session_id, tools)

    def _tokens_sync(self, session_id: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        assert self.counter is not None
        limit = self.session_limit(session_id)
        session = self.store.get_session(session_id)
        version, committed = self.committed(session_id)
        chat = context_chat(session, committed)
        total, counted = self.counter.count(chat, tools)
        budget = make_budget(limit)
        st = self.state(session_id)
        return {
            "session_id": session_id, "tokens": total, "context_limit": limit, "reserved": budget.reserved,
            "usable": budget.usable, "overflow": total >= budget.usable,
            "pre_threshold": int(budget.usable * self.config.pre_threshold),
            "rolling_ready": st.rolling is not None and st.rolling_base == version,
            "messages": len(session.messages), "context_messages": len(chat),
            "checkpoint_version": version, "counted_now": counted,
        }

    # -- compaction ----------------------------------------------------------------------

    def prune_now(self, session_id: str) -> dict[str, Any]:
        """Prune needs no model, so it runs at once (not queued) and is stored as markers."""
        assert self.counter is not None
        session = self.store.get_session(session_id)
        _version, committed = self.committed(session_id)
        start = boundary_index(session, committed.boundary_message_id if committed is not None else None)
        view = session.model_copy(update={"messages": [
            m.model_copy(update={"compacted": True}) if i < start else m for i, m in enumerate(session.messages)
        ]})
        result = prune_tool_outputs(view, self.counter)
        if result.committed:
            self.store.mark_pruned(session_id, [PruneMarker(c.message_id, c.call_id, c.tokens)
                                                for c in result.candidates])
        return {"committed": result.committed, "freed_tokens": result.freed_tokens, "reason": result.reason}

    async def submit_compaction(self, session_id: str, context_limit: int | None = None, *,
                                wait: str = WAIT_MODEL, keep_tail: bool = True) -> tuple[Job, dict]:
        """Prune at once, then queue the compaction in the foreground lane (or join the one
        already queued for this session). `wait` (WAIT_MODES): `instant` answers from the ready
        rolling summary or the deterministic checkpoint, with a background refinement."""
        if wait not in WAIT_MODES:
            raise ValueError(f"unknown wait mode {wait!r}")
        self.require_backend()
        self.store.session_info(session_id)  # NotFound -> 404
        if context_limit is not None:
            self.store.update_session(session_id, context_limit=context_limit)
        st = self.state(session_id)
        if st.compact_job is not None and not st.compact_job.status.terminal:
            return st.compact_job, {"joined": True}
        prune = await asyncio.to_thread(self.prune_now, session_id)
        rolling = st.rolling_job
        instant = wait == WAIT_INSTANT
        self.refiner.supersede(session_id)  # this compaction commits a newer version
        if rolling is not None and not rolling.status.terminal:
            if instant:
                # Nobody waits on it now, and our commit makes its result stale: the refinement
                # that follows reads the same prefix (the engine's per-session KV cache).
                self.scheduler.cancel(rolling, "superseded by an instant compaction")
                rolling = None
            else:
                self.scheduler.promote(rolling)  # an agent now waits on it: its next chunks run first
        job = self.scheduler.submit(JobKind.COMPACT,
                                    lambda j: self._compact_job(j, session_id, rolling, instant, keep_tail),
                                    lane=FOREGROUND_LANE, session_id=session_id, preemptible=False)
        st.compact_job = job
        return job, {"prune": prune, "wait": wait}

    def _wait_for(self, job: Job, other: Job) -> None:
        """Block this job's thread until `other` ends, staying cancellable."""
        loop = self.scheduler.loop
        assert loop is not None and other.future is not None
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait([other.future]), loop)
        while True:
            job.check()
            try:
                fut.result(timeout=JOB_WAIT_POLL_S)
                return
            except TimeoutError:
                continue

    def _compact_job(self, job: Job, session_id: str, rolling_job: Job | None, instant: bool = False,
                     keep_tail: bool = True) -> dict[str, Any]:
        t0 = time.perf_counter()
        if rolling_job is not None and not rolling_job.status.terminal:
            self._wait_for(job, rolling_job)  # it is about to produce the summary we would compute
        backend = JobBackend(self.require_backend(), job, self.scheduler)
        limit = self.session_limit(session_id)
        session = self.store.get_session(session_id)
        version, committed = self.committed(session_id)
        st = self.state(session_id)
        ids = {m.id for m in session.messages}
        # keep_tail False: the agent keeps its own tail (pi's extension): the agents' preset.
        # keep_tail True: a client asked (explicit): no loop guard, never larger than what the agent holds.
        agent_tail = ({"verbatim_tail": True, "reference_prefix": True, "loop_guard": False, "cite_ids": True}
                      if keep_tail else profiles.AGENT_KEEPS_TAIL.options()) | {"explicit": keep_tail}
        rolling = st.rolling if (st.rolling is not None and st.rolling_base == version
                                 and st.rolling.boundary_message_id in ids) else None
        if rolling is not None:
            mode = "swap"
            config = CompactionConfig(context_limit=limit, use_model=False, swap=True, priority=job.priority,
                                      **agent_tail)
            previous = rolling
        else:
            mode = "instant" if instant else "sync"
            config = CompactionConfig(context_limit=limit, use_model=not instant, priority=job.priority,
                                      **agent_tail)
            previous = committed
        assert self.counter is not None
        context_before, _ = self.counter.count(context_chat(session, committed))
        # What the agent holds is the last committed checkpoint plus what came after it.
        result = compact(session, backend, config, previous=previous, counter=self.counter,
                         held_tokens=context_before)
        job.check()
        extra = {"rolling_boundary": rolling.boundary_message_id} if rolling is not None else {}
        out = self._commit(session_id, result, version, mode, t0, extra)
        if mode == "instant":
            # The model's narrative for this very snapshot, queued on the event loop's thread.
            assert self.scheduler.loop is not None
            queued = asyncio.run_coroutine_threadsafe(
                self._submit_refine(session_id, session, committed, version, out["checkpoint_version"],
                                    context_before, config), self.scheduler.loop)
            try:
                out["refinement"] = queued.result(SUBMIT_FROM_JOB_S)
            except concurrent.futures.TimeoutError:  # committed all the same: the answer stands
                out["refinement"] = {"version": out["checkpoint_version"] + 1, "job_id": None, "status": "unknown"}
        return out

    def _commit(self, session_id: str, result: Any, version: int | None, mode: str, t0: float,
                extra_audit: dict[str, Any]) -> dict[str, Any]:
        """Store a compaction's checkpoint as the version after `version` (Conflict when that is
        no longer the latest), its prune markers and audit; metrics; the job's result."""
        cp = result.checkpoint
        stored = store_compaction(self.store, session_id, result, version, mode,
                                  (time.perf_counter() - t0) * 1000, extra_audit)
        st = self.state(session_id)
        st.rolling, st.rolling_base = None, None  # built on a version that is no longer the latest
        took = time.perf_counter() - t0
        self.metrics.inc("compactd_compactions_total", mode=mode)
        self.metrics.inc("compactd_compaction_tokens_before_total", cp.tokens.before)
        self.metrics.inc("compactd_compaction_tokens_after_total", cp.tokens.after)
        self.metrics.observe("compactd_compaction_seconds", took, mode=mode)
        return {
            "session_id": session_id, "checkpoint_version": stored, "mode": mode,
            "model_calls": len(cp.timings.model), "tokens": cp.tokens.to_dict(),
            "fallback": cp.verification.fallback, "seconds": round(took, 3),
        }

    # -- refinements ---------------------------------------------------------------------

    async def _submit_refine(self, session_id: str, session: Session, committed: Checkpoint | None,
                             base: int | None, instant_version: int, held: int,
                             config: CompactionConfig) -> dict[str, Any]:
        """Queue the model narrative for the instant checkpoint `instant_version` (built on
        `base`): what the job result tells the agent to look for. Runs on the event loop."""
        expect = {"version": instant_version + 1, "refines": instant_version}

        def ended(_job: Job) -> None:
            st = self.state(session_id)
            if st.dirty:  # turns arrived meanwhile: roll on top of the refined version
                st.dirty = False
                st.timer = asyncio.get_running_loop().call_later(self.config.debounce_s, self._roll_due, session_id)

        job = self.refiner.submit(
            session_id, JobKind.REFINE,
            lambda j: self._refine_job(j, session_id, session, committed, base, instant_version, held, config),
            wanted=lambda: self.committed(session_id)[0] == instant_version, session_id=session_id, ended=ended)
        if job is None:
            return {**expect, "job_id": None, "status": "skipped_overload"}
        return {**expect, "job_id": job.id, "status": str(job.status)}

    def _refine_job(self, job: Job, session_id: str, session: Session, committed: Checkpoint | None,
                    base: int | None, instant_version: int, held: int, config: CompactionConfig) -> dict[str, Any]:
        """The synchronous path on the instant checkpoint's snapshot (same previous, same
        messages: the same boundary, tail and fact sections), committed as the next version
        unless a newer one came meanwhile."""
        t0 = time.perf_counter()
        if self.committed(session_id)[0] != instant_version:
            return {"status": "stale"}
        backend = JobBackend(self.require_backend(), job, self.scheduler)
        # The instant one's, with the model; automatic, so the loop guard is on again where it was
        # the agent's tail (an explicit instant compaction's refinement must free enough to be worth it).
        config = replace(config, use_model=True, priority=job.priority, explicit=False,
                         loop_guard=config.loop_guard or config.explicit)
        assert self.counter is not None
        try:
            result = compact(session, backend, config, previous=committed, counter=self.counter, held_tokens=held)
        except CompactionRefused as exc:
            return {"status": "refused", "reason": str(exc)}
        job.check()
        try:
            out = self._commit(session_id, result, instant_version, "refined", t0, {"refines": instant_version})
        except Conflict:
            return {"status": "stale"}  # a compaction committed meanwhile
        return {"status": "done", **out}

    # -- agents' own compaction requests -------------------------------------------------

    def agent_compaction(self, req: AgentRequest, body: dict[str, Any], *, max_tokens: int | None = None) -> Job:
        """`req` (recognized by its agent's profile in `body`, the request's JSON) as one
        foreground job, never preempted, whose result is the AgentCompaction; a refinement it
        makes stale is cancelled first, and its own follows in the background. Call on the
        event loop. NothingToCompact (nothing queued) when the request holds no conversation;
        ValueError when its history cannot be read."""
        backend = self.require_backend()
        received = profiles.get(req.agent).read(req, body)
        self.agents.prepare(req, received)  # NothingToCompact before a job is queued
        for key in self.agents.continues(req, received):
            self.refiner.supersede(AGENT_KEY + key)
        wait = self.config.agent_wait

        def run(job: Job) -> AgentCompaction:
            assert self.counter is not None
            return self.agents.run(req, received, JobBackend(backend, job, self.scheduler), self.counter,
                                   max_tokens, job.priority, wait,  # type: ignore[arg-type]
                                   context_limit=self.config.context_limit)

        job = self.scheduler.submit(JobKind.AGENT_COMPACTION, run, lane=FOREGROUND_LANE, preemptible=False)
        assert job.future is not None
        job.future.add_done_callback(self._agent_answered)
        return job

    def _agent_answered(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        refinement: Refinement | None = future.result().refinement
        if refinement is None:
            return
        self.refiner.submit(
            AGENT_KEY + refinement.key, JobKind.AGENT_REFINE,
            lambda job: self.agents.refine(refinement, JobBackend(self.require_backend(), job, self.scheduler),
                                           self.counter, job.priority),  # type: ignore[arg-type]
            wanted=lambda: self.agents.wanted(refinement))

    def agent_usage(self, req: AgentRequest, body: dict[str, Any], result: AgentCompaction) -> tuple[int, int]:
        """(prompt, completion) tokens of the reply, by the agent's usage rule, with the model's
        own tokenizer; the completion is the text the agent gets."""
        backend = self.require_backend()
        if profiles.get(req.agent).usage == "history":
            prompt = result.checkpoint.tokens.before
        else:
            prompt = backend.count_messages(body.get("messages") or [])
        return prompt, backend.count(result.text)

    # -- rolling summaries ---------------------------------------------------------------

    def _maybe_roll(self, session_id: str, status: dict[str, Any]) -> None:
        if not self.config.rolling or status["tokens"] < status["pre_threshold"]:
            return
        st = self.state(session_id)
        if st.timer is not None:
            st.timer.cancel()
        loop = asyncio.get_running_loop()
        st.timer = loop.call_later(self.config.debounce_s, self._roll_due, session_id)

    def _roll_due(self, session_id: str) -> None:
        st = self.state(session_id)
        st.timer = None
        if st.rolling_job is not None and not st.rolling_job.status.terminal:
            st.dirty = True
            return
        if st.compact_job is not None and not st.compact_job.status.terminal:
            return  # the compaction resets the summary; the next append re-arms it
        if self.refiner.pending(session_id) is not None:
            st.dirty = True  # the refinement commits a new version: roll on top of it afterwards
            return
        try:
            job = self.scheduler.submit(JobKind.ROLLING, lambda j: self._rolling_job(j, session_id),
                                        lane=BACKGROUND_LANE, session_id=session_id)
        except Overloaded:
            self.metrics.inc("compactd_rolling_updates_total", status="skipped_overload")
            return
        st.rolling_job = job
        assert job.future is not None
        job.future.add_done_callback(lambda _f: self._rolling_ended(session_id, job))

    def _rolling_ended(self, session_id: str, job: Job) -> None:
        st = self.state(session_id)
        if st.rolling_job is job:
            st.rolling_job = None
        outcome = (job.result or {}).get("status", "done") if job.status == JobStatus.DONE else job.status
        self.metrics.inc("compactd_rolling_updates_total", status=outcome)
        preempted = job.status == JobStatus.CANCELLED and (job.error or "").startswith("preempted")
        if st.dirty or preempted:
            st.dirty = False
            st.timer = asyncio.get_running_loop().call_later(self.config.debounce_s, self._roll_due, session_id)

    def _rolling_job(self, job: Job, session_id: str) -> dict[str, Any]:
        backend = JobBackend(self.require_backend(), job, self.scheduler)
        session = self.store.get_session(session_id)
        version, committed = self.committed(session_id)
        st = self.state(session_id)
        # Every rolling update re-anchors on the committed checkpoint: the summarizer prompt then
        # starts with the same instructions + previous summary + a conversation that only grows,
        # so the engine's per-session KV prefix (cache_key) evaluates just the new turns, and the
        # narrative never drifts through a chain of summaries of summaries.
        previous = committed
        config = CompactionConfig(context_limit=self.session_limit(session_id), use_model=True,
                                  priority=job.priority)
        assert self.counter is not None
        held, _ = self.counter.count(context_chat(session, committed))
        try:
            result = compact(session, backend, config, previous=previous, counter=self.counter, held_tokens=held)
        except CompactionRefused as exc:
            return {"status": "refused", "reason": str(exc)}
        job.check()
        if self.committed(session_id)[0] != version:
            return {"status": "stale"}  # a compaction committed meanwhile
        st.rolling, st.rolling_base = result.checkpoint, version
        return {"status": "done", "boundary_message_id": result.checkpoint.boundary_message_id,
                "model_calls": len(result.checkpoint.timings.model)}

    # -- jobs, metrics -------------------------------------------------------------------

    def _job_changed(self, job: Job) -> None:
        if job.kind not in PERSISTED_KINDS:
            if job.status.terminal:
                self.metrics.inc("compactd_jobs_total", kind=job.kind, status=job.status)
            return
        try:
            if job.id not in self._persisted:
                self.store.create_job(job.kind, session_id=job.session_id, lane=job.lane, job_id=job.id)
                self._persisted.add(job.id)
            if job.status != JobStatus.QUEUED:
                if self.store.get_job(job.id).status != job.status:
                    self.store.update_job(job.id, job.status, error=job.error,
                                          result=job.result if job.status == JobStatus.DONE else None)
        except NotFound:
            pass  # session unknown to the store: nothing to record
        if job.status.terminal:
            self.metrics.inc("compactd_jobs_total", kind=job.kind, status=job.status)
            self._persisted.discard(job.id)

    def _generation_done(self, job: Job, stats: GenerationStats) -> None:
        evaluated = max(0, stats.prompt_tokens - stats.cached_prompt_tokens)
        self.metrics.inc("compactd_prompt_tokens_total", evaluated)
        self.metrics.inc("compactd_prompt_seconds_total", stats.prompt_ms / 1000)
        self.metrics.inc("compactd_decode_tokens_total", stats.decode_tokens)
        self.metrics.inc("compactd_decode_seconds_total", stats.decode_ms / 1000)
        if stats.prompt_tps:
            self.metrics.set("compactd_prompt_tokens_per_second", round(stats.prompt_tps, 2))
        if stats.decode_tps:
            self.metrics.set("compactd_decode_tokens_per_second", round(stats.decode_tps, 2))
        self.metrics.observe("compactd_time_to_first_token_seconds", stats.ttft_ms / 1000, lane=job.lane)

    def job_view(self, job_id: str) -> dict[str, Any]:
        """A job as GET /v1/jobs shows it: the live one while the scheduler holds it, else the
        stored record (NotFound when neither knows it)."""
        job: Job | JobRecord = self.scheduler.get(job_id) or self.store.get_job(job_id)
        return {k: getattr(job, k) for k in JOB_VIEW_FIELDS}

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        job = self.scheduler.get(job_id)
        if job is None:
            self.job_view(job_id)  # NotFound when unknown
            raise JobFinished(f"job {job_id!r} has already finished")
        self.scheduler.cancel(job, "cancelled by request")
        return self.job_view(job_id)

    def cancel(self, job: Job, reason: str) -> None:
        """Drop a queued job, or stop a running one at its next token (its client went away)."""
        self.scheduler.cancel(job, reason)

    # -- chat generations ----------------------------------------------------------------

    def submit_chat(self, messages: list[dict[str, Any]], options: dict[str, Any],
                    sink: Callable[[Any], None] | None = None) -> Job:
        """A chat generation in the foreground lane, never preempted. Without `sink`, the job's
        result is (text, stats); with it, every streamed item goes to `sink` as it comes, then
        the exception that ended the stream if any, then None."""
        backend = self.require_backend()

        def run(job: Job) -> tuple[str, GenerationStats]:
            return collect(JobBackend(backend, job, self.scheduler).generate(messages, **options))

        def produce(job: Job) -> None:
            assert sink is not None
            try:
                for item in JobBackend(backend, job, self.scheduler).generate(messages, **options):
                    sink(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the stream, then re-raised
                sink(exc)
                raise
            finally:
                sink(None)

        return self.scheduler.submit(JobKind.CHAT, run if sink is None else produce, preemptible=False)

    def chat_done(self, seconds: float) -> None:
        self.metrics.observe("compactd_chat_completion_seconds", seconds)

    def model_name(self) -> str:
        return self.require_backend().info().model_name

    # -- reading sessions back -----------------------------------------------------------

    def session_view(self, session_id: str) -> dict[str, Any]:
        info = self.store.session_info(session_id)
        return {"id": info.id, "created": info.created, "source_format": info.source_format,
                "context_limit": info.context_limit or self.config.context_limit, "messages": info.message_count,
                "checkpoint_version": info.latest_checkpoint}

    def checkpoint_view(self, session_id: str, fmt: str = "openai", version: int | None = None) -> dict[str, Any]:
        """The latest checkpoint (or `version`) as the agent takes it: OpenAI messages, or
        Anthropic's system + messages."""
        stored = self.store.latest_checkpoint(session_id)
        if version is not None and stored is not None and stored.version != version:
            stored = next((c for c in self.store.checkpoints(session_id) if c.version == version), None)
        if stored is None:
            self.store.session_info(session_id)  # unknown session -> NotFound first
            raise NoCheckpoint(f"session {session_id!r} has no checkpoint yet")
        data = stored.data
        out: dict[str, Any] = {"session_id": session_id, "version": stored.version, "format": fmt,
                               "boundary_message_id": stored.boundary_message_id, "tokens": data.get("tokens"),
                               "summary_text": data.get("summary_text"), "mode": data.get("audit", {}).get("mode"),
                               "refines": data.get("audit", {}).get("refines")}
        if fmt == "anthropic":
            out.update(to_anthropic(data["messages"]))
        else:
            out["messages"] = data["messages"]  # stored as the pipeline rendered them (OpenAI shape)
        return out

    def search(self, session_id: str, query: str, limit: int = 20) -> SearchResponse:
        return history.search(self.store, session_id, query, limit)

    def around(self, session_id: str, message_id: str, radius: int = 3) -> AroundResponse:
        return history.around(self.store, session_id, message_id, radius)

    # -- the page's views (worker/service/views.py: typed records, read-only) --------------

    def session_rows(self, offset: int, limit: int) -> tuple[tuple[views.SessionRow, ...], int]:
        return views.session_rows(self, offset, limit)

    def session_detail(self, session_id: str) -> views.SessionDetail:
        return views.session_detail(self, session_id)

    def message_rows(self, session_id: str, offset: int, limit: int,
                     preview_chars: int) -> tuple[tuple[views.MessageRow, ...], int]:
        return views.message_rows(self, session_id, offset, limit, preview_chars)

    def checkpoint_diff(self, session_id: str, a: int, b: int) -> views.CheckpointDiff:
        return views.checkpoint_diff(self, session_id, a, b)

    def worker_view(self) -> views.WorkerView:
        return views.worker_view(self)

    def render_metrics(self) -> str:
        for lane in LANES:
            self.metrics.set("compactd_queue_depth", self.scheduler.depth(lane), lane=lane)
            self.metrics.set("compactd_jobs_running", self.scheduler.running(lane), lane=lane)
        self.metrics.set("compactd_model_ready", 1 if self.ready else 0)
        return self.metrics.render()

    def overloaded(self, exc: Overloaded) -> None:
        self.metrics.inc("compactd_overload_rejections_total", lane=exc.lane)


__all__ = [
    "WAIT_MODES", "CompactdService", "JobFinished", "ModelNotReady", "NoCheckpoint", "ServiceConfig",
    "context_chat",
]
