"""An agent's compaction request through the verified pipeline, with rolling state per session.

The agent keeps its own recent tail and wraps the summary itself, so the whole received head is
summarized (no verbatim tail, no reference prefix, the agent's trigger is the loop guard) and
the reply is the agent's template (its profile, worker/agents/profiles.py).

Rolling state: each answered compaction is kept (the messages it covered, its checkpoint, the
reply sent) under the agent's session id (opencode's `x-session-id`) or, without one (pi), under
the reply itself. A later request whose prior summary starts with a reply we sent (pi appends
its file lists after it) is an update: its conversation is appended after the covered messages
and the pipeline runs with `previous=` that checkpoint, so the ledger carries every earlier fact
and the narrative is updated rather than restarted. A prior summary we did not write (the
agent's own, or one from before a restart) is the anchor of a fresh session. The state lives in
memory, bounded (MAX_SESSIONS, least recently used dropped); a restart starts sessions afresh.

How a request waits (`wait`, the `agent_wait` setting): `instant` (the default) answers with the
deterministic checkpoint (every fact section, the goal from the user's words, the previous
narrative carried: no model call on the request path) and hands back a `Refinement`: the
synchronous path on the same snapshot, run by the service as one background job per agent
session (worker/service/refine.py). Its result replaces the state's checkpoint (the reply the agent holds stays the key),
so the session's next compaction is an update on the model's narrative. A newer compaction of
the session supersedes a pending refinement (`continues` names the states it replaces: their
jobs are cancelled, and a result that lands anyway is dropped). `model` waits for the model's narrative; `none` never calls it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from backends.base import Backend

from ..pipeline import SUMMARY_MAX_TOKENS, CompactionConfig, compact
from ..pipeline.checkpoint import Checkpoint
from ..session import Message, Session, TextPart, id_forms, message_id
from ..tokens import TokenCounter
from . import profiles
from .profiles import AgentRequest, Received
from .template import render

MAX_SESSIONS = 256  # rolling states kept; an agent session idle past this many others starts afresh
PRIOR_SUMMARY_ID = "prior-summary"
AgentWait = Literal["instant", "model", "none"]


@dataclass
class AgentState:
    session: Session  # every message the replies so far covered
    checkpoint: Checkpoint
    reply: str


@dataclass
class Refinement:
    """The model's narrative for an answered instant checkpoint: what the background job runs."""

    key: str  # the agent session's state key
    session: Session
    previous: Checkpoint | None
    config: CompactionConfig
    answered: Checkpoint  # the deterministic checkpoint the agent got: the state it refines


@dataclass
class AgentCompaction:
    text: str
    checkpoint: Checkpoint
    mode: str  # "fresh", "update" or "anchored" (a prior summary we did not write)
    messages: int  # received in this request
    refinement: Refinement | None = field(default=None, repr=False)


class NothingToCompact(ValueError):
    """The request's conversation holds no message: it is answered as plain generation."""


def _fingerprint(text: str) -> str:
    return hashlib.sha1(text.strip().encode()).hexdigest()[:20]


class AgentCompactor:
    """Answers recognized compaction requests; thread-safe (jobs run on the engine's thread)."""

    def __init__(self) -> None:
        self._states: OrderedDict[str, AgentState] = OrderedDict()
        self._lock = threading.Lock()

    def _match(self, req: AgentRequest, received: Received) -> tuple[str, AgentState] | None:
        if not received.prior_summary:
            return None
        prior = received.prior_summary.strip()
        contains = profiles.get(req.agent).prior_match == "contains"
        with self._lock:
            keyed = self._states.get(req.session_key) if req.session_key else None
            candidates = ([(req.session_key, keyed)] if keyed is not None else []) + list(self._states.items())
            for key, state in candidates:
                reply = state.reply.strip()
                if prior.startswith(reply) or (contains and reply in prior):
                    return key, state  # type: ignore[return-value]
        return None

    def continues(self, req: AgentRequest, received: Received) -> set[str]:
        """The state keys this request's compaction replaces: their pending refinements are stale."""
        matched = self._match(req, received) if req.kind == "history" else None
        keys = {matched[0]} if matched is not None else set()
        if req.session_key:
            keys.add(req.session_key)
        return keys

    def prepare(self, req: AgentRequest, received: Received) -> tuple[Session, Checkpoint | None, str | None, str]:
        """(session to compact, previous checkpoint, the state key it continues, mode). An
        update appends what follows the prior summary (`received.after`, or everything the
        request carries) after the messages the matched state covered."""
        if not received.session.messages:
            raise NothingToCompact("the compaction request holds no conversation")
        matched = self._match(req, received) if req.kind == "history" else None
        if matched is not None:
            key, state = matched
            base = len(state.session.messages)
            fresh = (received.after or received.session).messages
            new = [m.model_copy(update={"id": message_id(base + i)}) for i, m in enumerate(fresh)]
            session = state.session.model_copy(update={"messages": state.session.messages + new}, deep=True)
            return session, state.checkpoint, key, "update"
        session = received.session.model_copy(update={"id": req.session_key or "agent"}, deep=True)
        if received.prior_summary and req.kind == "history" and received.after is None:
            # A summary we did not write, outside the history: the anchor of a fresh session.
            anchor = Message(id=PRIOR_SUMMARY_ID, role="user", is_summary=True,
                             parts=[TextPart(text=received.prior_summary)])
            session.messages.insert(0, anchor)
            return session, None, None, "anchored"
        return session, None, None, "fresh"

    def run(self, req: AgentRequest, received: Received, backend: Backend, counter: TokenCounter,
            max_tokens: int | None, priority: int, wait: AgentWait = "model", *,
            context_limit: int) -> AgentCompaction:
        """The agent's reply (see the module docstring for `wait`); an instant one carries the
        Refinement to run in the background."""
        profile = profiles.get(req.agent)
        session, previous, key, mode = self.prepare(req, received)
        preset = profile.preset
        config = CompactionConfig(
            context_limit=preset.context_limit or context_limit, use_model=wait == "model", priority=priority,
            summary_max_tokens=min(SUMMARY_MAX_TOKENS, max_tokens or SUMMARY_MAX_TOKENS), **preset.options(),
        )
        result = compact(session, backend, config, previous=previous, counter=counter)
        checkpoint = result.checkpoint
        checkpoint.audit = replace(checkpoint.audit, mode=f"agent:{req.agent}:{mode}")
        text = render(profile, result.sections, checkpoint.lang, req.kind, id_forms([m.id for m in session.messages]))
        refinement = None
        if req.kind == "history":
            state_key = self._remember(key, req.session_key, AgentState(session, checkpoint, text))
            if wait == "instant":
                refinement = Refinement(state_key, session, previous, replace(config, use_model=True), checkpoint)
        return AgentCompaction(text, checkpoint, mode, len(received.session.messages), refinement)

    def wanted(self, refinement: Refinement) -> bool:
        """Whether the refinement's state still holds the checkpoint it refines."""
        with self._lock:
            state = self._states.get(refinement.key)
        return state is not None and state.checkpoint is refinement.answered

    def refine(self, refinement: Refinement, backend: Backend, counter: TokenCounter, priority: int) -> dict[str, Any]:
        """The model's narrative for an answered instant checkpoint, kept as its session's
        checkpoint unless a newer compaction replaced that state meanwhile."""
        if not self.wanted(refinement):
            return {"status": "stale"}
        config = replace(refinement.config, priority=priority)
        result = compact(refinement.session, backend, config, previous=refinement.previous, counter=counter)
        checkpoint = result.checkpoint
        checkpoint.audit = replace(checkpoint.audit, mode=f"{refinement.answered.audit.mode}:refined")
        with self._lock:
            state = self._states.get(refinement.key)
            if state is None or state.checkpoint is not refinement.answered:
                return {"status": "stale"}
            state.checkpoint = checkpoint  # the reply the agent holds stays the match
        return {"status": "done", "model_calls": len(checkpoint.timings.model)}

    def state_of(self, key: str) -> AgentState | None:
        with self._lock:
            return self._states.get(key)

    def _remember(self, old_key: str | None, session_key: str | None, state: AgentState) -> str:
        key = session_key or _fingerprint(state.reply)
        with self._lock:
            if old_key is not None and old_key != key:
                self._states.pop(old_key, None)
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > MAX_SESSIONS:
                self._states.popitem(last=False)
        return key

    def __len__(self) -> int:
        return len(self._states)


__all__ = ["AgentCompaction", "AgentCompactor", "AgentState", "AgentWait", "NothingToCompact", "Refinement"]
