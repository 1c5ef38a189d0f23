"""SWE-agent trajectories (`*.traj`, one JSON document).

`history` is an OpenAI chat message array (assistant `tool_calls`, role `tool` replies that
name their call in `tool_call_ids`), imported through the OpenAI importer. Older or
non-function-calling trajectories may lack it: then each `trajectory` step (response,
action, observation) becomes an assistant message with one tool call and its tool result,
after the system/user messages the first step recorded.
"""

from __future__ import annotations

from typing import Any

from ..session import Message, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import INJECTED, FormatError, Source, load_input, require_messages, source_name
from .openai import load_messages


def _from_steps(steps: list[Any], warnings: list[str]) -> list[Message]:
    out: list[Message] = []
    first = steps[0] if steps and isinstance(steps[0], dict) else {}
    for i, m in enumerate(first.get("messages") or []):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user"):
            break  # only the prompt that preceded the first action
        out.append(Message(id=message_id(i, "p"), role=m["role"], parts=[TextPart(text=str(m.get("content") or ""))]))
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            warnings.append(f"trajectory step {i}: not an object, skipped")
            continue
        action = str(step.get("action") or "")
        cid = f"step_{i}"
        name = action.split(maxsplit=1)[0] if action.strip() else "action"
        parts: list[Any] = []
        text = str(step.get("response") or step.get("thought") or "")
        if text:
            parts.append(TextPart(text=text))
        parts.append(ToolCallPart(id=cid, name=name, arguments={"command": action}))
        out.append(Message(id=message_id(i, "a"), role="assistant", parts=parts))
        out.append(Message(id=message_id(i, "o"), role="tool",
                           parts=[ToolResultPart(call_id=cid, name=name, output=str(step.get("observation") or ""))]))
    return out


def load(src: Source) -> Session:
    warnings: list[str] = []
    doc = load_input(src, warnings)
    if not isinstance(doc, dict) or not ({"history", "trajectory"} & doc.keys()):
        raise FormatError("not a SWE-agent trajectory: expected an object with 'history' or 'trajectory'")
    sid = source_name(src)
    history = doc.get("history")
    if isinstance(history, list) and history:
        session = load_messages(history, session_id=sid, warnings=warnings)
        # Demonstration turns were shown to the model but are not this run's user.
        demo = {str(h.get("id") or message_id(i)) for i, h in enumerate(history) if isinstance(h, dict) and h.get("is_demo")}
        for m in session.messages:
            if m.id in demo:
                m.meta[INJECTED] = True
        session.meta["history_messages"] = len(history)
    else:
        steps = doc.get("trajectory")
        msgs = _from_steps(steps if isinstance(steps, list) else [], warnings)
        require_messages(msgs, "SWE-agent trajectory", warnings)
        session = Session(id=sid, messages=msgs, warnings=warnings)
        session.meta["from_trajectory_steps"] = True
    session.source_format = "swe_agent"
    steps = doc.get("trajectory")
    session.meta["steps"] = len(steps) if isinstance(steps, list) else 0
    info = doc.get("info")
    if isinstance(info, dict):
        session.meta.update({k: info[k] for k in ("exit_status", "submission") if k in info})
    return session


def detect(value: Any) -> bool:
    return isinstance(value, dict) and ("history" in value or "trajectory" in value) and "info" in value or (
        isinstance(value, dict) and isinstance(value.get("trajectory"), list)
    )
