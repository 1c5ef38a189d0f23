"""OpenAI chat-completions message arrays: `tool_calls` on assistant messages, role `tool`."""

from __future__ import annotations

from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id


class FormatError(ValueError):
    """Input that cannot be imported; the CLI reports it as one line with exit code 2."""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def load_messages(messages: list[dict[str, Any]], session_id: str = "session") -> Session:
    if not isinstance(messages, list):
        raise FormatError("expected a JSON list of chat messages")
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict) or "role" not in raw:
            raise FormatError(f"message {i}: expected an object with a 'role'")
        role = raw["role"]
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise FormatError(f"message {i}: unknown role {role!r}")
        parts: list[Any] = []
        if raw.get("reasoning_content"):
            parts.append(ReasoningPart(text=str(raw["reasoning_content"])))
        if role == "tool":
            call_id = str(raw.get("tool_call_id") or "")
            parts.append(
                ToolResultPart(call_id=call_id, name=names.get(call_id, raw.get("name") or ""),
                               output=_content_text(raw.get("content")))
            )
        else:
            text = _content_text(raw.get("content"))
            if text:
                parts.append(TextPart(text=text))
            for k, call in enumerate(raw.get("tool_calls") or []):
                fn = call.get("function") or {}
                call_id = str(call.get("id") or f"call_{i}_{k}")
                names[call_id] = fn.get("name", "")
                parts.append(ToolCallPart(id=call_id, name=fn.get("name", ""), arguments=fn.get("arguments") or {}))
        out.append(Message(id=str(raw.get("id") or message_id(i)), role=role, parts=parts))
    return Session(id=session_id, messages=out, source_format="openai")


def to_messages(session: Session) -> list[dict[str, Any]]:
    return session.to_chat(placeholder=True)
