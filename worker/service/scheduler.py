"""The asyncio front of the model: two lanes, bounded queues, cancellation, preemption.

Model work is serialized on the backend's one inference thread (backends/engine_thread.py),
whose priority queue already puts FOREGROUND (0) before BACKGROUND (10). This module decides
what reaches it and when:

- Two lanes, each with its own queue and its own runner threads, so a foreground job (an
  agent waiting on a compaction or a completion) never queues behind background work.
- A running background generation is *preempted* when foreground model work starts: its
  stream is closed at the next token and the job ends `cancelled` (rolling summaries are
  re-armed by their owner). A background job promoted to foreground is not preempted.
- Bounded: a lane holds at most `queue_size` waiting jobs; one more raises `Overloaded`,
  which the HTTP layer answers with 429 + Retry-After instead of an unbounded wait.
- Cancellation: a queued job is dropped; a running one is flagged and its generation stops
  at its next token (`JobBackend` closes the stream).

Jobs run synchronous functions (the pipeline's `compact`, a generation loop) in the lane's
threads; they only block on the engine thread's futures.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from backends.base import Backend, GenerationStats
from backends.engine_thread import BACKGROUND, FOREGROUND

from ..config import MAX_QUEUE_DEPTH
from .records import JobKind, JobStatus

# The line a generation's start logs (INFO): the engine is evaluating the prompt from here on.
# A crash test waits for it, so that its kill lands inside a real model call.
GENERATION_STARTED = "generation started (prompt evaluation): job %s"

log = logging.getLogger("compactd.scheduler")

FOREGROUND_LANE = "foreground"
BACKGROUND_LANE = "background"
LANES = (FOREGROUND_LANE, BACKGROUND_LANE)
LANE_PRIORITY = {FOREGROUND_LANE: FOREGROUND, BACKGROUND_LANE: BACKGROUND}

# Foreground: 2 runners so a swap (no model call) never waits behind a foreground generation.
# Background: 1, the engine serializes generations anyway and rolling updates are not urgent.
LANE_RUNNERS = {FOREGROUND_LANE: 2, BACKGROUND_LANE: 1}
RETRY_AFTER_MIN_S, RETRY_AFTER_MAX_S = 1, 120
DEFAULT_JOB_SECONDS = 10.0  # Retry-After guess before any job has finished
JOB_SECONDS_EWMA = 0.3  # weight of the newest job in the duration average

class Overloaded(Exception):
    """The lane's queue is full: retry after `retry_after` seconds."""

    def __init__(self, lane: str, depth: int, retry_after: int):
        super().__init__(f"the {lane} queue is full ({depth} jobs waiting): retry after {retry_after}s")
        self.lane = lane
        self.retry_after = retry_after


class JobCancelled(Exception):
    """Raised inside a job's thread at its next token once the job is cancelled or preempted."""


@dataclass(eq=False)
class Job:
    """A live job: what the scheduler queues and runs (the store keeps its `JobRecord`)."""

    id: str
    kind: JobKind
    lane: str
    fn: Callable[[Job], Any]
    session_id: str | None = None
    preemptible: bool = True
    status: JobStatus = JobStatus.QUEUED
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    result: Any = None
    cancel_reason: str | None = None
    future: asyncio.Future | None = None
    _cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def priority(self) -> int:
        """Read at every generate() call: a promoted job's next chunk runs at the new priority."""
        return LANE_PRIORITY[self.lane]

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        if self._cancel.is_set():
            raise JobCancelled(self.cancel_reason or "cancelled")

    def request_cancel(self, reason: str) -> None:
        if not self._cancel.is_set():
            self.cancel_reason = reason
            self._cancel.set()


class JobBackend:
    """The backend as one job sees it: every generation runs at the job's current priority,
    foreground generations preempt running background ones, and a cancelled job's stream is
    closed at its next token. Everything else (tokenize, count, info...) passes through."""

    def __init__(self, backend: Backend, job: Job, scheduler: Scheduler):
        self._backend = backend
        self._job = job
        self._scheduler = scheduler

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, messages: list[dict[str, Any]], **kwargs: Any) -> Iterator[str | GenerationStats]:
        self._job.check()
        if self._job.lane == FOREGROUND_LANE:
            self._scheduler.preempt_background(f"preempted by foreground job {self._job.id}")
        kwargs["priority"] = self._job.priority
        return self._guard(self._backend.generate(messages, **kwargs))

    def _guard(self, stream: Iterator[str | GenerationStats]) -> Iterator[str | GenerationStats]:
        self._scheduler._stream_started(self._job)
        log.info(GENERATION_STARTED, self._job.id)
        try:
            for item in stream:
                self._job.check()
                if isinstance(item, GenerationStats):
                    self._scheduler.on_generation(self._job, item)
                yield item
        finally:
            self._scheduler._stream_ended(self._job)
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # EngineThread.stream: the producer stops at its next token


JobHook = Callable[[Job], None]


class Scheduler:
    def __init__(
        self,
        *,
        queue_size: int = MAX_QUEUE_DEPTH,
        runners: dict[str, int] | None = None,
        on_change: JobHook | None = None,
        on_generation: Callable[[Job, GenerationStats], None] | None = None,
    ):
        self.queue_size = queue_size
        self._runners_per_lane = dict(runners or LANE_RUNNERS)
        self._queues: dict[str, deque[Job]] = {lane: deque() for lane in LANES}
        self._wakeups: dict[str, asyncio.Event] = {}
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._tasks: list[asyncio.Task] = []
        self._jobs: dict[str, Job] = {}
        self._running: dict[str, set[Job]] = {lane: set() for lane in LANES}
        self._streaming: set[Job] = set()
        self._lock = threading.Lock()  # _streaming and _running are read from job threads
        self._seconds: dict[str, float] = {lane: DEFAULT_JOB_SECONDS for lane in LANES}
        self._on_change = on_change or (lambda job: None)
        self._on_generation = on_generation or (lambda job, stats: None)
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for lane in LANES:
            self._wakeups[lane] = asyncio.Event()
            n = self._runners_per_lane[lane]
            self._executors[lane] = ThreadPoolExecutor(n, thread_name_prefix=f"compactd-{lane}")
            for _ in range(n):
                self._tasks.append(asyncio.create_task(self._runner(lane), name=f"compactd-{lane}-runner"))

    async def stop(self) -> None:
        """Cancel everything: queued jobs are dropped, running ones stop at their next token."""
        for lane in LANES:
            while self._queues[lane]:
                self._finish(self._queues[lane].popleft(), JobStatus.CANCELLED, error="server shutting down")
        with self._lock:
            running = [j for jobs in self._running.values() for j in jobs]
        for job in running:
            job.request_cancel("server shutting down")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for ex in self._executors.values():
            ex.shutdown(wait=False, cancel_futures=True)

    # -- submitting ----------------------------------------------------------------------

    def submit(
        self,
        kind: JobKind | str,
        fn: Callable[[Job], Any],
        *,
        lane: str = FOREGROUND_LANE,
        session_id: str | None = None,
        job_id: str | None = None,
        preemptible: bool = True,
    ) -> Job:
        """Queue `fn(job)` on `lane`; raises Overloaded when the lane's queue is full, ValueError for a
        kind that is not a JobKind (its plain value is accepted: `"chat"`)."""
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}")
        if self.loop is None:
            raise RuntimeError("scheduler not started")
        depth = len(self._queues[lane])
        if depth >= self.queue_size:
            raise Overloaded(lane, depth, self.retry_after(lane))
        job = Job(id=job_id or uuid.uuid4().hex, kind=JobKind(kind), lane=lane, fn=fn, session_id=session_id,
                  preemptible=preemptible)
        job.future = self.loop.create_future()
        self._jobs[job.id] = job
        self._queues[lane].append(job)
        self._on_change(job)
        self._wakeups[lane].set()
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        """Every job the scheduler holds now (the store keeps the ended ones)."""
        return list(self._jobs.values())

    def expected_seconds(self, lane: str) -> float:
        """The lane's average job time (DEFAULT_JOB_SECONDS until a job has ended): an ETA."""
        return self._seconds[lane]

    def cancel(self, job: Job, reason: str = "cancelled") -> bool:
        """Drop a queued job or flag a running one; False when it had already finished."""
        if job.status == JobStatus.QUEUED:
            try:
                self._queues[job.lane].remove(job)
            except ValueError:
                pass
            self._finish(job, JobStatus.CANCELLED, error=reason)
            return True
        if job.status == JobStatus.RUNNING:
            job.request_cancel(reason)
            return True
        return False

    def promote(self, job: Job) -> None:
        """Move a background job to the foreground lane (an agent now waits on it)."""
        if job.lane == FOREGROUND_LANE or job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            return
        if job.status == JobStatus.QUEUED:
            try:
                self._queues[job.lane].remove(job)
            except ValueError:
                return
            job.lane = FOREGROUND_LANE
            self._queues[FOREGROUND_LANE].appendleft(job)  # it was waiting already
            self._wakeups[FOREGROUND_LANE].set()
        else:
            with self._lock:
                self._running[job.lane].discard(job)
                job.lane = FOREGROUND_LANE
                self._running[FOREGROUND_LANE].add(job)
        job.preemptible = False
        self._on_change(job)

    def preempt_background(self, reason: str) -> int:
        """Stop running background generations at their next token (called from job threads)."""
        with self._lock:
            victims = [j for j in self._streaming if j.lane == BACKGROUND_LANE and j.preemptible]
        for job in victims:
            job.request_cancel(reason)
        return len(victims)

    # -- introspection -------------------------------------------------------------------

    def depth(self, lane: str) -> int:
        return len(self._queues[lane])

    def running(self, lane: str) -> int:
        with self._lock:
            return len(self._running[lane])

    def retry_after(self, lane: str) -> int:
        """Seconds until a slot is likely free: the waiting jobs over the runners, each taking
        the lane's average job time."""
        waiting = len(self._queues[lane]) + 1
        seconds = self._seconds[lane] * waiting / max(1, self._runners_per_lane[lane])
        return int(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(seconds))))

    def on_generation(self, job: Job, stats: GenerationStats) -> None:
        self._on_generation(job, stats)

    def _stream_started(self, job: Job) -> None:
        with self._lock:
            self._streaming.add(job)

    def _stream_ended(self, job: Job) -> None:
        with self._lock:
            self._streaming.discard(job)

    # -- running -------------------------------------------------------------------------

    async def _runner(self, lane: str) -> None:
        assert self.loop is not None
        wake = self._wakeups[lane]
        while True:
            if not self._queues[lane]:
                wake.clear()
                await wake.wait()
                continue
            job = self._queues[lane].popleft()
            run_lane = job.lane
            job.status, job.started = JobStatus.RUNNING, time.time()
            with self._lock:
                self._running[run_lane].add(job)
            self._on_change(job)
            try:
                result = await self.loop.run_in_executor(self._executors[lane], job.fn, job)
            except JobCancelled as exc:
                self._finish(job, JobStatus.CANCELLED, error=str(exc))
            except asyncio.CancelledError:
                job.request_cancel("server shutting down")
                self._finish(job, JobStatus.CANCELLED, error="server shutting down")
                raise
            except Exception as exc:  # noqa: BLE001 - the job's own failure, reported on the job
                self._finish(job, JobStatus.FAILED, error=str(exc) or type(exc).__name__, exc=exc)
            else:
                if job.cancelled:
                    self._finish(job, JobStatus.CANCELLED, error=job.cancel_reason)
                else:
                    self._finish(job, JobStatus.DONE, result=result)
            finally:
                with self._lock:
                    for jobs in self._running.values():
                        jobs.discard(job)

    def _finish(self, job: Job, status: JobStatus, *, result: Any = None, error: str | None = None,
                exc: BaseException | None = None) -> None:
        job.status, job.finished, job.error, job.result = status, time.time(), error, result
        if job.started is not None and status == JobStatus.DONE:
            took = job.finished - job.started
            self._seconds[job.lane] += JOB_SECONDS_EWMA * (took - self._seconds[job.lane])
        fut = job.future
        if fut is not None and not fut.done():
            if status == JobStatus.DONE:
                fut.set_result(result)
            elif status == JobStatus.CANCELLED:
                fut.set_exception(JobCancelled(error or "cancelled"))
            else:
                fut.set_exception(exc or RuntimeError(error or "failed"))
            fut.exception()  # mark retrieved: nobody may be waiting (wait=false jobs)
        self._on_change(job)
        # Keep finished jobs a while for GET /v1/jobs; the store keeps them for good.
        if len(self._jobs) > 4 * self.queue_size + 64:
            for jid in [j for j, v in self._jobs.items() if v.status.terminal][:64]:
                del self._jobs[jid]
