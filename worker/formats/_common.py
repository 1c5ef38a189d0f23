"""Shared reading helpers for the importers: path/text/object input, tolerant JSONL, text of blocks.

Every importer reads through here so that robustness is the same everywhere: a bad line is
skipped and recorded in the session's warnings with its line number, never raised as a
traceback and never dropped silently.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..session import GIT_BRANCH, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

Source = str | bytes | os.PathLike | list | dict


class FormatError(ValueError):
    """Input that cannot be imported; the CLI reports it as one line with exit code 2."""


class NoMessagesError(FormatError):
    """Well-formed input that holds no conversation yet (only settings or bookkeeping records): a
    hook may treat it as nothing to add, where a command asked to compact it still fails."""


# Hosts that inject text into user messages: such a message is context, not the user's words,
# so it must not open a turn (Message.starts_turn honours meta["injected"]).
INJECTED = "injected"


def read_bytes(src: Source) -> bytes | None:
    """The raw bytes of a path or text input; None when src is an already-parsed object."""
    if isinstance(src, (list, dict)):
        return None
    if isinstance(src, bytes):
        return src
    if isinstance(src, os.PathLike):
        return _read_path(Path(src))
    if isinstance(src, str):
        # A str is text when it looks like JSON or spans lines; otherwise it names a file.
        head = src.lstrip()[:1]
        if head in ("{", "[") or "\n" in src:
            return src.encode("utf-8", errors="surrogatepass")
        return _read_path(Path(src))
    raise FormatError(f"cannot read input of type {type(src).__name__}")


def _read_path(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory") from None
    except OSError as e:
        raise FormatError(f"{path}: cannot read ({e.strerror or e})") from None


def source_name(src: Source) -> str:
    if isinstance(src, os.PathLike):
        return Path(src).stem
    if isinstance(src, str) and not (src.lstrip()[:1] in ("{", "[") or "\n" in src):
        return Path(src).stem
    return "session"


TOO_DEEP = "nested too deeply to parse"  # json's recursion limit: the server answers bodies the same


def loads(text: str) -> Any:
    """json.loads, with a document nested deeper than Python's recursion limit (a RecursionError,
    not a ValueError) raised as FormatError: one line for the CLI, 400 for the server."""
    try:
        return json.loads(text)
    except RecursionError:
        raise FormatError(f"input is {TOO_DEEP}") from None


def parse_jsonl(data: bytes, warnings: list[str]) -> list[tuple[int, Any]]:
    """(line number, value) per parseable line. Undecodable, unparseable or truncated lines are
    skipped with a warning naming the line."""
    lines = data.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out: list[tuple[int, Any]] = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        n = i + 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            warnings.append(f"line {n}: invalid UTF-8 (binary data?) skipped")
            continue
        try:
            out.append((n, loads(text)))
        except FormatError:
            warnings.append(f"line {n}: {TOO_DEEP}, skipped")
        except ValueError:
            if i == last:
                warnings.append(f"line {n}: truncated last line skipped")
            else:
                warnings.append(f"line {n}: invalid JSON skipped")
    return out


def parse_document(data: bytes, warnings: list[str]) -> Any:
    """A whole JSON document; falls back to JSONL (one message per line) so that a
    truncated or partly broken message list still imports what it can."""
    try:
        return loads(data.decode("utf-8"))
    except FormatError:
        raise
    except (UnicodeDecodeError, ValueError):
        pass
    records = parse_jsonl(data, warnings)
    if len(records) == 1 and isinstance(records[0][1], list):
        return records[0][1]
    if not records:
        detail = f" ({warnings[-1]})" if warnings else ""
        raise FormatError(f"not JSON or JSONL: nothing importable{detail}")
    return [v for _, v in records]


def load_input(src: Source, warnings: list[str]) -> Any:
    data = read_bytes(src)
    if data is None:
        return src
    if not data.strip():
        raise FormatError("empty input: nothing to import")
    return parse_document(data, warnings)


def load_records(src: Source, warnings: list[str]) -> list[tuple[int, Any]]:
    """JSONL records of a path/text, or of an already-parsed list (numbered from 1)."""
    data = read_bytes(src)
    if data is None:
        items = src if isinstance(src, list) else [src]
        return list(enumerate(items, start=1))
    if not data.strip():
        raise FormatError("empty input: nothing to import")
    return parse_jsonl(data, warnings)


def block_text(content: Any) -> str:
    """Text of a content value: a string, or a list of blocks (text kept, media named)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        out: list[str] = []
        for b in content:
            if isinstance(b, str):
                out.append(b)
            elif isinstance(b, dict):
                t = b.get("type")
                if isinstance(b.get("text"), str):
                    out.append(b["text"])
                elif t in ("image", "input_image", "image_url", "document", "file"):
                    # Media stays visible as a marker so counts and summaries know it was there.
                    src = b.get("source") if isinstance(b.get("source"), dict) else {}
                    mime = b.get("mimeType") or b.get("mime") or src.get("media_type") or t
                    out.append(f"[{t}: {mime}]")
        return "\n".join(out)
    return str(content)


def finish_skips(meta: dict[str, Any], skipped: Counter[str], unknown: Counter[str] | None = None) -> None:
    """Record what was left out: `skipped` holds record types the importer knows carry nothing
    for the model (UI events, snapshots), `unknown` those it does not know at all. Unknown ones
    also have a warning each; `compactd inspect` lists both counts."""
    if skipped:
        meta["skipped"] = dict(sorted(skipped.items()))
    if unknown:
        meta[UNKNOWN_RECORDS] = dict(sorted(unknown.items()))


class BranchMarks:
    """Marks the first message imported after a branch is seen (or changes) with GIT_BRANCH."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.pending: str | None = None
        self.at = 0

    def seen(self, branch: Any, out: list[Message]) -> None:
        self.place(out)
        if isinstance(branch, str) and branch.strip() and branch != self.last:
            self.pending, self.at, self.last = branch, len(out), branch

    def place(self, out: list[Message]) -> None:
        if self.pending and len(out) > self.at:
            out[self.at].meta[GIT_BRANCH] = self.pending
            self.pending = None


# session.meta key: record/item types an importer did not understand, with a count each.
UNKNOWN_RECORDS = "unknown_records"


def unknown_record(unknown: Counter[str], warnings: list[str], where: str, kind: str, what: str) -> None:
    """Count a record the importer does not understand and warn about it: never dropped silently.
    `kind` is the counter key ("record:foo", "response_item:bar"), `what` the warning's words."""
    unknown[kind] += 1
    warnings.append(f"{where}: {what} skipped")


def require_messages(session_messages: list, what: str, warnings: list[str]) -> None:
    if not session_messages:
        detail = f"; {len(warnings)} warning(s), first: {warnings[0]}" if warnings else ""
        raise NoMessagesError(f"no importable messages found in {what} input{detail}")


# Tool-call block shapes: Anthropic/Claude Code `tool_use` + `input`, pi `toolCall` + `arguments`.
TOOL_CALL_BLOCKS = {"tool_use": "input", "toolCall": "arguments"}


def assistant_parts(blocks: list[Any], names: dict[str, str], id_prefix: str, skipped: Counter[str]) -> list[Any]:
    """Text, thinking and tool-call content blocks as session parts. `names` learns each call's
    tool name (results refer to calls by id only); other block types are counted as skipped."""
    parts: list[Any] = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        t = b.get("type")
        if t == "text":
            parts.append(TextPart(text=str(b.get("text", ""))))
        elif t == "thinking":
            parts.append(ReasoningPart(text=str(b.get("thinking", ""))))
        elif t in TOOL_CALL_BLOCKS:
            cid = str(b.get("id") or f"{id_prefix}_{len(parts)}")
            names[cid] = str(b.get("name") or "")
            args = b.get(TOOL_CALL_BLOCKS[t])
            parts.append(ToolCallPart(id=cid, name=names[cid], arguments=args if isinstance(args, (dict, str)) else {}))
        else:
            # redacted_thinking is opaque; server tool blocks have no local result.
            skipped[f"block:{t}"] += 1
    return parts


def user_blocks(
    blocks: list[dict[str, Any]],
    names: dict[str, str],
    base_id: str,
    where: str,
    warnings: list[str],
    skipped: Counter[str],
    timestamp: str | None = None,
) -> tuple[list[Message], list[TextPart]]:
    """An Anthropic user message's content blocks (Anthropic Messages, Claude Code): each
    `tool_result` becomes its own tool message (ids base_id, base_id.1, ...; name looked up in
    `names`), text and media blocks the user's text parts; other block types are counted as
    skipped. `where` ("message 3", "line 7") prefixes the warning for an unknown call id."""
    tools: list[Message] = []
    texts: list[TextPart] = []
    for b in blocks:
        t = b.get("type")
        if t == "tool_result":
            cid = str(b.get("tool_use_id") or "")
            if cid not in names:
                warnings.append(f"{where}: tool result for unknown call id {cid!r}")
            res = ToolResultPart(call_id=cid, name=names.get(cid, ""), output=block_text(b.get("content")),
                                 is_error=bool(b.get("is_error")))
            k = len(tools)
            tools.append(Message(id=base_id if k == 0 else f"{base_id}.{k}", role="tool", parts=[res],
                                 timestamp=timestamp))
        elif t == "text":
            texts.append(TextPart(text=str(b.get("text", ""))))
        elif t in ("image", "document"):
            texts.append(TextPart(text=block_text([b])))
        else:
            skipped[f"block:{t}"] += 1
    return tools, texts


# ---------------------------------------------------------------------------- harness noise
# Text a harness injects INTO a user message (a reminder, a slash-command wrapper, the output of
# a local command) is not the user's words: never a request, goal or constraint. Each importer
# names what its harness injects in one table of `Noise` rules; `mark_harness_noise` cuts those
# spans out. The message keeps its full text (what the agent's model was sent, what counting
# sees); `meta["user_text"]` holds what the user typed when that differs, `meta[INJECTED]` is set
# when nothing typed is left, and `meta["harness"]` names the rules that matched so the fact
# stages still mine the injected content (an error in hook output is an error).
USER_TEXT = "user_text"
HARNESS = "harness"


@dataclass(frozen=True)
class Noise:
    """One kind of injected content: `pattern` matches the whole span; `keep` is the name of a
    group whose text IS typed by the user (a slash command's arguments) and stays."""

    name: str
    pattern: re.Pattern[str]
    keep: str | None = None


def tag(name: str, *, keep_body: bool = False, flags: int = 0) -> re.Pattern[str]:
    """`<name>…</name>` (an unclosed one runs to the end); keep_body exposes the body as `body`."""
    return re.compile(rf"<{re.escape(name)}(?:\s[^>]*)?>(?P<body>.*?)(?:</{re.escape(name)}>|\Z)", re.S | flags)


def split_harness_noise(text: str, table: tuple[Noise, ...]) -> tuple[str, list[str]]:
    """(what the user typed, the names of the rules that matched) of one user text."""
    found: list[str] = []
    for rule in table:
        def cut(m: re.Match[str], rule: Noise = rule) -> str:
            if rule.name not in found:
                found.append(rule.name)
            return (m.group(rule.keep) or "") if rule.keep else ""
        text = rule.pattern.sub(cut, text)
    return text.strip(), found


def mark_harness_noise(msg: Message, table: tuple[Noise, ...]) -> Message:
    """Mark a user message's injected spans (see above); the text itself is left whole."""
    if msg.role != "user" or msg.is_summary:
        return msg
    words, found = split_harness_noise(msg.user_text, table)
    if not found:
        return msg
    msg.meta[HARNESS] = list(dict.fromkeys(list(msg.meta.get(HARNESS, [])) + found))
    if words:
        msg.meta[USER_TEXT] = words
    else:
        msg.meta[INJECTED] = True
    return msg
