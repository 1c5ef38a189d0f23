"""Small text helpers shared by the fact extractors and the checkpoint renderer.

Facts are quoted verbatim, so the same few rules (cut a long text in the middle with a marker,
quote as inline code that survives backticks, one line of a multi-line text) are needed both
where facts are pulled out and where they are rendered; they live here so neither side owns them.
"""

from __future__ import annotations

import re
from typing import Any

CUT_MARKER = "[… {n} chars cut …]"  # every cut says how much went: never silent
BARE_TOKEN_RE = re.compile(r"[^\s`]+")  # an output like `345` that needs no quoting


def cut_middle(text: str, limit: int) -> str:
    """Cut the middle of a long text, leaving a marker that says how much went (never silent)."""
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(n=len(text) - limit)
    keep = max(limit - len(marker), 2)
    head = keep * 2 // 3
    tail = keep - head
    return f"{text[:head]}{marker}{text[len(text) - tail:]}"


def code(text: str) -> str:
    """Inline code that survives backticks inside the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def one_line(text: str) -> str:
    first, _, rest = text.strip().partition("\n")
    return first + (" …" if rest.strip() else "")


def command_result(fact: Any, exit_word: str = "exit", failed_word: str = "failed",
                   max_chars: int | None = None) -> str:
    """`cmd` → output / exit status, as one line (`fact`: a CommandFact or an Action), the
    command cut in the middle past `max_chars`."""
    command = one_line(fact.command or "")
    out = code(cut_middle(command, max_chars) if max_chars else command)
    if fact.output is not None:
        # A bare token (`345`) reads as itself; anything with spaces is quoted as code.
        text = one_line(fact.output)
        out += " → " + (text if BARE_TOKEN_RE.fullmatch(text) else code(text))
    elif fact.exit_code is not None:
        out += f" → {exit_word} {fact.exit_code}"
    elif fact.status == "failed":
        out += f" → {failed_word}"
    return out
