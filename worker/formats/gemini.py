"""Gemini API `contents` (Gemini CLI's history, what its compaction request carries).

A `Content` is `{"role": "user"|"model", "parts": [Part]}` (the Gemini API's
`GenerateContentRequest.contents`; `function` is the older role of a function response). A
`Part` holds one of: `text` (with `thought: true` the model's reasoning), `functionCall`
`{id?, name, args}`, `functionResponse` `{id?, name, response}` (Gemini CLI's tools answer
`{"output": ...}` or `{"error": ...}`), `inlineData` / `fileData` (media, named by its MIME
type), `executableCode` / `codeExecutionResult`. Input: a list of contents or an object with
`contents` (a whole `GenerateContentRequest`; its `systemInstruction` is the system message).

A model content's calls are one assistant message; each function response becomes its own tool
message, paired with its call by `id`, else by name in call order (older requests carry no
ids). Gemini CLI re-sends a function response twice after `--resume` (the same id, the same
output): the repeat is counted in meta["skipped"] as `duplicate_function_response`, never a
second result of one call.

What Gemini CLI writes into user contents that is not the user's words (HARNESS_NOISE): its
`<session_context>` (date, OS, workspace tree) and the `<hook_context>` a hook adds. A user
content with a text part that opens with `<state_snapshot>` is a summary (Gemini CLI's compaction re-injects it as the
first user content). Any other part kind is counted in meta["unknown_records"] with a warning.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from typing import Any

from ..session import Message, ReasoningPart, Session, TextPart, ToolCallPart, ToolResultPart, message_id
from ._common import (
    FormatError,
    Noise,
    Source,
    finish_skips,
    load_input,
    mark_harness_noise,
    require_messages,
    source_name,
    tag,
    unknown_record,
)

HARNESS_NOISE: tuple[Noise, ...] = (
    Noise("session-context", tag("session_context")),
    Noise("hook-context", tag("hook_context")),
)
SNAPSHOT_OPEN = "<state_snapshot>"
ROLES = {"user": "user", "model": "assistant", "function": "tool"}
MEDIA = ("inlineData", "fileData")


def contents_of(value: Any) -> list[Any]:
    """The contents list of `value` (a list, or a request object); FormatError otherwise."""
    if isinstance(value, dict):
        value = value.get("contents")
    if not isinstance(value, list):
        raise FormatError("expected Gemini `contents`: a list of {role, parts}")
    return value


def _response_text(response: Any) -> tuple[str, bool]:
    """(output, is_error) of a functionResponse's `response`."""
    if isinstance(response, dict):
        keys = set(response)
        if keys == {"output"} and isinstance(response["output"], str):
            return response["output"], False
        if "error" in response and isinstance(response["error"], str):
            return response["error"], True
        return json.dumps(response, ensure_ascii=False), "error" in response
    if isinstance(response, str):
        return response, False
    return json.dumps(response, ensure_ascii=False), False


def _media(kind: str, part: dict[str, Any]) -> str:
    data = part.get(kind) if isinstance(part.get(kind), dict) else {}
    mime = data.get("mimeType") or kind
    where = data.get("fileUri")
    return f"[{kind}: {mime}{' ' + where if isinstance(where, str) else ''}]"


def load_contents(contents: list[Any], session_id: str = "session", system: Any = None,
                  warnings: list[str] | None = None) -> Session:
    """Import Gemini contents (see the module docstring); FormatError when none is importable."""
    warnings = [] if warnings is None else warnings
    skipped: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    out: list[Message] = []
    pending: dict[str, deque[str]] = defaultdict(deque)  # tool name -> ids of calls not yet answered
    names: dict[str, str] = {}  # call id -> tool name
    answered: dict[str, str] = {}  # call id -> its output
    system_text = _system_text(system)
    if system_text:
        out.append(Message(id=message_id(0), role="system", parts=[TextPart(text=system_text)]))

    def add(role: str, parts: list[Any]) -> Message:
        msg = Message(id=message_id(len(out)), role=role, parts=parts)  # type: ignore[arg-type]
        out.append(msg)
        return msg

    for i, content in enumerate(contents):
        where = f"content {i}"
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            warnings.append(f"{where}: not a Gemini content (no 'parts' list) skipped")
            continue
        role = ROLES.get(str(content.get("role") or "user"))
        if role is None:
            unknown_record(unknown, warnings, where, f"role:{content.get('role')}",
                           f"unknown role {content.get('role')!r}")
            continue
        texts: list[Any] = []
        for part in content["parts"]:
            if not isinstance(part, dict):
                warnings.append(f"{where}: a part that is not an object skipped")
                continue
            if isinstance(part.get("text"), str):
                is_thought = part.get("thought") is True and role == "assistant"
                texts.append(ReasoningPart(text=part["text"]) if is_thought else TextPart(text=part["text"]))
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                cid = str(call.get("id") or f"call_{i}_{len(texts)}")
                name = str(call.get("name") or "")
                names[cid] = name
                pending[name].append(cid)
                args = call.get("args")
                texts.append(ToolCallPart(id=cid, name=name, arguments=args if isinstance(args, (dict, str)) else {}))
            elif isinstance(part.get("functionResponse"), dict):
                resp = part["functionResponse"]
                name = str(resp.get("name") or "")
                output, is_error = _response_text(resp.get("response"))
                cid = str(resp.get("id") or "")
                if cid in answered:
                    skipped["duplicate_function_response"] += 1
                    if answered[cid] != output:
                        warnings.append(f"{where}: a second, different response to call {cid!r} skipped")
                    continue
                if not cid:
                    cid = pending[name][0] if pending[name] else f"call_{i}_{len(out)}"
                if cid in pending[name]:
                    pending[name].remove(cid)
                elif cid not in names:
                    warnings.append(f"{where}: function response for unknown call {cid!r}")
                answered[cid] = output
                _flush(add, role, texts)
                texts = []
                add("tool", [ToolResultPart(call_id=cid, name=name or names.get(cid, ""), output=output,
                                            is_error=is_error)])
            elif any(isinstance(part.get(k), dict) for k in MEDIA):
                texts.append(TextPart(text=_media(next(k for k in MEDIA if isinstance(part.get(k), dict)), part)))
            elif isinstance(part.get("executableCode"), dict):
                texts.append(TextPart(text=str(part["executableCode"].get("code") or "")))
            elif isinstance(part.get("codeExecutionResult"), dict):
                texts.append(TextPart(text=str(part["codeExecutionResult"].get("output") or "")))
            else:
                kind = next((k for k in part if k not in ("thoughtSignature", "thought")), "empty")
                unknown_record(unknown, warnings, where, f"part:{kind}", f"unknown part {kind!r}")
        _flush(add, role, texts)
    for msg in out:
        if msg.role == "user" and any(p.text.lstrip().startswith(SNAPSHOT_OPEN) for p in msg.parts
                                      if isinstance(p, TextPart)):
            msg.is_summary = True
        mark_harness_noise(msg, HARNESS_NOISE)
    require_messages(out, "Gemini", warnings)
    session = Session(id=session_id, messages=out, source_format="gemini", warnings=warnings)
    finish_skips(session.meta, skipped, unknown)
    return session


def _flush(add: Any, role: str, parts: list[Any]) -> None:
    """The parts gathered so far as one message of the content's role (a tool role's text: user)."""
    if parts:
        add("user" if role == "tool" else role, parts)


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, dict):
        parts = system.get("parts")
        if isinstance(parts, list):
            return "\n".join(str(p.get("text")) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(system.get("text"), str):
            return system["text"]
    return ""


def load(src: Source) -> Session:
    warnings: list[str] = []
    value = load_input(src, warnings)
    system = value.get("systemInstruction") if isinstance(value, dict) else None
    return load_contents(contents_of(value), session_id=source_name(src), system=system, warnings=warnings)


def detect(value: Any) -> bool:
    """True for Gemini contents: every sampled item a {role, parts} with role user/model/function."""
    try:
        contents = contents_of(value)
    except FormatError:
        return False
    sample = contents[:50]
    return bool(sample) and all(
        isinstance(c, dict) and isinstance(c.get("parts"), list) and "content" not in c
        and c.get("role", "user") in ROLES for c in sample)


__all__ = ["HARNESS_NOISE", "contents_of", "detect", "load", "load_contents"]
