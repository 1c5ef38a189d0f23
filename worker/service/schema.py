"""The store's SQLite schema and its migrations, and the full-text tokenizer it is built with.

Apart from the Store so that the SQL that enforces the invariants (append-only messages,
immutable checkpoints, legal job statuses) reads in one place. Migrations are append-only:
a released step never changes; a new schema version appends a step to `migrate`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from .records import StoreError

SCHEMA_VERSION = 1
TRIGRAM_MIN_SQLITE = (3, 34, 0)  # the first SQLite whose FTS5 has the trigram tokenizer

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
