"""Small builders for hand-made sessions."""

from __future__ import annotations

from worker.session import Message, Session, TextPart, ToolCallPart, ToolResultPart


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
