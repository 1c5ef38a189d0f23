"""Small builders for hand-made sessions."""

from __future__ import annotations

import json
from pathlib import Path

from worker.formats.openai import load_messages
from worker.session import Message, Session, TextPart, ToolCallPart, ToolResultPart

SWE_TRACE = Path(__file__).resolve().parent / "fixtures" / (
    "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj")


def swe_messages() -> list[Message]:
    """The SWE-agent trace's `history` (an OpenAI message list) as session messages."""
    return load_messages(json.loads(SWE_TRACE.read_text())["history"]).messages


class SessionBuilder:
    def __init__(self, sid: str = "s"):
        self.session = Session(id=sid)
        self._n = 0
        self._calls = 0

    def _id(self) -> str:
        self._n += 1
        return f"m{self._n:04d}"

    def system(self, text: str) -> SessionBuilder:
        self.session.messages.append(Message(id=self._id(), role="system", parts=[TextPart(text=text)]))
        return self

    def user(self, text: str) -> SessionBuilder:
        self.session.messages.append(Message(id=self._id(), role="user", parts=[TextPart(text=text)]))
        return self

    def assistant(self, text: str) -> SessionBuilder:
        self.session.messages.append(Message(id=self._id(), role="assistant", parts=[TextPart(text=text)]))
        return self

    def tool(self, name: str, args: dict, output: str, *, is_error: bool = False, text: str = "") -> SessionBuilder:
        self._calls += 1
        cid = f"call_{self._calls}"
        parts = ([TextPart(text=text)] if text else []) + [ToolCallPart(id=cid, name=name, arguments=args)]
        self.session.messages.append(Message(id=self._id(), role="assistant", parts=parts))
        self.session.messages.append(
            Message(id=self._id(), role="tool",
                    parts=[ToolResultPart(call_id=cid, name=name, output=output, is_error=is_error)])
        )
        return self

    def build(self) -> Session:
        return self.session


class Builder:
    """Bare message lists for the ledger and work-state tests: user text, and each tool call
    appended together with its result (ids m00000, m00001, ... as an importer numbers them)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def _id(self) -> str:
        return f"m{len(self.messages):05d}"

    def user(self, text: str) -> str:
        mid = self._id()
        self.messages.append(Message(id=mid, role="user", parts=[TextPart(text=text)]))
        return mid

    def call(self, name: str, args: dict, output: str = "", is_error: bool = False) -> str:
        """Append the call and its result; returns the result's message id."""
        cid = f"call_{len(self.messages)}"
        self.messages.append(Message(id=self._id(), role="assistant",
                                     parts=[ToolCallPart(id=cid, name=name, arguments=args)]))
        rid = self._id()
        self.messages.append(Message(id=rid, role="tool", parts=[
            ToolResultPart(call_id=cid, name=name, output=output, is_error=is_error)]))
        return rid

    def bash(self, command: str, output: str = "", is_error: bool = False) -> str:
        return self.call("bash", {"command": command}, output, is_error)

    def edit(self, path: str) -> str:
        return self.call("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, "ok")
