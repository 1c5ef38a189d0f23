"""The pieces an agent's template is built of, over compactd's typed sections.

The pipeline hands over its sections as `Section`s of `Block`s of `Bullet`s
(worker/pipeline/checkpoint.py); each agent's headings (its profile's `render`,
worker/agents/profiles.py) are a mapping of those, not a re-parse of markdown. Headings are the
agent's (English, as its prompt asks); the bodies keep the session's language.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..pipeline.checkpoint import Block, Section, none_label, user_labelled
from ..pipeline.summarize import strip_message_ids

if TYPE_CHECKING:
    from .profiles import AgentProfile, Kind

# Progress's blocks, in the order progress_section builds them.
PROGRESS_ORDER = ("done", "in_progress", "blocked")
USER_SAID = "User:"  # a constraint bullet's label: compactd's message id means nothing to the agent


def blocks(section: Section | None) -> list[Block]:
    """A section's non-empty blocks, without their headings."""
    if section is None:
        return []
    return [replace(b, heading=None) for b in section.blocks if b.bullets]


def merged(*sections: Section | None) -> Section:
    return Section(blocks=[b for s in sections for b in blocks(s)])


def body(section: Section, lang: str) -> str:
    return section.body().strip() or none_label(lang)


def goal(section: Section | None, lang: str, bullet: bool) -> str:
    text = (section.text if section is not None else "").strip()
    if not text:
        return none_label(lang)
    first, _, rest = text.partition("\n")
    return (f"- {first}\n{rest}".rstrip() if bullet else text)


def numbered(section: Section | None, lang: str) -> str:
    steps = [b.text for block in blocks(section) for b in block.bullets]
    return "\n".join(f"{k}. {s}" for k, s in enumerate(steps, 1)) or f"1. {none_label(lang)}"


def progress(section: Section | None, headings: dict[str, str], marks: dict[str, str] | None,
             lang: str) -> str:
    """Progress's Done / In Progress / Blocked blocks under the agent's headings (level 3),
    each bullet after the agent's mark (pi's checkboxes)."""
    out = []
    for key, block in zip(PROGRESS_ORDER, section.blocks if section is not None else [], strict=False):
        bullets = [replace(b, text=(marks or {}).get(key, "") + b.text) for b in block.bullets]
        text = Section(blocks=[Block(bullets)]).body() if bullets else f"- {none_label(lang)}"
        out.append(f"### {headings[key]}\n{text}")
    return "\n\n".join(out)


def progress_parts(section: Section | None) -> dict[str, Section]:
    """Progress's Done / In Progress / Blocked blocks by key ("done", "in_progress", "blocked")."""
    blocks_ = section.blocks if section is not None else []
    return {key: Section(blocks=[replace(b, heading=None)]) for key, b in zip(PROGRESS_ORDER, blocks_, strict=False)}


def document(sections: list[tuple[str, str]]) -> str:
    """The agent's markdown: each heading at level 2 over its body, a blank line between."""
    return "\n\n".join(f"## {heading}\n{text}" for heading, text in sections) + "\n"


def render(profile: AgentProfile, sections: dict[str, Section], lang: str, kind: Kind = "history",
           ids: set[str] | None = None) -> str:
    """The summary in the profile's template; the user's words labelled as the user's, and
    compactd's message ids (`ids`) dropped from the text: the agent cannot look one up."""
    ids = ids or set()
    text = profile.render(user_labelled(sections, ids, USER_SAID), lang, kind)
    return strip_message_ids(text, ids)


__all__ = ["blocks", "body", "document", "goal", "merged", "numbered", "progress", "progress_parts", "render"]
