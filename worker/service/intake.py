"""A request body as a Session: any supported transcript format (parsed JSON or raw JSONL
bytes), with position-numbered ids continued after the messages already stored.

Apart from the service because it is about the request's shape, not the service's state;
the importers themselves are worker/formats/.
"""

from __future__ import annotations

import re
from typing import Any

from ..formats import FormatError
from ..formats import load as load_transcript
from ..session import Session

INDEX_ID = re.compile(r"m(\d{5,})(\..+)?")  # ids the openai/anthropic importers number by position


def offset_index_ids(session: Session, base: int) -> Session:
    """Position-numbered ids (m00000, m00001.1, ...) continue after the `base` stored messages,
    so an append of only the new turns does not collide with the first batch's ids."""
    if base == 0 or session.source_format not in ("openai", "anthropic"):
        return session
    for m in session.messages:
        match = INDEX_ID.fullmatch(m.id)
        if match:
            m.id = f"m{int(match.group(1)) + base:05d}{match.group(2) or ''}"
    return session


def import_messages(payload: Any, fmt: str = "auto") -> Session:
    """Any supported transcript format, parsed JSON or raw JSONL bytes; FormatError otherwise.
    A JSON string body is refused: the importers read a str that is not JSON as a file path,
    and a request must never make the server read its own files."""
    if not isinstance(payload, (list, dict, bytes)):
        raise FormatError(f"expected a JSON array or object of messages (or JSONL), got {type(payload).__name__}")
    if isinstance(payload, list) and not payload:
        raise FormatError("no messages in the request body")
    session = load_transcript(payload, format=fmt)
    if not session.messages:
        raise FormatError("no messages in the request body")
    return session
