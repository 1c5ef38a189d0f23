"""pi (badlogic/pi-mono coding-agent) session JSONL.

Entries: a `session` header, `message` entries whose `message.role` is user / assistant /
toolResult / bashExecution / custom, `compaction` entries (summary, firstKeptEntryId),
`branch_summary`, `custom_message`, and settings entries (`model_change`,
`thinking_level_change`, `label`, `session_info`, `custom`) that hold no conversation content.
Newer files are a tree (`id` / `parentId`); we import the active branch, the path from the
last entry back to the root, as pi's buildSessionContext does. Older files (like the corpus
fixture) have no ids and are linear.

What pi itself puts into user messages is in HARNESS_NOISE (image placeholders; `!cmd` runs,
skill and extension messages are whole injected messages, marked where they are built).

A compaction entry is the previous summary. pi shows the model the summary first, then the kept
entries from firstKeptEntryId on, then what followed; we place the summary message the same
way (before the first kept message) and mark the messages it replaced compacted=True.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..session import Message, Session, TextPart, ToolResultPart, message_id
from ._common import (
    HARNESS,
    INJECTED,
    Noise,
    Source,
    assistant_parts,
    block_text,
    finish_skips,
    load_records,
    mark_harness_noise,
    require_messages,
    source_name,
    unknown_record,
)

# pi's own wording for a compaction summary sent to the model (core/messages.ts).
SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:"
BRANCH_PREFIX = "The following is a summary of a branch that this conversation came back from:"
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("image", re.compile(r"\[(?:image|document|file): [^\]\n]*\]")),
)
# Entry types (packages/coding-agent/src/core/session-manager.ts SessionEntry union) with no
# conversation content: settings, labels, extension state.
KNOWN_SKIP = {"model_change", "thinking_level_change", "label", "session_info", "custom"}
# oh-my-pi (can1357/oh-my-pi, a pi fork) writes the same format with more of them
# (packages/coding-agent/src/session/session-entries.ts at 01d016cac40ff3e15df51753e62af8b85e9fcf77):
# audit, usage and replay records, none in the model's context, and a fixed-width `title` slot as the
# first line, before the header. Its `reset_boundary` (`/clear`) ends the context the model holds.
OMP_SKIP = {"title_change", "ttsr_injection", "model_usage", "service_tier_change", "archive", "credential_pin",
            "session_init", "mode_change"}
HEADERS = {"session", "title"}  # not entries: no id, no place in the tree


def _active_branch(records: list[tuple[int, Any]], skipped: Counter[str]) -> list[tuple[int, Any]]:
    entries = [(n, r) for n, r in records if isinstance(r, dict) and r.get("type") not in HEADERS]
    by_id = {r["id"]: (n, r) for n, r in entries if isinstance(r.get("id"), str)}
    if not by_id or len(by_id) != len(entries):
        return records  # linear (older format) or ids missing: keep file order
    path: set[str] = set()
    cur: Any = entries[-1][1]["id"]
    while isinstance(cur, str) and cur in by_id and cur not in path:
        path.add(cur)
        cur = by_id[cur][1].get("parentId")
    kept = [(n, r) for n, r in records if not isinstance(r, dict) or r.get("type") in HEADERS or r.get("id") in path]
    if len(kept) < len(records):
        skipped["off-branch"] += len(records) - len(kept)
    return kept


def load(src: Source) -> Session:
    warnings: list[str] = []
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    records = _active_branch(load_records(src, warnings), skipped)
    out: list[Message] = []
    names: dict[str, str] = {}
    entry_index: dict[str, int] = {}  # entry id -> index in out of the first message it produced
    header: dict[str, Any] = {}
    summaries: list[int] = []
    for n, rec in records:
        if not isinstance(rec, dict):
            warnings.append(f"line {n}: not a JSON object, skipped")
            continue
        etype = rec.get("type")
        eid = str(rec.get("id") or message_id(n, "line"))
        ts = rec.get("timestamp")
        if etype == "session":
            header = rec
            continue
        if etype in KNOWN_SKIP or etype in OMP_SKIP or etype == "title":
            skipped[str(etype)] += 1
            continue
        if etype == "reset_boundary":
            for m in out:
                m.compacted = True
            counts["reset_boundary"] += 1
            continue
        if etype == "compaction":
            summary = str(rec.get("summary") or "")
            kept_id = rec.get("firstKeptEntryId")
            at = entry_index.get(kept_id, len(out)) if isinstance(kept_id, str) else len(out)
            msg = Message(id=eid, role="user", parts=[TextPart(text=f"{SUMMARY_PREFIX}\n\n<summary>\n{summary}\n</summary>")],
                          timestamp=ts, is_summary=True,
                          meta={"tokens_before": rec.get("tokensBefore"), "first_kept_entry_id": kept_id})
            for m in out[:at]:
                m.compacted = True
            out.insert(at, msg)
            summaries.append(at)
            for k, v in entry_index.items():
                if v >= at:
                    entry_index[k] = v + 1
            entry_index[eid] = at
            counts["compaction"] += 1
            continue
        if etype == "branch_summary":
            text = f"{BRANCH_PREFIX}\n\n<summary>\n{rec.get('summary') or ''}\n</summary>"
            entry_index[eid] = len(out)
            out.append(Message(id=eid, role="user", parts=[TextPart(text=text)], timestamp=ts, meta={INJECTED: True}))
            counts["branch_summary"] += 1
            continue
        if etype == "custom_message":
            entry_index[eid] = len(out)
            out.append(Message(id=eid, role="user", parts=[TextPart(text=block_text(rec.get("content")))], timestamp=ts,
                               meta={INJECTED: True, "custom_type": rec.get("customType")}))
            counts["custom_message"] += 1
            continue
        if etype != "message":
            unknown_record(unknown, warnings, f"line {n}", f"entry:{etype}", f"unknown entry type {etype!r}")
            continue
        msg_raw = rec.get("message")
        if not isinstance(msg_raw, dict):
            warnings.append(f"line {n}: message entry without a message object skipped")
            continue
        role = msg_raw.get("role")
        made = _message(msg_raw, eid, ts, names, n, warnings, skipped, unknown)
        if made is None:
            continue
        counts[str(role)] += 1
        entry_index[eid] = len(out)
        out.append(made)
        if made.is_summary:
            for m in out[:-1]:
                m.compacted = True
            summaries.append(len(out) - 1)
    require_messages(out, "pi session", warnings)
    sid = str(header.get("id") or source_name(src))
    session = Session(id=sid, messages=out, source_format="pi", warnings=warnings)
    session.meta["records"] = dict(counts)
    for key in ("cwd", "version", "provider", "modelId"):
        if key in header:
            session.meta[key] = header[key]
    finish_skips(session.meta, skipped, unknown)
    return session


def _message(raw: dict[str, Any], eid: str, ts: Any, names: dict[str, str], n: int,
             warnings: list[str], skipped: Counter[str], unknown: Counter[str]) -> Message | None:
    """One `message` entry by its AgentMessage role: pi-ai's user / assistant / toolResult
    (packages/ai/src/types.ts) and the coding agent's own bashExecution / custom / branchSummary /
    compactionSummary (packages/coding-agent/src/core/messages.ts)."""
    role = raw.get("role")
    content = raw.get("content")
    if role == "user":
        return mark_harness_noise(Message(id=eid, role="user", parts=[TextPart(text=block_text(content))], timestamp=ts),
                                  HARNESS_NOISE)
    if role == "assistant":
        blocks = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        parts = assistant_parts(blocks, names, f"call_{eid}", skipped)
        meta = {k: raw[k] for k in ("model", "stopReason", "errorMessage") if raw.get(k)}
        return Message(id=eid, role="assistant", parts=parts, timestamp=ts, meta=meta)
    if role == "toolResult":
        cid = str(raw.get("toolCallId") or "")
        if cid not in names:
            warnings.append(f"line {n}: tool result for unknown call id {cid!r}")
        res = ToolResultPart(call_id=cid, name=str(raw.get("toolName") or names.get(cid, "")),
                             output=block_text(content), is_error=bool(raw.get("isError")))
        return Message(id=eid, role="tool", parts=[res], timestamp=ts)
    if role == "bashExecution":
        if raw.get("excludeFromContext"):
            skipped["bashExecution(excluded)"] += 1
            return None
        # The user ran `!cmd`; pi sends it to the model as a user message in this shape.
        text = f"Ran `{raw.get('command', '')}`\n```\n{raw.get('output', '')}\n```"
        if raw.get("exitCode") not in (0, None):
            text += f"\n\nCommand exited with code {raw.get('exitCode')}"
        return Message(id=eid, role="user", parts=[TextPart(text=text)], timestamp=ts,
                       meta={INJECTED: True, "bash_execution": True, "shell_command": str(raw.get("command", "")),
                             "shell_output": str(raw.get("output", "")), "shell_exit": raw.get("exitCode")})
    if role == "compactionSummary":
        text = f"{SUMMARY_PREFIX}\n\n<summary>\n{raw.get('summary', '')}\n</summary>"
        return Message(id=eid, role="user", parts=[TextPart(text=text)], timestamp=ts, is_summary=True)
    if role == "pythonExecution" and raw.get("excludeFromContext"):
        skipped["pythonExecution(excluded)"] += 1
        return None
    if role in ("developer", "hookMessage", "fileMention", "pythonExecution"):
        # oh-my-pi's own roles (session/messages.ts): a developer-role reminder, a hook's message, the
        # files an `@` mention attached, the user's python cell; the CLI's content, never the user's words.
        if role == "fileMention":
            listed = raw.get("files")
            files = [f for f in listed if isinstance(f, dict)] if isinstance(listed, list) else []
            text = "\n\n".join(f"{f.get('path', '')}\n{f.get('content') or ''}" for f in files)
        elif role == "pythonExecution":
            text = f"Ran python\n```\n{raw.get('code', '')}\n```\n{raw.get('output', '')}"
            if raw.get("exitCode") not in (0, None):
                text += f"\n\nCommand exited with code {raw.get('exitCode')}"
        else:
            text = block_text(content)
        meta: dict[str, Any] = {INJECTED: True, "role": role}
        if role == "pythonExecution":
            meta[HARNESS] = ["pythonExecution"]  # its output's errors are still mined
        return Message(id=eid, role="user", parts=[TextPart(text=text)], timestamp=ts, meta=meta)
    if role in ("custom", "branchSummary"):
        text = block_text(content) if role == "custom" else f"{BRANCH_PREFIX}\n\n<summary>\n{raw.get('summary', '')}\n</summary>"
        return Message(id=eid, role="user", parts=[TextPart(text=text)], timestamp=ts, meta={INJECTED: True})
    unknown_record(unknown, warnings, f"line {n}", f"role:{role}", f"unknown message role {role!r}")
    return None


def detect(records: list[Any]) -> bool:
    for rec in records:
        if not isinstance(rec, dict):
            continue
        t = rec.get("type")
        if t == "session" and ("cwd" in rec or "version" in rec):
            return True
        if t in ("thinking_level_change", "model_change", "compaction", "branch_summary"):
            return True
        if t == "message" and isinstance(rec.get("message"), dict) and rec["message"].get("role") in (
            "user", "assistant", "toolResult", "bashExecution"
        ):
            return True
    return False
