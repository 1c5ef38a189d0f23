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
hold what the user typed while the agent was busy, a FIFO with four operations: `enqueue` (the
text), then exactly one of `remove` (handed to the model mid-turn: the assistant answers it and no
user record repeats it, so it is imported as a user message after the tool results in flight),
`dequeue` (sent as the next prompt: an ordinary user record follows, not imported twice) or
`popAll` (taken back into the input box, one record per message: nothing was sent). Newer
versions also write a `queued_command` attachment for each mid-turn delivery (its `prompt` a
string or, since 2.1.1xx, a list of text blocks), and some write `enqueue` without its text; the
words are imported once, from whichever of the two has them.

Record types (Claude Code's transcript writer, as public parsers and the fixtures show them):
`user` / `assistant` carry the conversation; `queue-operation` and `attachment:queued_command`
the queued words above; KNOWN_SKIP the rest, counted by type (`attachment` by its
attachment.type). A tool_result is an error when `is_error` is set, when its content is wrapped
in `<tool_use_error>`, or when the record's `toolUseResult` is an `Error: ...` string. Any other
record type is counted in meta["unknown_records"] with a warning.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ..session import Message, Session, TextPart, message_id
from ._common import (
    INJECTED,
    BranchMarks,
    Noise,
    Source,
    assistant_parts,
    block_text,
    finish_skips,
    load_records,
    mark_harness_noise,
    require_messages,
    source_name,
    tag,
    unknown_record,
    user_blocks,
)

SUMMARY_PREFIX = "This session is being continued from a previous conversation"
# Record types that hold no conversation content (UI progress, file snapshots, titles, hooks;
# `system` includes subtype compact_boundary, the marker before an isCompactSummary record).
# The session-metadata and bookkeeping types are those claude-code 2.1.197's and 2.1.217's
# transcript loaders read besides messages (2.1.217's record-type table adds file-history-delta,
# frame-link, ended-by-model, observer-ref): settings (mode, permission-mode, agent-*), a tool result's preview
# swapped in for the model (content-replacement: the full result stays in its user record),
# context collapse (marble-origami-*: the collapsed messages stay in the file, read in full).
KNOWN_SKIP = {
    "progress", "file-history-snapshot", "summary", "system", "queue-operation", "custom-title",
    "tag", "agent-name", "last-prompt", "pr-link", "attachment", "ai-title", "worktree-state",
    "mode", "permission-mode", "agent-color", "agent-setting", "attribution-snapshot", "bridge-session",
    "content-replacement", "fork-context-ref", "isolation-latch", "relocated", "speculation-accept",
    "marble-origami-commit", "marble-origami-snapshot", "marble-origami-reset",
    "file-history-delta", "frame-link", "ended-by-model", "observer-ref",
}
# The attachment Claude Code writes when it hands a queued message to the model mid-turn.
QUEUED_ATTACHMENT = "queued_command"
# A tool's own failure text (Claude Code wraps tool-input and permission errors in it).
TOOL_USE_ERROR_RE = re.compile(r"\A\s*<tool_use_error>")
# Everything Claude Code injects into user records (read from the real transcripts in
# tests/fixtures). A slash command's arguments are what the user typed after it: they stay.
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("system-reminder", tag("system-reminder")),
    # A background task's notification, then the pointer to its output that Claude Code appends
    # outside the tag: `Read the output file to retrieve the result: <path>` (2.1.197's binary),
    # `Full transcript available at: <path>` (2.1.63's queue-operation records, cc-meow-ja).
    Noise("task-notification", re.compile(
        r"<task-notification>.*?(?:</task-notification>|\Z)"
        r"(?:\s*(?:Read the output file to retrieve the result|Full transcript available at): \S+)?", re.S)),
    # Its 2.0.x form for a background agent: `<agent-notification><agent-id>…</agent-id><output-file>…
    # </output-file><status>completed</status><summary>…</summary>` (anthropics/claude-code#14715).
    Noise("agent-notification", tag("agent-notification")),
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
    # The desktop app's pull-request monitor (2.1.229, entrypoint claude-desktop): a new review
    # comment or CI result, with the monitor's own "Please address the feedback…", sent as a
    # prompt (origin "human", promptSource "sdk") wrapped whole in its tag (cc-nomos fixture).
    Noise("ci-monitor-event", tag("ci-monitor-event")),
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
    queued: list[tuple[str | None, int, Any]] = []  # (text or None, line, timestamp) typed while the agent worked
    delivered: list[tuple[str, int, Any]] = []  # handed to the model mid-turn, not yet placed
    # Placed this turn: its `remove` or its attachment may still follow, after the assistant's
    # next records (2.1.217 writes the attachment after the tool result in flight, cc-starcar).
    placed: list[str] = []
    unknown: Counter[str] = Counter()
    branches = BranchMarks()
    for n, rec in records:
        if not isinstance(rec, dict):
            warnings.append(f"line {n}: not a JSON object, skipped")
            continue
        rtype = rec.get("type")
        if rtype == "queue-operation" and _queue(rec, n, queued, delivered, placed):
            counts["queued"] += 1
            continue
        if rtype == "attachment":
            att = rec.get("attachment") if isinstance(rec.get("attachment"), dict) else {}
            prompt = block_text(att.get("prompt")) if att.get("type") == QUEUED_ATTACHMENT else ""
            if prompt.strip():
                if _deliver(delivered, (prompt, n, rec.get("timestamp")), placed):
                    counts["queued"] += 1
            else:
                skipped[f"attachment:{att.get('type')}" if att.get("type") else "attachment"] += 1
            continue
        if rtype not in ("user", "assistant"):
            if rtype in KNOWN_SKIP:
                skipped[str(rtype)] += 1
            else:
                unknown_record(unknown, warnings, f"line {n}", f"record:{rtype}", f"unknown record type {rtype!r}")
            continue
        msg = rec.get("message")
        if not isinstance(msg, dict):
            warnings.append(f"line {n}: {rtype} record without a message object skipped")
            continue
        if rec.get("isSidechain") and not subagent:
            skipped["sidechain"] += 1
            continue
        counts[rtype] += 1
        branches.seen(rec.get("gitBranch"), out)
        session_id = session_id or str(rec.get("sessionId") or "")
        cwd = cwd or str(rec.get("cwd") or "")  # the ledger makes absolute paths relative to it
        uid = str(rec.get("uuid") or message_id(n, "line"))
        ts = rec.get("timestamp")
        if rtype == "assistant":
            for text, at, qts in delivered:  # queued words reach the model before its next answer
                out.append(mark_harness_noise(Message(id=message_id(at, "line"), role="user", timestamp=qts,
                                                      parts=[TextPart(text=text)], meta={"queued": True}),
                                              HARNESS_NOISE))
                placed.append(text)
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
        _error_forms(tools, rec.get("toolUseResult"))
        out.extend(tools)
        k = len(tools)
        if not texts and k:
            continue
        placed.clear()  # a prompt of its own: a new turn, whose deliveries are new words
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
    branches.place(out)
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
    finish_skips(session.meta, skipped, unknown)
    if summary_at is not None:
        session.meta["previous_summary_index"] = summary_at
    return session


def _task_notification(content: str) -> bool:
    """Claude Code queues a background task's notice in the same queue as typed words, as JSON
    `{"task_id", "tool_use_id", "description", "task_type"}` (2.1.45 without `tool_use_id`,
    cc-contextevaluator line 48): the harness's, not the user's."""
    if not content.lstrip().startswith("{"):
        return False
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return isinstance(data, dict) and "task_id" in data and ("tool_use_id" in data or "task_type" in data)


def _deliver(delivered: list[tuple[str, int, Any]], item: tuple[str, int, Any], placed: list[str]) -> bool:
    """A mid-turn delivery, once: its `remove` and its attachment name the same words, whether
    the second comes before the words were placed or after (`placed`, this turn's)."""
    if any(text == item[0] for text, _, _ in delivered):
        return False
    if item[0] in placed:
        placed.remove(item[0])
        return False
    delivered.append(item)
    return True


def _queue(rec: dict[str, Any], n: int, queued: list[tuple[str | None, int, Any]],
           delivered: list[tuple[str, int, Any]], placed: list[str]) -> bool:
    """Follow the queue of typed-ahead messages; True when this record delivered one mid-turn."""
    op = rec.get("operation")
    content = rec.get("content")
    if op == "enqueue" and isinstance(content, str) and _task_notification(content):
        # Not queued: whether its removal is logged differs by version (2.1.45 logs none, and the
        # next `remove` is the typed words'; cc-langlearntts's later version logs one per notice).
        return False
    if op == "enqueue":  # without its text (some versions): a place in the queue all the same
        queued.append((content if isinstance(content, str) else None, n, rec.get("timestamp")))
    elif op == "dequeue" and queued:
        queued.pop(0)  # sent as the next prompt: an ordinary user record follows
    elif op == "remove" and queued:
        text, at, ts = queued.pop(0)
        return text is not None and _deliver(delivered, (text, at, ts), placed)
    elif op == "popAll" and queued:
        queued.pop(0)  # taken back into the input box, one record per message: never sent
    return False


def _error_forms(tools: list[Message], tool_use_result: Any) -> None:
    """A tool result is an error in each form Claude Code writes one: `is_error` (already read),
    content wrapped in `<tool_use_error>`, or a record-level `toolUseResult` "Error: ..." string
    (that record holds one result)."""
    for m in tools:
        for r in m.tool_results:
            if TOOL_USE_ERROR_RE.match(r.output):
                r.is_error = True
    if len(tools) == 1 and isinstance(tool_use_result, str) and tool_use_result.startswith("Error"):
        tools[0].tool_results[0].is_error = True


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
