"""Anthropic Messages: content blocks `text`, `thinking`, `tool_use`, `tool_result` (with
`is_error`), top-level `system`.

Accepted input: a list of messages, a request body `{"system": ..., "messages": [...]}`, or
JSONL with one message per line. Our model keeps tool results in role `tool` messages, so a
user message's tool_result blocks become one tool message per block (call id = tool_use_id,
name looked up from the matching tool_use); user text in the same message follows as a user
message, since a result must stay right after its call.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..session import Message, Session, TextPart, message_id
from ._common import (
    FormatError,
    Source,
    assistant_parts,
    block_text,
    finish_skips,
    load_input,
    require_messages,
    source_name,
    unknown_record,
    user_blocks,
)

ANTHROPIC_ONLY_BLOCKS = ("tool_use", "tool_result", "thinking", "redacted_thinking")


def _split(value: Any) -> tuple[Any, list[Any]]:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return value.get("system"), value["messages"]
    if isinstance(value, list):
        return None, value
    raise FormatError("expected a JSON list of Anthropic messages or an object with 'messages'")


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content]
    return []


def load_messages(
    messages: list[Any],
    system: Any = None,
    session_id: str = "session",
    warnings: list[str] | None = None,
) -> Session:
    warnings = [] if warnings is None else warnings
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    out: list[Message] = []
    if system:
        out.append(Message(id="system", role="system", parts=[TextPart(text=block_text(system))]))
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant", "system"):
            role = raw.get("role") if isinstance(raw, dict) else None
            if role:
                unknown_record(unknown, warnings, f"message {i}", f"role:{role}", f"unknown role {role!r}")
            else:
                warnings.append(f"message {i}: not a message (no 'role') skipped")
            continue
        base = str(raw.get("id") or message_id(i))
        role = raw["role"]
        if role == "system":  # not in the API, but saved transcripts sometimes inline it
            out.append(Message(id=base, role="system", parts=[TextPart(text=block_text(raw.get("content")))]))
            continue
        if role == "assistant":
            parts = assistant_parts(_blocks(raw.get("content")), names, f"toolu_{i}", skipped)
            out.append(Message(id=base, role="assistant", parts=parts))
            continue
        # user: tool results first (each its own tool message), then any text
        tools, texts = user_blocks(_blocks(raw.get("content")), names, base, f"message {i}", warnings, skipped)
        out.extend(tools)
        k = len(tools)
        if texts or k == 0:
            out.append(Message(id=base if k == 0 else f"{base}.text", role="user", parts=texts))
    require_messages(out, "Anthropic Messages", warnings)
    session = Session(id=session_id, messages=out, source_format="anthropic", warnings=warnings)
    finish_skips(session.meta, skipped, unknown)
    return session


def load(src: Source) -> Session:
    warnings: list[str] = []
    system, msgs = _split(load_input(src, warnings))
    return load_messages(msgs, system=system, session_id=source_name(src), warnings=warnings)


def detect(value: Any) -> bool:
    try:
        system, msgs = _split(value)
    except FormatError:
        return False
    sample = [m for m in msgs[:50] if isinstance(m, dict)]
    if not sample or not all(m.get("role") in ("user", "assistant", "system") for m in sample):
        return False
    if any(m.get("tool_calls") for m in sample):
        return False
    if isinstance(value, dict) and "system" in value:
        return True
    return any(
        isinstance(m.get("content"), list)
        and any(isinstance(b, dict) and b.get("type") in ANTHROPIC_ONLY_BLOCKS for b in m["content"])
        for m in sample
    )
