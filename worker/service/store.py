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
- Retrieval responses (`search`, `around`) are capped at 20 KiB of JSON, and say so when
  they had to cut.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from .session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart

SCHEMA_VERSION = 1
RESPONSE_CAP_BYTES = 20 * 1024  # MiMo-Code's cap for one history response
TRIGRAM_MIN_SQLITE = (3, 34, 0)
SNIPPET_CHARS = 160  # context on each side of the first hit
HIT_OPEN, HIT_CLOSE = "«", "»"

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
JOB_STATUSES: tuple[str, ...] = ("queued", "running", "done", "failed", "cancelled")
TERMINAL: frozenset[str] = frozenset({"done", "failed", "cancelled"})
# Allowed job transitions; a terminal job never changes again (a retry is a new job).
_TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "failed", "cancelled"}),
    "running": frozenset({"done", "failed", "cancelled"}),
}
INTERRUPTED = "interrupted by restart"


class StoreError(Exception):
    """Anything the store refuses. Subclasses let the HTTP layer pick 404 vs 409."""


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """A write that contradicts stored state: a re-sent message id with different
    content, a stale checkpoint parent, an illegal job transition, a duplicate id."""


# ----------------------------------------------------------------------------- records


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
class Checkpoint:
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
class Job:
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


class SearchHit(TypedDict):
    message_id: str
    seq: int
    role: str
    score: float  # -bm25: higher is better; 0.0 for the LIKE fallback
    snippet: str
    truncated: bool


class SearchResponse(TypedDict):
    session_id: str
    query: str
    mode: Literal["bm25", "bm25-any", "like", "empty"]
    note: str | None
    hits: list[SearchHit]
    truncated: bool


class AroundResponse(TypedDict):
    session_id: str
    message_id: str
    radius: int
    messages: list[dict[str, Any]]  # Message JSON + "seq" + "truncated"
    truncated: bool


# ----------------------------------------------------------------------------- helpers


def default_db_path() -> Path:
    """Per-user data dir; COMPACTD_DATA_DIR overrides it (tests, read-only homes)."""
    override = os.environ.get("COMPACTD_DATA_DIR")
    if override:
        d = Path(override).expanduser()
    else:
        from platformdirs import user_data_dir

        d = Path(user_data_dir("compactd"))
    return d / "compactd.sqlite3"


def fts_tokenizer_available() -> str:
    """'trigram' where SQLite supports it (>= 3.34, FTS5 built in), else 'unicode61'.
    unicode61 splits on spaces only, so CJK text is found only as whole runs."""
    if sqlite3.sqlite_version_info >= TRIGRAM_MIN_SQLITE and _probe_fts("trigram"):
        return "trigram"
    if _probe_fts("unicode61"):
        return "unicode61"
    raise StoreError(f"SQLite {sqlite3.sqlite_version} was built without FTS5; compactd needs it")


def _probe_fts(tokenizer: str) -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE probe USING fts5(x, tokenize='{tokenizer}')")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


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


def _fts_phrase(term: str) -> str:
    # A double-quoted FTS5 string is a literal phrase: no operator, column filter or
    # bracket inside it means anything, so `Decimal('58.47')` or `a:b` cannot be a
    # syntax error. The only escape is doubling the quote itself.
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + re.sub(r"([\\%_])", r"\\\1", term) + "%"


def _cut_middle(text: str, keep_bytes: int) -> str:
    """Keep about keep_bytes of UTF-8 from the head and the tail (two thirds head): tool
    outputs put the command on top and the error at the bottom, so both ends are worth
    more than the middle. Bytes, not chars: the cap is in bytes and CJK is 3 per char."""
    raw = text.encode()
    if keep_bytes >= len(raw):
        return text
    keep_bytes = max(keep_bytes, 0)
    head_n = keep_bytes * 2 // 3
    tail_n = keep_bytes - head_n
    # errors="ignore" drops a character split by the cut instead of emitting U+FFFD.
    head = raw[:head_n].decode(errors="ignore")
    tail = raw[len(raw) - tail_n :].decode(errors="ignore") if tail_n else ""
    cut = len(text) - len(head) - len(tail)
    return f"{head}…[{cut} chars truncated]…{tail}"


def _snippet(text: str, terms: list[str]) -> str:
    """A window around the first occurrence of a query term, with the terms marked.
    Ours rather than FTS5's snippet(): with the trigram tokenizer that counts trigrams,
    not words, and cuts through highlights."""
    folded = text.casefold()
    first = min((i for t in terms if (i := folded.find(t.casefold())) >= 0), default=0)
    start = max(0, first - SNIPPET_CHARS)
    end = min(len(text), first + SNIPPET_CHARS)
    window = text[start:end]
    spans: list[tuple[int, int]] = []
    wfold = window.casefold()
    for t in sorted(terms, key=len, reverse=True):
        tf = t.casefold()
        i = wfold.find(tf)
        while tf and i >= 0:
            if all(i >= e or i + len(tf) <= s for s, e in spans):
                spans.append((i, i + len(tf)))
            i = wfold.find(tf, i + len(tf))
    out, pos = [], 0
    for s, e in sorted(spans):
        out += [window[pos:s], HIT_OPEN, window[s:e], HIT_CLOSE]
        pos = e
    out.append(window[pos:])
    return ("…" if start > 0 else "") + "".join(out) + ("…" if end < len(text) else "")


def _fit_message(msg: dict[str, Any], max_bytes: int) -> dict[str, Any] | None:
    """Shrink the strings of a message dict (head + tail kept) until its JSON fits
    max_bytes; None when even emptied strings would not fit. The longest strings are cut
    down to a common level, so one huge tool output does not wipe out the short text
    next to it."""
    msg = json.loads(json.dumps(msg))  # private deep copy
    for _ in range(16):
        excess = _json_size(msg) - max_bytes
        if excess <= 0:
            return msg
        slots: list[tuple[int, dict[str, Any], str]] = []
        for part in msg.get("parts", []):
            if isinstance(part.get("arguments"), dict):
                part["arguments"] = json.dumps(part["arguments"], ensure_ascii=False)
            for key in ("text", "output", "arguments"):
                if isinstance(part.get(key), str) and len(part[key]) > 64:
                    slots.append((_json_size(part[key]), part, key))
        if not slots:
            return None
        slots.sort(key=lambda s: s[0], reverse=True)
        # Water level: cut the k longest to `level` JSON bytes each, with k the first
        # count for which the level stays above the next string (40 pays for a marker).
        for k in range(1, len(slots) + 1):
            level = (sum(s[0] for s in slots[:k]) - excess - 40 * k) // k
            if k == len(slots) or level >= slots[k][0]:
                break
        for encoded, part, key in slots[:k]:
            # Scale JSON bytes (escapes included) to raw UTF-8 bytes by this string's
            # ratio; cut at least 64 bytes so every round makes progress.
            raw = len(part[key].encode())
            part[key] = _cut_middle(part[key], min(int(level * raw / encoded), raw - 64))
        msg["truncated"] = True
    return None


# ----------------------------------------------------------------------------- schema


def _schema_v1(tokenizer: str) -> list[str]:
    return [
        """CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            created REAL NOT NULL,
            source_format TEXT NOT NULL DEFAULT '',
            context_limit INTEGER,
            meta TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            message_id TEXT NOT NULL,
            role TEXT NOT NULL,
            body TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            tokens INTEGER,
            created REAL NOT NULL,
            UNIQUE (session_id, message_id)
        )""",
        # Only `tokens` (a derived count) may change; the message itself never does.
        """CREATE TRIGGER messages_append_only_update
           BEFORE UPDATE OF seq, session_id, message_id, role, body, content_hash, created ON messages
           BEGIN SELECT RAISE(ABORT, 'messages are append-only: content cannot be updated'); END""",
        """CREATE TRIGGER messages_append_only_delete BEFORE DELETE ON messages
           BEGIN SELECT RAISE(ABORT, 'messages are append-only: they cannot be deleted'); END""",
        """CREATE TABLE prune_markers (
            session_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            compacted_at REAL NOT NULL,
            tokens INTEGER,
            PRIMARY KEY (session_id, message_id, call_id),
            FOREIGN KEY (session_id, message_id) REFERENCES messages(session_id, message_id)
        )""",
        """CREATE TABLE checkpoints (
            session_id TEXT NOT NULL REFERENCES sessions(id),
            version INTEGER NOT NULL,
            parent_version INTEGER,
            created REAL NOT NULL,
            body TEXT NOT NULL,
            summary_tokens INTEGER,
            boundary_message_id TEXT,
            PRIMARY KEY (session_id, version),
            FOREIGN KEY (session_id, parent_version) REFERENCES checkpoints(session_id, version),
            FOREIGN KEY (session_id, boundary_message_id) REFERENCES messages(session_id, message_id)
        )""",
        # A chain whose links can change cannot be audited: checkpoints are immutable too.
        """CREATE TRIGGER checkpoints_immutable_update BEFORE UPDATE ON checkpoints
           BEGIN SELECT RAISE(ABORT, 'checkpoints are immutable'); END""",
        """CREATE TRIGGER checkpoints_immutable_delete BEFORE DELETE ON checkpoints
           BEGIN SELECT RAISE(ABORT, 'checkpoints are immutable'); END""",
        """CREATE TABLE audits (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            checkpoint_version INTEGER,
            created REAL NOT NULL,
            dropped_message_ids TEXT NOT NULL,
            tokens_before INTEGER,
            tokens_after INTEGER,
            removed_by_verification TEXT NOT NULL,
            timings TEXT NOT NULL,
            FOREIGN KEY (session_id, checkpoint_version) REFERENCES checkpoints(session_id, version)
        )""",
        """CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            session_id TEXT REFERENCES sessions(id),
            kind TEXT NOT NULL,
            lane TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('queued','running','done','failed','cancelled')),
            created REAL NOT NULL,
            started REAL,
            finished REAL,
            error TEXT,
            result TEXT
        )""",
        "CREATE INDEX jobs_by_status ON jobs(status, created)",
        """CREATE TABLE token_cache (
            content_hash TEXT NOT NULL,
            model_key TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            PRIMARY KEY (content_hash, model_key)
        ) WITHOUT ROWID""",
        # rowid = messages.seq. The FTS table keeps its own copy of the text so bm25()
        # and our snippets need no join back through the JSON body.
        f"""CREATE VIRTUAL TABLE messages_fts USING fts5(
            session_id UNINDEXED, text, tokenize='{tokenizer}'
        )""",
    ]


def migrate(conn: sqlite3.Connection, tokenizer: str) -> int:
    """Bring the schema to SCHEMA_VERSION, one transaction per step; returns the version.
    A later version's steps append to `steps`; existing steps never change."""
    steps: list[Callable[[sqlite3.Connection], None]] = [
        lambda c: _run_v1(c, tokenizer),
    ]
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise StoreError(f"database schema v{current} is newer than this compactd (v{SCHEMA_VERSION})")
    for version in range(current + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            if conn.execute("PRAGMA user_version").fetchone()[0] >= version:
                conn.execute("ROLLBACK")
                continue
            steps[version - 1](conn)
            conn.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _run_v1(conn: sqlite3.Connection, tokenizer: str) -> None:
    for statement in _schema_v1(tokenizer):
        conn.execute(statement)
    conn.execute("INSERT INTO store_meta(key, value) VALUES ('fts_tokenizer', ?)", (tokenizer,))


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
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One read transaction = one consistent snapshot across several SELECTs.
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    def _require_session(self, conn: sqlite3.Connection, session_id: str) -> None:
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
            self._require_session(conn, session_id)
            if context_limit is not None:
                conn.execute("UPDATE sessions SET context_limit = ? WHERE id = ?", (context_limit, session_id))
            if meta is not None:
                conn.execute("UPDATE sessions SET meta = ? WHERE id = ?", (_dumps(dict(meta)), session_id))
        return self.session_info(session_id)

    def session_info(self, session_id: str) -> SessionInfo:
        with self._read() as conn:
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
        with self._read() as conn:
            srow = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if srow is None:
                raise NotFound(f"unknown session {session_id!r}")
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            marks = self._marks(conn, session_id)
        messages = [self._apply_marks(Message.model_validate_json(r["body"]), marks) for r in rows]
        return Session(id=session_id, messages=messages, source_format=srow["source_format"],
                       meta=json.loads(srow["meta"]))

    @staticmethod
    def _marks(conn: sqlite3.Connection, session_id: str) -> dict[tuple[str, str], tuple[float, int | None]]:
        return {
            (r["message_id"], r["call_id"]): (r["compacted_at"], r["tokens"])
            for r in conn.execute(
                "SELECT message_id, call_id, compacted_at, tokens FROM prune_markers WHERE session_id = ?",
                (session_id,),
            )
        }

    @staticmethod
    def _apply_marks(message: Message, marks: Mapping[tuple[str, str], tuple[float, int | None]]) -> Message:
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
            self._require_session(conn, session_id)
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

    def set_message_tokens(self, session_id: str, counts: Mapping[str, int]) -> None:
        """Record exact token counts (message id -> tokens); the only mutable column."""
        with self._write() as conn:
            for mid, tokens in counts.items():
                cur = conn.execute(
                    "UPDATE messages SET tokens = ? WHERE session_id = ? AND message_id = ?",
                    (tokens, session_id, mid),
                )
                if cur.rowcount == 0:
                    raise NotFound(f"unknown message {mid!r} in session {session_id!r}")

    def message_tokens(self, session_id: str) -> dict[str, int | None]:
        with self._lock:
            return {
                r[0]: r[1]
                for r in self._conn.execute(
                    "SELECT message_id, tokens FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
                )
            }

    # -- pruning

    def mark_pruned(
        self, session_id: str, markers: Iterable[PruneMarker], *, at: float | None = None
    ) -> list[PruneMarker]:
        """Mark tool results as compacted, all or nothing. Marking an already-pruned
        result keeps the first mark (pruning is idempotent). Returns the new marks."""
        at = self._clock() if at is None else at
        added: list[PruneMarker] = []
        with self._write() as conn:
            self._require_session(conn, session_id)
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
            self._require_session(conn, session_id)
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

    def latest_checkpoint(self, session_id: str) -> Checkpoint | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM checkpoints WHERE session_id = ? ORDER BY version DESC LIMIT 1", (session_id,)
            ).fetchone()
        return self._checkpoint(row) if row else None

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM checkpoints WHERE session_id = ? ORDER BY version", (session_id,)
            ).fetchall()
        return [self._checkpoint(r) for r in rows]

    @staticmethod
    def _checkpoint(row: sqlite3.Row) -> Checkpoint:
        return Checkpoint(
            session_id=row["session_id"], version=row["version"], parent_version=row["parent_version"],
            created=row["created"], data=json.loads(row["body"]), summary_tokens=row["summary_tokens"],
            boundary_message_id=row["boundary_message_id"],
        )

    def add_audit(self, session_id: str, checkpoint_version: int | None, audit: Audit) -> int:
        """Record one compaction (checkpoint_version None: a prune-only pass)."""
        with self._write() as conn:
            self._require_session(conn, session_id)
            return self._insert_audit(conn, session_id, checkpoint_version, audit)

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
    ) -> Job:
        job_id = job_id or uuid.uuid4().hex
        with self._write() as conn:
            if session_id is not None:
                self._require_session(conn, session_id)
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
    ) -> Job:
        """Move a job along queued -> running -> done/failed/cancelled (or queued ->
        failed/cancelled). Timestamps are set by the store; terminal jobs are final."""
        if status not in JOB_STATUSES:
            raise StoreError(f"unknown job status {status!r}")
        now = self._clock()
        with self._write() as conn:
            row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"unknown job {job_id!r}")
            if status not in _TRANSITIONS.get(row["status"], frozenset()):
                raise Conflict(f"job {job_id!r} cannot go from {row['status']} to {status}")
            conn.execute(
                """UPDATE jobs SET status = ?,
                       started = CASE WHEN ? = 'running' THEN ? ELSE started END,
                       finished = CASE WHEN ? IN ('done','failed','cancelled') THEN ? ELSE finished END,
                       error = coalesce(?, error),
                       result = coalesce(?, result)
                   WHERE id = ?""",
                (status, status, now, status, now, error, None if result is None else _dumps(result), job_id),
            )
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> Job:
        with self._lock:
            row = self._conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"unknown job {job_id!r}")
        return self._job(row)

    def list_jobs(self, *, session_id: str | None = None, status: JobStatus | None = None) -> list[Job]:
        """Oldest first: the order a restarted worker should re-queue `queued` jobs in."""
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if session_id is not None:
            sql, args = sql + " AND session_id = ?", [*args, session_id]
        if status is not None:
            sql, args = sql + " AND status = ?", [*args, status]
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
    def _job(row: sqlite3.Row) -> Job:
        return Job(
            id=row["id"], session_id=row["session_id"], kind=row["kind"], lane=row["lane"],
            status=row["status"], created=row["created"], started=row["started"],
            finished=row["finished"], error=row["error"],
            result=None if row["result"] is None else json.loads(row["result"]),
        )

    # -- token cache

    def token_cache_get(self, content_hash: str, model_key: str) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT tokens FROM token_cache WHERE content_hash = ? AND model_key = ?", (content_hash, model_key)
            ).fetchone()
        return None if row is None else int(row[0])

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

    # -- retrieval

    def search(self, session_id: str, query: str, limit: int = 20) -> SearchResponse:
        """Full-text search over one session's raw history (tool outputs included),
        ranked by bm25. Whitespace-separated terms must all occur (as substrings with the
        trigram tokenizer); if none matches all, any-term matching is tried. Terms shorter
        than 3 characters cannot use the trigram index: they are matched with LIKE (mode
        'like' when no term is long enough). The JSON response stays under 20 KiB."""
        limit = max(1, min(int(limit), 100))
        # FTS5 cannot hold a NUL inside a phrase ("unterminated string"): it separates terms.
        terms = list(dict.fromkeys(query.replace("\x00", " ").split()))
        response: SearchResponse = {
            "session_id": session_id, "query": query, "mode": "empty", "note": None, "hits": [], "truncated": False,
        }
        with self._read() as conn:
            self._require_session(conn, session_id)
            if not terms:
                response["note"] = "empty query"
                return response
            if self.fts_tokenizer == "trigram":
                long_terms = [t for t in terms if len(t) >= 3]
                short_terms = [t for t in terms if len(t) < 3]
            else:
                long_terms, short_terms = terms, []
                response["note"] = (
                    f"SQLite {sqlite3.sqlite_version} has no trigram tokenizer: matching whole words only, "
                    "so CJK text is found only as complete space-separated runs"
                )
            if long_terms:
                rows = self._fts_rows(conn, session_id, " AND ".join(map(_fts_phrase, long_terms)), short_terms, limit)
                response["mode"] = "bm25"
                if not rows and len(terms) > 1:
                    rows = self._fts_rows(conn, session_id, " OR ".join(map(_fts_phrase, long_terms)), [], limit)
                    response["mode"] = "bm25-any"
            else:
                rows = self._like_rows(conn, session_id, short_terms, limit)
                response["mode"] = "like"
                response["note"] = "query shorter than 3 characters: substring scan (LIKE), newest first, no ranking"
        return self._cap_hits(response, [
            SearchHit(message_id=r["message_id"], seq=r["seq"], role=r["role"],
                      score=-r["rank"] if r["rank"] is not None else 0.0,
                      snippet=_snippet(r["text"], terms), truncated=False)
            for r in rows
        ])

    @staticmethod
    def _fts_rows(conn: sqlite3.Connection, session_id: str, match: str, short_terms: list[str], limit: int) -> list[sqlite3.Row]:
        likes = "".join(" AND (f.text || '') LIKE ? ESCAPE '\\'" for _ in short_terms)
        return conn.execute(
            f"""SELECT m.message_id, m.seq, m.role, f.text, bm25(messages_fts) AS rank
                FROM messages_fts f JOIN messages m ON m.seq = f.rowid
                WHERE messages_fts MATCH ? AND f.session_id = ?{likes}
                ORDER BY rank, m.seq DESC LIMIT ?""",
            [match, session_id, *map(_like_pattern, short_terms), limit],
        ).fetchall()

    @staticmethod
    def _like_rows(conn: sqlite3.Connection, session_id: str, terms: list[str], limit: int) -> list[sqlite3.Row]:
        # `text || ''` keeps the LIKE away from the trigram index: for patterns under
        # 3 characters SQLite 3.40's trigram LIKE misses multi-byte (CJK) matches.
        likes = " AND ".join("(f.text || '') LIKE ? ESCAPE '\\'" for _ in terms)
        return conn.execute(
            f"""SELECT m.message_id, m.seq, m.role, f.text, NULL AS rank
                FROM messages_fts f JOIN messages m ON m.seq = f.rowid
                WHERE f.session_id = ? AND {likes}
                ORDER BY m.seq DESC LIMIT ?""",
            [session_id, *map(_like_pattern, terms), limit],
        ).fetchall()

    @staticmethod
    def _cap_hits(response: SearchResponse, hits: list[SearchHit]) -> SearchResponse:
        budget = RESPONSE_CAP_BYTES - _json_size(response) - 16
        for hit in hits:
            size = _json_size(hit) + 2  # ", " between list items
            if size > budget:
                # Shorten this snippet to what is left, if enough is left to be useful.
                keep = len(hit["snippet"].encode()) - (size - budget) - 40
                if keep < 120:
                    response["truncated"] = True
                    break
                hit["snippet"] = _cut_middle(hit["snippet"], keep)
                hit["truncated"] = True
                response["truncated"] = True
                size = _json_size(hit) + 2
            response["hits"].append(hit)
            budget -= size
        return response

    def around(self, session_id: str, message_id: str, radius: int = 3) -> AroundResponse:
        """The raw messages around one id (radius before and after), tool outputs
        verbatim even when pruned (that is how a pruned result is fetched back). The
        JSON response stays under 20 KiB: the target comes first, then neighbours
        nearest first; long strings are cut in the middle and marked `truncated`."""
        radius = max(0, min(int(radius), 50))
        with self._read() as conn:
            target = conn.execute(
                "SELECT seq FROM messages WHERE session_id = ? AND message_id = ?", (session_id, message_id)
            ).fetchone()
            if target is None:
                self._require_session(conn, session_id)
                raise NotFound(f"unknown message {message_id!r} in session {session_id!r}")
            seq = target["seq"]
            rows = [
                *conn.execute(
                    "SELECT seq, body FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
                    (session_id, seq, radius),
                ),
                *conn.execute(
                    "SELECT seq, body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                    (session_id, seq, radius + 1),
                ),
            ]
            marks = self._marks(conn, session_id)
        response: AroundResponse = {
            "session_id": session_id, "message_id": message_id, "radius": radius, "messages": [], "truncated": False,
        }
        budget = RESPONSE_CAP_BYTES - _json_size(response) - 16
        rows.sort(key=lambda r: r["seq"])
        at = next(i for i, r in enumerate(rows) if r["seq"] == seq)
        # The target may not starve its neighbours entirely: 1 KiB is held back for each
        # (up to half the budget), enough to show the call that produced an output.
        reserve = min(1024 * (len(rows) - 1), budget // 2)
        chosen: list[tuple[int, dict[str, Any]]] = []
        # Target first, then by distance (position in the session, not seq: seq is
        # global across sessions); if the budget runs out, the far ones go.
        for i in sorted(range(len(rows)), key=lambda i: (abs(i - at), i)):
            row = rows[i]
            msg = self._apply_marks(Message.model_validate_json(row["body"]), marks).model_dump(mode="json")
            msg["seq"], msg["truncated"] = row["seq"], False
            room = budget - 2 - (reserve if i == at else 0)
            fitted = _fit_message(msg, room) if room >= 256 else None
            if fitted is None:
                response["truncated"] = True
                continue
            if fitted["truncated"]:
                response["truncated"] = True
            chosen.append((row["seq"], fitted))
            budget -= _json_size(fitted) + 2
        response["messages"] = [m for _, m in sorted(chosen, key=lambda c: c[0])]
        return response
