"""Prune: clear old tool outputs without a model call (opencode's rules, the brief's constants).

Walk from newest to oldest, skip the most recent user turns, stop at the previous summary or
at an already-pruned result. The newest PRUNE_PROTECT tokens of tool output stay; older
completed results are candidates, committed only if they free more than PRUNE_MINIMUM.
Non-destructive: a result is *marked* compacted; rendering shows a placeholder that keeps
the tool name and arguments visible and names the message id and token count, so the agent
can fetch the output back. Nothing is deleted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..session import Session, ToolResultPart
from ..tokens import TokenCounter
from .stats import PrunedOutput

PROTECT_RECENT_TURNS = 2  # the agent is still working with the latest turns' outputs
PRUNE_PROTECT = 40_000  # newest tool-output tokens always kept
PRUNE_MINIMUM = 20_000  # a smaller gain is not worth invalidating the agent's prefix cache
PROTECTED_TOOLS = ("skill",)  # loaded instructions, not disposable output


@dataclass
class PruneResult:
    session: Session
    committed: bool
    freed_tokens: int
    candidates: list[PrunedOutput] = field(default_factory=list)
    reason: str = ""


def prune_tool_outputs(
    session: Session,
    counter: TokenCounter,
    *,
    protect_tokens: int = PRUNE_PROTECT,
    minimum: int = PRUNE_MINIMUM,
    protect_turns: int = PROTECT_RECENT_TURNS,
    protected_tools: tuple[str, ...] = PROTECTED_TOOLS,
    now: float | None = None,
) -> PruneResult:
    """Return a copy of `session` with old tool outputs marked compacted (or unchanged)."""
    turns_seen = 0
    seen_tokens = 0
    candidates: list[tuple[int, int, PrunedOutput]] = []  # (message index, part index, info)
    for i in range(len(session.messages) - 1, -1, -1):
        msg = session.messages[i]
        if msg.is_summary or msg.compacted:
            break
        if msg.starts_turn:
            turns_seen += 1
        if turns_seen < protect_turns:
            continue
        stop = False
        for j in range(len(msg.parts) - 1, -1, -1):
            part = msg.parts[j]
            if not isinstance(part, ToolResultPart):
                continue
            if part.compacted_at is not None:
                stop = True  # everything older was pruned by an earlier pass
                break
            if part.name in protected_tools:
                continue
            tokens = counter.text(part.output)
            seen_tokens += tokens
            if seen_tokens > protect_tokens:
                candidates.append((i, j, PrunedOutput(msg.id, part.call_id, part.name, tokens)))
        if stop:
            break
    freed = sum(c[2].tokens for c in candidates)
    infos = [c[2] for c in reversed(candidates)]
    if freed <= minimum:
        reason = f"prune would free {freed} tokens, not more than the {minimum} minimum: nothing changed"
        return PruneResult(session, False, 0, infos, reason)
    pruned = session.model_copy(deep=True)
    stamp = now if now is not None else time.time()
    for i, j, info in candidates:
        part = pruned.messages[i].parts[j]
        assert isinstance(part, ToolResultPart)
        part.compacted_at = stamp
        part.compacted_tokens = info.tokens
    return PruneResult(pruned, True, freed, infos, f"cleared {len(infos)} old tool outputs ({freed} tokens)")
