"""SWE-agent trajectories (`*.traj`, one JSON document: `history`, `trajectory`, `info`).

`history` is the chat the model saw (SWE-agent `sweagent/types.py` HistoryItem: role, content,
message_type "system_prompt" / "demonstration" / "observation" / "action", is_demo, thought,
action, tool_calls, tool_call_ids). Two shapes, both written by the same agent
(`sweagent/agent/agents.py`):

- function calling: the assistant's `tool_calls`, answered by role `tool` items naming their call
  in `tool_call_ids` (`_add_templated_messages_to_history` with tool_call_ids);
- classic (thought/action, every version before function calling and `ThoughtActionParser`
  since): the assistant item carries the parsed `action` and no tool_calls, and the observation
  comes back as a role `user` item (message_type "observation"; 0.x files have no
  message_type). That user item is tool output, not the user's words: it becomes the result of a
  call made from the `action` (`_classic_calls`). The first user item, the instance template with
  the issue, precedes any action and stays the user's.

Demonstration items (`is_demo`) were shown to the model but are not this run's user. Files
without `history` import each `trajectory` step (TrajectoryStep: response/thought, action,
observation) as an assistant message with one tool call and its tool result, after the
system/user messages the first step's `query` recorded.
"""

from __future__ import annotations

import json
from typing import Any

from ..session import Message, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import INJECTED, FormatError, Source, load_input, require_messages, source_name
from .openai import load_messages


def _from_steps(steps: list[Any], warnings: list[str]) -> list[Message]:
    out: list[Message] = []
    first = steps[0] if steps and isinstance(steps[0], dict) else {}
    for i, m in enumerate(first.get("messages") or first.get("query") or []):  # TrajectoryStep.query
        if not isinstance(m, dict) or m.get("role") not in ("system", "user"):
            break  # only the prompt that preceded the first action
        out.append(Message(id=message_id(i, "p"), role=m["role"], parts=[TextPart(text=str(m.get("content") or ""))]))
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            warnings.append(f"trajectory step {i}: not an object, skipped")
            continue
        action = str(step.get("action") or "")
        cid = f"step_{i}"
        name = action_tool(action) if action.strip() else "action"
        parts: list[Any] = []
        text = str(step.get("response") or step.get("thought") or "")
        if text:
            parts.append(TextPart(text=text))
        parts.append(ToolCallPart(id=cid, name=name, arguments={"command": action}))
        out.append(Message(id=message_id(i, "a"), role="assistant", parts=parts))
        out.append(Message(id=message_id(i, "o"), role="tool",
                           parts=[ToolResultPart(call_id=cid, name=name, output=str(step.get("observation") or ""))]))
    return out


# The commands SWE-agent's tool bundles define (tools/*/config.yaml: windowed, search,
# windowed_edit_*, edit_anthropic, submit, forfeit, filemap, image_tools); any other action is a
# line for the bash session (sweagent/tools/tools.py: the bash tool, enabled by default).
BUNDLE_COMMANDS = {
    "goto", "open", "create", "scroll_up", "scroll_down", "find_file", "search_dir", "search_file", "edit",
    "insert", "str_replace_editor", "submit", "exit_forfeit", "filemap", "view_image",
}
SHELL_TOOL = "bash"  # sweagent/tools/tools.py: the bash tool's name, argument `command`


def action_tool(action: str) -> str:
    """The tool an action line runs: a bundle command by its name, anything else bash."""
    first = action.split(maxsplit=1)[0] if action.strip() else ""
    return first if first in BUNDLE_COMMANDS else SHELL_TOOL


def _classic_calls(history: list[Any]) -> list[Any]:
    """The classic history in function-calling shape: an assistant item with an `action` and no
    tool_calls gets one call (`command`: the action), and the user observation that answers it
    becomes that call's `tool` reply. Other items are left as they are."""
    out: list[Any] = []
    waiting: str | None = None  # the call id an observation would answer
    for i, h in enumerate(history):
        if not isinstance(h, dict):
            out.append(h)
            continue
        role = h.get("role")
        if role == "assistant" and not h.get("tool_calls") and isinstance(h.get("action"), str) and h["action"].strip():
            action = h["action"].strip()
            waiting = f"swe_action_{i}"
            call = {"id": waiting, "type": "function",
                    "function": {"name": action_tool(action), "arguments": json.dumps({"command": action})}}
            out.append({**h, "tool_calls": [call]})
            continue
        if role == "user" and waiting and h.get("message_type") in ("observation", None):
            out.append({**h, "role": "tool", "tool_call_ids": [waiting]})
            waiting = None
            continue
        if role in ("assistant", "user", "tool"):
            waiting = None
        out.append(h)
    return out


def load(src: Source) -> Session:
    warnings: list[str] = []
    doc = load_input(src, warnings)
    if not isinstance(doc, dict) or not ({"history", "trajectory"} & doc.keys()):
        raise FormatError("not a SWE-agent trajectory: expected an object with 'history' or 'trajectory'")
    sid = source_name(src)
    history = doc.get("history")
    if isinstance(history, list) and history:
        history = _classic_calls(history)
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
