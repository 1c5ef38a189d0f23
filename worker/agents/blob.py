"""An agent's `<conversation>` blob parsed back into messages, each call paired with its result.

opencode and pi send their compaction model one text blob instead of chat messages, so the
model does not continue the conversation. Each entry starts a line with a marker:

- pi (`core/compaction/utils.ts`, serializeConversation): `[User]:`, `[Assistant]:`,
  `[Assistant thinking]:`, `[Assistant tool calls]: f(k="v", k2=1); g(...)` (values are JSON),
  `[Tool result]:`; entries are separated by a blank line; tool results are cut at 2,000
  characters (`[... N more characters truncated]`).
- opencode (`session/compaction.ts`): `[User]:`, `[Assistant]:`, `[Assistant reasoning]:`,
  `[Assistant tool call]: f({json})`, `[Tool result]:`, `[Tool error]:`, and in its newer
  serializer `[System update]:`, `[Synthetic context]:`, `[Shell]: cmd\\noutput`; the parts of
  one message are joined by a newline, messages by a blank line; outputs cut at 2,000
  characters (`[truncated]`).

A result answers the oldest call still open (both agents write each call's result right after
it, in order). Text that a harness wrote (system updates, synthetic context) is injected, not the
user's words. A line inside a tool output that happens to start with a marker is read as a new
entry: the blob has no escaping, so this is the best any reader can do.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..formats import opencode, pi
from ..formats._common import INJECTED, Noise, mark_harness_noise
from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id

MARKERS = (
    "User", "Assistant", "Assistant thinking", "Assistant reasoning", "Assistant tool calls",
    "Assistant tool call", "Tool result", "Tool error", "System update", "Synthetic context", "Shell",
)
ENTRY_RE = re.compile(r"^\[(" + "|".join(re.escape(m) for m in sorted(MARKERS, key=len, reverse=True)) + r")\]: ?",
                      re.M)
CALL_NAME_RE = re.compile(r"\s*([\w.\-:/]+)\(")
# What the agents themselves put in a user turn: opencode's synthetic "continue" after a
# compaction (session/compaction.ts) and both importers' attachment placeholders.
CONTINUE_NOISE = Noise("continue", re.compile(r"^Continue if you have next steps, or stop and ask for clarification "
                                             r"if you are unsure how to proceed\.$", re.M))
ATTACHED_NOISE = Noise("attached", re.compile(r"^\[Attached [^\]\n]*\]$", re.M))
# Either agent's: a blob whose agent is not known (each profile passes its own table).
HARNESS_NOISE: tuple[Noise, ...] = (CONTINUE_NOISE, *opencode.HARNESS_NOISE, *pi.HARNESS_NOISE, ATTACHED_NOISE)
SHELL_TOOL = "bash"  # a command the user ran itself (opencode `!cmd`) reads as a shell call


@dataclass
class _Entry:
    marker: str
    body: str


def entries(blob: str) -> list[_Entry]:
    """The blob's entries in order, each body without its marker and trailing blank lines."""
    found = list(ENTRY_RE.finditer(blob))
    out = []
    for k, m in enumerate(found):
        end = found[k + 1].start() if k + 1 < len(found) else len(blob)
        out.append(_Entry(m.group(1), blob[m.end():end].rstrip("\n")))
    return out


def _json_value(text: str, pos: int) -> tuple[Any, int]:
    return json.JSONDecoder().raw_decode(text, pos)


def parse_pi_calls(body: str) -> list[tuple[str, dict[str, Any] | str]]:
    """`read(path="foo.py"); bash(command="ls -la", timeout=5)` as (name, arguments) pairs;
    what does not parse stays one call with its raw argument text."""
    calls: list[tuple[str, dict[str, Any] | str]] = []
    pos = 0
    while pos < len(body):
        m = CALL_NAME_RE.match(body, pos)
        if not m:
            break
        name, pos = m.group(1), m.end()
        args: dict[str, Any] = {}
        try:
            while body[pos] != ")":
                eq = body.index("=", pos)
                key = body[pos:eq].strip()
                value, pos = _json_value(body, eq + 1)
                args[key] = value
                if body.startswith(", ", pos):
                    pos += 2
            pos += 1
        except (ValueError, IndexError):
            end = body.find("); ", pos)
            end = len(body) if end < 0 else end
            calls.append((name, body[m.end():end].rstrip(")")))
            pos = end + 3
            continue
        calls.append((name, args))
        if body.startswith("; ", pos):
            pos += 2
    return calls


def parse_opencode_call(body: str) -> tuple[str, dict[str, Any] | str]:
    """`read({"filePath":"/x"})` as (name, arguments); a string input stays a string."""
    m = CALL_NAME_RE.match(body)
    if not m:
        return body.strip(), {}
    inner = body[m.end():]
    try:
        value, end = _json_value(inner.lstrip(), 0)
        if isinstance(value, dict):
            return m.group(1), value
    except ValueError:
        pass
    return m.group(1), inner[:-1] if inner.endswith(")") else inner


class _Builder:
    """Messages as the entries come: consecutive assistant entries share one message."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.open_calls: deque[ToolCallPart] = deque()
        self.n_calls = 0

    def _add(self, role: str, parts: list[Any], **meta: Any) -> Message:
        msg = Message(id=message_id(len(self.messages)), role=role, parts=parts, meta=meta)  # type: ignore[arg-type]
        self.messages.append(msg)
        return msg

    def assistant(self, part: Any) -> None:
        last = self.messages[-1] if self.messages else None
        # Text after a call belongs to a later step: a new message, so it follows the result.
        if last is None or last.role != "assistant" or (last.tool_calls and not isinstance(part, ToolCallPart)):
            last = self._add("assistant", [])
        last.parts.append(part)

    def call(self, name: str, args: dict[str, Any] | str) -> None:
        self.n_calls += 1
        part = ToolCallPart(id=f"call_{self.n_calls}", name=name, arguments=args)
        self.open_calls.append(part)
        self.assistant(part)

    def result(self, output: str, is_error: bool) -> None:
        call = self.open_calls.popleft() if self.open_calls else None
        if call is None:  # a result with no call (its call was cut off): keep it, unpaired
            self.n_calls += 1
            call = ToolCallPart(id=f"call_{self.n_calls}", name="tool")
        self._add("tool", [ToolResultPart(call_id=call.id, name=call.name, output=output, is_error=is_error)])


def parse_conversation(blob: str, session_id: str = "agent", noise: tuple[Noise, ...] = HARNESS_NOISE) -> Session:
    """The blob as a Session (message ids m00000...); `noise`: what the agent writes into user
    turns that is not the user's words."""
    b = _Builder()
    for e in entries(blob):
        if e.marker == "User":
            mark_harness_noise(b._add("user", [TextPart(text=e.body)]), noise)
        elif e.marker in ("System update", "Synthetic context"):
            b._add("user", [TextPart(text=e.body)], **{INJECTED: True})
        elif e.marker == "Assistant":
            b.assistant(TextPart(text=e.body))
        elif e.marker in ("Assistant thinking", "Assistant reasoning"):
            b.assistant(ReasoningPart(text=e.body))
        elif e.marker == "Assistant tool calls":
            for name, args in parse_pi_calls(e.body):
                b.call(name, args)
        elif e.marker == "Assistant tool call":
            b.call(*parse_opencode_call(e.body))
        elif e.marker in ("Tool result", "Tool error"):
            b.result(e.body, e.marker == "Tool error")
        elif e.marker == "Shell":
            command, _, output = e.body.partition("\n")
            b.call(SHELL_TOOL, {"command": command})
            b.result(output, False)
    return Session(id=session_id, messages=b.messages, source_format="agent-blob")


__all__ = ["entries", "parse_conversation", "parse_opencode_call", "parse_pi_calls"]
