"""Claude Code session JSONL (~/.claude/projects/<dir>/<session>.jsonl).

One record per line. `user` / `assistant` records carry an Anthropic `message`; the rest
(`progress`, `file-history-snapshot`, `system`, `summary`, `queue-operation`, ...) are UI or
bookkeeping and are counted as skipped by type. Claude Code writes one assistant response as
several records sharing `message.id` (one content block each); consecutive ones are merged,
but a record that follows a tool result starts a new message so that no call is separated
from its result. Sidechain records (Task sub-agents) are skipped and counted. The in-session
compaction summary (`isCompactSummary`, text "This session is being continued from a
previous conversation ...") is the previous summary; everything before it is compacted.

What Claude Code itself writes into user records (reminders, slash-command wrappers, local
command output, interruption markers, image placeholders, the wrapper of a plan approved with
"clear context") is listed in HARNESS_NOISE: never the user's words. `queue-operation` records
hold what the user typed while the agent was busy: an `enqueue` later `remove`d was handed to
the model mid-turn (the assistant answers it; no user record repeats it), so it is imported as
a user message after the tool results in flight; one `dequeue`d comes back as an ordinary user
record, so it is not imported twice.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..session import Message, Session, TextPart, message_id
from ._common import (
    INJECTED,
    Noise,
    Source,
    assistant_parts,
    finish_skips,
    load_records,
    mark_harness_noise,
    require_messages,
    source_name,
    tag,
    user_blocks,
)

SUMMARY_PREFIX = "This session is being continued from a previous conversation"
# Record types that hold no conversation content (UI progress, file snapshots, titles, hooks).
KNOWN_SKIP = {
    "progress", "file-history-snapshot", "summary", "system", "queue-operation", "custom-title",
    "tag", "agent-name", "last-prompt", "pr-link", "attachment", "ai-title", "worktree-state",
}
# Everything Claude Code injects into user records (read from the real transcripts in
# tests/fixtures). A slash command's arguments are what the user typed after it: they stay.
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("system-reminder", tag("system-reminder")),
    Noise("task-notification", re.compile(
        r"<task-notification>.*?(?:</task-notification>|\Z)(?:\s*Read the output file to retrieve the result: \S+)?", re.S)),
    Noise("command-name", tag("command-name")),
    Noise("command-message", tag("command-message")),
    Noise("command-args", tag("command-args"), keep="body"),
    Noise("local-command-caveat", tag("local-command-caveat")),
    Noise("local-command-stdout", tag("local-command-stdout")),
    Noise("local-command-stderr", tag("local-command-stderr")),
    Noise("bash-input", tag("bash-input")),
    Noise("bash-stdout", tag("bash-stdout")),
    Noise("bash-stderr", tag("bash-stderr")),
    Noise("user-prompt-submit-hook", tag("user-prompt-submit-hook")),
    Noise("ide", re.compile(r"<ide_(?:opened_file|selection|diagnostics)>.*?</ide_\w+>", re.S)),
    Noise("interrupted", re.compile(r"\[Request interrupted by user(?: for tool use)?\]")),
    Noise("image", re.compile(r"\[Image #\d+\]|\[(?:image|document): [^\]\n]*\]")),
    # A plan approved with "clear context": the plan (the record's `planContent`) is the user's
    # brief; the wrapper around it is Claude Code's.
    Noise("plan-handoff", re.compile(
        r"\AImplement the following plan:\s*(?P<body>.*?)\s*(?:If you need specific details from before "
        r"(?:exiting plan mode|compaction)[^\n]*?read the full transcript at: \S+\s*)?\Z", re.S), keep="body"),
)
# `!cmd` run by the user: the command, and its output in the next record.
BASH_INPUT_RE = re.compile(r"<bash-input>(.*?)</bash-input>", re.S)
BASH_OUTPUT_RE = re.compile(r"<bash-(?:stdout|stderr)>(.*?)</bash-(?:stdout|stderr)>", re.S)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def load(src: Source) -> Session:
    warnings: list[str] = []
    records = load_records(src, warnings)
    skipped: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    out: list[Message] = []
    names: dict[str, str] = {}
    session_id = ""
    cwd = ""
    summary_at: int | None = None
    # A sub-agent's own file: every message record is a sidechain, so sidechains are the session.
    messages = [rec for _, rec in records if isinstance(rec, dict) and rec.get("type") in ("user", "assistant")]
    subagent = bool(messages) and all(rec.get("isSidechain") for rec in messages)
    agent_id = next((str(rec["agentId"]) for rec in messages if rec.get("agentId")), "") if subagent else ""
    queued: list[tuple[str, int, Any]] = []  # (text, line, timestamp) typed while the agent worked
    delivered: list[tuple[str, int, Any]] = []  # handed to the model mid-turn, not yet placed
    for n, rec in records:
        if not isinstance(rec, dict):
            warnings.append(f"line {n}: not a JSON object, skipped")
            continue
        rtype = rec.get("type")
        if rtype == "queue-operation" and _queue(rec, n, queued, delivered):
            counts["queued"] += 1
            continue
        if rtype not in ("user", "assistant"):
            if rtype in KNOWN_SKIP:
                skipped[str(rtype)] += 1
            else:
                warnings.append(f"line {n}: unknown record type {rtype!r} skipped")
            continue
        msg = rec.get("message")
        if not isinstance(msg, dict):
            warnings.append(f"line {n}: {rtype} record without a message object skipped")
            continue
        if rec.get("isSidechain") and not subagent:
            skipped["sidechain"] += 1
            continue
        counts[rtype] += 1
        session_id = session_id or str(rec.get("sessionId") or "")
        cwd = cwd or str(rec.get("cwd") or "")  # the ledger makes absolute paths relative to it
        uid = str(rec.get("uuid") or message_id(n, "line"))
        ts = rec.get("timestamp")
        if rtype == "assistant":
            for text, at, qts in delivered:  # queued words reach the model before its next answer
                out.append(mark_harness_noise(Message(id=message_id(at, "line"), role="user", timestamp=qts,
                                                      parts=[TextPart(text=text)], meta={"queued": True}),
                                              HARNESS_NOISE))
            delivered.clear()
            parts = assistant_parts(_blocks(msg.get("content")), names, f"toolu_{uid}", skipped)
            api_id = msg.get("id")
            prev = out[-1] if out else None
            if prev is not None and prev.role == "assistant" and api_id and prev.meta.get("api_id") == api_id:
                prev.parts.extend(parts)
                prev.meta["records"].append(uid)
                continue
            meta: dict[str, Any] = {"api_id": api_id, "records": [uid]}
            if msg.get("model"):
                meta["model"] = msg["model"]
            out.append(Message(id=uid, role="assistant", parts=parts, timestamp=ts, meta=meta))
            continue
        # user record: tool results (one tool message each), then the user's text
        tools, texts = user_blocks(_blocks(msg.get("content")), names, uid, f"line {n}", warnings, skipped, ts)
        out.extend(tools)
        k = len(tools)
        if not texts and k:
            continue
        text = "\n".join(p.text for p in texts)
        is_summary = bool(rec.get("isCompactSummary")) or text.lstrip().startswith(SUMMARY_PREFIX)
        meta: dict[str, Any] = {}
        if rec.get("isMeta"):
            meta[INJECTED] = True
        _shell_meta(text, meta)
        out.append(mark_harness_noise(Message(id=uid if k == 0 else f"{uid}.text", role="user", parts=texts,
                                              timestamp=ts, is_summary=is_summary, meta=meta), HARNESS_NOISE))
        if is_summary:
            summary_at = len(out) - 1
            for m in out[:summary_at]:
                m.compacted = True
    for text, at, qts in delivered:
        out.append(mark_harness_noise(Message(id=message_id(at, "line"), role="user", timestamp=qts,
                                              parts=[TextPart(text=text)], meta={"queued": True}), HARNESS_NOISE))
    require_messages(out, "Claude Code JSONL", warnings)
    if subagent:  # never the parent's id: the two sessions would collide in the store
        sid = f"agent-{agent_id}" if agent_id else source_name(src)
    else:
        sid = session_id or source_name(src)
    session = Session(id=sid, messages=out, source_format="claude_code", warnings=warnings)
    if subagent:
        session.meta["subagent"] = True
        if session_id:
            session.meta["parent_session_id"] = session_id
    session.meta["records"] = dict(counts)
    if cwd:
        session.meta["cwd"] = cwd
    finish_skips(session.meta, skipped)
    if summary_at is not None:
        session.meta["previous_summary_index"] = summary_at
    return session


def _queue(rec: dict[str, Any], n: int, queued: list[tuple[str, int, Any]], delivered: list[tuple[str, int, Any]]) -> bool:
    """Follow the queue of typed-ahead messages; True when this record delivered one mid-turn."""
    op = rec.get("operation")
    if op == "enqueue" and isinstance(rec.get("content"), str):
        queued.append((rec["content"], n, rec.get("timestamp")))
    elif op == "dequeue" and queued:
        queued.pop(0)  # sent as the next prompt: an ordinary user record follows
    elif op == "remove" and queued:
        delivered.append(queued.pop(0))
        return True
    return False


def _shell_meta(text: str, meta: dict[str, Any]) -> None:
    """`!cmd` records: the command and its output, for the fact stages (worker.facts.actions)."""
    cmd = BASH_INPUT_RE.search(text)
    if cmd:
        meta["shell_command"] = cmd.group(1).strip()
    outputs = BASH_OUTPUT_RE.findall(text)
    if outputs:
        meta["shell_output"] = "\n".join(o.rstrip("\n") for o in outputs if o.strip())


def detect(records: list[Any]) -> bool:
    """True when the first JSONL records look like Claude Code's."""
    for rec in records:
        if not isinstance(rec, dict):
            continue
        t = rec.get("type")
        if t in ("user", "assistant") and isinstance(rec.get("message"), dict) and (
            "uuid" in rec or "sessionId" in rec or "parentUuid" in rec
        ):
            return True
        if t in ("file-history-snapshot", "progress", "queue-operation") or (t == "summary" and "leafUuid" in rec):
            return True
    return False
