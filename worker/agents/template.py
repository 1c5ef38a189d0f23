"""compactd's typed sections, rendered in the template the agent asked for.

The pipeline hands over its sections as `Section`s of `Block`s of `Bullet`s
(worker/pipeline/checkpoint.py); each agent's headings are a mapping of those, not a re-parse
of markdown:

- opencode: Objective ← Goal; Important Details ← Constraints & Preferences + Key Decisions +
  Critical Context; Work State (Completed / Active / Blocked) ← Progress (Done / In Progress /
  Blocked); Next Move ← Next Steps, numbered; Relevant Files ← Relevant Files.
- pi: its six sections, which are compactd's less Relevant Files (folded into Critical
  Context; pi appends its own read/modified lists after the summary), Done items checked
  `[x]`, In Progress `[ ]`.
- pi's turn prefix: Original Request ← Goal; Early Progress ← Progress + Key Decisions;
  Context for Suffix ← Critical Context + Relevant Files + Constraints & Preferences.
- anything else: compactd's own seven sections.

Headings are the agent's (English, as its prompt asks); the bodies keep the session's language.
"""

from __future__ import annotations

from dataclasses import replace

from ..pipeline.checkpoint import Block, Section, none_label, render_summary, user_labelled
from ..pipeline.summarize import strip_message_ids

# Progress's blocks, in the order progress_section builds them.
PROGRESS_ORDER = ("done", "in_progress", "blocked")
OPENCODE_WORK = {"done": "Completed", "in_progress": "Active", "blocked": "Blocked"}
PI_WORK = {"done": "Done", "in_progress": "In Progress", "blocked": "Blocked"}
PI_CHECKBOX = {"done": "[x] ", "in_progress": "[ ] ", "blocked": ""}
USER_SAID = "User:"  # a constraint bullet's label: compactd's message id means nothing to the agent


def _blocks(section: Section | None) -> list[Block]:
    """A section as blocks; free text (the goal) becomes one block of one paragraph."""
    if section is None:
        return []
    if section.blocks:
        return [replace(b, heading=None) for b in section.blocks if b.bullets]
    return []


def _merged(*sections: Section | None) -> Section:
    return Section(blocks=[b for s in sections for b in _blocks(s)])


def _body(section: Section, lang: str) -> str:
    return section.body().strip() or none_label(lang)


def _goal(section: Section | None, lang: str, bullet: bool) -> str:
    text = (section.text if section is not None else "").strip()
    if not text:
        return none_label(lang)
    first, _, rest = text.partition("\n")
    return (f"- {first}\n{rest}".rstrip() if bullet else text)


def _numbered(section: Section | None, lang: str) -> str:
    steps = [b.text for block in _blocks(section) for b in block.bullets]
    return "\n".join(f"{k}. {s}" for k, s in enumerate(steps, 1)) or f"1. {none_label(lang)}"


def _progress(section: Section | None, headings: dict[str, str], marks: dict[str, str] | None,
              lang: str) -> str:
    blocks = section.blocks if section is not None else []
    out = []
    for key, block in zip(PROGRESS_ORDER, blocks, strict=False):
        bullets = [replace(b, text=(marks or {}).get(key, "") + b.text) for b in block.bullets]
        body = Section(blocks=[Block(bullets)]).body() if bullets else f"- {none_label(lang)}"
        out.append(f"### {headings[key]}\n{body}")
    return "\n\n".join(out)


def render_opencode(sections: dict[str, Section], lang: str) -> str:
    details = _merged(sections.get("Constraints & Preferences"), sections.get("Key Decisions"),
                      sections.get("Critical Context"))
    return _document([
        ("Objective", _goal(sections.get("Goal"), lang, bullet=True)),
        ("Important Details", _body(details, lang)),
        ("Work State", _progress(sections.get("Progress"), OPENCODE_WORK, None, lang)),
        ("Next Move", _numbered(sections.get("Next Steps"), lang)),
        ("Relevant Files", _body(_merged(sections.get("Relevant Files")), lang)),
    ])


def render_pi(sections: dict[str, Section], lang: str) -> str:
    critical = _merged(sections.get("Critical Context"), sections.get("Relevant Files"))
    return _document([
        ("Goal", _goal(sections.get("Goal"), lang, bullet=False)),
        ("Constraints & Preferences", _body(_merged(sections.get("Constraints & Preferences")), lang)),
        ("Progress", _progress(sections.get("Progress"), PI_WORK, PI_CHECKBOX, lang)),
        ("Key Decisions", _body(_merged(sections.get("Key Decisions")), lang)),
        ("Next Steps", _numbered(sections.get("Next Steps"), lang)),
        ("Critical Context", _body(critical, lang)),
    ])


def render_pi_turn_prefix(sections: dict[str, Section], lang: str) -> str:
    progress = Section(blocks=[b for b in _blocks(sections.get("Progress"))])
    early = _merged(progress, sections.get("Key Decisions"))
    context = _merged(sections.get("Critical Context"), sections.get("Relevant Files"),
                      sections.get("Constraints & Preferences"))
    return _document([
        ("Original Request", _goal(sections.get("Goal"), lang, bullet=False)),
        ("Early Progress", _body(early, lang)),
        ("Context for Suffix", _body(context, lang)),
    ])


def _document(sections: list[tuple[str, str]]) -> str:
    """The agent's markdown: each heading at level 2 over its body, a blank line between."""
    return "\n\n".join(f"## {heading}\n{body}" for heading, body in sections) + "\n"


def render(sections: dict[str, Section], lang: str, agent: str, kind: str = "history",
           ids: set[str] | None = None) -> str:
    """The summary in `agent`'s template; `ids`: compactd's message ids, dropped from the text."""
    ids = ids or set()
    sections = user_labelled(sections, ids, USER_SAID)
    if agent == "opencode":
        text = render_opencode(sections, lang)
    elif agent == "pi":
        text = render_pi_turn_prefix(sections, lang) if kind == "turn_prefix" else render_pi(sections, lang)
    else:
        text = render_summary(sections, lang, reference_prefix=False)
    return strip_message_ids(text, ids)


__all__ = ["render", "render_opencode", "render_pi", "render_pi_turn_prefix"]
