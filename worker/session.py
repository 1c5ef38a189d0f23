"""The session model: what every importer produces and every pipeline stage reads.

A session is the append-only list of one agent conversation's messages. Messages have
parts: text, tool call (id, name, arguments), tool result (call id, output, is_error,
compacted marker) and reasoning. A tool call and its result are a pair and are never
separated. A turn is one user message (with real user text) and everything the assistant
and tools did until the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]


# Message meta key: the git branch the agent's harness recorded the session on, set by an
# importer on the first message after it changes (Claude Code's per-record `gitBranch`, Codex's
# session_meta `git.branch`); the ledger keeps it as a branch.
GIT_BRANCH = "git_branch"


class TextPart(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(BaseModel):
    type: Literal["reasoning"] = "reasoning"
    text: str


class ToolCallPart(BaseModel):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    def argument_dict(self) -> dict[str, Any]:
        if isinstance(self.arguments, dict):
            return self.arguments
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {"_raw": self.arguments}
        return value if isinstance(value, dict) else {"_raw": value}


class ToolResultPart(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str = ""
    output: str = ""
    is_error: bool = False
    # Set by prune: the output stays stored, rendering shows a placeholder instead.
    compacted_at: float | None = None
    compacted_tokens: int | None = None


Part = Annotated[TextPart | ReasoningPart | ToolCallPart | ToolResultPart, Field(discriminator="type")]


class Message(BaseModel):
    id: str
    role: Role
    parts: list[Part] = Field(default_factory=list)
    timestamp: str | None = None
    # A summary an agent (or compactd) wrote in-session: the previous summary.
    is_summary: bool = False
    # Replaced by a later summary: already compacted, never summarized again.
    compacted: bool = False
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    @property
    def user_text(self) -> str:
        """What the user typed: the text without what a harness injected into it (the importer's
        table of harness noise sets meta["user_text"], or meta["injected"] when nothing is left)."""
        if self.meta.get("injected"):
            return ""
        words = self.meta.get("user_text")
        return words if isinstance(words, str) else self.text

    @property
    def starts_turn(self) -> bool:
        """A user message with the user's own words (not only tool results) opens a turn.
        Text a harness injected into a user message is not the user's words."""
        return self.role == "user" and bool(self.user_text.strip()) and not self.is_summary

    def content_key(self) -> str:
        """Hash of what the engine sees of this message (for count caches)."""
        return hashlib.sha1(
            json.dumps(self.to_chat(), ensure_ascii=False, sort_keys=True).encode()
        ).hexdigest()

    def to_chat(self, placeholder: bool = True) -> dict[str, Any]:
        """The message as ONE OpenAI chat entry, as the agent's model would be sent it: the shape
        counts and content keys hash (a tool message's results joined, under the first call id).
        With placeholder=True a pruned tool result renders as its placeholder."""
        return self.to_openai(placeholder, strict=False)[0]

    def to_openai(self, placeholder: bool = True, *, strict: bool = True) -> list[dict[str, Any]]:
        """The message in OpenAI chat-completions shape: the one renderer every caller uses.

        strict=True gives what the API accepts as is: one `tool` entry per result (the API
        matches each to one tool_call_id; the message's text follows the last result), a tool
        message without results as a user entry, and `content: None` beside tool calls when
        there is no text. strict=False gives exactly one entry (see to_chat)."""
        if self.role == "tool":
            results = self.tool_results
            outputs = [render_tool_result(p, self.id, placeholder) for p in results]
            extra = self.text
            if not strict:
                joined: dict[str, Any] = {"role": "tool", "content": "\n".join(outputs + ([extra] if extra else []))}
                if results:
                    joined["tool_call_id"] = results[0].call_id
                return [joined]
            entries = []
            for k, (r, content) in enumerate(zip(results, outputs, strict=True)):
                if k == len(results) - 1 and extra:
                    content = f"{content}\n{extra}" if content else extra
                entries.append({"role": "tool", "tool_call_id": r.call_id, "content": content})
            if not results and extra:
                entries.append({"role": "user", "content": extra})
            return entries
        out: dict[str, Any] = {"role": self.role, "content": self.text}
        calls = self.tool_calls
        if calls:
            if strict:
                out["content"] = self.text or None
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                for c in calls
            ]
        return [out]


def render_tool_result(part: ToolResultPart, message_id: str, placeholder: bool = True) -> str:
    if part.compacted_at is not None and placeholder:
        return prune_placeholder(part, message_id, part.compacted_tokens)
    return part.output


def prune_placeholder(part: ToolResultPart, message_id: str, tokens: int | None = None) -> str:
    size = f", {tokens} tokens" if tokens is not None else ""
    return (
        f"[Old tool result content cleared: {part.name or 'tool'} output of call {part.call_id} "
        f"(message {message_id}{size}); fetch it back with history around message_id={message_id}]"
    )


class Session(BaseModel):
    id: str = "session"
    messages: list[Message] = Field(default_factory=list)
    source_format: str = ""
    warnings: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)

    def turn_starts(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.starts_turn]

    def turns(self) -> list[tuple[int, int]]:
        """(start, end) index ranges of turns; messages before the first user turn are
        not part of any turn (system prompt, earlier summary)."""
        starts = self.turn_starts()
        return [(s, starts[k + 1] if k + 1 < len(starts) else len(self.messages)) for k, s in enumerate(starts)]

    def last_summary_index(self) -> int | None:
        """The agent's latest summary the model still holds: one a `/clear` or a truncation dropped
        (compacted) is no longer the previous summary."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].is_summary and not self.messages[i].compacted:
                return i
        return None

    def tool_call_index(self) -> dict[str, int]:
        """call id -> index of the message holding the call."""
        return {c.id: i for i, m in enumerate(self.messages) for c in m.tool_calls}

    def to_chat(self, placeholder: bool = True) -> list[dict[str, Any]]:
        """What counting sees: one entry per message that is not compacted (Message.to_chat)."""
        return [m.to_chat(placeholder) for m in self.messages if not m.compacted]

    def to_openai(self, placeholder: bool = True, include_compacted: bool = False) -> list[dict[str, Any]]:
        """A chat-completions `messages` array the API accepts as is (Message.to_openai)."""
        return [e for m in self.messages if include_compacted or not m.compacted for e in m.to_openai(placeholder)]


def boundary_index(session: Session, message_id: str | None) -> int:
    """Index of the first message after `message_id` (a checkpoint's boundary): where the part
    not yet covered by that checkpoint begins; 0 when the id is None or not in the session."""
    if not message_id:
        return 0
    for i, m in enumerate(session.messages):
        if m.id == message_id:
            return i + 1
    return 0


def message_id(index: int, prefix: str = "m") -> str:
    return f"{prefix}{index:05d}"


CITED_ID_MIN_CHARS = 8  # a UUID costs ~35 tokens, its first 8 hex ~8: a checkpoint cites dozens


def id_forms(ids: list[str]) -> set[str]:
    """Every way a checkpoint may name these messages: whole, or cited (to strip them from text
    for a reader that cannot look them up)."""
    return set(ids) | set(cited_ids(ids).values())


def cited_ids(ids: list[str]) -> dict[str, str]:
    """How a checkpoint cites each message id: its shortest prefix of at least
    CITED_ID_MIN_CHARS that no other id of the session starts with (as git abbreviates a sha).
    History lookups accept the prefix; short ids (`m00012`) stay whole."""
    ordered = sorted(set(ids))
    out: dict[str, str] = {}
    for i, mid in enumerate(ordered):
        need = CITED_ID_MIN_CHARS
        for other in ordered[max(0, i - 1):i] + ordered[i + 1:i + 2]:  # sorted: only neighbours share more
            need = max(need, len(os.path.commonprefix([mid, other])) + 1)
        while need < len(mid) and not mid[need - 1].isalnum():  # `abcdefgh-` reads as cut short
            need += 1
        out[mid] = mid if need >= len(mid) - 3 else mid[:need]  # a cut of a few chars is not worth the lookup
    return out
