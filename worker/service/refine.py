"""Background refinement: the model's narrative for a checkpoint that was answered without it.

Every door that answers at once (the sessions API's `wait=instant`, every agent door) hands its
refinement here. One pending refinement per key (a session id, an agent session's state): a
newer compaction of the key supersedes it (cancelled; a result that lands anyway is dropped by
the job itself), a job preempted by foreground work runs again while it is still wanted, an
overloaded queue skips it (the answer the agent holds stands). Outcomes are one metric,
`compactd_refinements_total{status}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .metrics import Metrics
from .records import JobKind, JobStatus
from .scheduler import BACKGROUND_LANE, Job, Overloaded, Scheduler

SUPERSEDED = "superseded by a newer compaction"


class Refiner:
    """The service's refinement jobs, keyed; call on the event loop."""

    def __init__(self, scheduler: Scheduler, metrics: Metrics) -> None:
        self.scheduler = scheduler
        self.metrics = metrics
        self._pending: dict[str, Job] = {}

    def submit(self, key: str, kind: JobKind, run: Callable[[Job], dict[str, Any]], *,
               wanted: Callable[[], bool], session_id: str | None = None,
               ended: Callable[[Job], None] | None = None) -> Job | None:
        """Queue `run` in the background lane as `key`'s refinement; None when the queue is full.
        `wanted`: whether its result would still be used (asked again when it is preempted);
        `ended`: called once it ends for good."""
        try:
            job = self.scheduler.submit(kind, run, lane=BACKGROUND_LANE, session_id=session_id)
        except Overloaded:
            self.metrics.inc("compactd_refinements_total", status="skipped_overload")
            return None
        self._pending[key] = job

        def done(_future: Any) -> None:
            if self._pending.get(key) is job:
                del self._pending[key]
            outcome = (job.result or {}).get("status", "done") if job.status == JobStatus.DONE else job.status
            self.metrics.inc("compactd_refinements_total", status=outcome)
            preempted = job.status == JobStatus.CANCELLED and (job.error or "").startswith("preempted")
            if preempted and wanted() and self.submit(key, kind, run, wanted=wanted, session_id=session_id,
                                                      ended=ended) is not None:
                return
            if ended is not None:
                ended(job)

        assert job.future is not None
        job.future.add_done_callback(done)
        return job

    def pending(self, key: str) -> Job | None:
        job = self._pending.get(key)
        return job if job is not None and not job.status.terminal else None

    def pending_keys(self, prefix: str = "") -> list[str]:
        return [k for k, job in self._pending.items() if k.startswith(prefix) and not job.status.terminal]

    def supersede(self, key: str) -> None:
        """A newer compaction of `key` makes its pending refinement stale: cancel it."""
        job = self._pending.pop(key, None)
        if job is not None and not job.status.terminal:
            self.scheduler.cancel(job, SUPERSEDED)


__all__ = ["SUPERSEDED", "Refiner"]
