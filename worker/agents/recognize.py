"""Which chat requests are an agent's compaction request, and what they carry.

Recognized by their own words (captured from opencode 1.18.33 and pi 0.73.1, see
tests/fixtures/agents/README.md): the system prompt's first sentence and a `<conversation>`
blob in the user message, with the markers of each variant (a prior summary to update, pi's
turn prefix, pi's "Additional focus"). Anything else is a compaction only when the client
says so with the header `X-Compactd-Mode: compact`; every other request stays plain
generation. A recognized request is never refused for its length: the pipeline chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from ..formats._common import block_text

MODE_HEADER = "x-compactd-mode"
COMPACT_MODE = "compact"
# Headers an agent names its session with (opencode sends x-session-id); the first one set wins.
SESSION_HEADERS = ("x-compactd-session", "x-session-id", "session_id", "x-session-affinity")

PI_SYSTEM = "You are a context summarization assistant."
# opencode 1.18.17+, and 1.14-1.18.16 (tests/fixtures/agents/drift/)
OPENCODE_SYSTEM = ("You are a context summarization agent.",
                   "You are an anchored context summarization assistant for coding sessions.")
PI_TURN_PREFIX = "This is the PREFIX of a turn that was too large to keep."
OPENCODE_MARKERS = ("Create a new anchored summary", "<prior-summary>", "Update the anchored summary")
CONVERSATION_RE = re.compile(r"<conversation>\n?(.*?)\n?</conversation>", re.S)
# opencode 1.14-1.18.16: no <conversation> tags; [instruction, template, ...entries] joined by blank
# lines, so the entries follow the template's closing "Rules:" bullets.
OPENCODE_UNTAGGED_RE = re.compile(
    r"\A(?:Create a new|Update the) anchored summary.*?</template>\n\nRules:\n(?:- [^\n]*\n)*?- [^\n]*\n\n(.*)\Z", re.S)
PRIOR_RE = {
    "pi": re.compile(r"<previous-summary>\n?(.*?)\n?</previous-summary>", re.S),
    # <prior-summary> since 1.18.17, <previous-summary> before
    "opencode": re.compile(r"<(?:prior|previous)-summary>\n?(.*?)\n?</(?:prior|previous)-summary>", re.S),
}
FOCUS_RE = re.compile(r"\n\nAdditional focus: (.*)\Z", re.S)  # pi's /compact <instructions>

Agent = Literal["opencode", "pi", "codex", "generic"]
Kind = Literal["history", "turn_prefix"]


@dataclass
class AgentRequest:
    agent: Agent
    kind: Kind
    conversation: str | None  # the blob; None: the request's own messages are the conversation
    prior_summary: str | None
    session_key: str | None
    focus: str | None = None


def _text(message: dict[str, Any]) -> str:
    return block_text(message.get("content"))


def session_key(headers: dict[str, str]) -> str | None:
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def recognize(messages: list[dict[str, Any]], headers: dict[str, str]) -> AgentRequest | None:
    """The compaction request in `messages`, or None for plain generation. `headers` are the
    request's, lower-cased."""
    forced = headers.get(MODE_HEADER, "").strip().lower() == COMPACT_MODE
    system = next((_text(m) for m in messages if m.get("role") in ("system", "developer")), "")
    users = [m for m in messages if m.get("role") == "user"]
    user = _text(users[-1]) if users else ""
    blob = CONVERSATION_RE.search(user)
    if blob is None and system.startswith(OPENCODE_SYSTEM):
        blob = OPENCODE_UNTAGGED_RE.search(user)
    key = session_key(headers)
    if blob is not None and len(users) == 1:
        if system.startswith(PI_SYSTEM):
            turn_prefix = PI_TURN_PREFIX in user[blob.end():]
            prior = PRIOR_RE["pi"].search(user, blob.end())
            focus = FOCUS_RE.search(user)
            return AgentRequest("pi", "turn_prefix" if turn_prefix else "history", blob.group(1),
                                prior.group(1) if prior else None, key, focus.group(1).strip() if focus else None)
        if system.startswith(OPENCODE_SYSTEM) and any(mark in user for mark in OPENCODE_MARKERS):
            prior = PRIOR_RE["opencode"].search(user[:blob.start(1)] + user[blob.end(1):])  # before or after
            return AgentRequest("opencode", "history", blob.group(1), prior.group(1) if prior else None, key)
    if not forced:
        return None
    if blob is not None:
        prior = PRIOR_RE["pi"].search(user) or PRIOR_RE["opencode"].search(user)
        return AgentRequest("generic", "history", blob.group(1), prior.group(1) if prior else None, key)
    return AgentRequest("generic", "history", None, None, key)


__all__ = ["AgentRequest", "MODE_HEADER", "recognize", "session_key"]
