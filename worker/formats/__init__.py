"""Importers: one module per agent transcript format, each producing a Session.

`load(path, format="auto")` picks the importer (`detect`) and returns the Session;
`inspect(session)` summarizes what was imported. Every importer skips bad lines with a
warning in `session.warnings` and raises FormatError when nothing is importable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ..session import Session
from . import anthropic, claude_code, codex, copilot, gemini, openai, opencode, pi, swe_agent
from ._common import UNKNOWN_RECORDS, FormatError, NoMessagesError, Source, loads, parse_jsonl, read_bytes

__all__ = ["FORMATS", "FormatError", "NoMessagesError", "detect", "inspect", "load"]

FORMATS: dict[str, Callable[[Source], Session]] = {
    "openai": openai.load,
    "anthropic": anthropic.load,
    "claude_code": claude_code.load,
    "pi": pi.load,
    "codex": codex.load,
    "swe_agent": swe_agent.load,
    "opencode": opencode.load,
    "gemini": gemini.load,
    "copilot": copilot.load,
}

# Enough lines to see past Claude Code's leading snapshot/progress records.
_SNIFF_LINES = 200


def _detect_records(records: list[Any]) -> str | None:
    if codex.detect(records):
        return "codex"
    if pi.detect(records):
        return "pi"
    if claude_code.detect(records):
        return "claude_code"
    if copilot.detect(records):
        return "copilot"
    return None


def _detect_document(doc: Any) -> str | None:
    if opencode.detect(doc):
        return "opencode"
    if swe_agent.detect(doc):
        return "swe_agent"
    if isinstance(doc, dict) and "type" in doc:  # a one-line JSONL file
        return _detect_records([doc])
    if gemini.detect(doc):
        return "gemini"
    if anthropic.detect(doc):
        return "anthropic"
    if openai.detect(doc):
        return "openai"
    if isinstance(doc, list):
        return _detect_records(doc[:_SNIFF_LINES])
    return None


def detect(src: Source) -> str:
    """The format name of a path, text or parsed object; FormatError when none fits."""
    data = read_bytes(src)
    if data is None:
        found = _detect_document(src)
    else:
        try:
            found = _detect_document(loads(data.decode("utf-8")))
        except FormatError:
            raise
        except (UnicodeDecodeError, ValueError):
            head = b"\n".join(data.split(b"\n", _SNIFF_LINES)[:_SNIFF_LINES])
            records = [v for _, v in parse_jsonl(head, [])]
            found = _detect_records(records)
            if found is None and records and all(isinstance(r, dict) and "role" in r for r in records):
                # JSONL of chat messages, one per line
                found = "anthropic" if anthropic.detect(records) else "openai"
    if found is None:
        raise FormatError("unrecognized transcript format; pass --format " + "|".join(FORMATS))
    return found


def load(src: Source, format: str = "auto") -> Session:
    fmt = detect(src) if format == "auto" else format
    if fmt not in FORMATS:
        raise FormatError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return FORMATS[fmt](src)


def inspect(session: Session) -> dict[str, Any]:
    """Counts of what an import produced (token counts are added by the caller)."""
    roles = Counter(m.role for m in session.messages)
    calls = [c for m in session.messages for c in m.tool_calls]
    results = [r for m in session.messages for r in m.tool_results]
    answered = {r.call_id for r in results}
    return {
        "format": session.source_format,
        "session_id": session.id,
        "messages": len(session.messages),
        "messages_by_role": dict(roles),
        "tool_calls": len(calls),
        "tool_results": len(results),
        "errors": sum(1 for r in results if r.is_error),
        "unanswered_tool_calls": sum(1 for c in calls if c.id not in answered),
        "turns": len(session.turns()),
        "previous_summaries": sum(1 for m in session.messages if m.is_summary),
        "compacted_messages": sum(1 for m in session.messages if m.compacted),
        "skipped": dict(session.meta.get("skipped", {})),
        # record/item types the importer did not understand (each also a warning)
        "unknown_records": dict(session.meta.get(UNKNOWN_RECORDS, {})),
        "warnings": list(session.warnings),
    }
