"""The model's part of a checkpoint: Goal, Key Decisions (with reasons) and Next Steps.

Facts and work state come from the ledger; the model only writes what needs judgement,
under a JSON schema (constrained decoding) with bounded items, at temperature 0. Its input
is a *bounded selection* of the head's narrative, so one compaction costs one model call of at
most PROMPT_MAX_TOKENS whatever the history's length: the user's messages first (verbatim
where short), then the assistant's text newest first, then tool calls as one-liners, then one
line per tool result; the previous summary (ours, or the agent's own in-session summary)
stands in for everything older, and the ledger's facts close the prompt. What is shown keeps
its order; each gap says how many messages it skipped, so nothing is cut silently.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backends.base import Backend, GenerationStats, collect
from backends.engine_thread import FOREGROUND

from ..session import Message, TextPart, ToolCallPart, ToolResultPart
from .anchor import bounded

GOAL_MAX_CHARS = 300
DECISIONS_MAX = 4
NEXT_STEPS_MAX = 4
ITEM_MAX_CHARS = 160
# Bounded schema => bounded output; this covers the worst case with room for JSON syntax.
MAX_NEW_TOKENS = 700
# The whole summarizer prompt (template, instructions, previous summary, conversation, facts):
# the ledger owns the facts, so this much narrative is enough for goal, decisions and next
# steps, and one prefill of it stays near a minute with the 1.5B on a 2-core CPU at any history.
PROMPT_MAX_TOKENS = 4096
# The previous summary's share: ours is schema-bounded (well under this); an agent's own
# summary can run to thousands of tokens and is cut in its middle.
PREVIOUS_MAX_TOKENS = 900
# The facts' share: lines kept in order (constraints and progress come first), the rest counted.
FACTS_MAX_TOKENS = 900
# A user message longer than this is cut in its middle (pasted logs, specs); shorter: verbatim.
USER_VERBATIM_TOKENS = 350
# The assistant's text per message: its plans and reasons sit at the start of a turn.
ASSISTANT_MAX_TOKENS = 160
# One-liners: a tool call's arguments and a tool result's first line.
CALL_LINE_MAX_CHARS = 200
RESULT_GIST_CHARS = 160
# Room left in the window for the chat template and safety.
WINDOW_MARGIN = 64
MIN_CONVERSATION_TOKENS = 256  # below this the model would see too little to be worth a call
GAP_MARK = "[… {n} earlier messages not shown …]"
FACTS_CUT_MARK = "[… {n} more fact lines not shown …]"
REPEAT_JUNK_COUNT = 3
# A looping model fills its output with one line; a decision whose reason is also a next step
# ("Find ready subtasks" three times in 400 characters) is redundant, not junk.
REPEAT_JUNK_SHARE = 0.3

NARRATIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "maxLength": GOAL_MAX_CHARS},
        "key_decisions": {
            "type": "array",
            "maxItems": DECISIONS_MAX,
            "items": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "maxLength": ITEM_MAX_CHARS},
                    "reason": {"type": "string", "maxLength": ITEM_MAX_CHARS},
                },
                "required": ["decision", "reason"],
            },
        },
        "next_steps": {"type": "array", "maxItems": NEXT_STEPS_MAX, "items": {"type": "string", "maxLength": ITEM_MAX_CHARS}},
    },
    "required": ["goal", "key_decisions", "next_steps"],
}

# The prompt's tags. `worker.pipeline.verify` imports them (through `trusted_text` and
# `untrusted_text` below) to tell what the user and the assistant wrote from tool output.
TOOL_RESULT_TAG = "[tool result"  # opens the one line each tool result gets
FACTS_OPEN, FACTS_CLOSE = "<facts>", "</facts>"  # around the ledger's facts, each alone on its line
CONVERSATION_OPEN, CONVERSATION_CLOSE = "<conversation>", "</conversation>"
PREVIOUS_OPEN, PREVIOUS_CLOSE = "<previous-summary>", "</previous-summary>"
TOOL_RESULT_LINE = re.compile(rf"^{re.escape(TOOL_RESULT_TAG)}[^\]]*\].*$", re.M)
FACTS_BLOCK = re.compile(rf"^{re.escape(FACTS_OPEN)}$.*?^{re.escape(FACTS_CLOSE)}$", re.M | re.S)
# '(m00012, m00015)', '(m00012, 3 attempts)': evidence pointers in the facts, alone or before a note.
ID_LIST_RE = re.compile(r"( ?)\(([^()\n]+)\)")

LANGUAGE_NAMES = {"en": "English", "zh": "Simplified Chinese (简体中文)", "ja": "Japanese (日本語)"}

SYSTEM_PROMPT = """You write part of a handoff note for a coding agent that will continue this work after its memory is cleared.
Facts (files, errors, commands, test results, what is done) are recorded elsewhere. You write only:
- goal: what the user wants overall, in one or two sentences, in the user's own terms.
- key_decisions: technical choices made in the conversation, each with the reason given for it. Only decisions the conversation states.
- next_steps: what still has to be done, according to the conversation and the facts. Never list something the facts show as done.
Rules: use only information in the input. Copy file paths, names and error text exactly. Do not invent. Do not mention summarizing. Write in {language}. Answer with JSON only."""

# An update must move the goal and the next steps on (issue 23: a second summary repeated the
# first one's word for word): the previous ones are input to rewrite, not text to copy.
UPDATE_NOTE = (
    "The <previous-summary> is what was known before the messages below; the work has moved on since. "
    "Rewrite the goal and the next steps for where the work stands after these messages: do not copy them "
    "from the previous summary. Drop every next step that these messages or the facts show done "
    "(a file read, a command run and passed, an edit made), and add what is left to do now. "
    "Keep the key decisions that still hold and add the new ones."
)
# The closing instruction of an update (with UPDATE_NOTE): the answer is the rewritten narrative.
UPDATE_ASK = "rewritten for where the work stands now, not copied from the previous summary"


@dataclass
class Narrative:
    goal: str = ""
    key_decisions: list[dict[str, str]] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    # Without a model: the agent's own in-session summary, carried (bounded) instead of dropped.
    agent_summary: str = ""
    agent_summary_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"goal": self.goal, "key_decisions": self.key_decisions, "next_steps": self.next_steps}
        if self.agent_summary:
            out.update(agent_summary=self.agent_summary, agent_summary_id=self.agent_summary_id)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Narrative:
        d = d or {}
        decisions = [
            {"decision": str(x.get("decision", "")).strip(), "reason": str(x.get("reason", "")).strip()}
            for x in d.get("key_decisions") or []
            if isinstance(x, dict) and str(x.get("decision", "")).strip()
        ]
        steps = [str(s).strip() for s in d.get("next_steps") or [] if str(s).strip()]
        return cls(str(d.get("goal") or "").strip(), decisions, steps, str(d.get("agent_summary") or ""),
                   str(d.get("agent_summary_id") or ""))


@dataclass
class SummarizeResult:
    narrative: Narrative
    model_input: str  # everything the model saw (for verification)
    raw_outputs: list[str]
    stats: list[GenerationStats]
    left_out: int  # head messages the bounded input did not show at all
    problems: list[str]  # junk detected (echo, repetition, unparsable): the caller falls back


def detect_language(messages: list[Message]) -> str:
    text = "".join(m.user_text for m in messages if m.role == "user" and not m.is_summary)
    han = len(re.findall(r"[\u4e00-\u9fff]", text))
    kana = len(re.findall(r"[\u3040-\u30ff]", text))
    latin = len(re.findall(r"[A-Za-z]", text))
    if kana > 10 and kana >= han * 0.2:
        return "ja"
    if han > 0 and han * 3 >= latin * 0.3:  # one Han char carries about as much as 3-4 letters
        return "zh"
    return "en"


def _gist(part: ToolResultPart) -> str:
    lines = [ln.strip() for ln in part.output.splitlines() if ln.strip()]
    if not lines:
        return "(no output)"
    first = lines[0][:RESULT_GIST_CHARS]
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return ("ERROR: " if part.is_error else "") + first + more


def _arguments(call: ToolCallPart) -> str:
    """The call's arguments on one line: file bodies shown by size (the ledger has the change)."""
    shown = {k: (v if not isinstance(v, str) or len(v) <= CALL_LINE_MAX_CHARS else f"<{len(v)} chars>")
             for k, v in call.argument_dict().items()}
    line = " ".join(json.dumps(shown, ensure_ascii=False).split())
    return line if len(line) <= CALL_LINE_MAX_CHARS else line[: CALL_LINE_MAX_CHARS - 1] + "…"


# Selection tiers, best first (see the module docstring).
USER, ASSISTANT, CALL, RESULT = range(4)


@dataclass
class _Item:
    message: int  # index in the head
    part: int
    tier: int
    text: str


def _items(messages: list[Message], count: Callable[[str], int]) -> list[_Item]:
    items = []
    for i, m in enumerate(messages):
        if m.compacted:
            continue
        # What a harness injected into a user turn (AGENTS.md, reminders, environment) is no task:
        # the model reads only the user's own words there (the ledger still mines the rest).
        harness = m.role == "user" and (bool(m.meta.get("injected")) or isinstance(m.meta.get("user_text"), str))
        if harness and m.user_text.strip():
            items.append(_Item(i, 0, USER, f"[user] {bounded(m.user_text.strip(), USER_VERBATIM_TOKENS, count)}"))
        for j, p in enumerate(m.parts):
            if isinstance(p, TextPart) and harness:
                continue
            if isinstance(p, TextPart) and p.text.strip():
                user = m.role == "user"
                limit = USER_VERBATIM_TOKENS if user else ASSISTANT_MAX_TOKENS
                items.append(_Item(i, j, USER if user else ASSISTANT,
                                   f"[{m.role}] {bounded(p.text.strip(), limit, count)}"))
            elif isinstance(p, ToolCallPart):
                items.append(_Item(i, j, CALL, f"[tool call {p.name}] {_arguments(p)}"))
            elif isinstance(p, ToolResultPart):
                items.append(_Item(i, j, RESULT, f"{TOOL_RESULT_TAG} {p.name}] {_gist(p)}"))
    return items


def _priority(items: list[_Item]) -> list[_Item]:
    """The user's first message (the task) first, then each tier newest first."""
    first_user = next((it for it in items if it.tier == USER), None)
    rest = sorted((it for it in items if it is not first_user), key=lambda it: (it.tier, -it.message, -it.part))
    return ([first_user] if first_user else []) + rest


def _render(chosen: list[_Item], n_messages: int) -> str:
    """The chosen items in their order, one block per message, a marker for each gap."""
    blocks: list[str] = []
    by_message: dict[int, list[_Item]] = {}
    for it in sorted(chosen, key=lambda it: (it.message, it.part)):
        by_message.setdefault(it.message, []).append(it)
    last = -1
    for i, group in by_message.items():
        if i - last > 1:
            blocks.append(GAP_MARK.format(n=i - last - 1))
        blocks.append("\n".join(it.text for it in group))
        last = i
    if chosen and n_messages - 1 - last > 0:
        blocks.append(GAP_MARK.format(n=n_messages - 1 - last).replace("earlier", "later"))
    return "\n\n".join(blocks)


def select_narrative(messages: list[Message], budget: int, count: Callable[[str], int]) -> tuple[str, int]:
    """The head's narrative within `budget` tokens: (text, messages left out entirely)."""
    items = _items(messages, count)
    chosen: list[_Item] = []
    used = 0
    for it in _priority(items):
        cost = count(it.text) + 2  # its separator, and a share of the gap markers
        if used + cost <= budget:
            chosen.append(it)
            used += cost
    text = _render(chosen, len(messages))
    while chosen and count(text) > budget:  # the estimate's slack ran out: drop the least wanted
        chosen.pop()
        text = _render(chosen, len(messages))
    shown = {it.message for it in chosen}
    left_out = sum(1 for i, m in enumerate(messages) if not m.compacted and i not in shown)
    return text, left_out


def narrative_lines(messages: list[Message]) -> list[str]:
    """One block per message, unbounded: what was said and done, without raw tool output
    (benchmarks measure the narrative a summarizer would read without the bound)."""
    blocks: dict[int, list[str]] = {}
    for it in _items(messages, lambda t: 0):
        blocks.setdefault(it.message, []).append(it.text)
    return ["\n".join(b) for b in blocks.values()]


def bounded_facts(facts: str, budget: int, count: Callable[[str], int]) -> str:
    """The facts' first lines within `budget` tokens, and how many lines went."""
    if count(facts) <= budget:
        return facts
    lines = facts.splitlines()
    kept: list[str] = []
    used = count(FACTS_CUT_MARK.format(n=len(lines)))
    for line in lines:
        n = count(line) + 1
        if used + n > budget:
            break
        kept.append(line)
        used += n
    return "\n".join(kept + [FACTS_CUT_MARK.format(n=len(lines) - len(kept))])


def build_prompt(
    conversation: str, facts: str, previous: str | None, lang: str
) -> list[dict[str, str]]:
    # Order for prefix reuse: what stays the same between updates of one session comes first
    # (instructions, previous summary, then the conversation, which only grows); the facts,
    # recomputed each time, come last.
    sections = []
    if previous:
        sections.append(f"{PREVIOUS_OPEN}\n{previous}\n{PREVIOUS_CLOSE}\n{UPDATE_NOTE}")
    sections.append(f"{CONVERSATION_OPEN}\n{conversation}\n{CONVERSATION_CLOSE}")
    if facts:
        sections.append(f"{FACTS_OPEN}\n{facts}\n{FACTS_CLOSE}")
    ask = f" ({UPDATE_ASK})" if previous else ""
    sections.append(
        f"Write the JSON object for the conversation above{ask}, in {LANGUAGE_NAMES[lang]}: "
        '{"goal": "...", "key_decisions": [{"decision": "...", "reason": "..."}], "next_steps": ["..."]}'
    )
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(language=LANGUAGE_NAMES[lang])},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def trusted_text(model_input: str) -> str:
    """The summarizer input without tool-result lines and without the facts block: what the
    user and the assistant wrote, the assistant's tool calls, and the previous summary."""
    return FACTS_BLOCK.sub("", TOOL_RESULT_LINE.sub("", model_input))


def untrusted_text(model_input: str) -> str:
    """The summarizer input's tool-result lines and facts block (whose error lines quote tool output)."""
    return "\n".join(TOOL_RESULT_LINE.findall(model_input) + FACTS_BLOCK.findall(model_input))


def strip_message_ids(text: str, ids: set[str]) -> str:
    """Drop '(m00012, m00015)' evidence pointers (and the ids before a note: '(m00012, 3
    attempts)' becomes '(3 attempts)'): noise to the model, which otherwise copies them into its
    own sentences, and to a reader who cannot look them up."""
    def strip(m: re.Match[str]) -> str:
        items = m.group(2).split(", ")
        kept = [x for x in items if x not in ids]
        if len(kept) == len(items):
            return m.group(0)
        return f"{m.group(1)}({', '.join(kept)})" if kept else ""

    return ID_LIST_RE.sub(strip, text)


def previous_text(narrative: Narrative | None, summary_text: str | None) -> str | None:
    if narrative is not None and (narrative.goal or narrative.key_decisions or narrative.next_steps
                                  or narrative.agent_summary):
        return json.dumps(narrative.to_dict(), ensure_ascii=False, indent=1)
    return summary_text or None


def _junk(text: str, prompt: list[dict[str, str]]) -> str | None:
    stripped = text.strip()
    if not stripped:
        return "empty output"
    if SYSTEM_PROMPT.split("\n")[0][:60] in stripped or CONVERSATION_OPEN in stripped:
        return "the model echoed its prompt"
    lines = [ln.strip() for ln in re.split(r"[\n\"]", stripped) if len(ln.strip()) > 12]
    if lines:
        line, n = Counter(lines).most_common(1)[0]
        if n >= REPEAT_JUNK_COUNT and n * len(line) >= REPEAT_JUNK_SHARE * len(stripped):
            return "the model repeated itself"
    return None


def parse_narrative(text: str) -> Narrative | None:
    """The JSON object in `text`; without constrained decoding a model may wrap it in a code
    fence or a sentence, so the outermost {...} is taken."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return Narrative.from_dict(data) if isinstance(data, dict) else None


def summarize_narrative(
    backend: Backend,
    messages: list[Message],
    *,
    facts: str,
    previous: str | None,
    lang: str,
    window: int,
    max_new_tokens: int = MAX_NEW_TOKENS,
    priority: int = FOREGROUND,
    cache_key: str | None = None,
    prompt_max_tokens: int = PROMPT_MAX_TOKENS,
) -> SummarizeResult:
    """One model call on a prompt of at most `prompt_max_tokens` (less where the window is smaller)."""
    limit = min(prompt_max_tokens, window - max_new_tokens - WINDOW_MARGIN)
    previous = bounded(previous, PREVIOUS_MAX_TOKENS, backend.count) if previous else previous
    facts = bounded_facts(facts, FACTS_MAX_TOKENS, backend.count) if facts else facts
    fixed = backend.count_messages(build_prompt("", facts, previous or "", lang))
    budget = limit - fixed
    if budget < MIN_CONVERSATION_TOKENS:
        raise ValueError(
            f"the summarizer window ({window} tokens) is too small for its instructions and facts ({fixed} tokens)"
        )
    conversation, left_out = select_narrative(messages, budget, backend.count)
    prompt = build_prompt(conversation, facts, previous, lang)
    schema = NARRATIVE_SCHEMA if backend.supports_json_schema else None
    text, st = collect(
        backend.generate(prompt, max_tokens=max_new_tokens, temperature=0.0, json_schema=schema,
                         priority=priority, isolated=True, cache_key=cache_key)
    )
    problem = _junk(text, prompt)
    parsed = parse_narrative(text) if problem is None else None
    problems = [] if parsed is not None else [problem or "unparsable JSON (output cut at the token limit?)"]
    return SummarizeResult(parsed or Narrative(), prompt[1]["content"], [text], [st], left_out, problems)
