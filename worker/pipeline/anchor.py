"""The agent's own in-session summary: the narrative's anchor, and what a deterministic checkpoint carries.

An agent that compacted in-session (Claude Code `isCompactSummary`, a pi `compaction` entry, a
Codex `compacted` record, an opencode summary message) wrote a summary of everything before it.
The model gets it as its `<previous-summary>`; without a model (`--no-model`) its content is
carried into the checkpoint instead of being dropped, bounded to a share of the summary's budget.
The facts before it are not taken from it: the ledger reads the whole raw transcript.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..facts.text import cut_middle
from ..session import Message, Session

# A share of the summary's token limit: the carried summary is the narrative, the ledger's facts
# still need most of the room.
AGENT_SUMMARY_SHARE = 0.35
# ... and never the room the ledger's exact facts need: only what a summary has above this. At 8k
# (a 3k summary) that is nothing: there the quote cost more facts than it carried (tune half, no
# model: 107 -> 132 of 360 kept; 16k and 32k unchanged). The quote stays in the history.
LEDGER_FLOOR_TOKENS = 3_000


# ... and not at all where less than this is left: cut in the middle to a few lines, it keeps
# the summary's first and last lines and costs the ledger's ranking more than it carries.
AGENT_SUMMARY_MIN_TOKENS = 400


def agent_summary_limit(summary_limit: int) -> int:
    """Tokens the agent's own summary may take when it is quoted in the Goal (0: not quoted)."""
    limit = min(int(summary_limit * AGENT_SUMMARY_SHARE), summary_limit - LEDGER_FLOOR_TOKENS)
    return limit if limit >= AGENT_SUMMARY_MIN_TOKENS else 0
# Harness text around the summary itself: Claude Code's preamble and closing instruction, pi's
# preamble and <summary> tags, and Claude Code's "Analysis:" scratchpad before "Summary:".
WRAPPER_RES = (
    re.compile(r"^This session is being continued from a previous conversation[^\n]*\n+", re.S),
    re.compile(r"^The conversation history before this point was compacted into the following summary:\s*", re.S),
    re.compile(r"^Analysis:.*?\n(?=Summary:)", re.S),
    re.compile(r"\n+Please continue the conversation from where we left (?:it )?off.*\Z", re.S),
    re.compile(r"</?summary>"),
)
SHRINK_MARGIN = 0.95  # each retry aims a little under the limit: token/char ratios vary along the text


def agent_summary(session: Session, head_start: int) -> Message | None:
    """The agent's summary the head starts after, if the head starts after one."""
    if head_start and session.messages[head_start - 1].is_summary:
        return session.messages[head_start - 1]
    return None


def summary_body(text: str) -> str:
    """The summary without the harness's wrapper text."""
    for rx in WRAPPER_RES:
        text = rx.sub("", text.strip())
    return text.strip()


def bounded(text: str, limit_tokens: int, count: Callable[[str], int]) -> str:
    """`text` cut in the middle (with a marker saying how much went) to at most `limit_tokens`;
    nothing where the limit leaves no room (not a fragment like "S[… 8747 chars cut …]l")."""
    if limit_tokens <= 0:
        return ""
    n = count(text)
    chars = len(text)
    out = text
    while n > limit_tokens and chars > 0:
        chars = int(chars * limit_tokens / n * SHRINK_MARGIN)
        out = cut_middle(text, chars)
        n = count(out)
    return out
