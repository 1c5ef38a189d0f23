"""Select the verbatim tail: the last turns that stay as they are after a compaction.

Keep the last TAIL_TURNS turns within preserve_recent_budget(usable) tokens. When they do not
fit, cut inside a turn, but only at a safe cut point: a user or assistant message whose
following messages hold every result of every call they make (never between a tool call and
its result). The cut-off prefix of a split turn goes to the head and is summarized too (pi).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..session import Session

TAIL_TURNS = 2  # the agent's latest exchanges, verbatim
TAIL_MAX_TOKENS = 8_000  # beyond this the tail crowds out the summary
TAIL_MIN_TOKENS = 2_000  # below this the agent loses its immediate context
TAIL_SHARE = 0.25  # of the usable window


def preserve_recent_budget(usable: int) -> int:
    return min(TAIL_MAX_TOKENS, max(TAIL_MIN_TOKENS, int(usable * TAIL_SHARE)))


@dataclass
class TailSelection:
    cut: int  # messages[cut:] are the tail; messages[head_start:cut] the head
    head_start: int  # first message after the previous summary
    tail_tokens: int
    budget: int
    split_turn_start: int | None  # set when the cut falls inside a turn


def safe_cuts(session: Session, start: int = 0) -> list[int]:
    """All safe cut indexes >= start (len(messages) included: an empty tail), in one pass."""
    n = len(session.messages)
    # For each message index, the earliest index of a call that a result at or after it answers.
    call_at = session.tool_call_index()
    earliest_open = [n + 1] * (n + 1)
    for k in range(n - 1, -1, -1):
        owners = [call_at[r.call_id] for r in session.messages[k].tool_results if r.call_id in call_at]
        earliest_open[k] = min([earliest_open[k + 1], *owners])
    return [k for k in range(start, n + 1) if (k == n or session.messages[k].role != "tool") and earliest_open[k] >= k]


def select_tail(
    session: Session, per_message: list[int], budget: int, tail_turns: int = TAIL_TURNS, head_start: int | None = None
) -> TailSelection:
    n = len(session.messages)
    if head_start is None:
        summary = session.last_summary_index()
        head_start = summary + 1 if summary is not None else 0
    if tail_turns <= 0:  # the agent keeps its own tail (an agent's compaction request): all is head
        return TailSelection(n, head_start, 0, budget, None)
    starts = [s for s in session.turn_starts() if s >= head_start]
    # No user turn since the boundary (one long agent turn): the tail is cut from the head's start.
    turn_start = starts[-tail_turns] if len(starts) >= tail_turns else (starts[0] if starts else head_start)
    # Suffix sums: tokens of messages[k:].
    suffix = [0] * (n + 1)
    for k in range(n - 1, -1, -1):
        suffix[k] = suffix[k + 1] + per_message[k]
    safe = safe_cuts(session, head_start)
    if turn_start < n and suffix[turn_start] <= budget and turn_start in safe:
        return TailSelection(turn_start, head_start, suffix[turn_start], budget, None)
    # Too big (or no turn boundary): the earliest safe cut at or after the turn start that fits.
    fitting = [k for k in safe if k >= min(turn_start, n) and suffix[k] <= budget]
    cut = fitting[0] if fitting else n
    owner = max((s for s in session.turn_starts() if s < cut), default=None)
    split = owner if owner is not None and owner >= head_start and cut not in session.turn_starts() and cut < n else None
    return TailSelection(cut, head_start, suffix[cut], budget, split)
