"""The refinement of an instant checkpoint: the model's narrative, computed in the background
lane after the agent was answered with the deterministic checkpoint, and committed as the next
checkpoint version (see service.py's docstring for the wait modes).

A mixin of CompactdService, kept apart so the service module stays small: it reads the
service's store, scheduler, counter, metrics and per-session state, and commits through
`_commit` like every other compaction.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..pipeline import CompactionConfig, CompactionRefused, compact
from ..pipeline.checkpoint import Checkpoint
from ..session import Session
from .records import Conflict, JobKind, JobStatus
from .scheduler import BACKGROUND_LANE, Job, JobBackend, Overloaded

if TYPE_CHECKING:
    from backends.base import Backend

    from ..tokens import TokenCounter
    from .metrics import Metrics
    from .scheduler import Scheduler
    from .store import Store


class Refinements:
    """The refinement jobs of CompactdService."""

    store: Store
    scheduler: Scheduler
    metrics: Metrics
    counter: TokenCounter | None
    config: Any

    # Provided by CompactdService.
    def state(self, session_id: str) -> Any: ...
    def committed(self, session_id: str) -> tuple[int | None, Checkpoint | None]: ...
    def require_backend(self) -> Backend: ...
    def session_limit(self, session_id: str) -> int: ...
    def _roll_due(self, session_id: str) -> None: ...
    def _commit(self, session_id: str, result: Any, version: int | None, mode: str, t0: float,
                extra_audit: dict[str, Any]) -> dict[str, Any]: ...

    async def _submit_refine(self, session_id: str, session: Session, committed: Checkpoint | None,
                             base: int | None, instant_version: int, held: int,
                             config: CompactionConfig) -> dict[str, Any]:
        """Queue the model narrative for the instant checkpoint `instant_version` (built on
        `base`): what the job result tells the agent to look for."""
        expect = {"version": instant_version + 1, "refines": instant_version}
        try:
            job = self.scheduler.submit(
                JobKind.REFINE, lambda j: self._refine_job(j, session_id, session, committed, base, instant_version, held, config),
                lane=BACKGROUND_LANE, session_id=session_id)
        except Overloaded:
            self.metrics.inc("compactd_refinements_total", status="skipped_overload")
            return {**expect, "job_id": None, "status": "skipped_overload"}
        st = self.state(session_id)
        st.refine_job = job
        assert job.future is not None
        job.future.add_done_callback(
            lambda _f: self._refine_ended(session_id, job, session, committed, base, instant_version, held, config))
        return {**expect, "job_id": job.id, "status": str(job.status)}

    def _refine_ended(self, session_id: str, job: Job, session: Session, committed: Checkpoint | None,
                      base: int | None, instant_version: int, held: int,
                             config: CompactionConfig) -> None:
        st = self.state(session_id)
        if st.refine_job is job:
            st.refine_job = None
        outcome = (job.result or {}).get("status", "done") if job.status == JobStatus.DONE else job.status
        self.metrics.inc("compactd_refinements_total", status=outcome)
        preempted = job.status == JobStatus.CANCELLED and (job.error or "").startswith("preempted")
        if preempted and self.committed(session_id)[0] == instant_version:  # still wanted: run it again
            asyncio.ensure_future(self._submit_refine(session_id, session, committed, base, instant_version, held, config))
        elif st.dirty:
            st.dirty = False
            st.timer = asyncio.get_running_loop().call_later(self.config.debounce_s, self._roll_due, session_id)

    def _refine_job(self, job: Job, session_id: str, session: Session, committed: Checkpoint | None,
                    base: int | None, instant_version: int, held: int,
                             config: CompactionConfig) -> dict[str, Any]:
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
