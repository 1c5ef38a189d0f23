"""GitHub Copilot CLI session event log (`~/.copilot/session-state/<session id>/events.jsonl`).

One event per line, `{type, data, id, timestamp, parentId}`, each `parentId` the event before it.
The event types and their `data` are the CLI's session-events schema, as github/copilot-sdk
generates it (nodejs/src/generated/session-events.ts, at cc0438d66e3e68c333537cb935d9425d4e4ed8d5;
every field read here is there since Copilot CLI 1.0.72, 29b071bbd715277ee892805a6d0f639319125c18):

- `user.message`: `content` is what the user typed, `transformedContent` what the model was sent
  (the date, reminders); `source` marks a message the CLI made (`system`, `instruction-discovery`,
  a skill): injected, not the user's words.
- `assistant.message`: `content`, `reasoningText`, and `toolRequests[]` (`toolCallId`, `name`,
  `arguments`: an object, or a string for a freeform tool such as `apply_patch`);
  `assistant.reasoning` holds a whole thought.
- `tool.execution_start` names the tool again; `tool.execution_complete` answers it by
  `toolCallId`: `success`, `result.content` (what the model saw), `error.message`.
- `system.message`: the system / developer prompt, logged again with each user prompt; the model
  holds one, so the same prompt again is counted and skipped.
- `session.compaction_complete`: `summaryContent` replaced `messagesRemoved` of the
  `preCompactionMessagesLength` messages the model held; `session.truncation` dropped the oldest
  `messagesRemovedDuringTruncation` without a summary.
- `session.start` / `session.resume` / `session.context_changed`: the working directory
  (`context.cwd`) and git branch.

Events from inside a sub-agent carry `agentId`: the sub-agent's own conversation, not this one's
(as Claude Code's sidechains), counted and skipped. Events of no content for the model (hooks,
permissions, usage, turn markers, plan and model changes, notices) are counted as skipped; any
other type is reported by `compactd inspect`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import (
    INJECTED,
    USER_TEXT,
    BranchMarks,
    Source,
    finish_skips,
    load_records,
    require_messages,
    source_name,
    unknown_record,
)

# Persisted event types with no content for the model (session-events.ts): lifecycle and
# bookkeeping, sub-agent lifecycle, hooks and permission prompts (a denied tool still answers with
# its own `tool.execution_complete`), and what the UI shows (warnings, errors, notifications, plan).
KNOWN_SKIP = {
    "assistant.turn_start", "assistant.turn_end", "hook.start", "hook.end", "permission.requested",
    "permission.completed", "session.plan_changed", "session.model_change", "session.mode_changed",
    "session.usage_checkpoint", "session.info", "session.warning", "session.error", "session.shutdown",
    "session.compaction_start", "session.handoff", "session.task_complete", "session.workspace_file_changed",
    "session.permissions_changed", "session.binary_asset", "system.notification", "skill.invoked",
    "subagent.started", "subagent.completed", "subagent.failed", "subagent.selected", "subagent.deselected",
    "tool.user_requested", "abort",
}
CONTEXT_EVENTS = {"session.start", "session.resume", "session.context_changed"}
# Events that change what the model holds without a message of their own.
HISTORY_EVENTS = {"session.compaction_complete", "session.truncation"}
# Types that make a file this format: no other importer's records have a `data` object under them.
DETECT_TYPES = {"session.start", "session.resume", "user.message", "assistant.message", "tool.execution_start",
                "tool.execution_complete"}


def _context(data: dict[str, Any], event: str) -> dict[str, Any]:
    ctx = data if event == "session.context_changed" else data.get("context")
    return ctx if isinstance(ctx, dict) else {}


def _held(out: list[Message]) -> list[Message]:
    """The messages the model still holds, oldest first: not system, not compacted."""
    return [m for m in out if m.role != "system" and not m.compacted]


def load(src: Source) -> Session:
    warnings: list[str] = []
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    out: list[Message] = []
    names: dict[str, str] = {}  # tool call id -> tool name
    branches = BranchMarks()
    header: dict[str, Any] = {}
    cwd: str | None = None
    open_assistant: Message | None = None  # consecutive assistant events: one message
    system_prompt: Any = None  # the latest system.message's content
    for n, rec in load_records(src, warnings):
        if not isinstance(rec, dict) or not isinstance(rec.get("data"), dict):
            warnings.append(f"line {n}: not an event object, skipped")
            continue
        event, data, ts = str(rec.get("type")), rec["data"], rec.get("timestamp")
        eid = str(rec.get("id") or message_id(n, "line"))
        if rec.get("agentId") or data.get("parentToolCallId"):  # the envelope's id, or the older field
            skipped[f"subagent:{event}"] += 1
            continue
        if rec.get("ephemeral"):
            skipped[f"ephemeral:{event}"] += 1
            continue
        if event in CONTEXT_EVENTS:
            ctx = _context(data, event)
            if event == "session.start":
                header = data
            if isinstance(ctx.get("cwd"), str):
                cwd = cwd or ctx["cwd"]
            branches.seen(ctx.get("branch"), out)
            counts[event] += 1
            continue
        if event in KNOWN_SKIP:
            skipped[event] += 1
            continue
        if event in ("assistant.message", "assistant.reasoning"):
            parts = _assistant_parts(event, data, names, eid)
            if open_assistant is None and parts:
                open_assistant = Message(id=eid, role="assistant", timestamp=ts, meta={})
                out.append(open_assistant)
            if open_assistant is not None:
                open_assistant.parts += parts
                if isinstance(data.get("model"), str):
                    open_assistant.meta["model"] = data["model"]
            counts[event] += 1
            continue
        if event == "tool.execution_start":
            cid = str(data.get("toolCallId") or "")
            if cid and cid not in names:  # a call no assistant message asked for (the user ran it)
                open_assistant = None
                out.append(Message(id=eid, role="assistant", timestamp=ts,
                                   parts=[_call(cid, data.get("toolName"), data.get("arguments"), names)]))
            counts[event] += 1
            continue
        if event == "system.message":
            if system_prompt is not None and data.get("content") == system_prompt:
                skipped["system.message(repeated)"] += 1
                continue
            system_prompt = data.get("content")
        open_assistant = None
        made = _other(event, data, eid, ts, names, out, n, warnings, unknown)
        if made is not None:
            out.append(made)
        if made is not None or event in HISTORY_EVENTS:
            counts[event] += 1
        branches.place(out)
    branches.place(out)
    require_messages(out, "Copilot CLI session", warnings)
    session = Session(id=str(header.get("sessionId") or source_name(src)), messages=out, source_format="copilot",
                      warnings=warnings)
    session.meta["records"] = dict(counts)
    if cwd:
        session.meta["cwd"] = cwd
    for key in ("copilotVersion", "producer", "selectedModel"):
        if isinstance(header.get(key), str):
            session.meta[key] = header[key]
    finish_skips(session.meta, skipped, unknown)
    return session


def _assistant_parts(event: str, data: dict[str, Any], names: dict[str, str], eid: str) -> list[Any]:
    if event == "assistant.reasoning":
        return [ReasoningPart(text=str(data.get("content") or ""))]
    parts: list[Any] = []
    if isinstance(data.get("reasoningText"), str) and data["reasoningText"]:
        parts.append(ReasoningPart(text=data["reasoningText"]))
    if isinstance(data.get("content"), str) and data["content"]:
        parts.append(TextPart(text=data["content"]))
    requests = data.get("toolRequests")
    for k, req in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(req, dict):
            continue
        cid = str(req.get("toolCallId") or f"{eid}_{k}")
        if cid not in names:  # else its tool.execution_start came first and made the call
            parts.append(_call(cid, req.get("name"), req.get("arguments"), names))
    return parts


def _call(cid: str, name: Any, args: Any, names: dict[str, str]) -> ToolCallPart:
    """A tool call; `names` learns its tool's name (a result names only the call id)."""
    names[cid] = str(name or "")
    return ToolCallPart(id=cid, name=names[cid], arguments=args if isinstance(args, (dict, str)) else {})


def _other(event: str, data: dict[str, Any], eid: str, ts: Any, names: dict[str, str], out: list[Message], n: int,
           warnings: list[str], unknown: Counter[str]) -> Message | None:
    """A user, system, tool-result or compaction event as a message (compaction and truncation
    also mark what the model no longer holds); None for an unknown type, counted."""
    if event == "user.message":
        typed = str(data.get("content") or "")
        sent = data.get("transformedContent") if isinstance(data.get("transformedContent"), str) else None
        msg = Message(id=eid, role="user", parts=[TextPart(text=sent or typed)], timestamp=ts)
        if data.get("source"):
            msg.meta.update({INJECTED: True, "source": data["source"]})
        elif sent and sent.strip() != typed.strip():
            msg.meta[USER_TEXT] = typed.strip()
        return msg
    if event == "system.message":
        return Message(id=eid, role="system", parts=[TextPart(text=str(data.get("content") or ""))], timestamp=ts)
    if event == "tool.execution_complete":
        cid = str(data.get("toolCallId") or "")
        if cid not in names:
            warnings.append(f"line {n}: tool result for unknown call id {cid!r}")
        result = data.get("result") if isinstance(data.get("result"), dict) else {}
        error = data.get("error") if isinstance(data.get("error"), dict) else {}
        text = "\n".join(t for t in (result.get("content"), error.get("message")) if isinstance(t, str) and t)
        res = ToolResultPart(call_id=cid, name=names.get(cid, ""), output=text, is_error=data.get("success") is False)
        return Message(id=eid, role="tool", parts=[res], timestamp=ts)
    if event == "session.compaction_complete":
        if data.get("success") is False or not isinstance(data.get("summaryContent"), str):
            return None  # a failed compaction changed nothing the model holds
        # The CLI counts the messages of its own list; ours are close to them (consecutive assistant
        # events are one message here), so the newest `kept` are taken to be the ones it kept.
        held = _held(out)
        removed, before = data.get("messagesRemoved"), data.get("preCompactionMessagesLength")
        kept = before - removed if isinstance(removed, int) and isinstance(before, int) and before >= removed else 0
        gone = held[: max(0, len(held) - kept)]
        for m in gone:
            m.compacted = True
        at = out.index(held[len(gone)]) if len(gone) < len(held) else len(out)  # before the first one kept
        summary = Message(id=eid, role="user", parts=[TextPart(text=data["summaryContent"])], timestamp=ts,
                          is_summary=True, meta={k: data[k] for k in ("trigger", "preCompactionTokens") if k in data})
        out.insert(at, summary)
        return None
    if event == "session.truncation":
        removed = data.get("messagesRemovedDuringTruncation")
        for m in _held(out)[: removed if isinstance(removed, int) and removed > 0 else 0]:
            m.compacted = True
        return None
    unknown_record(unknown, warnings, f"line {n}", f"event:{event}", f"unknown event type {event!r}")
    return None


def detect(records: list[Any]) -> bool:
    return any(isinstance(r, dict) and r.get("type") in DETECT_TYPES and isinstance(r.get("data"), dict)
               and "parentId" in r for r in records)
