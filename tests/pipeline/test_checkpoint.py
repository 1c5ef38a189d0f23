"""Shrinking the deterministic sections to the summary's budget."""

from __future__ import annotations

from worker.pipeline.checkpoint import Block, Bullet, Section

MORE = "more"


def test_quotes_go_with_their_bullet():
    section = Section(blocks=[Block([Bullet("m00031:", quote=["好的", "two lines"]), Bullet("m00020:", quote=["three"]),
                                     Bullet("m00010:", quote=["four"])])])
    # A dropped instruction's quote must not stay behind under another message's id.
    assert section.shrunk(1).body() == f"- m00031:\n  > 好的\n  > two lines\n- … 2 {MORE}"


def test_each_heading_counts_and_reports_its_own_list():
    section = Section(blocks=[
        Block([Bullet("a"), Bullet("b")], heading="Done"),
        Block([Bullet("c", subs=["x", "y\n    y continued"]), Bullet("d")], heading="In Progress"),
    ])
    assert section.shrunk(1).body().splitlines() == [
        "### Done", "- a", f"- … 1 {MORE}",
        "### In Progress", "- c", "  - x", f"  - … 1 {MORE}",
        f"- … 1 {MORE}",
    ]


def test_a_second_shrink_counts_the_first_ones_marker():
    section = Section(blocks=[Block([Bullet(str(i)) for i in range(5)], empty="(none)")])
    assert section.shrunk(3).shrunk(2).body().splitlines() == ["- 0", "- 1", f"- … 2 {MORE}"]
    assert Section(blocks=[Block([], empty="(none)")]).shrunk(1).body() == "(none)"
