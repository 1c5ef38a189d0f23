"""The model's part of a checkpoint: Goal, Key Decisions (with reasons) and Next Steps.

Facts and work state come from the ledger; the model only writes what needs judgement,
under a JSON schema (constrained decoding) with bounded items, at temperature 0. Its input
is the *narrative* of the head: user and assistant text, tool calls with their arguments,
one line per tool result, and the ledger's facts. When that exceeds the summarizer's
window it is folded in chunks (each chunk updates the previous result); messages are never
cut, because the recorded failure came from a summarizer whose input had been cut.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from backends.base import Backend, GenerationStats, collect
from backends.engine_thread import FOREGROUND

from ..session import Message, TextPart, ToolCallPart, ToolResultPart

GOAL_MAX_CHARS = 300
DECISIONS_MAX = 4
NEXT_STEPS_MAX = 4
ITEM_MAX_CHARS = 160
# Bounded schema => bounded output; this covers the worst case with room for JSON syntax.
MAX_NEW_TOKENS = 700
# Tool-call argument values longer than this (file bodies being written) are shown by size:
# the file path and the change are in the ledger, the body is not narrative.
ARGUMENT_VALUE_MAX_CHARS = 1200
RESULT_GIST_CHARS = 200
# Room left in the window for the chat template and safety.
WINDOW_MARGIN = 64
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
# '(m00012, m00015)': evidence pointers in the facts.
ID_LIST_RE = re.compile(r" ?\(([^()\s,]+(?:, [^()\s,]+)*)\)")

LANGUAGE_NAMES = {"en": "English", "zh": "Simplified Chinese (简体中文)", "ja": "Japanese (日本語)"}

SYSTEM_PROMPT = """You write part of a handoff note for a coding agent that will continue this work after its memory is cleared.
Facts (files, errors, commands, test results, what is done) are recorded elsewhere. You write only:
- goal: what the user wants overall, in one or two sentences, in the user's own terms.
- key_decisions: technical choices made in the conversation, each with the reason given for it. Only decisions the conversation states.
- next_steps: what still has to be done, according to the conversation and the facts. Never list something the facts show as done.
Rules: use only information in the input. Copy file paths, names and error text exactly. Do not invent. Do not mention summarizing. Write in {language}. Answer with JSON only."""

UPDATE_NOTE = (
    "The <previous-summary> is what was known before these messages. Keep what is still true, "
    "drop what is stale, and merge in the new messages."
)


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
    chunks: int
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
    args = call.argument_dict()
    shown = {
        k: (v if not isinstance(v, str) or len(v) <= ARGUMENT_VALUE_MAX_CHARS else f"<{len(v)} chars>")
        for k, v in args.items()
    }
    return json.dumps(shown, ensure_ascii=False)


def narrative_lines(messages: list[Message]) -> list[str]:
    """One block per message: what was said and done, without raw tool output."""
    blocks = []
    for m in messages:
        if m.compacted:
            continue
        parts = []
        for p in m.parts:
            if isinstance(p, TextPart) and p.text.strip():
                parts.append(f"[{m.role}] {p.text.strip()}")
            elif isinstance(p, ToolCallPart):
                parts.append(f"[tool call {p.name}] {_arguments(p)}")
            elif isinstance(p, ToolResultPart):
                parts.append(f"{TOOL_RESULT_TAG} {p.name}] {_gist(p)}")
        if parts:
            blocks.append("\n".join(parts))
    return blocks


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
    sections.append(
        f"Write the JSON object for the conversation above, in {LANGUAGE_NAMES[lang]}: "
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
    """Drop '(m00012, m00015)' evidence pointers: useful to the agent, noise to the model,
    which otherwise copies them into its own sentences."""
    return ID_LIST_RE.sub(lambda m: "" if all(x in ids for x in m.group(1).split(", ")) else m.group(0), text)


def previous_text(narrative: Narrative | None, summary_text: str | None) -> str | None:
    if narrative is not None and (narrative.goal or narrative.key_decisions or narrative.next_steps
                                  or narrative.agent_summary):
        return json.dumps(narrative.to_dict(), ensure_ascii=False, indent=1)
    return summary_text or None


def chunk_blocks(blocks: list[str], budget: int, count) -> list[list[str]]:
    """Group blocks into chunks of at most `budget` tokens; a block larger than the budget is
    split at line boundaries (kept whole, in order, across chunks)."""
    chunks: list[list[str]] = [[]]
    used = 0
    for block in blocks:
        n = count(block) + 1
        if n > budget:
            pieces, cur = [], []
            for line in block.splitlines():
                cur.append(line)
                if count("\n".join(cur)) > budget and len(cur) > 1:
                    pieces.append("\n".join(cur[:-1]))
                    cur = [line]
            pieces.append("\n".join(cur))
        else:
            pieces = [block]
        for piece in pieces:
            n = count(piece) + 1
            if used + n > budget and chunks[-1]:
                chunks.append([])
                used = 0
            chunks[-1].append(piece)
            used += n
    return [c for c in chunks if c]


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
    progress=None,
) -> SummarizeResult:
    blocks = narrative_lines(messages)
    fixed = backend.count_messages(build_prompt("", facts, previous or "", lang))
    # The previous result is carried into the next chunk, so reserve room for it too.
    budget = window - max_new_tokens - fixed - WINDOW_MARGIN - (max_new_tokens if len(blocks) > 1 else 0)
    if budget < 256:
        raise ValueError(
            f"the summarizer window ({window} tokens) is too small for its instructions and facts ({fixed} tokens)"
        )
    chunks = chunk_blocks(blocks, budget, backend.count) or [[]]
    raw: list[str] = []
    stats: list[GenerationStats] = []
    problems: list[str] = []
    inputs: list[str] = []
    current: str | None = previous
    narrative = Narrative()
    for k, chunk in enumerate(chunks):
        if progress:
            progress(k, len(chunks))
        prompt = build_prompt("\n\n".join(chunk), facts, current, lang)
        inputs.append(prompt[1]["content"])
        schema = NARRATIVE_SCHEMA if backend.supports_json_schema else None
        text, st = collect(
            backend.generate(prompt, max_tokens=max_new_tokens, temperature=0.0, json_schema=schema,
                             priority=priority, isolated=True,
                             cache_key=f"{cache_key}:{k}" if cache_key else None)
        )
        raw.append(text)
        stats.append(st)
        problem = _junk(text, prompt)
        parsed = parse_narrative(text) if problem is None else None
        if parsed is None:
            problems.append(f"chunk {k + 1}/{len(chunks)}: {problem or 'unparsable JSON (output cut at the token limit?)'}")
            continue
        narrative = parsed
        current = previous_text(parsed, None)
    return SummarizeResult(narrative, "\n\n".join(inputs), raw, stats, len(chunks), problems)
