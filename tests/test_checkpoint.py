"""Shrinking the deterministic sections to the summary's budget."""

from __future__ import annotations

from worker.checkpoint import shrink_bullets


def test_quotes_go_with_their_bullet():
    body = "- m00031:\n  > 好的\n  > two lines\n- m00020:\n  > three\n- m00010:\n  > four"
    # A dropped instruction's quote must not stay behind under another message's id.
    assert shrink_bullets(body, 1) == (
        "- m00031:\n  > 好的\n  > two lines\n- … 2 more not shown (search the history for them)")


def test_each_heading_counts_and_reports_its_own_list():
    body = "### Done\n- a\n- b\n### In Progress\n- c\n  - x\n  - y\n    y continued\n- d"
    assert shrink_bullets(body, 1).splitlines() == [
        "### Done", "- a", "- … 1 more not shown (search the history for them)",
        "### In Progress", "- c", "  - x", "  - … 1 more not shown (search the history for them)",
        "- … 1 more not shown (search the history for them)",
    ]
