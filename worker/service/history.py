"""Reading a session's raw history back: full-text search (BM25 over everything the agent
saw, tool outputs included), the messages around one id, and the snippet and size fitting
that keeps every answer under 20 KiB of JSON (and says so when it had to cut).

Apart from the store, which only persists: these are read paths with their own ranking and
fitting rules, served by `compactd history` and the /history routes.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any, Literal, TypedDict

from ..session import CITED_ID_MIN_CHARS, Message
from .records import NotFound, StoreError
from .store import Store

RESPONSE_CAP_BYTES = 20 * 1024  # MiMo-Code's cap for one history response
SNIPPET_CHARS = 160  # context on each side of the first hit
HIT_OPEN, HIT_CLOSE = "«", "»"  # marks around a query term in a snippet


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


# ----------------------------------------------------------------------------- fitting


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


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


# ----------------------------------------------------------------------------- retrieval


def search(store: Store, session_id: str, query: str, limit: int = 20) -> SearchResponse:
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
    with store.snapshot() as conn:
        store.require_session(conn, session_id)
        if not terms:
            response["note"] = "empty query"
            return response
        if store.fts_tokenizer == "trigram":
            long_terms = [t for t in terms if len(t) >= 3]
            short_terms = [t for t in terms if len(t) < 3]
        else:
            long_terms, short_terms = terms, []
            response["note"] = (
                f"SQLite {sqlite3.sqlite_version} has no trigram tokenizer: matching whole words only, "
                "so CJK text is found only as complete space-separated runs"
            )
        if long_terms:
            rows = _fts_rows(conn, session_id, " AND ".join(map(_fts_phrase, long_terms)), short_terms, limit)
            response["mode"] = "bm25"
            if not rows and len(terms) > 1:
                rows = _fts_rows(conn, session_id, " OR ".join(map(_fts_phrase, long_terms)), [], limit)
                response["mode"] = "bm25-any"
        else:
            rows = _like_rows(conn, session_id, short_terms, limit)
            response["mode"] = "like"
            response["note"] = "query shorter than 3 characters: substring scan (LIKE), newest first, no ranking"
    return _cap_hits(response, [
        SearchHit(message_id=r["message_id"], seq=r["seq"], role=r["role"],
                  score=-r["rank"] if r["rank"] is not None else 0.0,
                  snippet=_snippet(r["text"], terms), truncated=False)
        for r in rows
    ])

def _fts_rows(conn: sqlite3.Connection, session_id: str, match: str, short_terms: list[str], limit: int) -> list[sqlite3.Row]:
    likes = "".join(" AND (f.text || '') LIKE ? ESCAPE '\\'" for _ in short_terms)
    return conn.execute(
        f"""SELECT m.message_id, m.seq, m.role, f.text, bm25(messages_fts) AS rank
            FROM messages_fts f JOIN messages m ON m.seq = f.rowid
            WHERE messages_fts MATCH ? AND f.session_id = ?{likes}
            ORDER BY rank, m.seq DESC LIMIT ?""",
        [match, session_id, *map(_like_pattern, short_terms), limit],
    ).fetchall()

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

def around(store: Store, session_id: str, message_id: str, radius: int = 3) -> AroundResponse:
    """The raw messages around one id (radius before and after), tool outputs
    verbatim even when pruned (that is how a pruned result is fetched back). The
    JSON response stays under 20 KiB: the target comes first, then neighbours
    nearest first; long strings are cut in the middle and marked `truncated`."""
    radius = max(0, min(int(radius), 50))
    with store.snapshot() as conn:
        target = conn.execute(
            "SELECT seq, message_id FROM messages WHERE session_id = ? AND message_id = ?", (session_id, message_id)
        ).fetchone()
        if target is None and len(message_id) >= CITED_ID_MIN_CHARS:  # a checkpoint cites ids by prefix
            found = conn.execute(
                "SELECT seq, message_id FROM messages WHERE session_id = ? AND substr(message_id, 1, ?) = ? LIMIT 2",
                (session_id, len(message_id), message_id)).fetchall()
            if len(found) > 1:
                raise StoreError(f"message id prefix {message_id!r} is ambiguous in session {session_id!r}: "
                                 f"give more of it")
            target = found[0] if found else None
        if target is None:
            store.require_session(conn, session_id)
            raise NotFound(f"unknown message {message_id!r} in session {session_id!r}")
        seq, message_id = target["seq"], target["message_id"]
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
        marks = store.marks(conn, session_id)
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
        msg = store.apply_marks(Message.model_validate_json(row["body"]), marks).model_dump(mode="json")
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
