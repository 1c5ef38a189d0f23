"""`compactd hook claude-code`: feed Claude Code's own compaction the facts it must keep.

Claude Code cannot hand its compaction to another model: it summarizes with its session model
through the same endpoint as every turn. It runs hooks around it, though, and two of them can
carry compactd's facts (verified with claude-code 2.1.197, see integrations/claude-code/):

- **PreCompact**: the command's plain stdout is appended to the summarizer's prompt as
  "Additional Instructions:". We print the facts a summary loses most often (exact error lines,
  file paths, commands with their exit status, the user's own constraints), taken from the
  transcript by rules alone, as instructions to carry them verbatim.
- **SessionStart** with matcher `compact`: runs after the compaction; its JSON
  `hookSpecificOutput.additionalContext` is added to the new context. We add compactd's
  deterministic checkpoint, so whatever Claude's summary dropped is still there.

No model is loaded: a hook runs on Claude Code's critical path (the user waits on /compact),
and the fact ledger and work state need none. Both outputs are bounded in bytes.

Failure policy: this hook must never stop a compaction. Claude Code treats exit code 2 from
PreCompact as "block", so bad hook input or an unreadable transcript is one line on stderr and
exit 1, Claude Code's non-blocking error: the compaction goes on without compactd's facts. A
transcript that holds no conversation yet (a session opened on an earlier one's summary, only
settings records before the boundary) has no facts to add: empty output, exit 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..facts.actions import scan_actions
from ..facts.ledger import extract_ledger, user_requests
from ..facts.text import cut_end
from ..facts.workstate import derive_work_state
from ..pipeline.checkpoint import (
    Section,
    fact_labels,
    fit_sections,
    label,
    ledger_sections,
    none_label,
    progress_section,
    user_labelled,
)
from ..pipeline.summarize import detect_language, strip_message_ids
from ..session import Session, cited_ids, id_forms

# Claude Code caps what a hook injects into context at 10,000 characters (beyond it the text
# is replaced by a file reference); a UTF-8 byte is at most one character, so bytes under this
# bound are under the cap with room for our header lines.
MAX_OUTPUT_BYTES = 9_000
GOAL_MAX_CHARS = 600  # the user's first request, as the checkpoint's goal: a pasted log is not a goal
# The fit's note on what it left out: compactd's history API holds no Claude Code session.
LEFT_OUT = "Left out to fit this hook's output limit: {what}. Each is still in this session's transcript file."
EXIT_FAIL_OPEN = 1  # Claude Code's non-blocking hook error: shown, never blocks the compaction
# Errors first: what a summary loses most. Paths without their edit snippets (the summarizer
# reads the edits themselves; a path is what it must not garble).
PRECOMPACT_SECTIONS = ("Critical Context", "Constraints & Preferences", "Relevant Files", "Progress")
CHECKPOINT_SECTIONS = ("Goal", "Constraints & Preferences", "Progress", "Critical Context", "Relevant Files")
PRECOMPACT_HEADER = (
    "compactd read this session's transcript and extracted, by rules, the facts below. Your summary must carry "
    "every one of them verbatim, character for character, under the section where it fits: each exact error "
    "line (in backticks, unchanged), each file path, each command with its exit status, and each of the user's "
    "own instructions and constraints (quote them). Do not paraphrase them, do not drop them, do not mark an "
    "error as fixed unless the facts say it was resolved."
)
CHECKPOINT_HEADER = (
    "[compactd checkpoint — REFERENCE ONLY] Facts extracted by rules from the full transcript before this "
    "compaction (exact error lines, paths, commands, the user's own words). They complement the summary above; "
    "verify live state with tools before acting on them."
)


class HookInputError(ValueError):
    """Hook input Claude Code should not send (not JSON, no transcript_path, unreadable file)."""


@dataclass
class HookInput:
    event: str
    transcript_path: Path
    source: str | None  # SessionStart: startup / resume / clear / compact
    trigger: str | None  # PreCompact: manual / auto


def parse_hook_input(raw: str) -> HookInput:
    try:
        data = json.loads(raw)
    except ValueError:
        raise HookInputError("hook input on stdin is not JSON") from None
    if not isinstance(data, dict):
        raise HookInputError("hook input on stdin is not a JSON object")
    event, path = data.get("hook_event_name"), data.get("transcript_path")
    if event not in ("PreCompact", "SessionStart"):
        raise HookInputError(f"unsupported hook_event_name {event!r} (PreCompact or SessionStart)")
    if not isinstance(path, str) or not path:
        raise HookInputError("hook input has no transcript_path")
    return HookInput(event, Path(path).expanduser(), data.get("source"), data.get("trigger"))


def load_transcript(path: Path) -> Session | None:
    """The session; None for a transcript with no conversation in it yet."""
    from ..formats import FormatError, NoMessagesError, load

    if not path.is_file():
        raise HookInputError(f"transcript not found: {path}")
    try:
        return load(path, format="claude_code")
    except NoMessagesError:
        return None
    except (FormatError, OSError) as exc:
        raise HookInputError(f"cannot import {path}: {exc}") from None


def fact_sections(session: Session) -> tuple[dict[str, Section], str]:
    """The deterministic sections over the whole raw transcript (what came before Claude Code's
    earlier summaries included: its summary cuts the narrative, never the facts). Claude Code has
    no lookup of a transcript's record ids: the user's words are labelled as the user's, and
    `_bounded` drops the ids from the text."""
    messages = session.messages
    cwd = session.meta.get("cwd") if isinstance(session.meta.get("cwd"), str) else None
    actions = scan_actions(messages, cwd=cwd)
    ledger = extract_ledger(messages, cwd=cwd, actions=actions)
    cite = cited_ids([m.id for m in messages])
    state = derive_work_state(messages, ledger, cwd=cwd, actions=actions, cite=cite)
    lang = detect_language(messages)
    requests = [m.user_text for _, m in user_requests(messages)] or [m.user_text for m in messages if m.starts_turn]
    sections = {**ledger_sections(ledger, lang, cite), "Progress": progress_section(state, lang, cite),
                "Goal": Section(text=cut_end(requests[0], GOAL_MAX_CHARS) if requests else "")}
    labels = fact_labels(lang)
    return user_labelled(sections, id_forms([m.id for m in messages]), labels["user"] + ":", labels["agent"] + ":"), lang


def _render(sections: dict[str, Section], lang: str, names: tuple[str, ...]) -> str:
    parts = []
    for name in names:
        section = sections.get(name)
        body = (section.body() if section else "").strip() or none_label(lang)
        parts.append(f"## {label(name, lang)}\n{body}")
    return "\n\n".join(parts) + "\n"


def _bounded(header: str, sections: dict[str, Section], lang: str, names: tuple[str, ...], limit: int,
             ids: set[str] | None = None) -> str:
    """Header + the named sections within `limit` UTF-8 bytes, fitted by importance like a
    checkpoint; past the fit's last resort, a cut at a line boundary (a goal can be long)."""
    room = limit - len(header.encode()) - 2
    ids = ids or set()
    _, body, _ = fit_sections(sections, lang, room, lambda text: len(text.encode()),
                              render=lambda secs: strip_message_ids(_render(secs, lang, names), ids),
                              left_out=LEFT_OUT)
    text = f"{header}\n\n{body}"
    data = text.encode()
    if len(data) > limit:
        cut = data[:limit].decode("utf-8", "ignore")
        text = cut[: cut.rfind("\n") + 1] if "\n" in cut else cut
    return text


def precompact_instructions(session: Session, limit: int = MAX_OUTPUT_BYTES) -> str:
    """What PreCompact prints: the facts as instructions for Claude Code's summarizer."""
    sections, lang = fact_sections(session)
    files = sections["Relevant Files"]
    sections["Relevant Files"] = replace(files, blocks=[replace(b, bullets=[replace(x, subs=[]) for x in b.bullets])
                                                        for b in files.blocks])
    return _bounded(PRECOMPACT_HEADER, sections, lang, PRECOMPACT_SECTIONS, limit, id_forms([m.id for m in session.messages]))


def session_start_output(session: Session, limit: int = MAX_OUTPUT_BYTES) -> dict[str, Any]:
    """What SessionStart prints: the checkpoint as additionalContext, in Claude Code's shape."""
    sections, lang = fact_sections(session)
    context = _bounded(CHECKPOINT_HEADER, sections, lang, CHECKPOINT_SECTIONS, limit, id_forms([m.id for m in session.messages]))
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}


def run_hook(raw: str) -> str:
    """The hook's stdout for one invocation; HookInputError for input it cannot use. A
    SessionStart for anything but a compaction, or a transcript with no conversation yet, adds
    nothing (empty output)."""
    hook = parse_hook_input(raw)
    if hook.event == "SessionStart" and hook.source not in (None, "compact"):
        return ""
    session = load_transcript(hook.transcript_path)
    if session is None:
        return ""
    if hook.event == "PreCompact":
        return precompact_instructions(session)
    return json.dumps(session_start_output(session), ensure_ascii=False)
