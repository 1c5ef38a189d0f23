"""Codex rollout JSONL (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl), CLI and Desktop.

Each line is a `RolloutItem` (openai/codex `codex-rs/protocol/src/protocol.rs`):
`{"timestamp", "type", "payload"}` with type `session_meta`, `response_item`, `compacted`,
`turn_context` or `event_msg` (and bookkeeping with no model history, BOOKKEEPING_TOP). `response_item` payloads are `ResponseItem`s
(`codex-rs/protocol/src/models.rs`), what the model saw; each type the enum has had in the last
year is read in `_item` (CALL_TYPES, OUTPUT_TYPES, SKIP_ITEMS, each citing its variant). `event_msg` payloads are UI
events that repeat the same conversation (user_message, agent_message, agent_reasoning,
exec_command_end, ...), used only when the file has no response_item messages at all, so that
the user prompt is not counted twice. `compacted` lines hold a previous summary (`message`;
empty when the summary itself is the encrypted `compaction` item). Code mode's `exec` tool runs
every other tool from JavaScript (worker/formats/_codemode.py): its nested calls are kept in the
message's meta["nested_calls"] so the fact stages see the commands and patched paths.

What the CLI injects into user messages (AGENTS.md instructions, <environment_context>, image
placeholders, ...) is listed in HARNESS_NOISE: never the user's words, so a message of nothing
else does not open a turn. A record or item type not listed here is counted in
meta["unknown_records"] with a warning, never dropped silently.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._codemode import nested_calls
from ._common import (
    BranchMarks,
    Noise,
    Source,
    block_text,
    finish_skips,
    load_records,
    mark_harness_noise,
    require_messages,
    source_name,
    tag,
    unknown_record,
)

# What Codex (CLI and Desktop) injects as user messages or into them: codex-rs/core/src/
# contextual_user_message.rs (CONTEXTUAL_USER_FRAGMENTS: AGENTS.md, environment_context, skill,
# user_shell_command, turn_aborted, subagent_notification, additional_context), the protocol's
# other user-input tags (user_instructions; recommended_plugins, the plugin catalogue Desktop
# sends), and an IDE's context before protocol.rs USER_MESSAGE_BEGIN ("## My request for
# Codex:", where the user's own words begin).
USER_MESSAGE_BEGIN = "## My request for Codex:"
HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("agents-md", re.compile(r"# AGENTS\.md instructions for [^\n]*\n+<INSTRUCTIONS>.*?(?:</INSTRUCTIONS>|\Z)", re.S)),
    Noise("instructions", tag("INSTRUCTIONS")),
    Noise("user-instructions", tag("user_instructions")),
    Noise("environment-context", tag("environment_context")),
    Noise("user-shell-command", tag("user_shell_command")),
    Noise("turn-aborted", tag("turn_aborted")),
    Noise("skill", tag("skill")),
    Noise("subagent-notification", tag("subagent_notification", flags=re.I)),
    Noise("additional-context", tag("additional_context")),
    Noise("recommended-plugins", tag("recommended_plugins")),
    Noise("ide-context", re.compile(rf"\A.*?{re.escape(USER_MESSAGE_BEGIN)}[ \t]*\n?", re.S)),
    Noise("image", re.compile(r"<image\b[^>]*>.*?</image>|\[Image #\d+\]|\[input_image: [^\]\n]*\]", re.S)),
)
# protocol.rs `RolloutItem` variants (serde tag "type", snake_case).
KNOWN_TOP = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
# RolloutItem variants that codex-rs replays into no model history (its thread-history
# projection maps them to nothing): a context baseline (`world_state`: AGENTS.md, environments,
# skills; 0.145+), usage and risk bookkeeping. Counted as skipped by type.
BOOKKEEPING_TOP = {"world_state", "token_usage_record", "security_risk_score", "rollout_reference"}
# models.rs ResponseItem::FunctionCall (`arguments`, a JSON string), ::CustomToolCall (freeform
# `input`), ::LocalShellCall (`action`: LocalShellAction::Exec {command: argv, working_directory}).
CALL_TYPES = {"function_call", "custom_tool_call", "local_shell_call"}
# models.rs ResponseItem::FunctionCallOutput / ::CustomToolCallOutput (`output`: a string, content
# items, or {content, success}); `mcp_tool_call_output` is the ResponseInputItem spelling.
OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output", "mcp_tool_call_output"}
# ResponseItem types with nothing for the model to re-read, counted as skipped by type:
# ::WebSearchCall (server-side search, no local output), ::ToolSearchCall / ::ToolSearchOutput
# (tool discovery), ::ImageGenerationCall (base64 result), ::GhostSnapshot (the harness's git
# snapshot), ::Compaction (alias compaction_summary) / ::ContextCompaction (encrypted summary).
SKIP_ITEMS = {"web_search_call", "tool_search_call", "tool_search_output", "image_generation_call",
              "ghost_snapshot", "compaction", "compaction_summary", "context_compaction"}
# The code-mode tool whose input is JavaScript (codex-rs/code-mode PUBLIC_TOOL_NAME).
CODE_MODE_TOOL = "exec"
NESTED_CALLS = "nested_calls"  # Message.meta key read by worker.facts.actions.scan_actions


def _output_text(output: Any) -> tuple[str, bool]:
    """function_call_output.output (models.rs FunctionCallOutputPayload): a string, a list of
    content items, {"content": ..., "success": bool}, or an MCP CallToolResult {content, isError}."""
    if isinstance(output, dict):
        failed = output.get("success") is False or output.get("isError") is True
        return block_text(output.get("content")), failed
    return block_text(output), False


def _code_mode_calls(code: str) -> list[dict[str, Any]]:
    """The nested tool calls of an `exec` cell as {"name", "arguments"}: an object argument as is,
    a string one (a freeform tool such as apply_patch) under "input"; unreadable ones as {}."""
    out: list[dict[str, Any]] = []
    for name, arg in nested_calls(code):
        args = arg if isinstance(arg, dict) else {"input": arg} if isinstance(arg, str) else {}
        out.append({"name": name, "arguments": args})
    return out


class _Builder:
    def __init__(self, warnings: list[str]) -> None:
        self.out: list[Message] = []
        self.names: dict[str, str] = {}
        self.warnings = warnings
        self.open: Message | None = None  # the assistant message still collecting parts

    def assistant(self, n: int, ts: Any) -> Message:
        if self.open is None:
            self.open = Message(id=message_id(n, "line"), role="assistant", timestamp=ts)
            self.out.append(self.open)
        return self.open

    def close(self) -> None:
        self.open = None

    def add(self, msg: Message) -> None:
        self.close()
        self.out.append(msg)


def _item(b: _Builder, p: dict[str, Any], n: int, ts: Any, skipped: Counter[str], unknown: Counter[str]) -> None:
    t = p.get("type")
    if t == "message":
        role = p.get("role")
        text = block_text(p.get("content"))
        if role == "assistant":
            b.assistant(n, ts).parts.append(TextPart(text=text))
        elif role in ("user", "developer", "system"):
            b.add(mark_harness_noise(Message(id=message_id(n, "line"), role="user" if role == "user" else "system",
                                             parts=[TextPart(text=text)], timestamp=ts), HARNESS_NOISE))
        else:
            b.warnings.append(f"line {n}: message with unknown role {role!r} skipped")
    elif t == "reasoning":
        text = block_text(p.get("summary")) or block_text(p.get("content"))
        if text:
            b.assistant(n, ts).parts.append(ReasoningPart(text=text))
        else:
            skipped["reasoning(encrypted)"] += 1
    elif t in CALL_TYPES:
        cid = str(p.get("call_id") or p.get("id") or message_id(n, "call"))
        name = str(p.get("name") or ("shell" if t == "local_shell_call" else ""))
        args = p.get("arguments") if t == "function_call" else p.get("input") if t == "custom_tool_call" else p.get("action")
        b.names[cid] = name
        msg = b.assistant(n, ts)
        msg.parts.append(ToolCallPart(id=cid, name=name, arguments=args if isinstance(args, (dict, str)) else {}))
        if t == "custom_tool_call" and name == CODE_MODE_TOOL and isinstance(args, str):
            # The JavaScript stays the call's arguments (what the model wrote and is counted);
            # the tools it runs are read out for the fact stages. Every cell is recorded, one whose
            # calls cannot be read with none: it is a cell all the same (its yield is polled by `wait`).
            msg.meta.setdefault(NESTED_CALLS, {})[cid] = _code_mode_calls(args)
    elif t in OUTPUT_TYPES:
        cid = str(p.get("call_id") or "")
        if cid not in b.names:
            b.warnings.append(f"line {n}: tool output for unknown call id {cid!r}")
        text, failed = _output_text(p.get("output"))
        b.add(Message(id=message_id(n, "line"), role="tool", timestamp=ts,
                      parts=[ToolResultPart(call_id=cid, name=b.names.get(cid, ""), output=text, is_error=failed)]))
    elif t in SKIP_ITEMS:
        skipped[f"response_item:{t}"] += 1
    else:
        unknown_record(unknown, b.warnings, f"line {n}", f"response_item:{t}", f"unknown response item type {t!r}")


def load(src: Source) -> Session:
    warnings: list[str] = []
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    records = load_records(src, warnings)
    has_items = any(isinstance(r, dict) and r.get("type") == "response_item"
                    and isinstance(r.get("payload"), dict) and r["payload"].get("type") == "message"
                    for _, r in records)
    b = _Builder(warnings)
    branches = BranchMarks()
    meta: dict[str, Any] = {}
    for n, rec in records:
        if not isinstance(rec, dict):
            warnings.append(f"line {n}: not a JSON object, skipped")
            continue
        t = rec.get("type")
        p = rec.get("payload")
        if t in BOOKKEEPING_TOP:
            skipped[str(t)] += 1
            continue
        if t not in KNOWN_TOP:
            unknown_record(unknown, warnings, f"line {n}", f"record:{t}", f"unknown record type {t!r}")
            continue
        if not isinstance(p, dict):
            warnings.append(f"line {n}: {t} without a payload object skipped")
            continue
        ts = rec.get("timestamp")
        counts[f"{t}:{p.get('type')}" if t in ("response_item", "event_msg") else str(t)] += 1
        if t == "session_meta":
            meta.update({k: p[k] for k in ("id", "cwd", "cli_version", "originator", "model_provider") if k in p})
            git = p.get("git") if isinstance(p.get("git"), dict) else {}  # protocol.rs GitInfo
            branches.seen(git.get("branch"), b.out)
        elif t == "turn_context":  # protocol.rs TurnContextItem: per-turn cwd, model, policies
            if "model" in p:
                meta["model"] = p["model"]
            if isinstance(p.get("cwd"), str):
                meta.setdefault("cwd", p["cwd"])
            skipped["turn_context"] += 1
        elif t == "response_item":
            _item(b, p, n, ts, skipped, unknown)
        elif t == "compacted":
            text = str(p.get("message") or "")
            for m in b.out:
                m.compacted = True
            b.add(Message(id=message_id(n, "line"), role="user", parts=[TextPart(text=text)], timestamp=ts,
                          is_summary=True))
        elif t == "event_msg":
            et = p.get("type")
            if not has_items and et == "user_message":
                b.add(mark_harness_noise(Message(id=message_id(n, "line"), role="user", timestamp=ts,
                                                 parts=[TextPart(text=str(p.get("message", "")))]), HARNESS_NOISE))
            elif not has_items and et == "agent_message":
                b.assistant(n, ts).parts.append(TextPart(text=str(p.get("message", ""))))
            elif not has_items and et == "agent_reasoning":
                b.assistant(n, ts).parts.append(ReasoningPart(text=str(p.get("text", ""))))
            else:
                skipped[f"event_msg:{et}"] += 1
    branches.place(b.out)
    require_messages(b.out, "Codex rollout", warnings)
    session = Session(id=str(meta.get("id") or source_name(src)), messages=b.out, source_format="codex",
                      warnings=warnings, meta=meta)
    session.meta["records"] = dict(counts)
    finish_skips(session.meta, skipped, unknown)
    return session


def detect(records: list[Any]) -> bool:
    return any(isinstance(r, dict) and r.get("type") in ("session_meta", "response_item", "turn_context")
               and isinstance(r.get("payload"), dict) for r in records)
