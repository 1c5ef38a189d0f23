"""What the store hands out and refuses: its errors, its frozen record types, and the ONE
job-status enum (with its allowed transitions) that the store, the scheduler, the service
and the HTTP schemas all share.

A module of its own so that the scheduler and the HTTP layer can name a job status or a
record without importing the SQLite code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class JobStatus(str, Enum):
    """A job's life: queued -> running -> done | failed | cancelled (or queued -> failed |
    cancelled). A str, so it compares, serializes and binds to SQL as its plain value."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:  # metric labels and f-strings show "done", not "JobStatus.DONE"
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[JobStatus] = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
# Allowed job transitions; a terminal job never changes again (a retry is a new job).
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.RUNNING: frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED}),
}
INTERRUPTED = "interrupted by restart"


class JobKind(str, Enum):
    """What a job does: ONE name per kind, stored in the jobs table and used as the metric label
    (`compactd_jobs_total{kind=...}`), whichever door queued it. A str, like JobStatus."""

    COMPACT = "compact"  # POST /v1/sessions/{id}/compact
    ROLLING = "rolling"  # a background rolling-summary update
    REFINE = "refine"  # the model narrative after an instant checkpoint
    CHAT = "chat"  # plain generation (/v1/chat/completions)
    AGENT_COMPACTION = "agent_compaction"  # an agent's own compaction request (opencode, pi, Codex)
    AGENT_REFINE = "agent_refine"  # the model narrative after an agent was answered at once

    def __str__(self) -> str:  # metric labels and f-strings show "chat", not "JobKind.CHAT"
        return self.value


# The kinds the store records (a session's compaction history); the others only count in metrics.
PERSISTED_KINDS: frozenset[JobKind] = frozenset({JobKind.COMPACT, JobKind.ROLLING, JobKind.REFINE})  # the error of a job a restart cut off


class StoreError(Exception):
    """Anything the store refuses. Subclasses let the HTTP layer pick 404 vs 409."""


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """A write that contradicts stored state: a re-sent message id with different
    content, a stale checkpoint parent, an illegal job transition, a duplicate id."""


@dataclass(frozen=True)
class SessionInfo:
    id: str
    created: float
    source_format: str
    context_limit: int | None
    meta: dict[str, Any]
    message_count: int
    latest_checkpoint: int | None


@dataclass(frozen=True)
class PruneMarker:
    message_id: str
    call_id: str
    tokens: int | None = None
    compacted_at: float | None = None  # set by the store when marking


@dataclass(frozen=True)
class StoredCheckpoint:
    """One link of a session's checkpoint chain as stored: `data` is the pipeline
    checkpoint's dict (`worker.pipeline.checkpoint.Checkpoint.to_dict()`)."""

    session_id: str
    version: int
    parent_version: int | None
    created: float
    data: dict[str, Any]
    summary_tokens: int | None
    boundary_message_id: str | None


@dataclass(frozen=True)
class Audit:
    """What one compaction did, kept for the benchmark reports and for debugging."""

    dropped_message_ids: list[str] = field(default_factory=list)
    tokens_before: int | None = None
    tokens_after: int | None = None
    removed_by_verification: list[Any] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditRecord:
    id: int
    session_id: str
    checkpoint_version: int | None
    created: float
    audit: Audit


@dataclass(frozen=True)
class JobRecord:
    """A compaction or rolling job as the store keeps it (the live one is `scheduler.Job`)."""

    id: str
    session_id: str | None
    kind: str
    lane: str
    status: JobStatus
    created: float
    started: float | None
    finished: float | None
    error: str | None
    result: Any
