"""The durable store: one SQLite file holding sessions, their append-only messages, prune
markers, the checkpoint chain, compaction audits, jobs, a token-count cache and a
full-text index over everything an agent saw (tool outputs included).

Design rules, each enforced here rather than trusted to callers:
- Messages are the source of truth and are never rewritten or deleted: triggers abort any
  UPDATE of their content columns and any DELETE. Pruning is a row in `prune_markers`;
  `get_session` applies it as `compacted_at` on the tool result.
- Every multi-row write runs in one `BEGIN IMMEDIATE` transaction, so a kill leaves either
  all of it or none of it (WAL + synchronous=NORMAL keeps committed data across a crash
  of the process; an OS crash may lose the last commits but never corrupts the file).
- One connection guarded by a lock: the HTTP server calls in from worker threads, and
  ":memory:" databases cannot be shared between connections anyway.

Persistence only: searching and reading back history is `history.py`; the schema and its
migrations are `schema.py`; the record types and errors are `records.py`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import default_db_path
from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart
from .records import (
    INTERRUPTED,
    JOB_TRANSITIONS,
    Audit,
    AuditRecord,
    Conflict,
    JobRecord,
    JobStatus,
    NotFound,
    PruneMarker,
    SessionInfo,
    StoredCheckpoint,
    StoreError,
)
from .schema import fts_tokenizer_available, migrate

Marks = Mapping[tuple[str, str], tuple[float, int | None]]  # (message id, call id) -> (pruned at, tokens)


# ----------------------------------------------------------------------------- helpers


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _unpruned(message: Message) -> Message:
    """The message as stored: prune state lives in prune_markers, not in the body, so a
    client echoing back a pruned view does not look like changed content."""
    if not any(p.compacted_at is not None for p in message.tool_results):
        return message
    parts = [
        p.model_copy(update={"compacted_at": None, "compacted_tokens": None}) if isinstance(p, ToolResultPart) else p
        for p in message.parts
    ]
    return message.model_copy(update={"parts": parts})


def _canonical(message: Message) -> str:
    return _dumps(message.model_dump(mode="json"))


def search_text(message: Message) -> str:
    """What the full-text index sees: every word the agent saw, tool outputs included."""
    chunks: list[str] = []
    for p in message.parts:
        if isinstance(p, (TextPart, ReasoningPart)):
            chunks.append(p.text)
        elif isinstance(p, ToolCallPart):
            chunks.append(f"{p.name} {p.arguments_json()}")
        elif isinstance(p, ToolResultPart):
            chunks.append(f"{p.name}\n{p.output}" if p.name else p.output)
    return "\n".join(c for c in chunks if c)


# ----------------------------------------------------------------------------- store


class Store:
    """Thread-safe: every call takes one lock around the single connection."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if path is None:
            path = default_db_path()
        self.path = str(path)
        self._clock = clock
        self._lock = threading.RLock()
        try:
            self._open(busy_timeout_ms)
        except (OSError, sqlite3.Error) as exc:
            # A directory, a file that is not a database, an unwritable place: one clear
            # line for the CLI (exit 2), never a traceback.
            conn = getattr(self, "_conn", None)
            if conn is not None:
                conn.close()
            raise StoreError(f"cannot open the database {self.path}: {exc}") from None

    def _open(self, busy_timeout_ms: int) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is
        # exactly what the code says it is.
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self.journal_mode: str = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # Without a limit the -wal file keeps its high-water size after a big import.
        self._conn.execute("PRAGMA journal_size_limit = 33554432")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self.schema_version = migrate(self._conn, fts_tokenizer_available())
        row = self._conn.execute("SELECT value FROM store_meta WHERE key = 'fts_tokenizer'").fetchone()
        # The tokenizer the index was built with (a file may predate a newer SQLite).
        self.fts_tokenizer: str = row[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so a read-then-write (version check,
        # idempotency check) cannot be raced by another process between the two.
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction = one consistent snapshot across several SELECTs (history.py
        reads through it too)."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    def require_session(self, conn: sqlite3.Connection, session_id: str) -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise NotFound(f"unknown session {session_id!r}")

    # -- sessions

    def create_session(
        self,
        session_id: str | None = None,
        *,
        context_limit: int | None = None,
        source_format: str = "",
        meta: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
    ) -> str:
        session_id = session_id or uuid.uuid4().hex
        with self._write() as conn:
            exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if exists:
                if exist_ok:
                    return session_id
                raise Conflict(f"session {session_id!r} already exists")
            conn.execute(
                "INSERT INTO sessions(id, created, source_format, context_limit, meta) VALUES (?,?,?,?,?)",
                (session_id, self._clock(), source_format, context_limit, _dumps(dict(meta or {}))),
            )
        return session_id

    def update_session(
        self, session_id: str, *, context_limit: int | None = None, meta: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        """Session settings may change (the agent switched models); messages may not.
        None leaves a field as it is; `meta` replaces the whole dict."""
        with self._write() as conn:
            self.require_session(conn, session_id)
            if context_limit is not None:
                conn.execute("UPDATE sessions SET context_limit = ? WHERE id = ?", (context_limit, session_id))
            if meta is not None:
                conn.execute("UPDATE sessions SET meta = ? WHERE id = ?", (_dumps(dict(meta)), session_id))
        return self.session_info(session_id)

    def session_info(self, session_id: str) -> SessionInfo:
        with self.snapshot() as conn:
            row = conn.execute(
                """SELECT s.*,
                     (SELECT count(*) FROM messages m WHERE m.session_id = s.id) AS n,
                     (SELECT max(version) FROM checkpoints c WHERE c.session_id = s.id) AS v
                   FROM sessions s WHERE s.id = ?""",
                (session_id,),
            ).fetchone()
        if row is None:
            raise NotFound(f"unknown session {session_id!r}")
        return SessionInfo(
            id=row["id"], created=row["created"], source_format=row["source_format"],
            context_limit=row["context_limit"], meta=json.loads(row["meta"]),
            message_count=row["n"], latest_checkpoint=row["v"],
        )

    def list_sessions(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT id FROM sessions ORDER BY created, id")]

    def get_session(self, session_id: str) -> Session:
        """All messages in append order, prune markers applied as `compacted_at` /
        `compacted_tokens` on their tool results."""
        with self.snapshot() as conn:
            srow = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if srow is None:
                raise NotFound(f"unknown session {session_id!r}")
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            marks = self.marks(conn, session_id)
        messages = [self.apply_marks(Message.model_validate_json(r["body"]), marks) for r in rows]
        return Session(id=session_id, messages=messages, source_format=srow["source_format"],
                       meta=json.loads(srow["meta"]))

    @staticmethod
    def marks(conn: sqlite3.Connection, session_id: str) -> Marks:
        return {
            (r["message_id"], r["call_id"]): (r["compacted_at"], r["tokens"])
            for r in conn.execute(
                "SELECT message_id, call_id, compacted_at, tokens FROM prune_markers WHERE session_id = ?",
                (session_id,),
            )
        }

    @staticmethod
    def apply_marks(message: Message, marks: Marks) -> Message:
        """The message with its prune markers as `compacted_at` / `compacted_tokens`."""
        if not marks or not message.tool_results:
            return message
        parts: list[Any] = []
        for p in message.parts:
            mark = marks.get((message.id, p.call_id)) if isinstance(p, ToolResultPart) else None
            if mark is not None:
                p = p.model_copy(update={"compacted_at": mark[0], "compacted_tokens": mark[1]})
            parts.append(p)
        return message.model_copy(update={"parts": parts})

    # -- messages

    def append_messages(self, session_id: str, messages: Iterable[Message]) -> list[str]:
        """Append in order, all or nothing. Returns the ids actually added: a re-sent id
        with identical content is skipped; with different content the whole batch fails
        with Conflict (never a silent overwrite). `compacted_at` on an incoming tool
        result (from a client echoing a pruned view, or `prune`'s marked copy) is
        recorded as a prune marker, not as content."""
        added: list[str] = []
        now = self._clock()
        with self._write() as conn:
            self.require_session(conn, session_id)
            seen: dict[str, str] = {}
            for incoming in messages:
                message = _unpruned(incoming)
                canon = _canonical(message)
                if message.id in seen:
                    if seen[message.id] != canon:
                        raise Conflict(f"message {message.id!r} appears twice in the batch with different content")
                    continue
                seen[message.id] = canon
                row = conn.execute(
                    "SELECT body FROM messages WHERE session_id = ? AND message_id = ?",
                    (session_id, message.id),
                ).fetchone()
                if row is not None:
                    # Re-canonicalize the stored body through the model so a field added
                    # to Message later (with a default) is not mistaken for a change.
                    if _canonical(Message.model_validate_json(row["body"])) != canon:
                        raise Conflict(
                            f"message {message.id!r} already stored with different content; messages are append-only"
                        )
                else:
                    cur = conn.execute(
                        """INSERT INTO messages(session_id, message_id, role, body, content_hash, created)
                           VALUES (?,?,?,?,?,?)""",
                        (session_id, message.id, message.role, canon, message.content_key(), now),
                    )
                    conn.execute(
                        "INSERT INTO messages_fts(rowid, session_id, text) VALUES (?,?,?)",
                        (cur.lastrowid, session_id, search_text(message)),
                    )
                    added.append(message.id)
                for part in incoming.tool_results:
                    if part.compacted_at is not None:
                        conn.execute(
                            """INSERT OR IGNORE INTO prune_markers(session_id, message_id, call_id, compacted_at, tokens)
                               VALUES (?,?,?,?,?)""",
                            (session_id, message.id, part.call_id, part.compacted_at, part.compacted_tokens),
                        )
        return added

    # -- pruning

    def mark_pruned(
        self, session_id: str, markers: Iterable[PruneMarker], *, at: float | None = None
    ) -> list[PruneMarker]:
        """Mark tool results as compacted, all or nothing. Marking an already-pruned
        result keeps the first mark (pruning is idempotent). Returns the new marks."""
        at = self._clock() if at is None else at
        added: list[PruneMarker] = []
        with self._write() as conn:
            self.require_session(conn, session_id)
            for m in markers:
                row = conn.execute(
                    "SELECT body FROM messages WHERE session_id = ? AND message_id = ?",
                    (session_id, m.message_id),
                ).fetchone()
                if row is None:
                    raise NotFound(f"unknown message {m.message_id!r} in session {session_id!r}")
                calls = {p.call_id for p in Message.model_validate_json(row["body"]).tool_results}
                if m.call_id not in calls:
                    raise StoreError(f"message {m.message_id!r} has no tool result for call {m.call_id!r}")
                cur = conn.execute(
                    """INSERT OR IGNORE INTO prune_markers(session_id, message_id, call_id, compacted_at, tokens)
                       VALUES (?,?,?,?,?)""",
                    (session_id, m.message_id, m.call_id, at, m.tokens),
                )
                if cur.rowcount:
                    added.append(PruneMarker(m.message_id, m.call_id, m.tokens, at))
        return added

    def prune_markers(self, session_id: str) -> list[PruneMarker]:
        with self._lock:
            return [
                PruneMarker(r["message_id"], r["call_id"], r["tokens"], r["compacted_at"])
                for r in self._conn.execute(
                    """SELECT p.* FROM prune_markers p
                       JOIN messages m ON m.session_id = p.session_id AND m.message_id = p.message_id
                       WHERE p.session_id = ? ORDER BY m.seq, p.call_id""",
                    (session_id,),
                )
            ]

    # -- checkpoints and audits

    def add_checkpoint(
        self,
        session_id: str,
        checkpoint: Mapping[str, Any],
        parent_version: int | None,
        *,
        summary_tokens: int | None = None,
        boundary_message_id: str | None = None,
        audit: Audit | None = None,
    ) -> int:
        """Append the next link of the chain and return its version (1, 2, ...).
        `parent_version` must be the current latest (None for the first): a compaction
        built on a stale checkpoint raises Conflict instead of forking the chain. With
        `audit`, the audit record is written in the same transaction."""
        with self._write() as conn:
            self.require_session(conn, session_id)
            latest = conn.execute(
                "SELECT max(version) FROM checkpoints WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            if parent_version != latest:
                raise Conflict(
                    f"checkpoint parent {parent_version} is not the latest version ({latest}) of session {session_id!r}"
                )
            version = (latest or 0) + 1
            try:
                conn.execute(
                    """INSERT INTO checkpoints(session_id, version, parent_version, created, body,
                                               summary_tokens, boundary_message_id)
                       VALUES (?,?,?,?,?,?,?)""",
                    (session_id, version, parent_version, self._clock(), _dumps(dict(checkpoint)),
                     summary_tokens, boundary_message_id),
                )
            except sqlite3.IntegrityError as exc:  # the boundary is not a stored message
                raise StoreError(f"checkpoint boundary {boundary_message_id!r}: {exc}") from exc
            if audit is not None:
                self._insert_audit(conn, session_id, version, audit)
        return version

    def latest_checkpoint(self, session_id: str) -> StoredCheckpoint | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM checkpoints WHERE session_id = ? ORDER BY version DESC LIMIT 1", (session_id,)
            ).fetchone()
        return self._checkpoint(row) if row else None

    def checkpoints(self, session_id: str) -> list[StoredCheckpoint]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM checkpoints WHERE session_id = ? ORDER BY version", (session_id,)
            ).fetchall()
        return [self._checkpoint(r) for r in rows]

    @staticmethod
    def _checkpoint(row: sqlite3.Row) -> StoredCheckpoint:
        return StoredCheckpoint(
            session_id=row["session_id"], version=row["version"], parent_version=row["parent_version"],
            created=row["created"], data=json.loads(row["body"]), summary_tokens=row["summary_tokens"],
            boundary_message_id=row["boundary_message_id"],
        )

    def _insert_audit(self, conn: sqlite3.Connection, session_id: str, version: int | None, audit: Audit) -> int:
        try:
            cur = conn.execute(
                """INSERT INTO audits(session_id, checkpoint_version, created, dropped_message_ids,
                                      tokens_before, tokens_after, removed_by_verification, timings)
                   VALUES (?,?,?,?,?,?,?,?)""",
                (session_id, version, self._clock(), _dumps(list(audit.dropped_message_ids)),
                 audit.tokens_before, audit.tokens_after, _dumps(list(audit.removed_by_verification)),
                 _dumps(dict(audit.timings))),
            )
        except sqlite3.IntegrityError as exc:
            raise NotFound(f"no checkpoint v{version} in session {session_id!r}") from exc
        return int(cur.lastrowid or 0)

    def audits(self, session_id: str) -> list[AuditRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM audits WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
        return [
            AuditRecord(
                id=r["id"], session_id=r["session_id"], checkpoint_version=r["checkpoint_version"],
                created=r["created"],
                audit=Audit(
                    dropped_message_ids=json.loads(r["dropped_message_ids"]),
                    tokens_before=r["tokens_before"], tokens_after=r["tokens_after"],
                    removed_by_verification=json.loads(r["removed_by_verification"]),
                    timings=json.loads(r["timings"]),
                ),
            )
            for r in rows
        ]

    # -- jobs

    def create_job(
        self, kind: str, *, session_id: str | None = None, lane: str = "default", job_id: str | None = None
    ) -> JobRecord:
        job_id = job_id or uuid.uuid4().hex
        with self._write() as conn:
            if session_id is not None:
                self.require_session(conn, session_id)
            try:
                conn.execute(
                    "INSERT INTO jobs(id, session_id, kind, lane, status, created) VALUES (?,?,?,?,'queued',?)",
                    (job_id, session_id, kind, lane, self._clock()),
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"job {job_id!r} already exists") from exc
        return self.get_job(job_id)

    def update_job(
        self, job_id: str, status: JobStatus, *, error: str | None = None, result: Any = None
    ) -> JobRecord:
        """Move a job along queued -> running -> done/failed/cancelled (or queued ->
        failed/cancelled). Timestamps are set by the store; terminal jobs are final."""
        try:
            status = JobStatus(status)
        except ValueError:
            raise StoreError(f"unknown job status {status!r}") from None
        now = self._clock()
        with self._write() as conn:
            row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"unknown job {job_id!r}")
            if status not in JOB_TRANSITIONS.get(JobStatus(row["status"]), frozenset()):
                raise Conflict(f"job {job_id!r} cannot go from {row['status']} to {status}")
            conn.execute(
                """UPDATE jobs SET status = ?,
                       started = CASE WHEN ? = 'running' THEN ? ELSE started END,
                       finished = CASE WHEN ? IN ('done','failed','cancelled') THEN ? ELSE finished END,
                       error = coalesce(?, error),
                       result = coalesce(?, result)
                   WHERE id = ?""",
                (status.value, status.value, now, status.value, now, error, None if result is None else _dumps(result), job_id),
            )
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobRecord:
        with self._lock:
            row = self._conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"unknown job {job_id!r}")
        return self._job(row)

    def list_jobs(self, *, session_id: str | None = None, status: JobStatus | None = None) -> list[JobRecord]:
        """Oldest first: the order a restarted worker should re-queue `queued` jobs in."""
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if session_id is not None:
            sql, args = sql + " AND session_id = ?", [*args, session_id]
        if status is not None:
            sql, args = sql + " AND status = ?", [*args, JobStatus(status).value]
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY created, rowid", args).fetchall()
        return [self._job(r) for r in rows]

    def fail_interrupted_jobs(self) -> list[str]:
        """At start-up, before any worker runs: a job still `running` was cut off by a
        crash or kill. It is failed, not retried: its half-done work is gone and a blind
        retry could loop on whatever killed it. Returns the job ids."""
        with self._write() as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM jobs WHERE status = 'running' ORDER BY created")]
            conn.execute(
                "UPDATE jobs SET status = 'failed', finished = ?, error = ? WHERE status = 'running'",
                (self._clock(), INTERRUPTED),
            )
        return ids

    @staticmethod
    def _job(row: sqlite3.Row) -> JobRecord:
        return JobRecord(
            id=row["id"], session_id=row["session_id"], kind=row["kind"], lane=row["lane"],
            status=JobStatus(row["status"]), created=row["created"], started=row["started"],
            finished=row["finished"], error=row["error"],
            result=None if row["result"] is None else json.loads(row["result"]),
        )

    # -- token cache

    def token_cache_get_many(self, content_hashes: Iterable[str], model_key: str) -> dict[str, int]:
        """Counts for the hashes already known; the caller counts only the rest."""
        hashes = list(dict.fromkeys(content_hashes))
        out: dict[str, int] = {}
        with self._lock:
            for i in range(0, len(hashes), 500):  # stay under SQLite's bound-parameter limit
                chunk = hashes[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for r in self._conn.execute(
                    f"SELECT content_hash, tokens FROM token_cache WHERE model_key = ? AND content_hash IN ({marks})",
                    [model_key, *chunk],
                ):
                    out[r[0]] = int(r[1])
        return out

    def token_cache_put(self, content_hash: str, model_key: str, tokens: int) -> None:
        with self._write() as conn:
            conn.execute(
                """INSERT INTO token_cache(content_hash, model_key, tokens) VALUES (?,?,?)
                   ON CONFLICT(content_hash, model_key) DO UPDATE SET tokens = excluded.tokens""",
                (content_hash, model_key, int(tokens)),
            )
