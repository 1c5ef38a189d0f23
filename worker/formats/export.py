"""Export a session (or the pipeline's OpenAI-shape checkpoint messages) so an agent can send it
as is: `to_openai` gives a chat-completions `messages` array, `to_anthropic` a Messages API
`{"system", "messages"}` pair.

Compacted messages (replaced by a later summary) are left out, and pruned tool results render
as their placeholder, exactly as Session.to_chat does. Reasoning is not exported: OpenAI chat
has no field for it, and Anthropic only accepts thinking blocks with the provider's signature.
"""

from __future__ import annotations

from typing import Any

from ..session import Message, Session, TextPart, ToolCallPart, ToolResultPart, render_tool_result
from .openai import load_messages

Exportable = Session | list[Message] | list[dict[str, Any]]


def _messages(src: Exportable, include_compacted: bool) -> list[Message]:
    if isinstance(src, Session):
        msgs = src.messages
    elif isinstance(src, list) and all(isinstance(m, Message) for m in src):
        msgs = list(src)  # type: ignore[arg-type]
    elif isinstance(src, list):
        msgs = load_messages(src).messages  # OpenAI-shape dicts, e.g. a checkpoint
    else:
        raise TypeError(f"cannot export {type(src).__name__}")
    return [m for m in msgs if include_compacted or not m.compacted]


def to_openai(src: Exportable, placeholder: bool = True, include_compacted: bool = False) -> list[dict[str, Any]]:
    """A chat-completions `messages` array, rendered by Message.to_openai (the one renderer)."""
    return [e for m in _messages(src, include_compacted) for e in m.to_openai(placeholder)]


def _anthropic_blocks(m: Message, placeholder: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, TextPart) and p.text:
            blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ToolCallPart):
            blocks.append({"type": "tool_use", "id": p.id, "name": p.name, "input": p.argument_dict()})
        elif isinstance(p, ToolResultPart):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": p.call_id,
                                     "content": render_tool_result(p, m.id, placeholder)}
            if p.is_error:
                block["is_error"] = True
            blocks.append(block)
    # The API wants tool results before any text in a user message.
    blocks.sort(key=lambda b: b["type"] != "tool_result")
    return blocks


def to_anthropic(src: Exportable, placeholder: bool = True, include_compacted: bool = False) -> dict[str, Any]:
    """{"system": str (absent when none), "messages": [...]}: system text separate, tool calls
    as tool_use blocks, results as tool_result blocks in user messages, consecutive same-role
    messages merged (the API requires alternation)."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for m in _messages(src, include_compacted):
        if m.role == "system":
            if m.text:
                system.append(m.text)
            continue
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _anthropic_blocks(m, placeholder)
        if not blocks:
            continue  # the API rejects empty content; an empty message carries nothing
        if messages and messages[-1]["role"] == role:
            merged = messages[-1]["content"] + blocks
            if role == "user":
                merged.sort(key=lambda b: b["type"] != "tool_result")
            messages[-1]["content"] = merged
        else:
            messages.append({"role": role, "content": blocks})
    out: dict[str, Any] = {"messages": messages}
    if system:
        out["system"] = "\n\n".join(system)
    return out
