"""The real set's ground truth and its one scorer: load the expected facts written by reading
each real transcript (benchmarks/data/real-facts/*.json, schema in its README.md), read the
agent's own in-session summary straight from the raw file, and decide per fact whether a text
keeps it. Every approach (compactd, the baselines, the agent's own summary) is scored by
`kept()` below and nothing else, so they are compared on one rule.

A fact's `match` says how it is found in a text:

- `exact`: the fact's text occurs in the text, whitespace-normalized (every run of whitespace
  is one space; case and everything else as written). Error lines, commands, the user's
  constraints in their own language. A text that quotes as a Markdown blockquote (`> ` before
  each line) is also read without those markers, so a constraint the user wrapped over two
  lines is found as they typed it.
- `path`: the path's last two components occur as a path in the text (not inside a longer
  name: `src/pkg/mod.py` and `/repo/src/pkg/mod.py` are kept by `pkg/mod.py`, `xpkg/mod.py`
  is not). A leading `~/` and a trailing `/` are ignored.
- `words`: a paraphrase (decisions, open work). When it names identifiers (see `identifiers()`:
  paths, URLs, commit hashes, `#N` numbers, versions and IP addresses, hex colours, snake_case,
  camelCase, CONSTANT_CASE, dotted and `backtick` names), the fact is kept when every one of
  them occurs verbatim (paths by the `path` rule). A fact with none is kept when at least
  `WORDS_SHARE` of its content words occur: Latin words of 4+ letters outside `STOPWORDS`
  (case-folded), and each pair of adjacent CJK, kana or Hangul characters.

Nothing here imports worker/: the ground truth and the scorer do not depend on the pipeline
they judge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import FIXTURES, REPO

REAL_FACTS_DIR = REPO / "benchmarks" / "data" / "real-facts"
KINDS = ("error", "path", "command", "constraint", "decision", "open")
WORDS_SHARE = 0.6  # "most content words": a paraphrase may drop a word or two, not half of them
MAX_LISTED = 8  # missing facts listed per run in the JSON
# Keys of a raw record whose string values are readable summary text (Claude Code message
# content, Codex `compacted` message and replacement history, opencode parts), and pi's
# `compaction` entry, which keeps its text under `summary` (pi-mono
# packages/coding-agent/docs/session.md, "CompactionEntry": {"type": "compaction", "summary": ...,
# "firstKeptEntryId": ..., "tokensBefore": ...}; the same key in its `compactionSummary` message,
# packages/coding-agent/src/core/messages.ts).
SUMMARY_TEXT_KEYS = frozenset({"text", "content", "message", "summary"})
SKIPPED_KEYS = frozenset({"encrypted_content"})  # Codex keeps its summary here, unreadable

STOPWORDS = frozenset("""the and but for with are was were been being from into onto that this these those there their
them they have has had not never also then than will would could should just only make sure about after before again
because which while where when what each every some other more most less very much many such like into over under
still later until via per its it's one two three four five""".split())

WS = re.compile(r"\s+")
BLOCKQUOTE = re.compile(r"(?m)^[ \t]*>[ \t]?")  # a Markdown blockquote's marker at a line's start
URL = re.compile(r"\bhttps?://[^\s)\]>\"'`]+")
PATHLIKE = re.compile(r"(?:~/|\.{1,2}/|/)?(?:[\w.@-]+/)+[\w.@-]+/?")
IDENT = re.compile(
    r"`[^`\n]{2,80}`"  # a backtick span
    r"|#[0-9a-fA-F]{6}\b"  # a hex colour
    r"|#\d+\b"  # a PR or issue number
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{6,40}\b"  # a commit hash or colour, hex with a digit and a letter
    r"|\bv?\d+(?:\.\d+)+(?::\d+)?\b"  # a version, date-version or IP address (with a port)
    r"|\b[A-Za-z_][\w-]*(?:\.[\w-]+)+"  # dotted: auth.store.ts, spotter-fum.1, Hooks.TranscriptHighlighter
    r"|\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+\b"  # snake_case, CONSTANT_CASE
    r"|\b[a-z]+[A-Z][A-Za-z0-9]*\b"  # camelCase
    r"|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"  # PascalCase with an inner capital
)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
MIN_IDENT = 3  # shorter "identifiers" (`a.b`) say nothing


@dataclass(frozen=True)
class RealFact:
    kind: str
    text: str
    match: str
    where: str
    before_agent_summary: bool


@dataclass(frozen=True)
class RealCase:
    """One real transcript and its expected facts."""

    name: str  # the facts file's stem
    fixture: Path
    format: str
    language: str
    facts: tuple[RealFact, ...]
    summary_where: str | None  # "line N" / "message N": the agent's own summary, when it wrote one
    summary_note: str
    split: str = "tune"  # "tune" | "heldout": the half it belongs to (README.md, by source repository)


def load_cases(directory: Path = REAL_FACTS_DIR, fixtures: Path = FIXTURES) -> list[RealCase]:
    cases = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        summary = data.get("agent_summary") or {}
        cases.append(RealCase(
            name=path.stem, fixture=fixtures / data["fixture"], format=data["format"], language=data["language"],
            facts=tuple(RealFact(f["kind"], f["text"], f["match"], str(f.get("where", "")),
                                 bool(f.get("before_agent_summary"))) for f in data["facts"]),
            summary_where=summary.get("where") if summary.get("present") else None,
            summary_note=summary.get("note", ""),
            split=data["split"],
        ))
    return cases


# --- the agent's own summary, from the raw file ---------------------------------------------


def _strings(value: Any, key: str | None = None) -> Iterable[str]:
    if isinstance(value, str):
        if key in SUMMARY_TEXT_KEYS:
            yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in SKIPPED_KEYS:
                yield from _strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, key)


def raw_record(fixture: Path, where: str) -> Any:
    """The record `where` names: a 1-based line of a JSONL file, or an index in an export's
    `messages` ("message N")."""
    kind, _, num = where.partition(" ")
    n = int(num)
    if kind == "line":
        with fixture.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if i == n:
                    return json.loads(line)
        raise ValueError(f"{fixture.name} has no line {n}")
    if kind == "message":
        return json.loads(fixture.read_text(encoding="utf-8"))["messages"][n]
    raise ValueError(f"unknown location {where!r}")


def agent_summary_text(case: RealCase) -> str | None:
    """The readable text of the agent's own in-session summary (None when it wrote none). A
    Codex summary is encrypted: what is left readable is its replacement history."""
    if not case.summary_where:
        return None
    return "\n".join(s for s in _strings(raw_record(case.fixture, case.summary_where)) if s.strip())


# --- the scorer ------------------------------------------------------------------------------


def normalize(text: str) -> str:
    return WS.sub(" ", text).strip()


def unquoted(text: str) -> str:
    """The text without Markdown blockquote markers at its lines' starts."""
    return BLOCKQUOTE.sub("", text)


def path_key(path: str) -> str:
    """The last two components: `/testbed/src/pkg/mod.py` and `src/pkg/mod.py` are one file."""
    parts = [p for p in path.strip().rstrip("/").split("/") if p and p not in (".", "~")]
    return "/".join(parts[-2:])


def has_path(path: str, text: str) -> bool:
    key = path_key(path)
    if not key:
        return False
    return re.search(r"(?<![\w.@-])" + re.escape(key) + r"(?![\w@-])", text) is not None


def _pathlike(p: str) -> bool:
    """A path or a slashed name, not a word pair like "malformed/raw": anchored, a directory,
    3+ components, a file extension, or a `-`, `_` or digit (a branch `feat/code-of-conduct`);
    `@scope/name` packages count. All are matched by the path rule."""
    if "<" in p or re.fullmatch(r"[\d./:-]+", p):
        return False
    return (p.startswith(("~/", "./", "../", "/", "@")) or p.endswith("/") or p.count("/") >= 2
            or re.search(r"\.[A-Za-z]\w*$|[-_\d]", p) is not None)


def identifiers(text: str) -> list[str]:
    """The specific names a `words` fact hangs on, in order, without duplicates."""
    found: list[str] = []

    def take_url(m: re.Match[str]) -> str:
        found.append(m.group(0).rstrip(".,;:"))
        return " "

    def take_path(m: re.Match[str]) -> str:
        if _pathlike(m.group(0)):
            found.append(m.group(0))
            return " "
        return m.group(0)

    rest = PATHLIKE.sub(take_path, URL.sub(take_url, text))
    for m in IDENT.finditer(rest):
        ident = m.group(0).strip("`").rstrip(".")
        if len(ident) >= MIN_IDENT:
            found.append(ident)
    return list(dict.fromkeys(found))


def content_units(text: str) -> set[str]:
    words = {w for w in re.findall(r"[a-z][a-z0-9_-]{3,}", text.lower()) if w not in STOPWORDS}
    chars = [c if CJK.match(c) else " " for c in text]
    pairs = {a + b for a, b in zip(chars, chars[1:], strict=False) if a != " " and b != " "}
    return words | pairs


def _is_path(ident: str) -> bool:
    return "/" in ident and not ident.startswith("http")


def kept(fact: RealFact, text: str) -> bool:
    """Whether `text` keeps `fact`, by its `match` rule (module docstring)."""
    if fact.match == "exact":
        want = normalize(fact.text)
        return want in normalize(text) or want in normalize(unquoted(text))
    if fact.match == "path":
        return has_path(fact.text, text)
    if fact.match == "words":
        idents = identifiers(fact.text)
        if idents:
            flat = normalize(text)
            return all(has_path(i, text) if _is_path(i) else normalize(i) in flat for i in idents)
        units = content_units(fact.text)
        return bool(units) and len(units & content_units(text)) / len(units) >= WORDS_SHARE
    raise ValueError(f"unknown match rule {fact.match!r}")


def score_text(text: str, facts: Iterable[RealFact]) -> dict[str, Any]:
    """Per kind: total, kept, rate, the missing ones; and all kinds pooled."""
    facts = list(facts)
    per_kind: dict[str, Any] = {}
    for kind in KINDS:
        of_kind = [f for f in facts if f.kind == kind]
        hits = [f for f in of_kind if kept(f, text)]
        per_kind[kind] = {"total": len(of_kind), "kept": len(hits),
                          "rate": round(len(hits) / len(of_kind), 3) if of_kind else None,
                          "missing": [f.text[:200] for f in of_kind if f not in hits][:MAX_LISTED]}
    total = sum(v["total"] for v in per_kind.values())
    kept_all = sum(v["kept"] for v in per_kind.values())
    return {"per_kind": per_kind, "kept": kept_all, "total": total,
            "rate": round(kept_all / total, 3) if total else None}


def pool(scores: list[dict[str, Any]]) -> dict[str, Any]:
    """Several `score_text` results as one: kept and total summed per kind and overall."""
    kinds = {}
    for kind in KINDS:
        total = sum(s["per_kind"][kind]["total"] for s in scores)
        kept = sum(s["per_kind"][kind]["kept"] for s in scores)
        kinds[kind] = {"kept": kept, "total": total, "rate": round(kept / total, 3) if total else None}
    total = sum(v["total"] for v in kinds.values())
    kept = sum(v["kept"] for v in kinds.values())
    return {"per_kind": kinds, "kept": kept, "total": total, "rate": round(kept / total, 3) if total else None}


def message_text(messages: list[dict[str, Any]]) -> str:
    """What an agent reads from OpenAI-shape messages: contents, and each tool call's name and
    decoded string arguments (a command is scored as typed, not JSON-escaped)."""
    out: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p.get("text", "") for p in content if isinstance(p, dict)]
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            out.append(str(fn.get("name", "")))
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = fn.get("arguments")
            out += list(_all_strings(args))
    return "\n".join(s for s in out if s)


def _all_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _all_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _all_strings(v)
