"""opencode `opencode export <session>` JSON: `{"info": Session, "messages": [{"info", "parts"}]}`.

Schema (sst/opencode, packages/opencode/src/session/message-v2.ts and cli/cmd/export.ts):
message info has `role` user/assistant (assistant: `summary: true` marks a compaction
summary, `parentID`, `error`); parts are `text` (`synthetic`, `ignored`), `reasoning`,
`tool` (`callID`, `tool`, `state` {status pending/running/completed/error, input, output,
error, time.compacted}), `compaction` (`auto`, `tail_start_id`), `file`, `step-start`,
`step-finish`, `snapshot`, `patch`, `agent`, `subtask`, `retry`.

opencode keeps a tool call and its output in one part; we emit the call on the assistant
message and the output as a following tool message, splitting the assistant message at step
boundaries so text written after a result stays after it. A user message with a `compaction`
part, answered by an assistant message with `summary: true`, is the previous compaction: the
summary is is_summary, and messages before it (before `tail_start_id` when the tail was kept)
are compacted. A pending/running tool (interrupted) gets the error result opencode itself sends.
What opencode writes into a user message (`synthetic` text parts, file placeholders, the
compaction prompt) is never the user's words (HARNESS_NOISE and `synthetic`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import (
    INJECTED,
    USER_TEXT,
    FormatError,
    Noise,
    Source,
    block_text,
    finish_skips,
    load_input,
    mark_harness_noise,
    require_messages,
    source_name,
    unknown_record,
)

INTERRUPTED = "[Tool execution was interrupted]"
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("file", re.compile(r"^\[file: [^\]\n]*\]$", re.M)),
)
COMPACTION_PROMPT = "What did we do so far?"  # what opencode sends for a compaction part
# message-v2.ts `Part` union: every part type opencode (and its fork Kilo) writes. Those not read
# as content above are bookkeeping (step markers, snapshots, patches, agent mentions, retries).
PART_TYPES = {"text", "subtask", "reasoning", "file", "tool", "step-start", "step-finish", "snapshot", "patch",
              "agent", "retry", "compaction"}


def _skip_part(pt: Any, where: str, skipped: Counter[str], unknown: Counter[str], warnings: list[str]) -> None:
    if pt in PART_TYPES:
        skipped[f"part:{pt}"] += 1
    else:
        unknown_record(unknown, warnings, where, f"part:{pt}", f"unknown part type {pt!r}")


def _tool_result(part: dict[str, Any], skipped: Counter[str]) -> ToolResultPart:
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    status = state.get("status")
    cid, name = str(part.get("callID") or part.get("id") or ""), str(part.get("tool") or "")
    if status == "completed":
        t = state.get("time") if isinstance(state.get("time"), dict) else {}
        # opencode's prune sets time.compacted; the output stays stored, as in our model.
        compacted = t.get("compacted")
        # tool/bash.ts: a command that ran to its end is `completed` whatever its status; its exit
        # code is in metadata.exit (a non-zero one is the failure the agent saw).
        md = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
        failed = isinstance(md.get("exit"), int) and not isinstance(md.get("exit"), bool) and md["exit"] != 0
        return ToolResultPart(call_id=cid, name=name, output=block_text(state.get("output")), is_error=failed,
                              compacted_at=float(compacted) / 1000 if isinstance(compacted, (int, float)) else None)
    if status == "error":
        return ToolResultPart(call_id=cid, name=name, output=str(state.get("error") or ""), is_error=True)
    skipped[f"tool:{status}"] += 1
    return ToolResultPart(call_id=cid, name=name, output=INTERRUPTED, is_error=True)


def _assistant(mid: str, parts: list[Any], ts: Any, meta: dict[str, Any], skipped: Counter[str],
               unknown: Counter[str], warnings: list[str], calls: Counter[str]) -> list[Message]:
    out: list[Message] = []
    cur = Message(id=mid, role="assistant", timestamp=ts, meta=dict(meta))
    results: list[Message] = []
    seg = 0
    for p in parts:
        t = p.get("type")
        if t in ("text", "reasoning") and results:
            # New step after tool results: flush the call message and its results first.
            out.append(cur)
            out.extend(results)
            results = []
            seg += 1
            cur = Message(id=f"{mid}#{seg}", role="assistant", timestamp=ts, meta=dict(meta))
        if t == "text":
            if not p.get("ignored"):
                cur.parts.append(TextPart(text=str(p.get("text", ""))))
        elif t == "reasoning":
            cur.parts.append(ReasoningPart(text=str(p.get("text", ""))))
        elif t == "tool":
            state = p.get("state") if isinstance(p.get("state"), dict) else {}
            inp = state.get("input")
            res = _tool_result(p, skipped)
            calls[res.call_id] += 1
            if calls[res.call_id] > 1:  # a call and its output share one part: a repeated id is renamed in both
                res.call_id = f"{res.call_id}#{calls[res.call_id]}"
            cur.parts.append(ToolCallPart(id=res.call_id, name=res.name, arguments=inp if isinstance(inp, dict) else {}))
            results.append(Message(id=str(p.get("id") or f"{mid}.{res.call_id}"), role="tool", parts=[res], timestamp=ts))
        else:  # step markers, snapshots, patches: no content for the model
            _skip_part(t, f"message {mid}", skipped, unknown, warnings)
    out.append(cur)
    out.extend(results)
    return out


def load(src: Source) -> Session:
    warnings: list[str] = []
    doc = load_input(src, warnings)
    if not (isinstance(doc, dict) and isinstance(doc.get("messages"), list)):
        raise FormatError("not an opencode export: expected an object with 'info' and 'messages'")
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    out: list[Message] = []
    first_of: dict[str, int] = {}  # opencode message id -> index of its first message in out
    compaction_users: dict[str, dict[str, Any]] = {}  # user message id -> its compaction part
    # Ids are unique in what opencode writes; a copy that redacted them (Entire's checkpoints
    # write `"callID": "REDACTED"`) repeats them: a repeated call id is numbered (#2, …), a message id (~2, …).
    calls: Counter[str] = Counter()
    for i, entry in enumerate(doc["messages"]):
        info = entry.get("info") if isinstance(entry, dict) else None
        parts = entry.get("parts") if isinstance(entry, dict) else None
        if not isinstance(info, dict) or not isinstance(parts, list):
            warnings.append(f"message {i}: expected {{info, parts}}, skipped")
            continue
        parts = [p for p in parts if isinstance(p, dict)]
        role = info.get("role")
        mid = str(info.get("id") or message_id(i))
        t = info.get("time") if isinstance(info.get("time"), dict) else {}
        ts = t.get("created")
        first_of[mid] = len(out)
        if role == "user":
            texts: list[Any] = []
            meta: dict[str, Any] = {}
            for p in parts:
                pt = p.get("type")
                if pt == "text" and not p.get("ignored"):
                    texts.append(TextPart(text=str(p.get("text", ""))))
                elif pt == "file":
                    texts.append(TextPart(text=f"[file: {p.get('filename') or p.get('mime') or 'file'}]"))
                elif pt == "compaction":
                    compaction_users[mid] = p
                    texts.append(TextPart(text=COMPACTION_PROMPT))
                    meta[INJECTED] = True
                elif pt == "subtask":
                    texts.append(TextPart(text=str(p.get("prompt", ""))))
                else:
                    _skip_part(pt, f"message {i}", skipped, unknown, warnings)
            typed = [str(p.get("text", "")) for p in parts
                     if p.get("type") == "text" and not p.get("ignored") and not p.get("synthetic")]
            # prompt.ts command(): a command run as a subtask is stored as one subtask part whose
            # `prompt` is the command's template, expanded; what the user typed is the command.
            typed += [f"/{p['command']}" for p in parts if p.get("type") == "subtask" and p.get("command")]
            harness = [name for name, found in (
                ("synthetic", any(p.get("type") == "text" and p.get("synthetic") and not p.get("ignored") for p in parts)),
                ("subtask", any(p.get("type") == "subtask" for p in parts))) if found]
            if harness:
                meta["harness"] = harness
                if "\n".join(typed).strip():
                    meta[USER_TEXT] = "\n".join(typed).strip()
                else:
                    meta[INJECTED] = True
            out.append(mark_harness_noise(Message(id=mid, role="user", parts=texts, timestamp=str(ts) if ts else None,
                                                  meta=meta), HARNESS_NOISE))
        elif role == "assistant":
            meta = {k: info[k] for k in ("modelID", "providerID", "agent", "finish") if info.get(k)}
            if info.get("error"):
                meta["error"] = info["error"]
            msgs = _assistant(mid, parts, str(ts) if ts else None, meta, skipped, unknown, warnings, calls)
            if info.get("summary") is True:
                msgs[0].is_summary = True
                parent = str(info.get("parentID") or "")
                _mark_compacted(out, first_of, parent, compaction_users.get(parent))
            out.extend(msgs)
        else:
            unknown_record(unknown, warnings, f"message {i}", f"role:{role}", f"unknown role {role!r}")
    seen: set[str] = set()
    for m in out:
        base, n = m.id, 1
        while m.id in seen:
            n += 1
            m.id = f"{base}~{n}"
        seen.add(m.id)
    require_messages(out, "opencode export", warnings)
    sinfo = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    session = Session(id=str(sinfo.get("id") or source_name(src)), messages=out, source_format="opencode",
                      warnings=warnings)
    if sinfo.get("title"):
        session.meta["title"] = sinfo["title"]
    finish_skips(session.meta, skipped, unknown)
    return session


def _mark_compacted(out: list[Message], first_of: dict[str, int], request_id: str,
                    part: dict[str, Any] | None) -> None:
    """Everything before the compaction request is replaced by the summary, except the kept
    tail (from tail_start_id on) when opencode kept one. Without a compaction part (older
    opencode) the summary replaces everything before it."""
    end = first_of.get(request_id, len(out)) if part is not None else len(out)
    tail = part.get("tail_start_id") if part is not None else None
    if isinstance(tail, str) and tail in first_of:
        end = min(end, first_of[tail])
    for m in out[:end]:
        m.compacted = True


def detect(value: Any) -> bool:
    if not (isinstance(value, dict) and isinstance(value.get("messages"), list)):
        return False
    msgs = [m for m in value["messages"][:20] if isinstance(m, dict)]
    return bool(msgs) and all("info" in m and "parts" in m for m in msgs)
