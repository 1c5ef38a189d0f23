"""Small text helpers shared by the fact extractors, the verifier and the checkpoint renderer.

Facts are quoted verbatim, so the same few rules (cut a long text in the middle with a marker,
quote as inline code that survives backticks, one line of a multi-line text) are needed both
where facts are pulled out and where they are rendered; they live here so neither side owns them.

Every cap cuts at a word boundary and never inside a backtick span (issue 23): a stump such as
"keeps `src/api/ord" reads as a fact that is wrong, and an open backtick turns the rest of the
agent's markdown into code. `finished` is the same rule for text someone else cut (the
summarizer's schema stops a string at its maxLength wherever it is).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from typing import Any

CUT_MARKER = "[… {n} chars cut …]"  # every cut says how much went: never silent
SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")  # where one sentence of a message ends
BARE_TOKEN_RE = re.compile(r"[^\s`]+")  # an output like `345` that needs no quoting
BACKTICK_RUN_RE = re.compile(r"`+")  # a code span opens and closes with runs of equal length
ELLIPSIS = "…"  # what an end cut leaves: the reader sees the text goes on
# A command named where it is not the fact itself (the run an error came from or that fixed it, a
# work item's evidence): the run is listed whole under Commands.
CITED_COMMAND_MAX_CHARS = 100
# A cut moves at most this share of its piece to reach a word boundary: further, and one long
# token (a path, a hash) would cost the whole piece, so it is cut where it is (never inside code).
SNAP_MAX_SHARE = 0.5
# Han, kana and CJK punctuation have no spaces between words: any character boundary is one.
NO_SPACE_SCRIPT_RE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")
# What an unfinished phrase may end with, before the cut: dropped with it ("because the").
DANGLING_RE = re.compile(
    r"(?:\s+(?:a|an|the|to|of|and|or|but|in|on|at|for|with|by|from|into|as|because|since|so|that|which|who"
    r"|when|while|if|than|then|via|is|are|was|were|be|its|their|our|your|this|these))+\s*$", re.I)
DANGLING_TAIL_RE = re.compile(r"[\s,;:—–\-/(\[{<\"'“‘]+$")  # separators and openers left at a cut
OPENERS = {"(": ")", "[": "]", "{": "}"}  # a bracket opened and never closed: cut before it
MIN_FINISHED_WORDS = 2  # fewer whole words than this after the trim: the item is dropped
MIN_FINISHED_CHARS = 4  # ... or, in text without spaces (Chinese), fewer characters


def code_spans(text: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The backtick code spans of `text` as (start, end), in order, and where each unmatched run
    starts (an opening backtick that nothing closes)."""
    runs = [(m.start(), m.end()) for m in BACKTICK_RUN_RE.finditer(text)]
    by_length: dict[int, deque[int]] = {}
    for k, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, deque()).append(k)
    spans: list[tuple[int, int]] = []
    unmatched: list[int] = []
    i = 0
    while i < len(runs):
        same = by_length[runs[i][1] - runs[i][0]]
        while same and same[0] <= i:
            same.popleft()
        if not same:
            unmatched.append(runs[i][0])
            i += 1
        else:
            close = same.popleft()
            spans.append((runs[i][0], runs[close][1]))
            i = close + 1
    return spans, unmatched


def _inside(spans: list[tuple[int, int]], starts: list[int], pos: int) -> bool:
    k = bisect_left(starts, pos) - 1  # the last span starting before pos
    return k >= 0 and spans[k][1] > pos


def _word_boundary(text: str, pos: int, spans: list[tuple[int, int]], starts: list[int]) -> bool:
    """A place a cut may go: at whitespace or in spaceless script, and outside every code span."""
    if 0 < pos < len(text):
        before, after = text[pos - 1], text[pos]
        if not (before.isspace() or after.isspace()
                or NO_SPACE_SCRIPT_RE.match(before) or NO_SPACE_SCRIPT_RE.match(after)):
            return False
    return not _inside(spans, starts, pos)


def boundary_before(text: str, pos: int, floor: int = 0) -> int:
    """The last cut place at or before `pos` (not below `floor`); else, when `pos` is inside a
    code span, the span's start (a cut never opens code, whatever it costs) unless the span
    starts the text; else `pos`."""
    spans, _ = code_spans(text)
    starts = [st for st, _ in spans]
    found = next((p for p in range(pos, max(floor, 0) - 1, -1) if _word_boundary(text, p, spans, starts)), None)
    if found is not None:
        return found
    k = bisect_left(starts, pos) - 1
    return spans[k][0] if k >= 0 and spans[k][1] > pos and spans[k][0] > 0 else pos


def boundary_after(text: str, pos: int, ceiling: int | None = None) -> int:
    """The first cut place at or after `pos` (not past `ceiling`); else, inside a code span, the
    span's end unless the span ends the text; else `pos`."""
    spans, _ = code_spans(text)
    starts = [st for st, _ in spans]
    top = len(text) if ceiling is None else min(ceiling, len(text))
    found = next((p for p in range(pos, top + 1) if _word_boundary(text, p, spans, starts)), None)
    if found is not None:
        return found
    k = bisect_left(starts, pos) - 1
    return spans[k][1] if k >= 0 and spans[k][1] > pos and spans[k][1] < len(text) else pos


def cut_end(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a word boundary outside code with an ellipsis."""
    if len(text) <= limit:
        return text
    room = max(limit - len(ELLIPSIS), 1)
    head = text[: boundary_before(text, room, int(room * (1 - SNAP_MAX_SHARE)))].rstrip()
    return (head or text[:room]) + ELLIPSIS


def cut_middle(text: str, limit: int) -> str:
    """Cut the middle of a long text, leaving a marker that says how much went (never silent);
    both ends of the cut at word boundaries outside code spans (within SNAP_MAX_SHARE)."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(CUT_MARKER.format(n=len(text))), 2)  # the widest count the marker can show
    head = keep * 2 // 3
    tail = keep - head
    h = boundary_before(text, head, head - int(head * SNAP_MAX_SHARE))
    t = boundary_after(text, len(text) - tail, len(text) - tail + int(tail * SNAP_MAX_SHARE))
    return f"{text[:h]}{CUT_MARKER.format(n=t - h)}{text[t:]}"


def code(text: str) -> str:
    """Inline code that survives backticks inside the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def one_line(text: str) -> str:
    """The first line, " …" when more follows; a code span the line break cuts open is left out
    of it (unless it is the whole line)."""
    text = text.strip()
    first, _, rest = text.partition("\n")
    if not rest.strip():
        return first
    spans, _ = code_spans(text)
    crossing = next((s for s, e in spans if s < len(first) < e), None)
    if crossing:
        first = first[:crossing].rstrip()
    return first + " …"


# A multi-line script's lines that run nothing a reader would look it up by: a `cd` (Claude Code's
# Bash tool keeps one shell, and agents open scripts with a `cd` into the project), shell options
# (`set -euo pipefail`), comments and blank lines, and an `echo "=== label ==="` banner (the agents'
# way of labelling a script's parts).
SCRIPT_PREAMBLE_RE = re.compile(
    r"""^\s*(?:cd(?:\s+(?:"[^"\n]*"|'[^'\n]*'|[^\s;&|]+))?|set\s+[-+]\w+(?:\s+[-+]?\w+)*|#.*|echo\s+(["'])[^"'\n]*\1|)\s*$""")


def command_line(command: str) -> str:
    """The one line a command is named by: `one_line` of the script from its first line that runs
    something (SCRIPT_PREAMBLE_RE), so `cd /repo` then `javap -p -cp out Dvc` is named by the
    `javap` line. A single line, or a script of preamble only, is `one_line` of the whole."""
    lines = command.strip().split("\n")
    k = next((i for i, line in enumerate(lines) if not SCRIPT_PREAMBLE_RE.match(line)), 0)
    return one_line("\n".join(lines[k:]))


def unfinished(text: str, capped: bool) -> str | None:
    """Why `text` reads as cut off, or None: a backtick span left open, a bracket or a quote
    left open at its end, or (`capped`: it was stopped at a length cap) its last word cut."""
    _, unmatched = code_spans(text)
    if unmatched:
        return "a backtick span left open"
    if _open_bracket(text) is not None or text.count('"') % 2:
        return "a bracket or quote left open"
    if capped and _mid_word(text):
        return "cut mid-word at the length cap"
    return None


def _open_bracket(text: str) -> int | None:
    """Where the first bracket that is never closed opens (outside code spans)."""
    spans, _ = code_spans(text)
    starts = [st for st, _ in spans]
    stack: list[int] = []
    for i, c in enumerate(text):
        if c not in "([{)]}" or _inside(spans, starts, i) or i in starts:
            continue
        if c in OPENERS:
            stack.append(i)
        elif c in OPENERS.values() and stack and OPENERS[text[stack[-1]]] == c:
            stack.pop()
    return stack[0] if stack else None


def finished(text: str, capped: bool) -> str:
    """`text` trimmed back to its last whole phrase (an ellipsis says it goes on), or "" when too
    little of it is whole (see `unfinished`). A text that is not cut off is returned as it is."""
    if unfinished(text, capped) is None:
        return text
    out = text
    _, unmatched = code_spans(out)
    if unmatched:
        out = out[: unmatched[0]]
    elif capped and _mid_word(out):  # the last word may be a part of one
        out = out[: boundary_before(out, len(out) - 1)] if " " in out.strip() else ""
    while True:
        before = out
        opened = _open_bracket(out)
        if opened is not None:
            out = out[:opened]
        if out.count('"') % 2:
            out = out[: out.rfind('"')]
        out = DANGLING_RE.sub("", DANGLING_TAIL_RE.sub("", out))
        if out == before:
            break
    words = out.split()
    spaceless = not words or (len(words) == 1 and NO_SPACE_SCRIPT_RE.search(out))
    if (len(out.strip()) < MIN_FINISHED_CHARS) if spaceless else len(words) < MIN_FINISHED_WORDS:
        return ""
    return out.rstrip() + ELLIPSIS


def _mid_word(text: str) -> bool:
    return bool(text) and (text[-1].isalnum() or text[-1] == "_") and not NO_SPACE_SCRIPT_RE.match(text[-1])


def command_result(fact: Any, exit_word: str = "exit", failed_word: str = "failed", command: str | None = None) -> str:
    """`cmd` → output / exit status, as one line (`fact`: a CommandFact or an Action); `command`
    is the command as shown when it is cut to fit."""
    out = code(command if command is not None else command_line(fact.command or ""))
    if fact.output is not None:
        # A bare token (`345`) reads as itself; anything with spaces is quoted as code.
        text = one_line(fact.output)
        out += " → " + (text if BARE_TOKEN_RE.fullmatch(text) else code(text))
    elif fact.exit_code is not None:
        out += f" → {exit_word} {fact.exit_code}"
    elif fact.status == "failed":
        out += f" → {failed_word}"
    return out
