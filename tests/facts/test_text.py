"""Caps cut at word boundaries and never inside a backtick span (issue 23): the text helpers
every fact and checkpoint cap goes through, and the stump rules the verifier applies."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from worker.facts.text import (
    CUT_MARKER,
    code_spans,
    command_line,
    cut_end,
    cut_middle,
    finished,
    one_line,
    unfinished,
)
from worker.facts.workstate import REQUEST_TEXT_MAX_CHARS, request_text

PROSE = ("Keep the old parser in `src/api/orders.ts` because the new one drops the `total` field whenever "
         "the `currency` header is missing, and the checkout page then shows `NaN` to the customer")


def balanced(text: str) -> bool:
    return not code_spans(text)[1]


@pytest.mark.parametrize("limit", range(40, len(PROSE), 7))
def test_an_end_cut_ends_at_a_word_outside_code(limit):
    out = cut_end(PROSE, limit)
    assert len(out) <= limit and out.endswith("…") and balanced(out)
    kept = out.removesuffix("…")
    assert PROSE.startswith(kept) and PROSE[len(kept)] == " "  # the next character starts a new word


@pytest.mark.parametrize("limit", range(60, len(PROSE), 9))
def test_a_middle_cut_keeps_whole_words_and_whole_spans_at_both_ends(limit):
    out = cut_middle(PROSE, limit)
    assert len(out) <= limit and balanced(out)
    head, n, tail = re.match(r"(.*)\[… (\d+) chars cut …\](.*)", out).groups()
    assert PROSE.startswith(head) and PROSE.endswith(tail) and len(head) + int(n) + len(tail) == len(PROSE)
    assert not head or head[-1] == " " or PROSE[len(head)] == " "
    assert not tail or tail[0] == " " or PROSE[len(PROSE) - len(tail) - 1] == " "


def test_a_cut_inside_one_long_token_still_cuts_and_says_how_much():
    out = cut_middle("x" * 300, 100)
    n = int(re.search(r"\[… (\d+) chars cut …\]", out).group(1))
    assert len(out) <= 100 and len(out) - len(CUT_MARKER.format(n=n)) + n == 300


def test_one_line_does_not_leave_a_span_open_across_the_line_break():
    assert one_line("run `a\nb` then\nmore") == "run …"
    assert one_line("x `y` z\nmore") == "x `y` z …"
    assert one_line("single `line`") == "single `line`"


def test_a_work_item_names_its_request_in_whole_words():
    request = "Please fix " + "the `orders` endpoint so that totals round " * 10
    text = request_text(request)
    assert len(text) <= REQUEST_TEXT_MAX_CHARS and text.endswith("…") and balanced(text)
    assert request[len(text) - 1] == " "  # the word before the ellipsis is whole


@pytest.mark.parametrize("text, capped, why", [
    ("Keep `src/api/orders.ts` because the API then returns `src/api/ord", True, "backtick"),
    ("Run the tes", True, "mid-word"),
    ("Use the cache (because the", False, "bracket"),
    ('Run "pytest -k test_a', False, "quote"),
])
def test_stumps_are_recognized(text, capped, why):
    assert why in unfinished(text, capped)


@pytest.mark.parametrize("text, capped", [
    ("Fix the bug in `foo.py`.", True),
    ("Fix the bug in `foo.py` now", False),  # not capped: its last word is a word
    ("Use ``a`b`` as the separator (it is rare)", False),
    ("修改 `src/app.py` 的默认值", True),  # spaceless script: any boundary is a word's
])
def test_whole_items_are_not_stumps(text, capped):
    assert unfinished(text, capped) is None and finished(text, capped) == text


def test_a_stump_is_trimmed_to_its_whole_phrase_or_dropped():
    long = ("Keep the parser in `src/api/orders.ts` because the old one drops the `total` field when the "
            "`currency` is not set and the API then returns `src/api/ord")
    assert finished(long, True) == ("Keep the parser in `src/api/orders.ts` because the old one drops the `total` "
                                    "field when the `currency` is not set and the API then returns…")
    assert finished("Use the cache (because the", False) == "Use the cache…"
    assert finished("Run the tes", True) == ""  # "Run" alone is no step
    assert finished("Run `pytest -k \"test_a", False) == ""


def test_a_command_list_is_cut_in_its_longest_link():
    from worker.facts.shell import cut_command

    # bash(1) Lists: `git add <paths> && git commit -m "msg" && git status` keeps its message.
    cmd = ('git add .github/workflows/secret-scan.yml .github/workflows/dependency-scan.yml .gitleaks.toml '
           '.audit-exceptions.json && git commit -m "ci: add secret scan and dependency vulnerability workflows" '
           '&& git status --short')
    out = cut_command(cmd, 200)
    assert len(out) <= 200 and CUT_MARKER.split("{")[0] in out
    assert out.startswith("git add .github/") and out.endswith(
        '&& git commit -m "ci: add secret scan and dependency vulnerability workflows" && git status --short')
    assert cut_command("echo 'a && b' " + "x" * 300, 120) == cut_middle("echo 'a && b' " + "x" * 300, 120)  # one link
    assert cut_command(cmd, 1000) == cmd


def test_a_long_command_gives_up_its_cd_before_what_it_ran():
    from worker.facts.shell import cut_command

    # darthzen/neuvector-mcp (tune half): every Bash call opens with a `cd` into a quoted iCloud path.
    ran = "python -m pytest tests/test_policy_read.py tests/test_policy_write.py tests/test_waf_tools.py -q 2>&1 | tail -30"
    cmd = 'cd "/Users/rashford/Library/Mobile Documents/com~apple~CloudDocs/Developer/neuvector-mcp" && ' + ran
    out = cut_command(cmd, 200)
    assert len(out) <= 200 and out.startswith('cd "/Users/') and out.endswith('/neuvector-mcp" && ' + ran)
    assert cut_command("cd /repo && " + ran, 200) == "cd /repo && " + ran  # fits: as typed


FLUTTER = (Path(__file__).resolve().parents[1] / "fixtures"
           / "cc-flutterdockerimage_aba9151e-9900-4227-9be2-735c5d04d586.jsonl")  # NOTICE.md; tune half


def bash_command(path: Path, line: int) -> str:
    record = json.loads(path.read_text(encoding="utf-8").split("\n")[line - 1])
    return next(c["input"]["command"] for c in record["message"]["content"] if c.get("type") == "tool_use")


def test_a_script_is_named_by_its_first_line_that_runs_something():
    # Claude Code Bash calls of a real session: a `cd` into the worktree, an `echo "=== … ==="` banner
    assert command_line(bash_command(FLUTTER, 817)) == "javap -p -cp out Dvc"
    assert command_line(bash_command(FLUTTER, 366)).startswith("gh issue edit 532 --repo gmeligio/flutter-docker-image \\ …")
    # a `cd` chained to a command runs it; one line, or a script of preamble only, is its first line
    assert command_line("cd /x && make\nls") == "cd /x && make …"
    assert command_line("set -euo pipefail\n# build\nnpm test") == "npm test"
    assert command_line("cd /x\ncd /y") == one_line("cd /x\ncd /y") == "cd /x …"
    assert command_line("git status") == "git status"
