"""OpenAI chat-completions message arrays: `tool_calls` on assistant messages, role `tool`.

Accepted input: a list of messages, `{"messages": [...]}` (a request body or a saved chat), or
JSONL with one message per line. Reasoning (`reasoning_content`, `reasoning`) becomes a
ReasoningPart.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import (
    FormatError,
    Source,
    block_text,
    finish_skips,
    load_input,
    require_messages,
    source_name,
    unknown_record,
)

__all__ = ["FormatError", "detect", "load", "load_messages"]

ROLES = ("system", "user", "assistant", "tool")


def _content_text(content: Any) -> str:
    return block_text(content)


def _message_list(value: Any) -> list[Any]:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return value["messages"]
    if isinstance(value, list):
        return value
    raise FormatError("expected a JSON list of chat messages or an object with 'messages'")


def load_messages(
    messages: list[dict[str, Any]],
    session_id: str = "session",
    warnings: list[str] | None = None,
) -> Session:
    """Import a chat message list. Malformed entries are skipped with a warning; a list with
    nothing importable raises FormatError."""
    if not isinstance(messages, list):
        raise FormatError("expected a JSON list of chat messages")
    warnings = [] if warnings is None else warnings
    unknown: Counter[str] = Counter()
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict) or "role" not in raw:
            warnings.append(f"message {i}: not a chat message (no 'role') skipped")
            continue
        role = raw["role"]
        if role == "developer":
            role = "system"
        if role == "function":  # legacy function-calling reply
            role = "tool"
        if role not in ROLES:
            unknown_record(unknown, warnings, f"message {i}", f"role:{role}", f"unknown role {role!r}")
            continue
        parts: list[Any] = []
        reasoning = raw.get("reasoning_content") or raw.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts.append(ReasoningPart(text=reasoning))
        if role == "tool":
            call_id = str(raw.get("tool_call_id") or "")
            if not call_id and isinstance(raw.get("tool_call_ids"), list) and raw["tool_call_ids"]:
                call_id = str(raw["tool_call_ids"][0])  # SWE-agent spelling
            if call_id and call_id not in names:
                warnings.append(f"message {i}: tool result for unknown call id {call_id!r}")
            parts.append(
                ToolResultPart(call_id=call_id, name=names.get(call_id, raw.get("name") or ""),
                               output=_content_text(raw.get("content")))
            )
        else:
            text = _content_text(raw.get("content"))
            if text:
                parts.append(TextPart(text=text))
            for k, call in enumerate(raw.get("tool_calls") or []):
                if not isinstance(call, dict):
                    warnings.append(f"message {i}: tool call {k} is not an object, skipped")
                    continue
                fn = call.get("function") or {}
                call_id = str(call.get("id") or f"call_{i}_{k}")
                name = str(fn.get("name") or "")
                names[call_id] = name
                args = fn.get("arguments")
                parts.append(ToolCallPart(id=call_id, name=name, arguments=args if isinstance(args, (dict, str)) else {}))
        meta = {"name": raw["name"]} if role != "tool" and isinstance(raw.get("name"), str) else {}
        out.append(Message(id=str(raw.get("id") or message_id(i)), role=role, parts=parts, meta=meta))
    require_messages(out, "OpenAI chat", warnings)
    session = Session(id=session_id, messages=out, source_format="openai", warnings=warnings)
    finish_skips(session.meta, Counter(), unknown)
    return session


def load(src: Source) -> Session:
    warnings: list[str] = []
    value = load_input(src, warnings)
    return load_messages(_message_list(value), session_id=source_name(src), warnings=warnings)


def detect(value: Any) -> bool:
    """True for a message list (or {"messages": ...}) in OpenAI chat shape."""
    try:
        msgs = _message_list(value)
    except FormatError:
        return False
    sample = [m for m in msgs[:50] if isinstance(m, dict)]
    if not sample or not all("role" in m for m in sample):
        return False
    for m in sample:
        if m.get("tool_calls") or m.get("role") == "tool":
            return True
        c = m.get("content")
        if isinstance(c, list) and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking")
                                       for b in c):
            return False
    return not (isinstance(value, dict) and "system" in value)

