"""Small builders for hand-made sessions."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes import SessionBuilder
from worker.formats.openai import load_messages
from worker.session import Message

SWE_TRACE = Path(__file__).resolve().parent / "fixtures" / (
    "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj")


def swe_messages() -> list[Message]:
    """The SWE-agent trace's `history` (an OpenAI message list) as session messages."""
    return load_messages(json.loads(SWE_TRACE.read_text())["history"]).messages


class Builder(SessionBuilder):
    """Old spelling of SessionBuilder(numbering="importer") whose user() returns the new id
    (kept until the ledger and work-state tests use tests.fakes directly)."""

    def __init__(self) -> None:
        super().__init__(numbering="importer")

    def user(self, text: str) -> str:  # type: ignore[override]
        return super().user(text).last_id
