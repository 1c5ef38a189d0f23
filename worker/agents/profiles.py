"""One `AgentProfile` per agent: everything compactd knows of an agent, in one place.

An agent reaches compactd through a *door* (`chat`: /v1/chat/completions; `responses`: Codex's
/v1/responses; `gemini`: the Gemini API's generateContent; `hook`: a command the agent runs
around its own compaction). A profile says, for
one agent:

- how to recognize its compaction request, by the request's structure (which message holds the
  agent's prompt, the blob it wraps the conversation in, the markers of each variant), never by
  a byte prefix of the whole body;
- how to read its history: a text blob (opencode, pi) or structured items (Codex);
- how to render compactd's typed sections in its template (worker/agents/template.py's pieces);
- its preset (the agent keeps its own recent tail and wraps the summary itself), its
  harness-noise table (what the agent writes into user turns that is not the user's words) and
  its usage rule (what the prompt-token count of the reply counts).

The built-in agents are registered below through `register`, the same call a new agent uses
(as simonw/llm registers its own models through the hook a plugin uses). `recognize` asks the
profiles of a door in registration order; the first that claims the request answers it. A
request no profile claims is a compaction only when the client says so with the header
`X-Compactd-Mode: compact` (the `generic` profile); every other request stays plain
generation. A recognized request is never refused for its length: the pipeline chunks.

A new agent: one profile here, one importer in worker/formats/ (if its history is structured),
one captured request in tests/fixtures/agents/, and its tests (CONTRIBUTING.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..formats import claude_code as claude_code_format
from ..formats import codex as codex_format
from ..formats import gemini as gemini_format
from ..formats import load as load_transcript
from ..formats import opencode as opencode_format
from ..formats import pi as pi_format
from ..formats._common import Noise, block_text, mark_harness_noise, tag
from ..pipeline.checkpoint import Section, render_summary
from ..session import Message, Session
from . import template as t
from .blob import ATTACHED_NOISE, CONTINUE_NOISE, HARNESS_NOISE, parse_conversation

Door = Literal["chat", "responses", "hook", "gemini"]
Kind = Literal["history", "turn_prefix"]
# How the reply's prompt-token count is counted: "request": the request's messages with the
# model's tokenizer (what the agent sent); "history": the history compactd read (Codex's items).
Usage = Literal["request", "history"]

MODE_HEADER = "x-compactd-mode"
COMPACT_MODE = "compact"
# Headers an agent names its session with (opencode sends x-session-id); the first one set wins.
SESSION_HEADERS = ("x-compactd-session", "x-session-id", "session_id", "x-session-affinity")
# The agent's window is not in its request; the budget only bounds the summary and prune's
# protected share, so a window larger than any agent's keeps both at their own limits.
AGENT_CONTEXT_LIMIT = 131_072


@dataclass
class AgentRequest:
    agent: str  # the profile's name
    kind: Kind
    conversation: str | None  # the blob; None: the request's own messages/items are the conversation
    prior_summary: str | None
    session_key: str | None
    focus: str | None = None


@dataclass
class Received:
    """The history a request carries, read by its profile."""

    session: Session
    prior_summary: str | None  # a summary the agent holds: ours (an update) or its own (an anchor)
    after: Session | None = None  # the prior summary is in `session`: the messages that follow it


@dataclass(frozen=True)
class Preset:
    """How the pipeline runs for an agent that keeps its own recent tail and wraps the summary
    itself: the whole received head is summarized, no verbatim tail, no reference prefix, and
    the agent's own trigger is the loop guard."""

    verbatim_tail: bool = False
    reference_prefix: bool = False
    loop_guard: bool = False
    context_limit: int | None = AGENT_CONTEXT_LIMIT  # None: the service's configured limit

    def options(self) -> dict[str, bool]:
        """The CompactionConfig fields it sets (the summary cites no message id either: the
        agent's model cannot look one up)."""
        return {"verbatim_tail": self.verbatim_tail, "reference_prefix": self.reference_prefix,
                "loop_guard": self.loop_guard, "cite_ids": False}


AGENT_KEEPS_TAIL = Preset()

Recognizer = Callable[[dict[str, Any], dict[str, str]], AgentRequest | None]
Reader = Callable[[AgentRequest, dict[str, Any]], Received]
Renderer = Callable[[dict[str, Section], str, Kind], str]


@dataclass(frozen=True)
class AgentProfile:
    name: str
    door: Door
    # (request body, lower-cased headers) -> the compaction it asks for, or None. None for a
    # hook door: the agent calls compactd's command, there is no request to tell apart.
    recognize: Recognizer | None
    read: Reader  # the history the request carries (for a hook: unused, the hook reads its transcript)
    render: Renderer  # compactd's sections in the agent's template
    preset: Preset = AGENT_KEEPS_TAIL
    harness_noise: tuple[Noise, ...] = ()
    usage: Usage = "request"
    # How a prior summary holds a reply we sent: at its start (pi appends its file lists after
    # it) or anywhere (Codex re-injects it after its own prefix paragraph).
    prior_match: Literal["prefix", "contains"] = "prefix"


PROFILES: dict[str, AgentProfile] = {}


def register(profile: AgentProfile) -> AgentProfile:
    """Add an agent (a later profile of the same name replaces the earlier one)."""
    PROFILES[profile.name] = profile
    return profile


def get(name: str) -> AgentProfile:
    return PROFILES[name]


def session_key(headers: dict[str, str]) -> str | None:
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def recognize(body: dict[str, Any], headers: dict[str, str], door: Door = "chat") -> AgentRequest | None:
    """The compaction request in `body` (the request's JSON) at `door`, or None for plain
    generation. `headers` are the request's, lower-cased."""
    for profile in PROFILES.values():
        if profile.door == door and profile.recognize is not None:
            found = profile.recognize(body, headers)
            if found is not None:
                return found
    if door == "chat" and headers.get(MODE_HEADER, "").strip().lower() == COMPACT_MODE:
        return _generic(body, headers)
    return None


# ----------------------------------------------------------------------------- chat messages


def _text(message: dict[str, Any]) -> str:
    return block_text(message.get("content"))


@dataclass
class _Chat:
    """A chat request's parts that recognition reads."""

    system: str  # the first system/developer message
    user: str  # the last user message
    users: int
    blob: re.Match[str] | None


CONVERSATION_RE = re.compile(r"<conversation>\n?(.*?)\n?</conversation>", re.S)


def _chat(body: dict[str, Any]) -> _Chat:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = next((_text(m) for m in messages if m.get("role") in ("system", "developer")), "")
    users = [m for m in messages if m.get("role") == "user"]
    user = _text(users[-1]) if users else ""
    return _Chat(system, user, len(users), CONVERSATION_RE.search(user))


def _after_last_summary(session: Session, prior: Callable[[Message], str] = lambda m: m.text) -> Received:
    """A history that carries the agent's earlier summary (marked is_summary by its reader):
    the last one is the prior summary (`prior` takes its text out of the message), what follows
    it an update's new messages."""
    summaries = [i for i, m in enumerate(session.messages) if m.is_summary]
    if not summaries:
        return Received(session, None)
    last = summaries[-1]
    return Received(session, prior(session.messages[last]),
                    session.model_copy(update={"messages": session.messages[last + 1:]}))


def _read_blob(noise: tuple[Noise, ...]) -> Reader:
    def read(req: AgentRequest, body: dict[str, Any]) -> Received:
        if req.conversation is not None:
            return Received(parse_conversation(req.conversation, noise=noise), req.prior_summary)
        # Header-forced, no blob: the request's own messages, in OpenAI shape.
        return Received(load_transcript(body.get("messages") or [], format="openai"), req.prior_summary)
    return read


# ----------------------------------------------------------------------------- opencode
# packages/opencode/src/session/compaction.ts: the system prompt is the compaction agent's, the
# one user message asks for an anchored summary of the history (tests/fixtures/agents/drift/):
# - 1.18.17+: the history in <conversation>, an update's last summary in <prior-summary>;
# - 1.14-1.18.16: another system sentence, the history untagged after the template's closing
#   "Rules:" bullets ([instruction, template, ...entries] joined by blank lines), an update's
#   summary in <previous-summary> before it.

OPENCODE_SYSTEM = ("You are a context summarization agent.",
                   "You are an anchored context summarization assistant for coding sessions.")
OPENCODE_MARKERS = ("Create a new anchored summary", "<prior-summary>", "Update the anchored summary")
OPENCODE_UNTAGGED_RE = re.compile(
    r"\A(?:Create a new|Update the) anchored summary.*?</template>\n\nRules:\n(?:- [^\n]*\n)*?- [^\n]*\n\n(.*)\Z", re.S)
OPENCODE_PRIOR_RE = re.compile(r"<(?:prior|previous)-summary>\n?(.*?)\n?</(?:prior|previous)-summary>", re.S)


def _opencode_request(name: str, chat: _Chat, headers: dict[str, str]) -> AgentRequest | None:
    """opencode's user message (either layout), once the system prompt said it is one."""
    blob = chat.blob or OPENCODE_UNTAGGED_RE.search(chat.user)
    if blob is None or chat.users != 1 or not any(mark in chat.user for mark in OPENCODE_MARKERS):
        return None
    prior = OPENCODE_PRIOR_RE.search(chat.user[:blob.start(1)] + chat.user[blob.end(1):])  # before or after
    return AgentRequest(name, "history", blob.group(1), prior.group(1) if prior else None, session_key(headers))


def _recognize_opencode(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    chat = _chat(body)
    return _opencode_request("opencode", chat, headers) if chat.system.startswith(OPENCODE_SYSTEM) else None


def render_opencode(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """Objective ← Goal; Important Details ← Constraints & Preferences + Key Decisions + Critical
    Context; Work State (Completed / Active / Blocked) ← Progress; Next Move ← Next Steps,
    numbered; Relevant Files ← Relevant Files."""
    details = t.merged(sections.get("Constraints & Preferences"), sections.get("Key Decisions"),
                       sections.get("Critical Context"))
    return t.document([
        ("Objective", t.goal(sections.get("Goal"), lang, bullet=True)),
        ("Important Details", t.body(details, lang)),
        ("Work State", t.progress(sections.get("Progress"), OPENCODE_WORK, None, lang)),
        ("Next Move", t.numbered(sections.get("Next Steps"), lang)),
        ("Relevant Files", t.body(t.merged(sections.get("Relevant Files")), lang)),
    ])


OPENCODE_WORK = {"done": "Completed", "in_progress": "Active", "blocked": "Blocked"}
# opencode's synthetic "continue" after a compaction, its file placeholders, attachments.
OPENCODE_NOISE = (CONTINUE_NOISE, *opencode_format.HARNESS_NOISE, ATTACHED_NOISE)

register(AgentProfile("opencode", "chat", _recognize_opencode, _read_blob(OPENCODE_NOISE), render_opencode,
                      harness_noise=OPENCODE_NOISE))


# ----------------------------------------------------------------------------- pi
# packages/coding-agent/src/core/compaction/ (0.46-0.73.1): the summarization system prompt, the
# one user message wraps the serialized history in <conversation>; an update carries the last
# summary in <previous-summary>; a split turn's prefix is its own request; `/compact <text>`
# appends "Additional focus: <text>". Before 0.46 (tests/fixtures/agents/drift/): no system
# prompt and no blob, the conversation's own messages followed by one user message holding the
# prompt: the CONTEXT CHECKPOINT COMPACTION prompt (history, 0.17-0.30), its split-turn variant,
# or (0.31-0.45) the turn-prefix prompt alone.

PI_SYSTEM = "You are a context summarization assistant."
PI_TURN_PREFIX = "This is the PREFIX of a turn that was too large to keep."
PI_PRIOR_RE = re.compile(r"<previous-summary>\n?(.*?)\n?</previous-summary>", re.S)
PI_FOCUS_RE = re.compile(r"\n\nAdditional focus: (.*)\Z", re.S)
PI_WORK = {"done": "Done", "in_progress": "In Progress", "blocked": "Blocked"}
PI_CHECKBOX = {"done": "[x] ", "in_progress": "[ ] ", "blocked": ""}
PI_NOISE = (*pi_format.HARNESS_NOISE, ATTACHED_NOISE)


PI_RAW_HISTORY = "You are performing a CONTEXT CHECKPOINT COMPACTION."
PI_RAW_TURN_PREFIXES = ("You are performing a CONTEXT CHECKPOINT COMPACTION for a split turn.", PI_TURN_PREFIX)


def _recognize_pi_raw(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    """pi before 0.46: no system message, the conversation's messages, then pi's prompt."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if len(messages) < 2 or messages[-1].get("role") != "user":
        return None
    if any(m.get("role") in ("system", "developer") for m in messages):
        return None
    prompt = _text(messages[-1]).lstrip()
    if prompt.startswith(PI_RAW_TURN_PREFIXES):
        kind: Kind = "turn_prefix"
    elif prompt.startswith(PI_RAW_HISTORY):
        kind = "history"
    else:
        return None
    focus = PI_FOCUS_RE.search(prompt)
    return AgentRequest("pi", kind, None, None, session_key(headers), focus.group(1).strip() if focus else None)


def _read_pi(req: AgentRequest, body: dict[str, Any]) -> Received:
    if req.conversation is not None:
        return _read_blob(PI_NOISE)(req, body)
    history = [m for m in body.get("messages") or [] if isinstance(m, dict)][:-1]  # less pi's prompt
    session = load_transcript(history, format="openai")
    for m in session.messages:
        mark_harness_noise(m, PI_NOISE)
    return Received(session, None)


def _recognize_pi(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    chat = _chat(body)
    if chat.blob is None or chat.users != 1 or not chat.system.startswith(PI_SYSTEM):
        return _recognize_pi_raw(body, headers)
    turn_prefix = PI_TURN_PREFIX in chat.user[chat.blob.end():]
    prior = PI_PRIOR_RE.search(chat.user, chat.blob.end())
    focus = PI_FOCUS_RE.search(chat.user)
    return AgentRequest("pi", "turn_prefix" if turn_prefix else "history", chat.blob.group(1),
                        prior.group(1) if prior else None, session_key(headers),
                        focus.group(1).strip() if focus else None)


def render_pi(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """pi's six sections: compactd's less Relevant Files (folded into Critical Context; pi
    appends its own read/modified lists), Done items `[x]`, In Progress `[ ]`. A turn prefix:
    Original Request ← Goal; Early Progress ← Progress + Key Decisions; Context for Suffix ←
    Critical Context + Relevant Files + Constraints & Preferences."""
    if kind == "turn_prefix":
        early = t.merged(sections.get("Progress"), sections.get("Key Decisions"))
        context = t.merged(sections.get("Critical Context"), sections.get("Relevant Files"),
                           sections.get("Constraints & Preferences"))
        return t.document([
            ("Original Request", t.goal(sections.get("Goal"), lang, bullet=False)),
            ("Early Progress", t.body(early, lang)),
            ("Context for Suffix", t.body(context, lang)),
        ])
    critical = t.merged(sections.get("Critical Context"), sections.get("Relevant Files"))
    return t.document([
        ("Goal", t.goal(sections.get("Goal"), lang, bullet=False)),
        ("Constraints & Preferences", t.body(t.merged(sections.get("Constraints & Preferences")), lang)),
        ("Progress", t.progress(sections.get("Progress"), PI_WORK, PI_CHECKBOX, lang)),
        ("Key Decisions", t.body(t.merged(sections.get("Key Decisions")), lang)),
        ("Next Steps", t.numbered(sections.get("Next Steps"), lang)),
        ("Critical Context", t.body(critical, lang)),
    ])


register(AgentProfile("pi", "chat", _recognize_pi, _read_pi, render_pi, harness_noise=PI_NOISE))


# ----------------------------------------------------------------------------- Codex
# Codex speaks only the Responses API and sends its compaction to the provider of every turn
# (codex 0.171.0): it marks the request `"request_kind":"compaction"` in its turn metadata
# (`client_metadata["x-codex-turn-metadata"]` or that header), and its default compact prompt
# (codex-rs/core/templates/compact/prompt.md) is the last input item.

TURN_METADATA = "x-codex-turn-metadata"
COMPACT_PROMPT_START = "You are performing a CONTEXT CHECKPOINT COMPACTION."
# 0.58.0+ opens with COMPACT_PROMPT_START; before it, the "memento" prompt (tests/fixtures/agents/drift/).
COMPACT_PROMPT_STARTS = (COMPACT_PROMPT_START, "You have exceeded the maximum number of tokens, please stop coding and "
                         "instead write a short memento message for the next agent.")
# codex-rs/core/templates/compact/summary_prefix.md: how Codex re-injects an earlier summary.
SUMMARY_PREFIX = "Another language model started to solve this problem"


def turn_metadata(body: dict[str, Any], headers: Any) -> dict[str, Any]:
    client = body.get("client_metadata")
    raw = client.get(TURN_METADATA) if isinstance(client, dict) else None
    raw = raw or headers.get(TURN_METADATA)
    try:
        meta = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _item_text(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text") or "") for c in content if isinstance(c, dict))
    return ""


def is_compaction(body: dict[str, Any], headers: Any) -> bool:
    """Codex marks its compaction request in its turn metadata; its default prompt is the
    fallback mark (a configured `compact_prompt` is recognized by the metadata alone)."""
    if turn_metadata(body, headers).get("request_kind") == "compaction":
        return True
    items = body.get("input")
    return isinstance(items, list) and bool(items) and _item_text(items[-1]).lstrip().startswith(COMPACT_PROMPT_STARTS)


def _recognize_codex(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    if not is_compaction(body, headers):
        return None
    key = turn_metadata(body, headers).get("session_id") or headers.get("session-id")
    return AgentRequest("codex", "history", None, None, str(key) if key else None)


def session_from_input(body: dict[str, Any], session_id: str) -> Session:
    """The conversation to compact: every input item but the trailing compaction prompt, read
    by the rollout importer's item parser; Codex's re-injected earlier summary is a summary.
    A ValueError when `input` is not a list."""
    items = body.get("input")
    if not isinstance(items, list):
        raise ValueError("input must be a list of items")
    items = [i for i in items if isinstance(i, dict)]
    if items and items[-1].get("type", "message") == "message" and items[-1].get("role") == "user":
        items = items[:-1]  # the compaction prompt (default or a configured compact_prompt)
    records = [{"type": "response_item", "payload": {"type": "message", **i} if "type" not in i else i}
               for i in items]
    if isinstance(body.get("instructions"), str) and body["instructions"].strip():
        records.insert(0, {"type": "response_item", "payload": {"type": "message", "role": "developer",
                                                                "content": body["instructions"]}})
    session = codex_format.load(records)
    session.id = session_id
    for m in session.messages:
        if m.role == "user" and m.text.lstrip().startswith(SUMMARY_PREFIX):
            m.is_summary = True
    return session


def _read_codex(req: AgentRequest, body: dict[str, Any]) -> Received:
    """Codex re-sends its earlier summary (and the user messages it kept) in its input: the last
    summary is the prior one, and what follows it is an update's new messages."""
    return _after_last_summary(session_from_input(body, req.session_key or "codex"))


def _render_compactd(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """compactd's own seven sections (the agent prefixes the summary itself)."""
    return render_summary(sections, lang, reference_prefix=False)


# Codex compacts against the window it was configured with: the service's limit.
register(AgentProfile("codex", "responses", _recognize_codex, _read_codex, _render_compactd,
                      preset=Preset(context_limit=None), harness_noise=codex_format.HARNESS_NOISE,
                      usage="history", prior_match="contains"))


# ----------------------------------------------------------------------------- Kilo
# Kilo CLI 7.7 (an opencode fork, @kilocode/cli): its compaction agent's system prompt is Kilo's
# own text ("You are Kilo, …") with opencode's summarization prompt appended; the user message is
# opencode's (tests/fixtures/agents/kilo-compaction-request.json).

KILO_SYSTEM = "You are Kilo,"


def _recognize_kilo(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    chat = _chat(body)
    if not chat.system.startswith(KILO_SYSTEM) or not any(s in chat.system for s in OPENCODE_SYSTEM):
        return None
    return _opencode_request("kilo", chat, headers)


register(AgentProfile("kilo", "chat", _recognize_kilo, _read_blob(OPENCODE_NOISE), render_opencode,
                      harness_noise=OPENCODE_NOISE))


# ----------------------------------------------------------------------------- Aider
# Aider 0.86 (aider/history.py, ChatSummary.summarize_real, through --weak-model): system is
# aider/prompts.py's `summarize`; the one user message is the head of the chat as
# "# USER\n<text>\n# ASSISTANT\n<text>\n…" (user and assistant messages only; restored lines end
# in markdown's two-space break). Aider keeps its newest messages itself and puts the summary
# first, as the user's words: the reply is first-person prose ("I asked you…"), no headings,
# no fenced code. Every other weak-model request (commit messages, …) is plain generation.

AIDER_SYSTEM = "*Briefly* summarize this partial conversation about programming."
AIDER_ENTRY_RE = re.compile(r"^# (USER|ASSISTANT)\n", re.M)
AIDER_ROLES = {"USER": "user", "ASSISTANT": "assistant"}
# aider/prompts.py `summary_prefix`: how Aider puts an earlier summary first in the chat.
AIDER_SUMMARY_PREFIX = "I spoke to you previously about a number of things."


def _recognize_aider(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    chat = _chat(body)
    if not chat.system.startswith(AIDER_SYSTEM) or chat.users != 1 or not AIDER_ENTRY_RE.match(chat.user):
        return None
    return AgentRequest("aider", "history", chat.user, None, session_key(headers))


def _read_aider(req: AgentRequest, body: dict[str, Any]) -> Received:
    """The "# USER / # ASSISTANT" head as chat messages. An earlier summary (Aider's or ours) is
    the first user message, after AIDER_SUMMARY_PREFIX: the prior summary, never the user's words."""
    text = req.conversation or ""
    marks = list(AIDER_ENTRY_RE.finditer(text))
    messages = []
    for mark, nxt in zip(marks, [*marks[1:], None], strict=True):
        content = text[mark.end(): nxt.start() if nxt else len(text)]
        content = "\n".join(line.removesuffix("  ") for line in content.split("\n")).strip()
        if content:
            messages.append({"role": AIDER_ROLES[mark.group(1)], "content": content})
    session = load_transcript(messages, format="openai")
    first = session.messages[0] if session.messages else None
    if first is not None and first.role == "user" and first.text.startswith(AIDER_SUMMARY_PREFIX):
        first.is_summary = True
    return _after_last_summary(session, lambda m: m.text.removeprefix(AIDER_SUMMARY_PREFIX).strip())


def _prose(lead: str, section: Section | None) -> str:
    """A paragraph: the lead, then the section's bullets (their quotes and sub-items kept)."""
    text = t.merged(section).body().strip()
    return f"{lead}\n{text}" if text else ""


def render_aider(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """First person, as the user telling the assistant (Aider's prompt asks so): Goal, the
    user's constraints, the errors and context, files, progress, decisions, next steps; one
    paragraph each, facts kept verbatim in backticks; no headings, no fenced code."""
    goal_section = sections.get("Goal")
    goal = goal_section.text.strip() if goal_section is not None else ""
    parts = t.progress_parts(sections.get("Progress"))
    paragraphs = [
        f"I asked you: {goal}" if goal else "I asked you to help me with this project.",
        _prose("I told you:", sections.get("Constraints & Preferences")),
        _prose("What we ran into, verbatim:", sections.get("Critical Context")),
        _prose("The files involved:", sections.get("Relevant Files")),
        _prose("You did:", parts.get("done")),
        _prose("Still in progress:", parts.get("in_progress")),
        _prose("Blocked:", parts.get("blocked")),
        _prose("We decided:", sections.get("Key Decisions")),
        _prose("Next, you were going to:", sections.get("Next Steps")),
    ]
    return "\n\n".join(p for p in paragraphs if p).replace("```", "`") + "\n"


register(AgentProfile("aider", "chat", _recognize_aider, _read_aider, render_aider, prior_match="contains"))


# ----------------------------------------------------------------------------- Qwen Code
# Qwen Code 0.24 (packages/core/src/services/chatCompressionService.ts, getCompressionPrompt;
# through `compactionModel`): system is the compression prompt, then the structured history
# (user, assistant with tool_calls, tool), then one user message asking for the snapshot. The
# reply is `<state_snapshot>` with its 9 tags (an `<analysis>` block is optional: Qwen strips
# it; none is sent). Qwen replaces the whole history with the reply; its next compaction sees
# it as the first user message (prior_match "contains").

QWEN_SYSTEM = "You are the component that summarizes a conversation when its context window is about to overflow."
QWEN_PROMPT = "First, reason in your <analysis> block. Then, produce the <state_snapshot> XML."
QWEN_FOCUS_RE = re.compile(r"\n\nAdditional Instructions:\n(.*)\Z", re.S)  # /compress <text>, PreCompact hooks
SNAPSHOT_RE = re.compile(r"<state_snapshot>.*?</state_snapshot>", re.S)
# What Qwen Code writes into user turns: skills and environment reminders, hook context.
QWEN_NOISE = (Noise("system-reminder", tag("system-reminder")),
              Noise("user-prompt-submit-context", tag("qwen:user-prompt-submit-context")))
QWEN_TAGS = ("primary_request_and_intent", "key_technical_concepts", "files_and_code_sections", "errors_and_fixes",
             "problem_solving", "all_user_messages", "pending_tasks", "current_work", "next_step")


def _recognize_qwen(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if len(messages) < 2 or messages[0].get("role") != "system" or messages[-1].get("role") != "user":
        return None
    system = _text(messages[0])
    if not system.startswith(QWEN_SYSTEM) or _text(messages[-1]).strip() != QWEN_PROMPT:
        return None
    focus = QWEN_FOCUS_RE.search(system)
    return AgentRequest("qwen-code", "history", None, None, session_key(headers),
                        focus.group(1).strip() if focus else None)


def _read_qwen(req: AgentRequest, body: dict[str, Any]) -> Received:
    history = [m for m in body.get("messages") or [] if isinstance(m, dict)][1:-1]
    session = load_transcript(history, format="openai")
    for m in session.messages:
        mark_harness_noise(m, QWEN_NOISE)
        if m.role == "user" and SNAPSHOT_RE.search(m.text):
            m.is_summary = True
    return _after_last_summary(session)


def render_qwen(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """`<state_snapshot>` with Qwen's 9 tags: primary_request_and_intent ← Goal;
    key_technical_concepts ← Key Decisions; files_and_code_sections ← Relevant Files;
    errors_and_fixes ← Critical Context; problem_solving ← Progress Done; all_user_messages ←
    Constraints & Preferences (the user's words); pending_tasks ← Blocked; current_work ← In
    Progress; next_step ← Next Steps. Bodies are compactd's text as is (Qwen reads the snapshot
    as text, so an error line keeps its `<module>`), "(none)" when empty."""
    by_key = t.progress_parts(sections.get("Progress"))
    bodies = {
        "primary_request_and_intent": t.goal(sections.get("Goal"), lang, bullet=False),
        "key_technical_concepts": t.body(t.merged(sections.get("Key Decisions")), lang),
        "files_and_code_sections": t.body(t.merged(sections.get("Relevant Files")), lang),
        "errors_and_fixes": t.body(t.merged(sections.get("Critical Context")), lang),
        "problem_solving": t.body(t.merged(by_key.get("done")), lang),
        "all_user_messages": t.body(t.merged(sections.get("Constraints & Preferences")), lang),
        "pending_tasks": t.body(t.merged(by_key.get("blocked")), lang),
        "current_work": t.body(t.merged(by_key.get("in_progress")), lang),
        "next_step": t.numbered(sections.get("Next Steps"), lang),
    }
    inner = "\n".join(f"<{tag_}>\n{bodies[tag_]}\n</{tag_}>" for tag_ in QWEN_TAGS)
    return f"<state_snapshot>\n{inner}\n</state_snapshot>\n"


register(AgentProfile("qwen-code", "chat", _recognize_qwen, _read_qwen, render_qwen, harness_noise=QWEN_NOISE,
                      prior_match="contains"))


# ----------------------------------------------------------------------------- Claude Code
# Claude Code summarizes with its session model through the endpoint of every turn and cannot
# hand its compaction over; its hooks (PreCompact, SessionStart "compact") run
# `compactd hook claude-code` around it, which reads the transcript itself
# (worker/agents/claude_code.py). No request to recognize, no history in a request.


def _no_request(req: AgentRequest, body: dict[str, Any]) -> Received:
    raise TypeError("Claude Code's hook reads its transcript file, not a request")


register(AgentProfile("claude-code", "hook", None, _no_request, _render_compactd,
                      harness_noise=claude_code_format.HARNESS_NOISE))


# ----------------------------------------------------------------------------- generic
# Any client that says `X-Compactd-Mode: compact`: a <conversation> blob if it has one (either
# agent's prior-summary tag), else its own messages; compactd's own sections.

def _generic(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest:
    chat = _chat(body)
    key = session_key(headers)
    if chat.blob is None:
        return AgentRequest("generic", "history", None, None, key)
    prior = PI_PRIOR_RE.search(chat.user) or OPENCODE_PRIOR_RE.search(chat.user)
    return AgentRequest("generic", "history", chat.blob.group(1), prior.group(1) if prior else None, key)


# Registered without a recognizer: `recognize` reaches it through the header alone.
register(AgentProfile("generic", "chat", None, _read_blob(HARNESS_NOISE), _render_compactd,
                      harness_noise=HARNESS_NOISE))


# ----------------------------------------------------------------------------- Gemini CLI
# Gemini CLI (0.61.0) speaks only the Gemini API, on one base URL for its turns and its
# compaction (GOOGLE_GEMINI_BASE_URL), and compacts in two non-streaming `:generateContent`
# requests under a `chat-compression-*` model alias (google-gemini/gemini-cli
# packages/core/src/context/chatCompressionService.ts, `ChatCompressionService.compress`; its
# prompt: packages/core/src/prompts/snippets.ts `getCompressionPrompt`, read in the pinned
# bundle): the system instruction opens with GEMINI_SYSTEM, `contents` is the oldest ~70% of the
# history, then one user text: the draft's GEMINI_DRAFT (or GEMINI_UPDATE when a
# `<state_snapshot>` is in that history), and the verify pass re-sends the same contents + the
# draft as a model turn + GEMINI_VERIFY. Gemini stores the verify answer's text verbatim as the
# first user content of the new history. Recognized by that structure, whatever the model name.


GEMINI_SYSTEM = ("You are a specialized system component responsible for distilling chat history into a "
                 "structured XML <state_snapshot>.")
GEMINI_DRAFT = "Generate a new <state_snapshot> based on the provided history."
GEMINI_UPDATE = "A previous <state_snapshot> exists in the history."
GEMINI_VERIFY = "Critically evaluate the <state_snapshot> you just generated."
GEMINI_TAGS = ("overall_goal", "active_constraints", "key_knowledge", "artifact_trail", "file_system_state",
               "recent_actions", "task_state")


def _gemini_text(content: Any) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return ""
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _gemini_system(body: dict[str, Any]) -> str:
    system = body.get("systemInstruction")
    if isinstance(system, str):
        return system
    return _gemini_text(system) if isinstance(system, dict) else ""


def gemini_verify_draft(body: dict[str, Any]) -> str | None:
    """The draft a verify request asks to re-check (its model turn's `<state_snapshot>`), or
    None when `body` is not Gemini CLI's verify request or its draft holds no snapshot."""
    contents = body.get("contents")
    if not isinstance(contents, list) or len(contents) < 2 or not _gemini_system(body).lstrip().startswith(
            GEMINI_SYSTEM):
        return None
    last, draft = contents[-1], contents[-2]
    if not (isinstance(last, dict) and last.get("role") == "user" and isinstance(draft, dict)
            and draft.get("role") == "model" and _gemini_text(last).lstrip().startswith(GEMINI_VERIFY)):
        return None
    found = SNAPSHOT_RE.search(_gemini_text(draft))
    return found.group(0) if found else None


def _recognize_gemini(body: dict[str, Any], headers: dict[str, str]) -> AgentRequest | None:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents or not _gemini_system(body).lstrip().startswith(GEMINI_SYSTEM):
        return None
    last = contents[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    ask = _gemini_text(last).lstrip()
    if not ask.startswith((GEMINI_DRAFT, GEMINI_UPDATE, GEMINI_VERIFY)):
        return None
    return AgentRequest("gemini-cli", "history", None, None, session_key(headers))


def _read_gemini(req: AgentRequest, body: dict[str, Any]) -> Received:
    """The contents less the trailing instruction (and a verify pass's draft), by the Gemini
    importer; a `<state_snapshot>` in the history (an earlier compaction's, ours or Gemini's) is
    the prior summary, and what follows it an update's new messages. A ValueError when the
    contents cannot be read."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    contents = contents[:-1]
    if contents and contents[-1].get("role") == "model" and SNAPSHOT_RE.search(_gemini_text(contents[-1])):
        contents = contents[:-1]  # a verify pass whose draft was not ours to repeat
    session = gemini_format.load_contents(contents, req.session_key or "gemini") if contents else Session(
        id=req.session_key or "gemini")
    return _after_last_summary(session, lambda m: next(
        (p.text.strip() for p in m.parts if getattr(p, "type", "") == "text" and p.text.lstrip().startswith(
            "<state_snapshot>")), m.text))


def _xml_body(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in text.strip().splitlines())


def render_gemini(sections: dict[str, Section], lang: str, kind: Kind = "history") -> str:
    """Gemini CLI's `<state_snapshot>` and only it (Gemini stores the text verbatim), its 7 tags
    in its order: overall_goal ← Goal; active_constraints ← Constraints & Preferences;
    key_knowledge ← Critical Context (exact errors, commands and their exit status);
    artifact_trail ← Key Decisions (what changed and why); file_system_state ← Relevant Files;
    recent_actions ← Progress's Done; task_state ← the plan, numbered: Progress's In Progress
    `[IN PROGRESS]`, Blocked `[BLOCKED]`, then Next Steps `[TODO]`. Bodies are compactd's
    bullets verbatim (not XML-escaped: an error line stays exact). Bounded like every agent's
    reply (the pipeline's summary budget): far below the half-full window Gemini compacts at,
    so Gemini's check that the new history is smaller holds."""
    parts = t.progress_parts(sections.get("Progress"))

    def items(section: Section | None) -> list[str]:
        return [b.text for block in t.blocks(section) for b in block.bullets]

    plan = ([f"[IN PROGRESS] {x}" for x in items(parts.get("in_progress"))]
            + [f"[BLOCKED] {x}" for x in items(parts.get("blocked"))]
            + [f"[TODO] {x}" for x in items(sections.get("Next Steps"))])
    bodies = {
        "overall_goal": t.goal(sections.get("Goal"), lang, bullet=False),
        "active_constraints": t.body(t.merged(sections.get("Constraints & Preferences")), lang),
        "key_knowledge": t.body(t.merged(sections.get("Critical Context")), lang),
        "artifact_trail": t.body(t.merged(sections.get("Key Decisions")), lang),
        "file_system_state": t.body(t.merged(sections.get("Relevant Files")), lang),
        "recent_actions": t.body(t.merged(parts.get("done")), lang),
        "task_state": "\n".join(f"{k}. {s}" for k, s in enumerate(plan, 1)) or f"1. {t.none_label(lang)}",
    }
    inner = "\n".join(f"<{tag}>\n{_xml_body(bodies[tag])}\n</{tag}>" for tag in GEMINI_TAGS)
    return f"<state_snapshot>\n{inner}\n</state_snapshot>"


register(AgentProfile("gemini-cli", "gemini", _recognize_gemini, _read_gemini, render_gemini,
                      harness_noise=gemini_format.HARNESS_NOISE, usage="history"))

__all__ = ["AGENT_CONTEXT_LIMIT", "AGENT_KEEPS_TAIL", "GEMINI_TAGS", "MODE_HEADER", "PROFILES", "AgentProfile",
           "AgentRequest", "Door", "Preset", "Received", "gemini_verify_draft", "get", "is_compaction", "recognize",
           "register", "render_gemini", "session_from_input", "session_key"]
