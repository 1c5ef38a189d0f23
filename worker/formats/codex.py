"""Codex CLI rollout JSONL (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl).

Lines are `{"timestamp", "type", "payload"}`. `response_item` payloads are what the model saw
(message / reasoning / function_call / function_call_output / custom_tool_call[_output] /
local_shell_call); `event_msg` payloads are UI events that repeat the same conversation
(user_message, agent_message, agent_reasoning, token_count); `turn_context` and
`session_meta` are settings. To avoid counting the user prompt twice, event_msg
conversation events are used only when the file has no response_item messages at all.
`compacted` lines hold a previous summary. What the CLI injects into user messages (AGENTS.md
instructions, <environment_context>, image placeholders, ...) is listed in HARNESS_NOISE: never
the user's words, so a message of nothing else does not open a turn.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import (
    Noise,
    Source,
    block_text,
    finish_skips,
    load_records,
    mark_harness_noise,
    require_messages,
    source_name,
    tag,
)

# What Codex (CLI and Desktop) injects as user messages or into them (tests/fixtures rollouts).
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("agents-md", re.compile(r"# AGENTS\.md instructions for [^\n]*\n+<INSTRUCTIONS>.*?(?:</INSTRUCTIONS>|\Z)", re.S)),
    Noise("instructions", tag("INSTRUCTIONS")),
    Noise("user-instructions", tag("user_instructions")),
    Noise("environment-context", tag("environment_context")),
    Noise("user-shell-command", tag("user_shell_command")),
    Noise("turn-aborted", tag("turn_aborted")),
    Noise("image", re.compile(r"<image\b[^>]*>.*?</image>|\[Image #\d+\]|\[input_image: [^\]\n]*\]", re.S)),
)
KNOWN_TOP = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
CALL_TYPES = {"function_call", "custom_tool_call", "local_shell_call"}
OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output"}


def _output_text(output: Any) -> tuple[str, bool]:
    """function_call_output.output: a string, or {"content": ..., "success": bool}."""
    if isinstance(output, dict):
        return block_text(output.get("content")), output.get("success") is False
    return block_text(output), False


class _Builder:
    def __init__(self, warnings: list[str]) -> None:
        self.out: list[Message] = []
        self.names: dict[str, str] = {}
        self.warnings = warnings
        self.open: Message | None = None  # the assistant message still collecting parts

    def assistant(self, n: int, ts: Any) -> Message:
        if self.open is None:
            self.open = Message(id=message_id(n, "line"), role="assistant", timestamp=ts)
            self.out.append(self.open)
        return self.open

    def close(self) -> None:
        self.open = None

    def add(self, msg: Message) -> None:
        self.close()
        self.out.append(msg)


def _item(b: _Builder, p: dict[str, Any], n: int, ts: Any, skipped: Counter[str]) -> None:
    t = p.get("type")
    if t == "message":
        role = p.get("role")
        text = block_text(p.get("content"))
        if role == "assistant":
            b.assistant(n, ts).parts.append(TextPart(text=text))
        elif role in ("user", "developer", "system"):
            b.add(mark_harness_noise(Message(id=message_id(n, "line"), role="user" if role == "user" else "system",
                                             parts=[TextPart(text=text)], timestamp=ts), HARNESS_NOISE))
        else:
            b.warnings.append(f"line {n}: message with unknown role {role!r} skipped")
    elif t == "reasoning":
        text = block_text(p.get("summary")) or block_text(p.get("content"))
        if text:
            b.assistant(n, ts).parts.append(ReasoningPart(text=text))
        else:
            skipped["reasoning(encrypted)"] += 1
    elif t in CALL_TYPES:
        cid = str(p.get("call_id") or p.get("id") or message_id(n, "call"))
        name = str(p.get("name") or ("shell" if t == "local_shell_call" else ""))
        args = p.get("arguments") if t == "function_call" else p.get("input") if t == "custom_tool_call" else p.get("action")
        b.names[cid] = name
        b.assistant(n, ts).parts.append(
            ToolCallPart(id=cid, name=name, arguments=args if isinstance(args, (dict, str)) else {}))
    elif t in OUTPUT_TYPES:
        cid = str(p.get("call_id") or "")
        if cid not in b.names:
            b.warnings.append(f"line {n}: tool output for unknown call id {cid!r}")
        text, failed = _output_text(p.get("output"))
        b.add(Message(id=message_id(n, "line"), role="tool", timestamp=ts,
                      parts=[ToolResultPart(call_id=cid, name=b.names.get(cid, ""), output=text, is_error=failed)]))
    else:
        skipped[f"response_item:{t}"] += 1


def load(src: Source) -> Session:
    warnings: list[str] = []
    skipped: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    records = load_records(src, warnings)
    has_items = any(isinstance(r, dict) and r.get("type") == "response_item"
                    and isinstance(r.get("payload"), dict) and r["payload"].get("type") == "message"
                    for _, r in records)
    b = _Builder(warnings)
    meta: dict[str, Any] = {}
    for n, rec in records:
        if not isinstance(rec, dict):
            warnings.append(f"line {n}: not a JSON object, skipped")
            continue
        t = rec.get("type")
        p = rec.get("payload")
        if t not in KNOWN_TOP:
            warnings.append(f"line {n}: unknown record type {t!r} skipped")
            continue
        if not isinstance(p, dict):
            warnings.append(f"line {n}: {t} without a payload object skipped")
            continue
        ts = rec.get("timestamp")
        counts[f"{t}:{p.get('type')}" if t in ("response_item", "event_msg") else str(t)] += 1
        if t == "session_meta":
            meta.update({k: p[k] for k in ("id", "cwd", "cli_version", "originator", "model_provider") if k in p})
        elif t == "turn_context":
            if "model" in p:
                meta["model"] = p["model"]
            skipped["turn_context"] += 1
        elif t == "response_item":
            _item(b, p, n, ts, skipped)
        elif t == "compacted":
            text = str(p.get("message") or "")
            for m in b.out:
                m.compacted = True
            b.add(Message(id=message_id(n, "line"), role="user", parts=[TextPart(text=text)], timestamp=ts,
                          is_summary=True))
        elif t == "event_msg":
            et = p.get("type")
            if not has_items and et == "user_message":
                b.add(mark_harness_noise(Message(id=message_id(n, "line"), role="user", timestamp=ts,
                                                 parts=[TextPart(text=str(p.get("message", "")))]), HARNESS_NOISE))
            elif not has_items and et == "agent_message":
                b.assistant(n, ts).parts.append(TextPart(text=str(p.get("message", ""))))
            elif not has_items and et == "agent_reasoning":
                b.assistant(n, ts).parts.append(ReasoningPart(text=str(p.get("text", ""))))
            else:
                skipped[f"event_msg:{et}"] += 1
    require_messages(b.out, "Codex rollout", warnings)
    session = Session(id=str(meta.get("id") or source_name(src)), messages=b.out, source_format="codex",
                      warnings=warnings, meta=meta)
    session.meta["records"] = dict(counts)
    finish_skips(session.meta, skipped)
    return session


def detect(records: list[Any]) -> bool:
    return any(isinstance(r, dict) and r.get("type") in ("session_meta", "response_item", "turn_context")
               and isinstance(r.get("payload"), dict) for r in records)
