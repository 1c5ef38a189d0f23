"""The fact ledger: exact facts from raw messages, carried across compactions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import worker.facts.ledger as ledger_module
from tests.fakes import Builder, SessionBuilder, swe_messages
from worker.facts.actions import PR_SEEN, Action, scan_actions
from worker.facts.ledger import (
    MAX_COMMANDS,
    MAX_FILES,
    MAX_RESOLVED_ERRORS,
    MAX_UNRESOLVED_ERRORS,
    RULE_LINE_RE,
    USER_MESSAGE_MAX_CHARS,
    Ledger,
    UserInstruction,
    budget_user_instructions,
    condense_user_message,
    cut_paste,
    extract_ledger,
    is_chitchat,
)
from worker.facts.output import (
    CODEX_COMMAND_HEADER_RE,
    diffstat_paths,
    error_lines,
    find_tallies,
    first_meaningful_line,
)
from worker.facts.shell import (
    commit_subject,
    looks_like_path,
    normalize_path,
    only_looks,
    publishes,
    run_key,
    sets_up,
    shell_file_actions,
)
from worker.formats import claude_code, load
from worker.pipeline.checkpoint import ledger_sections, render_summary


def render_markdown(ledger: Ledger, lang: str = "en") -> str:
    """The ledger's sections as the summary shows them."""
    return render_summary(ledger_sections(ledger, lang), lang, reference_prefix=False)

FIXTURES = Path(__file__).parent.parent / "fixtures"
CC = FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
PI = FIXTURES / "pi_large-session.jsonl"

PYTEST_FAIL = """============================= test session starts ==============================
collected 3 items

tests/test_money.py F..                                                  [100%]

=================================== FAILURES ===================================
_________________________________ test_round __________________________________

    def test_round():
>       assert round_money(Decimal("58.4730")) == Decimal("58.47")
E       AssertionError: assert Decimal('58.4730') == Decimal('58.47')
E        +  where Decimal('58.4730') = round_money(Decimal('58.4730'))

tests/test_money.py:7: AssertionError
=========================== short test summary info ============================
FAILED tests/test_money.py::test_round - AssertionError: assert Decimal('58.4730') == Decimal('58.47')
========================= 1 failed, 2 passed in 0.05s ==========================
"""
PYTEST_PASS = "tests/test_money.py ...                                                  [100%]\n3 passed in 0.04s\n"
E_LINE = "E       AssertionError: assert Decimal('58.4730') == Decimal('58.47')"



# ---------------------------------------------------------------------------- SWE-agent trace
def test_swe_trace_files_commands_and_outputs():
    ledger = extract_ledger(swe_messages())
    fields = ledger.file("src/marshmallow/fields.py")
    assert fields is not None and "modified" in fields.actions  # `edit` names no path: the result header does
    assert "m00020" in fields.message_ids  # the edit call
    repro = ledger.file("reproduce.py")
    assert repro is not None and repro.actions[0] == "created" and repro.last_action == "deleted"
    assert ledger.file("setup.py").actions == ["read"]
    # Changed files rank above read-only ones; the file still there above the deleted scratch file.
    assert [f.path for f in ledger.files] == ["src/marshmallow/fields.py", "reproduce.py", "setup.py"]
    runs = [(c.output, c.message_ids) for c in ledger.commands if c.command == "python reproduce.py"]
    assert runs == [("344", ["m00013"]), ("345", ["m00023"])]
    assert ledger.errors == []  # the trace has no traceback: 344 is a wrong output, not an error line
    md = render_markdown(ledger)
    assert "`python reproduce.py` → 344 (m00013)" in md
    assert "`python reproduce.py` → 345 (m00023)" in md
    assert "- `src/marshmallow/fields.py` — read, modified" in md
    assert all("://" not in f.path for f in ledger.files)
    # The issue text is the user's instruction, kept whole by the ledger; a tight checkpoint (the
    # dense rendering) cuts it down to the user-message budget, with a marker.
    task = ledger.user_instructions[0]
    assert task.message_id == "m00001" and not task.cut
    assert "Output of this snippet is `344`, but it seems that `345` is correct." in task.text
    (tight,), _ = budget_user_instructions([task], budget=len(task.text) // 2, per_message=len(task.text) // 2)
    assert tight.cut and "chars cut …]" in tight.text and len(tight.text) < len(task.text)


# ---------------------------------------------------------------------------- errors, resolution, ranking
def test_pytest_failure_kept_verbatim_then_resolved_and_ranked_below_open_error():
    b = Builder()
    b.user("fix the rounding bug in money.py")
    fail_id = b.bash("pytest -q", PYTEST_FAIL + "Exit code 1", is_error=True)
    b.bash("python scripts/migrate.py", "Traceback (most recent call last):\n  File \"scripts/migrate.py\", "
           "line 3, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'\nExit code 1", True)
    b.call("Edit", {"file_path": "src/money.py", "old_string": "a", "new_string": "b"}, "ok")
    pass_id = b.bash("pytest -q", PYTEST_PASS)
    ledger = extract_ledger(b.messages)

    texts = [e.text for e in ledger.errors]
    assert E_LINE in texts
    e = next(e for e in ledger.errors if e.text == E_LINE)
    assert e.resolved and e.resolved_by == pass_id and e.message_ids == [fail_id]
    assert "tests/test_money.py::test_round" in e.test_ids
    # The open error ranks above every resolved one.
    assert ledger.errors[0].text == "ModuleNotFoundError: No module named 'yaml'" and not ledger.errors[0].resolved
    assert [x.resolved for x in ledger.errors] == sorted(x.resolved for x in ledger.errors)
    assert [t.text for t in ledger.tallies] == ["1 failed, 2 passed in 0.05s", "3 passed in 0.04s"]
    assert [t.failed for t in ledger.tallies] == [True, False]
    md = render_markdown(ledger)
    unresolved_at, resolved_at = md.index("Unresolved errors"), md.index("Resolved errors")
    assert unresolved_at < md.index("`ModuleNotFoundError: No module named 'yaml'`") < resolved_at
    assert md.index(f"`{E_LINE}`") > resolved_at
    assert "- `src/money.py` — modified" in md


def test_chinese_session_keeps_exact_error_and_renders_zh_labels():
    b = Builder()
    b.user("请帮我运行 scripts/load_config.py，修复报错，不要改动 tests/ 目录。")
    b.bash("python scripts/load_config.py",
           "Traceback (most recent call last):\n  File \"scripts/load_config.py\", line 1, in <module>\n"
           "    import yaml\nModuleNotFoundError: No module named 'yaml'\n", is_error=True)
    ledger = extract_ledger(b.messages)
    assert [e.text for e in ledger.unresolved_errors()] == ["ModuleNotFoundError: No module named 'yaml'"]
    md = render_markdown(ledger, lang="zh")
    for label in ("## 关键上下文", "## 相关文件", "## 约束与偏好", "未解决的错误"):
        assert label in md
    assert "`ModuleNotFoundError: No module named 'yaml'`" in md
    assert "> 请帮我运行 scripts/load_config.py，修复报错，不要改动 tests/ 目录。" in md
    assert "## 相关文件\n(无)" in md  # running a script is not reading it


def test_error_line_patterns():
    out = "\n".join([
        "../tui/test/chat-simple.ts(28,2): error TS2739: Type '{ a: 1 }' is missing the following properties",
        "✘ [ERROR] Could not resolve \"js/app.js\"",
        "cp: /opt/x/dark.json: No such file or directory",
        "src/main.rs:3:5: error[E0308]: mismatched types",
        "     ** (RuntimeError) no :secret_key_base configuration found",
        "FAILED tests/test_a.py::test_b - assert 1 == 2",
        "all good here, no error words",
        "warning: unused variable",
    ])
    assert error_lines(out) == [
        "../tui/test/chat-simple.ts(28,2): error TS2739: Type '{ a: 1 }' is missing the following properties",
        "✘ [ERROR] Could not resolve \"js/app.js\"",
        "cp: /opt/x/dark.json: No such file or directory",
        "src/main.rs:3:5: error[E0308]: mismatched types",
        "** (RuntimeError) no :secret_key_base configuration found",
        "FAILED tests/test_a.py::test_b - assert 1 == 2",
    ]
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\n    json.loads(s)\n" \
         "json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 256 (char 255)"
    assert error_lines(tb) == ["json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 256 (char 255)"]


def test_is_error_without_error_line_keeps_first_meaningful_line_and_exit_status():
    b = Builder()
    b.call("Read", {"file_path": "/repo/big.json"},
           "File content (85812 tokens) exceeds maximum allowed tokens (25000). Please use offset.", True)
    b.bash("npm run check", "\n> pkg@1.0 check\n> tsgo --noEmit\n\nDebugger attached.\nCommand exited with code 1", True)
    b.call("Read", {"file_path": "/repo/big.json", "offset": 1, "limit": 10}, "1→{")
    ledger = extract_ledger(b.messages)
    big = next(e for e in ledger.errors if e.text.startswith("File content (85812 tokens)"))
    assert big.resolved  # the same tool on the same path later succeeded
    exit_err = next(e for e in ledger.errors if e.text == "Command exited with code 1")
    assert exit_err.exit_only and not exit_err.resolved and exit_err.command == "npm run check"
    check = next(c for c in ledger.commands if c.command == "npm run check")
    assert check.status == "failed" and check.exit_code == 1
    assert ledger.file("/repo/big.json").actions == ["read"]  # the failed read is not a read


def test_grep_without_match_is_not_an_error():
    b = Builder()
    b.bash('grep -n "console.error" src/theme.ts', "Command exited with code 1", is_error=True)
    ledger = extract_ledger(b.messages)
    assert ledger.errors == [] and ledger.commands[0].status == "ok"


@pytest.mark.parametrize("command, setup", [
    ("git checkout feat/phase-12-multi-factor", True), ("gh pr close 46 && git checkout -b deps/x", True),
    ("cd frontend && bun add @chakra-ui/react @emotion/react", True),
    ("go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@latest 2>&1", True),
    ("DB_HOST=192.168.133.114 pnpm --filter api dev 2>&1", True), ("npm run dev", True), ("pip install -e .", True),
    ("npm test", False), ("pnpm --filter web build", False), ("git status", False), ("git commit -m 'install x'", False),
    ("echo 'npm install'", False),
])
def test_setup_runs_by_each_tools_cli(command, setup):
    assert sets_up(command) is setup


# Commands from the tune half (cc-langlearntts, cc-starcar, pi-authgo, cc-meow-ja): what changed the
# repository's history, a remote or a PR is published; listing tags, reading a PR or the API is not.
@pytest.mark.parametrize("command, published", [
    ("git tag v0.6.3 && git push origin main v0.6.3", True), ("git revert --no-edit b6443c1", True),
    ("gh pr merge 5 --repo polecatspeaks/StarCar --merge --delete-branch 2>&1 | tail -3", True),
    ("gh api -X PUT repos/polecatspeaks/StarCar/branches/main/protection --input -", True),
    ('gh pr create --base main --head soph/x --title "Harden OAuth client security checks"', True),
    ("cargo publish", True), ("git tag", False), ("git tag -l 'v*'", False), ("gh pr view 5 --json state", False),
    ("gh api repos/polecatspeaks/StarCar", False), ("git status -sb", False), ("echo 'git push'", False),
    ("npm test", False),
    # git's own options before the subcommand (git(1): `-C <path>`, `-c <name>=<value>`); cc-chkit's push
    ("git -C /Users/marc/Workspace/chx push", True), ("git -c core.hooksPath=/dev/null push origin main", True),
    ("git -C /Users/marc/Workspace/chx log --oneline -5", False),
    # GitButler's `but` (crates/but/src/args/mod.rs): `push`, and `pr`/`review` that push and open one;
    # its own `-C <path>` before the subcommand (cc-linkblog, tune half, for the first)
    ('but pr new update-feed-docs -m "Update postman tests"', True), ("but push update-feed-docs", True),
    ("but -C /repo push", True), ("but commit update-feed-docs -m 'docs: x' -p upw,yu", False),
    ("but status --json -f", False),
    # usage and rehearsals publish nothing (git-push(1) `-n, --dry-run`; `but push -d`), nor `but pr template`
    ("but push --dry-run", False), ("git push -n origin main", False), ("but pr new --help", False),
    ("but pr template", False), ("npm publish --dry-run", False), ("git revert -n b6443c1", True),
])
def test_published_runs_by_each_tools_cli(command, published):
    assert publishes(command) is published


def test_process_listings_and_waits_only_look():
    assert only_looks('ps aux | grep "nest\\|node.*api" | grep -v grep | head -5')
    assert only_looks("sleep 5 && tail -20 /private/tmp/claude-501/tasks/b3d53de.output")
    assert not only_looks("kill 33189") and not only_looks("sleep 1; rm -rf dist")
    assert only_looks("git -C /Users/marc/Workspace/chx status") and not only_looks("git -C /repo push")
    # GitButler's `but status`/`diff`/`show` read; `but` alone runs `status`; its writes do not only look.
    assert only_looks("but status --json -f") and only_looks("but") and only_looks("but -C /repo diff")
    assert not only_looks("but commit update-feed-docs -m 'x'") and not only_looks("but branch new x")
    assert shell_file_actions("git -C /repo add src/a.py", ["/repo"]) == [("src/a.py", "staged")]


# ---------------------------------------------------------------------------- paths
def test_a_windows_file_has_one_name():
    """cc-starcar (tune half; Claude Code on Windows): the Write tool names `C:\\Users\\…\\docs\\setup.md`,
    Git Bash `/c/Users/…/scripts/board.ps1`, the session's cwd is `C:\\Users\\Chris\\git\\starcar`."""
    cwds = ["C:\\Users\\Chris\\git\\starcar"]
    assert normalize_path("C:\\Users\\Chris\\git\\starcar\\docs\\setup.md", cwds) == "docs/setup.md"
    assert normalize_path("/c/Users/Chris/git/starcar/scripts/board.ps1", cwds) == "scripts/board.ps1"
    assert normalize_path("C:\\Users\\Chris\\.claude\\memory\\MEMORY.md", cwds) == "C:/Users/Chris/.claude/memory/MEMORY.md"
    assert normalize_path("/c/Users/Chris/.claude/memory/MEMORY.md", cwds) == "C:/Users/Chris/.claude/memory/MEMORY.md"
    assert normalize_path("/c/src/app.py", ["/home/u/proj"]) == "/c/src/app.py"  # no Windows cwd: a POSIX path


def test_paths_are_conservative():
    assert looks_like_path("src/a.py") and looks_like_path("Makefile") and looks_like_path("../tui/x.ts")
    assert looks_like_path("~/.pi/agent/themes/custom.json")
    for not_path in ("1/2", "a/b", "and/or", "https://example.com/x.py", "-rf", "$HOME/x", "*.py", "build/"):
        assert not looks_like_path(not_path), not_path
    actions = shell_file_actions(
        "cat README.md | grep x > out/report.txt; sed -i 's/a/b/' src/x.py && rm -f build/tmp.o\n"
        "echo '1 > 2' ; sed -n '1,20p' lib/y.ex; echo done 2>&1 >> logs/run.log; touch new_file.py; "
        "curl https://example.com/a/b.json -o /dev/null", cwds=[])
    assert sorted(actions) == sorted([
        ("README.md", "read"), ("out/report.txt", "created"), ("src/x.py", "modified"),
        ("build/tmp.o", "deleted"), ("lib/y.ex", "read"), ("logs/run.log", "modified"),
        ("new_file.py", "created"),
    ])
    # BSD sed's `-i ''` suffix is not the script; a heredoc body is not a command.
    assert shell_file_actions("sed -i '' 's/x/y/g' packages/tui/test/editor.test.ts", []) == [
        ("packages/tui/test/editor.test.ts", "modified")]
    assert shell_file_actions("cat > /tmp/fix.py << 'EOF'\nrm important.py\nEOF\npython /tmp/fix.py", []) == [
        ("/tmp/fix.py", "created")]


def test_patch_headers_and_cwd_relative_paths():
    b = Builder()
    patch = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** Add File: docs/new.md\n+hi\n*** End Patch"
    b.call("apply_patch", {"input": patch}, "Done!")
    b.call("str_replace_editor", {"command": "view", "path": "/repo/setup.cfg"}, "[metadata]")
    b.call("str_replace_editor", {"command": "create", "path": "/repo/pkg/mod.py", "file_text": "x"}, "ok")
    diff = "--- a/lib/old.py\n+++ b/lib/old.py\n@@ -1 +1 @@\n--- /dev/null\n+++ b/lib/added.py\n"
    b.call("patch", {"patch": diff}, "ok")
    ledger = extract_ledger(b.messages, cwd="/repo")
    got = {f.path: f.actions for f in ledger.files}
    assert got == {"src/app.py": ["modified"], "docs/new.md": ["created"], "setup.cfg": ["read"],
                   "pkg/mod.py": ["created"], "lib/old.py": ["modified"], "lib/added.py": ["created"]}


# ---------------------------------------------------------------------------- tallies, commits, branches
@pytest.mark.parametrize("output,expected", [
    ("Finished in 1.0 seconds\n58 tests, 1 failure\n", [("58 tests, 1 failure", True)]),
    ("===== 7 passed in 0.12s =====", [("7 passed in 0.12s", False)]),
    ("3 failed, 10 passed in 0.2s", [("3 failed, 10 passed in 0.2s", True)]),
    ("Ran 12 tests in 0.003s\n\nFAILED (failures=1)", [("Ran 12 tests in 0.003s … FAILED (failures=1)", True)]),
    ("Ran 12 tests in 0.003s\n\nOK", [("Ran 12 tests in 0.003s … OK", False)]),
    ("Tests:       1 failed, 57 passed, 58 total", [("Tests:       1 failed, 57 passed, 58 total", True)]),
    ("# tests 4\n# pass 4\n# fail 0", [("tests 4, pass 4, fail 0", False)]),
    ("test result: ok. 12 passed; 0 failed; 0 ignored", [("test result: ok. 12 passed; 0 failed; 0 ignored", False)]),
    ("1 error\n", []),  # esbuild's count, not a test tally
])
def test_tallies(output, expected):
    assert find_tallies(output) == expected


def test_commits_and_branches():
    b = Builder()
    b.bash("git checkout -b fix-rounding", "Switched to a new branch 'fix-rounding'")
    b.bash('git add -A && git commit -m "Fix rounding"', "[fix-rounding 3bb8701] Fix rounding\n 1 file changed")
    b.bash('git commit -m "nothing"', "nothing to commit, working tree clean\nExit code 1", True)
    ledger = extract_ledger(b.messages)
    assert [(c.sha, c.text, c.branch) for c in ledger.commits] == [("3bb8701", "Fix rounding", "fix-rounding")]
    assert [br.name for br in ledger.branches] == ["fix-rounding"]
    md = render_markdown(ledger)
    assert "`3bb8701` `Fix rounding`" in md and "`fix-rounding` (current)" in md


def test_a_quiet_heredoc_commit_in_a_long_script_is_named_by_git_log():
    """cc-starcar (tune half; polecatspeaks/StarCar, MIT), line 174: Claude Code's heredoc commit
    message, `git commit -q` (no `[branch sha]` line), then `git log --oneline -1`, inside a script
    longer than the command the ledger keeps."""
    command = ("cd /c/Users/Chris/git/starcar\n" + "gh issue comment 4 --body 'x'\n" * 30 + "git add CLAUDE.md\n"
               "git commit -q -m \"$(cat <<'EOF'\ndocs: STANDING ORDER - never commit to main, everything lands by PR, "
               "docs included\n\nOwner order issued on founding day.\nEOF\n)\"\ngit log --oneline -1")
    output = ("warning: in the working copy of 'CLAUDE.md', LF will be replaced by CRLF the next time Git touches it\n"
              "31297f4 docs: STANDING ORDER - never commit to main, everything lands by PR, docs included")
    b = Builder()
    b.bash(command, output)
    b.bash('git commit -q -m "probe: expected to be refused"\ngit push origin main', "Everything up-to-date")
    ledger = extract_ledger(b.messages)
    assert [(c.sha, c.text) for c in ledger.commits] == [
        ("31297f4", "docs: STANDING ORDER - never commit to main, everything lands by PR, docs included"),
        (None, "probe: expected to be refused")]


def test_a_commit_git_names_off_a_branch_or_only_later():
    """codex-cli-pretext (tune half; blackgirlbytes/pretext-handwriting-demo, MIT): a commit on a detached
    HEAD prints `[detached HEAD 9c78d9d] …` (builtin/commit.c), and `git cherry-pick` prints the same
    summary; cc-starcar (tune half), line 288: a quiet commit, then `HEAD is now at 1c47c1d …` from a
    reset names it (builtin/reset.c). A quiet commit takes the sha a later `git log --oneline` gives
    its subject (the newest such commit), never one a known commit has, nor a parent's."""
    b = Builder()
    b.bash('git commit -m "Adopt theme"', "[detached HEAD 9c78d9d] Adopt theme\n 2 files changed")
    b.bash("git cherry-pick 9c78d9d", "[detached HEAD 9f7e801] Adopt theme\n Date: Wed Apr 1 03:41:48 2026")
    b.bash('git commit -q -m "design: the harness"', "")
    b.bash("git reset --hard HEAD", "HEAD is now at 1c47c1d design: the harness")
    b.bash('git commit -m wip', "[main aaa1111] wip\n 1 file changed")
    b.bash('git commit -q -m wip', "")
    b.bash("git log --oneline -2", "bbb2222 (HEAD -> main) wip\naaa1111 wip")
    b.bash('git commit -q -m "Fix typo"', "")
    b.bash("git reset --hard HEAD~1", "HEAD is now at ccc3333 Fix typo")  # the parent, also "Fix typo"
    ledger = extract_ledger(b.messages)
    assert [(c.sha, c.text, c.branch) for c in ledger.commits] == [
        ("9c78d9d", "Adopt theme", None), ("9f7e801", "Adopt theme", None), ("1c47c1d", "design: the harness", None),
        ("aaa1111", "wip", "main"), ("bbb2222", "wip", None), (None, "Fix typo", None)]
    assert "detached HEAD" not in {br.name for br in ledger.branches}


def test_a_commit_message_read_from_standard_input_names_the_commit():
    """cc-nomos (tune half; Nomos-N4s/nomos, Apache-2.0): `git commit -q -F - <<'EOF'` takes its
    message from the heredoc (git-commit(1) `-F -`), then `git log --oneline -1` names the commit.
    Unnamed, the committed files were listed as not committed."""
    s = claude_code.load(FIXTURES / "cc-nomos_763eeec5-648e-4d0e-9a0d-75867b918b75.jsonl")
    commits = [(c.sha, c.text) for c in extract_ledger(s.messages).commits]
    assert ("66d0b84", "fix(identity): reject duplicate genesis holders and enforce total_holders") in commits
    assert commit_subject("git commit -F- <<EOF\nfix: subject\n\nbody\nEOF") == "fix: subject"
    assert commit_subject("git commit -F notes.txt") is None  # a file's message is not in the command


def test_pull_requests_gh_opened_and_merged():
    """`gh pr create` prints the new pull request's URL (cc-lockcodemanager, tune half, with git's
    warning above it); `gh pr merge` its confirmation (cli/cli pkg/cmd/pr/merge/merge_test.go, MIT);
    a failed create names nothing. The checkpoint says `#N` as the agent and the user write it."""
    b = Builder()
    b.bash('gh pr create --title "docs: clarify scheduler-component limitation is condition-entity-only" '
           '--body "$(cat <<\'EOF\'\n## Summary\nEOF\n)"',
           "Warning: 1 uncommitted change\nhttps://github.com/raman325/lock_code_manager/pull/1131")
    b.bash('gh pr create --title "again"', "a pull request for branch \"docs\" into branch \"master\" already "
           "exists:\nhttps://github.com/raman325/lock_code_manager/pull/1131\nExit code 1", True)
    b.bash("gh pr merge 3 --squash", "✓ Squashed and merged pull request OWNER/REPO#3 (The title of the PR)")
    b.bash("gh pr view 1131", "title:\tdocs: clarify\nurl:\thttps://github.com/raman325/lock_code_manager/pull/1131")
    ledger = extract_ledger(b.messages)
    # Viewing #1131 afterwards keeps it opened, where it was opened.
    assert [(p.number, p.state, p.title, p.url) for p in ledger.pull_requests] == [
        (1131, "opened", "docs: clarify scheduler-component limitation is condition-entity-only",
         "https://github.com/raman325/lock_code_manager/pull/1131"),
        (3, "merged", "The title of the PR", None)]
    assert ledger.pull_requests[0].message_ids == [b.messages[1].id]
    md = render_markdown(ledger)
    assert ("#1131 `docs: clarify scheduler-component limitation is condition-entity-only` — opened "
            "(" in md and "https://github.com/raman325/lock_code_manager/pull/1131)" in md)
    assert "#3 `The title of the PR` — merged" in md
    assert Ledger.from_dict(json.loads(json.dumps(ledger.to_dict()))).pull_requests == ledger.pull_requests
    dense = ledger_sections(ledger, "en", dense=True)["Critical Context"].body()
    # A tight budget: the number and the URL (which agents and users quote), not the title.
    assert "  - #1131 — opened (https://github.com/raman325/lock_code_manager/pull/1131)\n" in dense
    # A double-quoted title is read as the shell reads it: `\"` is a quote (bash(1), QUOTING).
    b.bash('gh pr create --title "fix: say \\"hi\\" to \\$USER"', "https://github.com/a/b/pull/14")
    assert extract_ledger(b.messages).pull_requests[-1].title == 'fix: say "hi" to $USER'


def test_pull_requests_the_session_closed_or_worked_on():
    """`gh pr close 46` prints `✓ Closed pull request owner/repo#46 (title)` (cc-meow-ja, tune half);
    a `gh pr view`/`checks`/`diff` names the pull request the work is about: by the number or URL it
    was given (cc-lockcodemanager's `gh pr checks 1127`), else by the URL its output shows
    (cc-chkit's `gh pr view --json number,title,url,…` on the current branch). Looking at one never
    replaces what the session did to it, and ranks below it."""
    s = claude_code.load(FIXTURES / "cc-meow-ja_fc996c60-fb21-4123-b967-4f406da4bc25.jsonl")
    prs = {p.number: p for p in extract_ledger(s.messages).pull_requests}
    assert (prs[46].state, prs[46].title) == ("closed", ":arrow_up: ci: Bump actions/github-script from 7 to 8")
    assert prs[45].state == "opened"  # then `gh pr checks 45`, `gh pr view 45 --comments`
    s = claude_code.load(FIXTURES / "cc-chkit_ae3fbe71-2e30-4381-887b-bdbcbb548d8a.jsonl")
    assert [(p.number, p.state, p.url) for p in extract_ledger(s.messages).pull_requests] == [
        (22, "seen", "https://github.com/obsessiondb/chkit/pull/22")]
    b = Builder()
    b.bash("gh pr checks 1127 2>&1 | head -20", "Auto Merge\tfail\t37s\thttps://github.com/raman325/lock_code_manager/"
           "actions/runs/1/job/2")
    b.bash("for i in 46 47; do gh pr view $i --json title; done", '{"title":"a"}\n{"title":"b"}')  # which: not said
    b.bash('gh pr create --title "docs"', "https://github.com/a/b/pull/9")
    b.bash("gh pr view 9 --comments --json comments",
           '{"comments":[{"url":"https://github.com/a/b/pull/9#issuecomment-1"}]}')
    # An option's value, quoted text and a heredoc body name no pull request.
    b.bash("gh pr checks --interval 20 --watch", "")
    b.bash('gh pr comment --body "fixes 3 bugs"', "")
    b.bash('git commit -m "docs: run gh pr checks 5 first"', "")
    b.bash("gh pr close 9 && gh pr reopen 9", "✓ Closed pull request a/b#9 (docs)\n✓ Reopened pull request a/b#9 (docs)")
    b.bash("gh pr view", "title:\tdocs: x\nstate:\tOPEN\nurl:\thttps://github.com/a/b/pull/12")  # to a pipe, not a tty
    ledger = extract_ledger(b.messages)
    assert [(p.number, p.state) for p in ledger.pull_requests] == [(1127, "seen"), (9, "opened"), (12, "seen")]
    md = render_markdown(ledger)
    assert "#1127 — worked on" in md and "#9 `docs` — opened" in md
    for n in range(100, 100 + ledger_module.MAX_PULL_REQUESTS):  # many looked at: the one opened stays
        b.bash(f"gh pr checks {n}", "")
    assert 9 in [p.number for p in extract_ledger(b.messages).pull_requests]


def test_commits_and_pull_requests_through_gitbutler():
    """GitButler's `but` (cc-linkblog, tune half: its agent skill has the session commit and open the
    PR with `but`, never git): `✓ Created commit ae90dc5 on branch update-feed-docs` is a commit, `✓
    Created PR #19` with its `URL:` line an opened pull request (gitbutlerapp/gitbutler crates/but/src/
    command/legacy/commit.rs, command/legacy/forge/review.rs). From 0.22 the id may be a change id
    (`Created commit tpm on branch 'A'`, from 0.21.1), which names no git commit; a refused commit and quoted text
    make none. A commit stays made when a later link fails; each review of a stack is a pull request."""
    s = claude_code.load(FIXTURES / "cc-linkblog_541f3bdd-a886-4bd8-82eb-31db274f7451.jsonl")
    ledger = extract_ledger(s.messages)
    assert [(c.sha, c.text, c.branch) for c in ledger.commits] == [
        ("ae90dc5", "docs: update postman tests and implementation plan for /feed endpoint (#9)", "update-feed-docs")]
    assert [(p.number, p.state, p.title, p.url) for p in ledger.pull_requests] == [
        (19, "opened", "Update postman tests and implementation plan for /feed endpoint (#9)",
         "https://github.com/vidluther/linkblog/pull/19")]
    b = Builder()
    b.bash("but commit A -m 'feat: add x' --changes g0", "Created commit tpm on branch 'A'")
    b.bash("but commit -m 'fix: y'", "Created commit 1a2b3c4")
    b.bash("but commit B -m 'feat: z' -p up,yu", "Error: Invalid file ID(s): up", is_error=True)
    b.bash('echo "but commit -m nothing"', "but commit -m nothing")
    b.bash("but pr new A", "  ✓ Pushed to origin\n✓ Created review #7\n  Title: feat: add x\n  Branch: A\n"
           "  URL: https://github.com/a/b/pull/7")
    b.bash("but commit A -m 'feat: w' && but push A", "✓ Created commit 2b3c4d5 on branch A\nError: failed to push 1 of 1 "
           "branch\nExit code 1", is_error=True)
    b.bash("but commit A -m \"$(cat <<'EOF'\nfeat: from a heredoc\n\nbody\nEOF\n)\"", "Created commit kpz on branch 'A'")
    b.bash("git commit -m 'git subject' && but commit B -m 'but subject'",
           "[main 3c4d5e6] git subject\n 1 file changed\n✓ Created commit 4d5e6f7 on branch B")
    b.bash("but commit C -m 'docs' && cat CHANGELOG.md", "✓ Created commit 5e6f7a8 on branch C\n## Created commit 9999999")
    ledger = extract_ledger(b.messages)
    assert [(c.sha, c.text, c.branch) for c in ledger.commits] == [
        (None, "feat: add x", "A"), ("1a2b3c4", "fix: y", None), ("2b3c4d5", "feat: w", "A"),
        (None, "feat: from a heredoc", "A"), ("3c4d5e6", "git subject", "main"), ("4d5e6f7", "but subject", "B"),
        ("5e6f7a8", "docs", "C")]
    assert [(p.number, p.state, p.title, p.url) for p in ledger.pull_requests] == [
        (7, "opened", "feat: add x", "https://github.com/a/b/pull/7")]
    b.bash("but pr new B", "✓ Created review #8\n  Title: a\n  URL: https://github.com/a/b/pull/8\n"
           "✓ Created review #9\n  Title: b\n  URL: https://github.com/a/b/pull/9")
    assert [p.number for p in extract_ledger(b.messages).pull_requests] == [7, 8, 9]
    # A stack whose lower branch already had its review: that one is worked on, the new one opened.
    b.bash("but pr new D", "\nPR already exists for B #8\n  URL: https://github.com/a/b/pull/8\n\n"
           "✓ Created review #10\n  Title: d\n  Branch: D\n  URL: https://github.com/a/b/pull/10")
    b.bash("but pr new E", "\nPR already exists for E #11\n  URL: https://github.com/a/b/pull/11")
    prs = {p.number: (p.state, p.url) for p in extract_ledger(b.messages).pull_requests}
    assert prs[10] == ("opened", "https://github.com/a/b/pull/10")
    assert prs[11] == (PR_SEEN, "https://github.com/a/b/pull/11")
    assert prs[8][0] == "opened"  # opened earlier in the session: seeing it again does not make it only seen


def test_pull_requests_through_github_tools():
    """A pull request opened or merged through GitHub's MCP server (Claude Code's GitHub plugin,
    cc-langlearntts, tune half: `create_pull_request` answers `{"id", "url"}`, `merge_pull_request`
    the REST merge response) or Codex's GitHub connector (codex-cli-agentv, tune half: the PR's
    snapshot after `Output:`) is in the ledger as one `gh` opened or merged."""
    s = claude_code.load(FIXTURES / "cc-langlearntts_0742cd3c-db27-4429-8ec3-839db1c6c5e2.jsonl")
    prs = {p.number: p for p in extract_ledger(s.messages).pull_requests}
    assert (prs[30].state, prs[30].title, prs[30].url) == (
        "merged", "fix: change ElevenLabs default voice from rachel to matilda",
        "https://github.com/punt-labs/langlearn-tts/pull/30")
    assert (prs[31].state, prs[31].url) == ("opened", "https://github.com/punt-labs/langlearn-tts/pull/31")
    s = load(FIXTURES / "codex-cli-agentv_019efc87-fa98-7971-91df-0c9512a065da.jsonl")
    assert [(p.number, p.state, p.url) for p in extract_ledger(s.messages).pull_requests] == [
        (1510, "opened", "https://github.com/EntityProcess/agentv/pull/1510")]
    # Before its minimal responses the server answered the whole PR object: its `url` is the API's,
    # `html_url` the page; a merge GitHub refused, or a call that failed, names nothing.
    b = Builder()
    b.call("mcp__github__create_pull_request", {"owner": "a", "repo": "b", "title": "Fix it", "head": "x", "base": "main"},
           json.dumps({"number": 7, "url": "https://api.github.com/repos/a/b/pulls/7",
                       "html_url": "https://github.com/a/b/pull/7", "body": "see https://github.com/a/b/pull/3"}))
    b.call("mcp__github__merge_pull_request", {"owner": "a", "repo": "b", "pullNumber": 7},
           json.dumps({"sha": "abc", "merged": False, "message": "Pull Request is not mergeable"}))
    b.call("mcp__github__merge_pull_request", {"owner": "a", "repo": "b", "pullNumber": 8},
           "failed to merge pull request: 405 Pull Request is not mergeable", is_error=True)
    b.call("mcp__github__merge_pull_request", {"owner": "a", "repo": "b", "pullNumber": True},  # no number
           json.dumps({"sha": "abc", "merged": True, "message": "Pull Request successfully merged"}))
    assert [(p.number, p.state, p.title, p.url) for p in extract_ledger(b.messages).pull_requests] == [
        (7, "opened", "Fix it", "https://github.com/a/b/pull/7")]


def test_a_session_of_many_branches_keeps_main_and_shows_the_newest():
    # A session that visits many PR branches (cc-lockcodemanager, tune: eight dependabot branches) must
    # not evict the branch it came from: five chained compactions at 32k lost `main` at a bound of 5.
    b = Builder()
    names = ["main"] + [f"dependabot/pip/dep-{k}" for k in range(7)]
    for name in names:
        b.bash(f"git checkout {name}", f"Switched to branch '{name}'")
    ledger = extract_ledger(b.messages)
    assert [br.name for br in ledger.branches] == names
    md = render_markdown(ledger)
    assert "`dependabot/pip/dep-6` (current)" in md and "`dependabot/pip/dep-2`" in md
    assert "`dependabot/pip/dep-1`" not in md and "`main`" not in md  # shown: the newest BRANCHES_SHOWN


def test_a_commit_git_made_passed_whatever_its_hook_logged():
    """cc-contextevaluator (tune half): the pre-commit hook ran the test suite, whose logs print
    `error: Database connection failed` under `1274 pass`, and git then printed `[main 37016ac] …`:
    the commit exists (git-commit(1)), so the run passed and those lines are no error. A hook that
    failed stops the commit before git prints that line."""
    hook_log = ("[EvaluationRoutes] Error in POST /api/evaluate:\nerror: Database connection failed\n"
                "      at <anonymous> (src/api/routes/evaluation.test.ts:315:25)\n\n 1274 pass\n 0 fail\n")
    b = Builder()
    b.bash('git commit -m "Fix tree view"', hook_log + "error: script \"test\" exited with code 1\nExit code 1", True)
    b.bash('git commit -m "Fix tree view"', hook_log + "[main 37016ac] Fix tree view\n 6 files changed")
    b.bash('git commit -m "Tidy" && git push', "[main 4d5e6f7] Tidy\n 1 file changed\n"
           "error: failed to push some refs to 'origin'\nExit code 1", True)
    b.bash('git commit -m "Docs"', "Exit code: 0\nOutput:\n" + hook_log + "[main 8a9b0c1] Docs\n 1 file changed")  # Codex
    ledger = extract_ledger(b.messages)
    assert [c.sha for c in ledger.commits] == ["37016ac", "4d5e6f7", "8a9b0c1"]  # the push failed; the commit was made
    assert all(e.resolved for e in ledger.errors if "Database" in e.text)  # the passing re-run resolved it
    assert [e.text for e in ledger.unresolved_errors()] == ["error: failed to push some refs to 'origin'"]


def test_run_key_drops_output_filters():
    assert run_key('cd pkg && npm run check 2>&1 | grep "error TS" | wc -l') == "cd pkg && npm run check"
    assert run_key("cd /repo && mix test 2>&1", ["/repo"]) == "mix test"
    # A working directory with a space is quoted (cc-neuvectormcp: an iCloud Drive checkout).
    cwd = "/Users/rashford/Library/Mobile Documents/com~apple~CloudDocs/Developer/neuvector-mcp"
    assert run_key(f'cd "{cwd}" && make verify PY=.venv/bin/python 2>&1 | tail -4', [cwd]) == "make verify PY=.venv/bin/python"
    assert run_key(f"cd '{cwd}/' && make verify", [cwd]) == "make verify"
    assert run_key('cd "/elsewhere x" && make verify', [cwd]) == 'cd "/elsewhere x" && make verify'
    assert run_key('echo "a|b" | head') == 'echo "a|b"'


def test_only_looks_tells_reads_from_changes():
    for cmd in ("git status 2>&1", "cd /repo && ls -la | head -5", "git diff --stat", "sed -n 1,5p f.py",
                "grep -rn TODO src 2>/dev/null"):
        assert only_looks(cmd), cmd
    for cmd in ("bd update spotter-fum.1 --status in_progress", "npm install highlight.js 2>&1 | tail -5",
                "cp a.json b.json", "sed -i s/a/b/ f.py", "echo x > notes.txt", "git push", "mix credo 2>&1"):
        assert not only_looks(cmd), cmd
    # A line continuation (bash(1), QUOTING) goes on with the same command: its next line is not a program.
    assert only_looks("ls -la \\\n  src/") and only_looks("git diff \\\n  --stat")
    assert not only_looks("ls \\\n  src/ && npm install")
    # Usage and version lookups print and exit, whatever else the line names (GNU Coding Standards 4.8).
    assert only_looks("bd create --help") and only_looks("gh --version") and only_looks("git help commit")
    assert not only_looks("gh --version && gh auth refresh") and not only_looks("tool --help > usage.txt")


SMALL_BOUND = 60  # below the spotter session's run count, so the eviction order shows


def test_a_long_session_keeps_its_early_setup_runs_over_its_looks(monkeypatch):
    # cc-spotter: ~90 distinct runs. Past MAX_COMMANDS the ledger drops look-only runs
    # (`git status`, `ls`) first, so `npm install highlight.js` from before Claude Code's own
    # compaction (line ~650) is still a fact.
    session = claude_code.load(CC)
    monkeypatch.setattr(ledger_module, "MAX_COMMANDS", 1000)
    every = [c.command for c in extract_ledger(session.messages).commands]
    monkeypatch.setattr(ledger_module, "MAX_COMMANDS", SMALL_BOUND)
    kept = [c.command for c in extract_ledger(session.messages).commands]
    assert len(every) > SMALL_BOUND == len(kept)
    assert all(only_looks(c) for c in every if c not in kept)
    for early in ("bd update spotter-fum.1 --status in_progress", "mix compile --warnings-as-errors 2>&1 | tail -10",
                  "cd /home/USER/projects/spotter-worktrees/spotter-fum/assets && npm install highlight.js 2>&1 | tail -5"):
        assert early in kept


# ---------------------------------------------------------------------------- user instructions
def test_a_lone_message_may_take_the_whole_budget_others_share_it():
    task = UserInstruction("m1", "TASK " + "t" * 4000, False, 1)
    (alone,), _ = budget_user_instructions([task])
    assert alone.text == task.text  # 4k of a 6k budget: nothing else to crowd out
    rules = [UserInstruction(f"m{i}", f"rule {i}: " + "r" * 2500, False, i) for i in range(2, 5)]
    kept, _ = budget_user_instructions([task] + rules)
    assert kept[0].cut and len(kept[0].text) <= USER_MESSAGE_MAX_CHARS + 100  # four share it: the per-message bound


def test_typed_messages_go_before_pasted_ones_whatever_their_cue_words():
    # pi-authgo_019e44d4 (tune half): three pasted code reviews ("…should…", "…only…") and the
    # short instructions typed between them; a tight budget keeps the typed ones first.
    b = Builder()
    review = "Issues / concerns\n\n" + "\n".join(f"  {i}. The check should only run once; consider x{i}. " + "z" * 300
                                                for i in range(8))
    b.user(review)
    typed = b.user("Can you do commits first")
    b.user(review.replace("Issues", "New findings"))
    ledger = extract_ledger(b.messages)
    assert [u.message_id for u in ledger.user_instructions][0] == typed


def test_a_pasted_document_goes_after_typed_messages_even_when_short():
    # flop-labs/technocore-chat (tune half): the user pastes a site checker's Markdown briefs ("# Implement
    # sitemap.xml … ## Requirements … Must …"), each under 2k chars, between short typed instructions
    # with no cue word ("deployment logic is in flop-core"). A brief opens as a document does
    # (PASTE_START_RE); its cue words are the document's, so a tight budget keeps the typed ones.
    b = Builder()
    typed = [b.user("also deploy latest image to the box"), b.user("deployment logic is in flop-core")]
    for name in ("sitemap.xml", "an MCP Server Card", "an API Catalog"):
        b.user(f"# Implement {name}\n\n## Requirements\n\n- Serve it with HTTP 200\n- It must validate\n" + "x" * 900)
    ledger = extract_ledger(b.messages, user_budget_chars=1500)
    assert {u.message_id for u in ledger.user_instructions[:2]} == set(typed)
    from worker.facts.ledger import is_pasted

    assert not is_pasted("+1, and do not touch the API") and not is_pasted("<br> tags break it, do not use them")


def test_a_statement_before_a_question_asks_for_work():
    from worker.facts.ledger import is_question

    assert not is_question("create pr on flop-core. is there something on technocore to commit?")
    assert not is_question("increase to much higher. 5 / second should be ok?")
    assert is_question("ok. did you push?") and is_question("why? what broke?")  # chit-chat, or only questions
    assert is_question("Hmm... why did it fail?") and is_question("I see. Did it pass?")  # an interjection first
    assert is_question("Why?! What happened?")
    assert is_question("好的。测试通过了吗？") and is_question("v1.2.3 is out?")


def test_user_instructions_newest_first_within_budget():
    b = Builder()
    ids = [b.user(f"instruction {i}: " + "x" * 900) for i in range(8)]
    b.user("/mode")  # a harness command, not an instruction
    ledger = extract_ledger(b.messages, user_budget_chars=3000)
    kept = [u.message_id for u in ledger.user_instructions]
    assert kept[:-1] == ids[::-1][: len(kept) - 1]  # newest first, contiguous
    assert kept[-1] == ids[0] and ledger.user_instructions[-1].cut  # and the task as first stated, cut to its share
    assert sum(len(u.text) for u in ledger.user_instructions) <= 3000
    assert ledger.user_instructions_omitted == 8 - len(kept) > 0  # never silent
    assert ledger.user_instructions[0].text == b.messages[-2].text  # the newest is whole
    assert "older user message(s) omitted" in render_markdown(ledger)
    long = Builder()
    long.user("START " + "y" * 30_000 + " END")  # past the ledger's whole user budget
    u = extract_ledger(long.messages).user_instructions[0]
    assert u.cut and u.text.startswith("START ") and u.text.endswith(" END") and "chars cut …]" in u.text


def test_long_user_message_keeps_its_opening_its_end_and_its_rules():
    brief = swe_messages()[1].text  # SWE-agent's 3.8k-char task brief, cut to a 2k-char budget
    whole = extract_ledger(swe_messages()[:2]).user_instructions
    assert whole[0].text == brief.strip() and not whole[0].cut  # the ledger keeps it as written
    (u,), _ = budget_user_instructions(whole, budget=2000)
    assert u.cut and len(u.text) <= 2200 and "chars cut …]" in u.text
    assert u.text.startswith(brief[:200]) and u.text.endswith("bash-$")
    for rule in ("YOU SHOULD ALWAYS INCLUDE EXACTLY ONE TOOL CALL", "you cannot use any interactive session commands",
                 "make sure to insert appropriate indentation", "Always start by trying to replicate the bug"):
        assert rule in u.text
    # Every cut is marked with its size (a cut blank line needs no marker): kept + cut = the original.
    cuts = sum(int(n) for n in re.findall(r"\[… (\d+) chars cut …\]", u.text))
    kept = re.sub(r"\[… \d+ chars cut …\]\n?", "", u.text)
    assert 0 <= len(brief.strip()) - len(kept) - cuts <= 4


@pytest.mark.parametrize("text, rule", [
    ("omfg use fucking rgb values in the themes, no rgb indices!", True),  # pi line 389: a correction
    ("no, that's not it, bot use the dark theme.", True),  # pi line 356
    ("No conosle logs! setTheme should return an error", True),
    ("1. YAML front matter syntax is valid (no parsing errors)", False),  # a plan's check, not a rule
    ("Error: no such file", False),
])
def test_a_correction_is_a_rule(text, rule):
    assert bool(RULE_LINE_RE.search(text)) is rule


def test_a_cut_brief_keeps_its_steps_not_its_quoted_samples():
    """A plan's imperative steps are kept after its rules; lines in a ``` block are a quoted
    sample (agent-stuff-ko's plan quotes XML full of "must" and "Always"), not the user's rules."""
    sample = "```xml\n<rules>\n" + "".join(f"- Always do sample thing {i}\n" for i in range(30)) + "</rules>\n```\n"
    filler = "".join(f"Background sentence number {i} about the context.\n" for i in range(40))
    text = ("# Migration plan\n" + filler + sample + "- Add Korean `description` (within 200 char limit)\n"
            + filler + "- Set CalVer `version: 2026.02.0`\n" + filler + "Done.")
    cut = condense_user_message(text, 600)
    assert "- Add Korean `description` (within 200 char limit)" in cut and "- Set CalVer `version: 2026.02.0`" in cut
    assert "sample thing" not in cut


def test_a_pasted_document_is_its_typed_instruction():
    doc = "# Project Integration\n\n<meta>\nDocument: project-integration.md\n</meta>\n\n" + "- Don't add tools\n" * 80
    assert cut_paste(doc + "\n\n\n수정해줘") == f"# Project Integration\n[… {len(doc) - 21} chars cut …]\n수정해줘"
    typed = "hm, i selected the theme while you were working and got a crash, that should never happen.\n\n" + doc
    assert cut_paste(typed) == typed  # typed prose first: not a paste with an instruction after it
    assert cut_paste(doc) == doc  # no instruction after it


def _prsui_overlay() -> str:
    """A Next.js build-error overlay the prsui user copied into a message (real output)."""
    from worker.formats import opencode
    session = opencode.load(FIXTURES / "opencode-prsui_ses_07ac41142ffeddbVHcJxVQEWuA.json")
    return next(m.user_text for m in session.messages if m.role == "user" and m.user_text.startswith("## Error Type"))


def test_a_pasted_log_keeps_the_error_lines_it_reports():
    """The paste is cut to its first line and the instruction after it, but the error the user
    pasted (Next.js's `Module not found`, read by the same convention as a tool's output) stays."""
    text = _prsui_overlay()
    cut = cut_paste(text)
    assert len(cut) < len(text) // 3
    assert cut.splitlines()[0] == "## Error Type"
    assert "Module not found: Can't resolve '@/components/ui/smooth-input'" in cut.splitlines()


def test_a_pasted_documents_samples_are_not_errors_it_reports():
    """agent-stuff-ko pastes guides whose ``` samples and `<output>` examples hold error-shaped
    lines (a docstring's `ValueError: …`, an HTTP error body): material, not what the user saw fail."""
    session = claude_code.load(FIXTURES / "cc-agentstuff-ko_2b3756eb-8c69-4980-ac0a-8d2c534931d8.jsonl")
    docs = [m.user_text for m in session.messages if m.role == "user"
            and m.user_text.startswith(("# Conflict Resolution", "# Interaction Modes"))]
    assert len(docs) == 2 and "ValueError: If items list is empty" in docs[0] + docs[1]
    for doc in docs:
        assert len(cut_paste(doc).splitlines()) == 3  # the first line, the cut, the typed instruction


def test_a_message_cut_to_the_room_left_keeps_its_pasted_error():
    """Where the user budget leaves less room than the message, it is condensed (opening, errors,
    rules, end), not cut in the middle, where the error line of a pasted log sits."""
    typed = ("The editable chip page does not build since the last change.\n"
             "It worked before you replaced the input with the new primitive.\n"
             "Here is what the dev server shows in the browser:\n\n")
    text = typed + _prsui_overlay()
    kept, omitted = budget_user_instructions([UserInstruction("m1", text, seq=1)], budget=300, per_message=2000)
    assert omitted == 0 and len(kept[0].text) <= 300 and kept[0].cut
    assert kept[0].text.startswith("The editable chip page does not build")
    assert "Module not found: Can't resolve '@/components/ui/smooth-input'" in kept[0].text


def test_a_users_rule_comes_before_newer_plain_requests():
    b = Builder()
    rule = b.user("Fix the crash. 不要修改 parse_config() 的公开签名。")
    newer = [b.user(f"request {i}: " + "x" * 900) for i in range(4)]
    ledger = extract_ledger(b.messages, user_budget_chars=2500)
    assert [u.message_id for u in ledger.user_instructions] == [rule, newer[3], newer[2], newer[1]]
    assert ledger.user_instructions[-1].cut and ledger.user_instructions_omitted == 1  # the oldest request
    body = render_markdown(ledger).split("## Constraints & Preferences\n")[1]
    assert body.startswith(f"- {rule}:\n  > Fix the crash. 不要修改")


@pytest.mark.parametrize("text, chitchat", [
    ("Thanks. What is still open?", True),
    ("好的，明天继续。", True),
    ("Great, thanks!", True),
    ("跑一下全部测试。", False),  # short, but an instruction
    ("好的，请修改并运行测试。", False),
    ("Good, now fix the tests", False),
    ("Can you fix the bug?", False),
])
def test_chit_chat_is_not_a_user_instruction(text, chitchat):
    b = Builder()
    b.user(text)
    assert is_chitchat(text) is chitchat
    assert (extract_ledger(b.messages).user_instructions == []) is chitchat


# ---------------------------------------------------------------------------- carrying across compactions
def test_merge_dedups_and_stays_bounded_after_three_merges():
    ledger: Ledger | None = None
    for window in range(3):
        b = Builder()
        b.user(f"window {window}")
        for i in range(40):
            for r in range(MAX_FILES // 100 + 1):  # 3 windows x 40 steps: more read files than the bound
                b.call("Read", {"file_path": f"src/w{window}_{i}_{r}.py"}, "content")
            b.call("Edit", {"file_path": f"src/edit_{i % 5}.py", "old_string": "a", "new_string": "b"}, "ok")
            b.bash(f"pytest tests/test_{i}.py", f"E       AssertionError: w{window} case {i}\nExit code 1", True)
            b.bash("pytest -q", PYTEST_FAIL + "Exit code 1", True)
        for m in b.messages:
            m.id = f"w{window}-{m.id}"
        ledger = extract_ledger(b.messages, previous=ledger)
        json.dumps(ledger.to_dict())  # JSON-safe at every step
    assert len(ledger.files) <= MAX_FILES and len(ledger.commands) <= MAX_COMMANDS
    assert len(ledger.unresolved_errors()) <= MAX_UNRESOLVED_ERRORS
    assert len(ledger.resolved_errors()) <= MAX_RESOLVED_ERRORS
    paths = [f.path for f in ledger.files]
    assert len(paths) == len(set(paths))
    # The 5 edited files rank first; the read-only files were cut down to the bound.
    assert sorted(paths[:5]) == [f"src/edit_{i}.py" for i in range(5)]
    assert len(paths) == MAX_FILES and not any(f.changed for f in ledger.files[5:])
    e = next(e for e in ledger.errors if e.text == E_LINE)
    assert e.attempts == 120 and len(e.message_ids) <= 6  # one fact, counted across all windows
    assert [u.text for u in ledger.user_instructions] == ["window 2", "window 1", "window 0"]
    # Re-extracting the same window is idempotent: no double counting.
    again = extract_ledger(b.messages, previous=ledger)
    assert next(x for x in again.errors if x.text == E_LINE).attempts == 120
    assert len(again.user_instructions) == 3
    assert Ledger.from_dict(json.loads(json.dumps(again.to_dict()))) == again


# ---------------------------------------------------------------------------- real traces via the importers
def _cc_cwd() -> str:
    for line in CC.read_text().splitlines():
        rec = json.loads(line)
        if isinstance(rec, dict) and rec.get("cwd"):
            return rec["cwd"]
    raise AssertionError("no cwd in the Claude Code fixture")


def test_claude_code_trace_key_facts():
    cc = pytest.importorskip("worker.formats.claude_code", reason="Claude Code importer not written yet")
    session = cc.load(CC)
    ledger = extract_ledger(session.messages, cwd=_cc_cwd())
    texts = [e.text for e in ledger.errors]
    for expected in ('✘ [ERROR] Could not resolve "js/app.js"',
                     "json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 256 (char 255)",
                     "code: assert subagent_lines != []"):
        assert expected in texts
    assert any(t.startswith("File content (85812 tokens) exceeds maximum allowed tokens (25000)") for t in texts)
    assert any('expected selector ".subagent-badge" to return a single element, but got none' in t for t in texts)
    assert "58 tests, 1 failure" in [t.text for t in ledger.tallies]
    changed = [f.path for f in ledger.changed_files()]
    for path in ("lib/spotter_web/live/session_live.ex", "lib/spotter/services/transcript_renderer.ex",
                 "test/spotter/services/transcript_renderer_test.exs"):
        assert path in changed
    assert any(p.endswith(".claude/plans/drifting-tumbling-whisper.md") for p in changed)
    assert ledger.user_instructions[0].text.startswith("Work on bead spotter-fum.")
    assert [c.sha for c in ledger.commits][:1] == ["3bb8701"]


def test_pi_trace_key_facts():
    pi = pytest.importorskip("worker.formats.pi", reason="pi importer not written yet")
    session = pi.load(PI)
    ledger = extract_ledger(session.messages, cwd=session.meta.get("cwd"))
    texts = [e.text for e in ledger.errors]
    assert ("cp: /opt/homebrew/lib/node_modules/@mariozechner/pi-coding-agent/dist/theme/dark.json: "
            "No such file or directory") in texts
    assert any("error TS" in t for t in texts)
    assert ledger.file("packages/coding-agent/src/tui/user-message-selector.ts").changed
    assert len(ledger.errors) <= MAX_UNRESOLVED_ERRORS + MAX_RESOLVED_ERRORS
    md = render_markdown(ledger)
    assert "## Critical Context" in md and "## Relevant Files" in md and "## Constraints & Preferences" in md


def test_pi_trace_ts2739_survives_as_carried_fact():
    """Compacting in windows (as the worker does) keeps the TS2739 line once it has been seen."""
    pi = pytest.importorskip("worker.formats.pi", reason="pi importer not written yet")
    messages = pi.load(PI).messages
    ts2739 = ("../tui/test/chat-simple.ts(28,2): error TS2739: Type '{ description: ChalkInstance; noMatch: any; }' "
              "is missing the following properties from type 'SelectListTheme': selectedPrefix, selectedText, "
              "scrollInfo")
    first = extract_ledger(messages[:100])
    assert ts2739 in [e.text for e in first.errors]
    assert f"`{ts2739}`" in render_markdown(first)


def test_a_long_failing_runs_further_error_lines_are_carried_and_shown_only_where_room_is_left():
    # cc-spotter (tune half), line 1327 ff.: `mix test` with more failing tests than a result's first
    # MAX_ERROR_LINES_PER_RESULT lines; the rest are carried as `further` facts.
    from worker.facts.output import MAX_ERROR_LINES_PER_RESULT
    from worker.facts.workstate import derive_work_state
    from worker.pipeline.checkpoint import RANK_SPARE

    session = claude_code.load(FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl")
    actions = scan_actions(session.messages)
    long_run = next(a for a in actions if a.further_errors)
    assert len(long_run.errors) <= MAX_ERROR_LINES_PER_RESULT + 1  # a count line may follow
    tool_use = "test transcript row class mapping tool_use rows have is-tool-use class (SpotterWeb.SessionLiveTest)"
    assert tool_use in long_run.further_errors and tool_use not in long_run.errors
    ledger = extract_ledger(session.messages, actions=actions)
    fact = next(e for e in ledger.errors if e.text == tool_use)
    assert fact.further
    assert all(not e.further for e in ledger.errors if any(e.text in a.errors for a in actions))
    state = derive_work_state(session.messages, ledger, actions=actions)
    assert all(tool_use not in b.text for b in state.blocked)
    resolved = next(b for b in ledger_sections(ledger)["Critical Context"].blocks[0].bullets
                    if b.subs and any(tool_use in s for s in b.subs))
    assert resolved.sub_ranks[[i for i, s in enumerate(resolved.subs) if tool_use in s][0]] == RANK_SPARE


def test_a_failed_run_is_not_remembered_by_a_label_it_echoed():
    # Nomos-N4s/nomos: `echo "=== any entire binary/config in user profile ===" && ls … | grep …`
    # printed its label, then grep found nothing (exit 1): the run is remembered by its exit status
    s = claude_code.load(FIXTURES / "cc-nomos_763eeec5-648e-4d0e-9a0d-75867b918b75.jsonl")
    (action,) = [a for a in scan_actions(s.messages) if a.message_id == "e489b6e7-0b32-4e21-8ac7-2a7ded8876ba"]
    assert action.output == "=== any entire binary/config in user profile ==="
    assert (action.status, action.errors, action.exit_only) == ("failed", ["Exit code 1"], True)
    # an echoed message that is not a label is the script's own word on the failure, and stays
    assert first_meaningful_line("tests failed", 'pytest || { echo "tests failed"; exit 1; }') == "tests failed"


def test_paths_git_add_names_are_changed_files_not_edits():
    # Nomos-N4s/nomos (record a9ff5991…): files patched by `python - <<'PY'` scripts, then named by
    # `git add`; staging says they changed, not when, so it is no edit the work state dates runs by
    s = claude_code.load(FIXTURES / "cc-nomos_763eeec5-648e-4d0e-9a0d-75867b918b75.jsonl")
    ledger = extract_ledger(s.messages)
    keys = ledger.file("tests/test_keys.py")
    assert keys is not None and keys.actions == ["read", "staged"] and keys.changed and keys.rank == 0
    frontier = ledger.file("book/appendix-f-data/verifier_frontier.json")  # only ever seen staged
    assert frontier is not None and frontier.last_action == "staged" and frontier.rank == 2
    assert shell_file_actions("git add -A src/a.py tests/b.py . && git commit -m 'x'", []) == [
        ("src/a.py", "staged"), ("tests/b.py", "staged")]
    staging = Action(pos=0, message_id="m", call_message_id="m", tool="Bash", files=[("src/a.py", "staged")])
    assert staging.changes == []


def test_the_files_a_git_diffstat_lists_are_files_not_edits():
    # castai/kimchi-dev (tests/fixtures, tune half): `git show 9b6e51761536 --stat` lists the three
    # files the commit in question changed; the session then reads two of them, never the third
    s = load(FIXTURES / "pi-kimchidev_019dcd91-86ff-737d-86b6-08c8e5ec7284.jsonl")
    cwd = s.meta["cwd"]
    actions = scan_actions(s.messages, cwd=cwd)
    shows = [a for a in actions if a.command and "--stat" in a.command]
    assert shows and ("src/extensions/web-fetch/page-fetcher.ts", "listed") in shows[0].files
    assert all(a.changes == [] for a in shows)  # a commit's change is not this session's edit
    ledger = extract_ledger(s.messages, cwd=cwd, actions=actions)
    fetcher = ledger.file("src/extensions/web-fetch/page-fetcher.ts")
    assert fetcher is not None and fetcher.only_listed and not fetcher.changed and fetcher.rank == 3
    models, cli = ledger.file("src/models.ts"), ledger.file("src/cli.ts")  # met later: known by what was done
    assert models is not None and models.actions == ["read", "modified"] and models.rank == 0
    assert cli is not None and cli.actions == ["read"] and cli.last_action == "read"


def test_diffstat_paths_as_git_prints_them(tmp_path: Path):
    # git's own output (diff.c show_stats): a rename in braces, a name cut to fit the column with
    # `...`, a binary file, `--compact-summary`'s tags, a C-quoted name; a cut name is no path
    git = shutil.which("git")
    assert git, "git is needed: compactd's tests run in a git checkout"

    def run(*args: str) -> str:
        return subprocess.run([git, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    run("init", "-q")
    long_dir = tmp_path / "packages" / "a-rather-long-package-name" / "src" / "components" / "shared"
    long_dir.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("one\ntwo\nthree\n")
    (long_dir / "ContextFilesBrowserModal.tsx").write_text("x\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\x00\x01")
    run("add", "-A")
    run("commit", "-q", "-m", "first")
    (tmp_path / "docs" / "howto").mkdir()
    run("mv", "docs/guide.md", "docs/howto/guide.md")
    (long_dir / "ContextFilesBrowserModal.tsx").write_text("y\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\x00\x02")
    run("commit", "-q", "-am", "second")
    out = run("show", "--stat=60", "-M", "--format=", "HEAD")
    assert "{ => howto}" in out and " .../" in out and "Bin " in out  # the three forms are there
    assert diffstat_paths(out) == ["docs/howto/guide.md", "logo.png"]
    whole = run("show", "--stat=200", "--format=", "HEAD")
    assert "packages/a-rather-long-package-name/src/components/shared/ContextFilesBrowserModal.tsx" in diffstat_paths(whole)
    # a patch's context lines open with a space too: ` x.py | 3` in a table is no diffstat line
    (tmp_path / "docs" / "sizes.md").write_text("x.py | 3\ny.py | 4\nz.py | 5\n")
    (tmp_path / "été.txt").write_text("non-ASCII: C-quoted\n")
    run("add", "-A")
    run("commit", "-q", "-m", "third")
    compact = run("show", "--stat", "--compact-summary", "--format=", "HEAD")
    assert '"\\303\\251t\\303\\251.txt" (new)' in compact
    assert diffstat_paths(compact) == ["docs/sizes.md", "été.txt"]
    (tmp_path / "docs" / "sizes.md").write_text("x.py | 3\ny.py | 4\nz.py | 6\n")
    run("commit", "-q", "-am", "fourth")
    patch = run("show", "--stat", "-p", "--format=", "HEAD")
    assert "\n x.py | 3\n" in patch and diffstat_paths(patch) == ["docs/sizes.md"]
    # git names files from the repository's top; a session working in a subdirectory names them from
    # there: one file, which the session's own read names
    sub = long_dir.parent.parent
    show = subprocess.run([git, "show", "--stat=200", "--format=", "HEAD~2"], cwd=sub, check=True,
                          capture_output=True, text=True).stdout
    b = SessionBuilder()
    b.user("why did the modal change?").bash("git show --stat HEAD~2", show)
    b.call("Read", {"file_path": str(long_dir / "ContextFilesBrowserModal.tsx")}, "y")
    files = {f.path: f.actions for f in extract_ledger(b.messages, cwd=str(sub)).files}
    assert files == {"logo.png": ["listed"], "docs/howto/guide.md": ["listed"],
                     "components/shared/ContextFilesBrowserModal.tsx": ["read"]}


def test_a_poll_of_a_running_codex_command_is_that_run():
    """Codex's unified exec: `gh pr checks --watch` outlives its yield and answers `Process running
    with session ID N`; each `write_stdin {"session_id": N}` that polls it is the same run, with
    no outcome until one says `Process exited with code N` (codex-desktop-mise, tests/fixtures)."""
    session = load(FIXTURES / "codex-desktop-mise_019f2387-40a7-7151-a232-8ebb871f52ba.jsonl")
    actions = scan_actions(session.messages)
    assert not [a for a in actions if a.tool == "write_stdin" and not a.command]  # every poll found its run
    watch = [a for a in actions if a.command == "gh pr checks 10722 --watch --interval 20"]
    assert len(watch) > 10
    still_running = [a for a in watch if a.exit_code is None]
    assert still_running and {a.status for a in still_running} == {"unknown"}
    assert {a.status for a in watch if a.exit_code == 0} == {"ok"}
    assert [a for a in watch if a.exit_code == 1 and a.status == "failed"]
    # A watch stopped with `\u0003` (exit 130) says no error: neither passed nor failed.
    stopped = [a for a in actions if a.exit_code == 130]
    assert stopped and all(a.status == "unknown" and not a.errors for a in stopped)


def test_the_command_line_of_codex_s_exec_envelope_is_not_output():
    """Codex CLI 0.118 (between openai/codex#13860 and its revert #17031) opened its unified exec
    result with the command as the shell ran it, `Command: /bin/zsh -lc '…'`, above `Chunk ID`. A run
    that failed without printing is remembered by its exit status, not by that echo
    (codex-cli-pretext, tune half; blackgirlbytes/pretext-handwriting-demo, MIT, line 293)."""
    session = load(FIXTURES / "codex-cli-pretext_019d473b-fa3b-7480-9725-723b0aae707f.jsonl")
    actions = scan_actions(session.messages)
    printenv = [a for a in actions if a.command == "printenv OPENAI_API_KEY"]
    assert printenv and all(a.errors == ["Process exited with code 1"] and a.exit_only for a in printenv)
    assert not [e for a in actions for e in a.errors if e.startswith("Command: ")]
    # A heredoc's lines are part of the echo (line 2316's `npx -p playwright node - <<'EOF'` run) ...
    heredoc = ("Command: /bin/zsh -lc \"bash <<'EOF'\nset -e\nfalse\nEOF\"\nChunk ID: ab12cd\n"
               "Wall time: 0.0100 seconds\nProcess exited with code 1\nOriginal token count: 0\nOutput:\n")
    assert CODEX_COMMAND_HEADER_RE.sub("", heredoc).startswith("Chunk ID: ab12cd\n")
    assert first_meaningful_line(CODEX_COMMAND_HEADER_RE.sub("", heredoc)) is None
    # ... and only the envelope's: a command's own output that says `Command: …` stays.
    b = Builder()
    b.bash("./deploy.sh", "Command: kubectl apply failed\nExit code 2")
    assert [e.text for e in extract_ledger(b.messages).errors] == ["Command: kubectl apply failed"]


def test_a_line_that_says_something_passed_is_not_why_a_run_failed():
    """A failed run with no known error line is remembered by its first line, but never by one its
    format marks as a pass: a TAP `ok N` (codex-desktop-hk, tune half; jdx/hk, MIT: a bats run under
    mise whose only error lines were `ERROR task failed` and bats warnings), or a `gh pr checks` row of
    a check that passed (codex-desktop-mise, tune half; jdx/mise, MIT)."""
    hk = load(FIXTURES / "codex-desktop-hk_019f5cfd-b70b-73a1-ad47-32159be95bba.jsonl")
    mise = load(FIXTURES / "codex-desktop-mise_019f2387-40a7-7151-a232-8ebb871f52ba.jsonl")
    errors = [e for s in (hk, mise) for a in scan_actions(s.messages) for e in a.errors]
    assert "[test:bats] ERROR task failed" in errors
    assert not [e for e in errors if "ok 1 auto-batch" in e or "\tpass\t" in e]
    for passed in ("ok 3 - parses", "[test:bats:nogit] ok 1 auto-batch large file lists", "--- PASS: TestA (0.00s)",
                   "ok  \tgithub.com/jdx/hk/step\t0.21s", "test step::tests::argv ... ok",
                   "tests/test_a.py::test_b PASSED [ 50%]", "CodeRabbit\tpass\t0\t\tReview completed",
                   "PASS", "test result: ok. 12 passed; 0 failed"):
        assert first_meaningful_line(f"{passed}\nthe deploy key expired\n") == "the deploy key expired", passed
    # A pending check is what `gh pr checks` (exit 8) waited on; a failed or cancelled one is why it failed.
    for failed in ("not ok 4 - parses", "nightly\tfail\t1m35s\thttps://github.com/o/r/actions/runs/1/job/2\t",
                   "lint\tpending\t0\thttps://github.com/o/r/actions/runs/1/job/2\t", "okay, retrying",
                   "a\tpass\tb"):
        assert first_meaningful_line(f"{failed}\nmore\n") == failed.strip()


def _copilot_events(calls: list[tuple[str, dict, str]]) -> list[dict]:
    """A Copilot CLI events.jsonl (github/copilot-sdk session-events.ts): one user message, then
    each (tool, arguments, result) as an assistant tool request and its `tool.execution_complete`."""
    events = [{"type": "user.message", "data": {"content": "start the dev server and build"}}]
    for n, (tool, args, result) in enumerate(calls):
        events.append({"type": "assistant.message", "data": {"messageId": f"m{n}", "content": "",
                                                             "toolRequests": [{"toolCallId": f"c{n}", "name": tool,
                                                                               "arguments": args}]}})
        events.append({"type": "tool.execution_complete",
                       "data": {"toolCallId": f"c{n}", "success": True, "result": {"content": result}}})
    return [{**e, "id": f"e{i}", "timestamp": "2026-03-07T10:00:00Z"} for i, e in enumerate(events)]


def test_a_copilot_shell_polled_by_its_shell_id_is_that_run():
    """Copilot CLI's shells (@github/copilot on npm: 1.0.0 index.js, 1.0.60 app.js): an async
    command answers `<command started in background with shellId: ID>`, a sync one past its
    `initial_wait` `<command with shellId: ID is still running after N seconds. …>`; each
    `read_bash` / `write_bash {"shellId": ID}` polls that run, which has no outcome until a poll
    prints its exit code: `<shellId: ID completed with exit code N>` (1.0.60) or `<command with
    id: ID exited with exit code N>` (1.0.0), as Copilot's shared transcripts show them; `stop_bash`
    ends it with `<command with id: ID stopped>`."""
    build, dev = "npm run build", "npx next dev --port 3001"
    events = _copilot_events([
        ("bash", {"command": dev, "description": "Start dev server", "mode": "async", "shellId": "devserver"},
         "<command started in background with shellId: devserver>"),
        ("bash", {"command": build, "description": "Build", "mode": "sync", "initial_wait": 30},
         "Creating an optimized production build ...\n<command with shellId: 7 is still running after 30 seconds. The command is still running. "
         "Check the output above - if it looks like the command is waiting for input, use write_bash to provide it. "
         "Otherwise, use read_bash to continue waiting for output, or stop_bash to stop it.>"),
        ("read_bash", {"shellId": "7", "delay": 60},
         "Type error: Property 'id' does not exist on type 'User'.\n<shellId: 7 completed with exit code 1>"),
        ("read_bash", {"shellId": "devserver", "delay": 15}, "ready on http://localhost:3001\n"
         "<command with id: devserver exited with exit code 0>"),
        ("bash", {"command": "git status --short", "description": "Status"}, " M src/user.ts\n<exited with exit code 0>"),
        ("bash", {"command": "npm run watch", "description": "Watch", "mode": "async"},
         "<command started in background with shellId: 9>"),
        ("stop_bash", {"shellId": "9"}, "<command with id: 9 stopped>"),
    ])
    session = load(events, format="copilot")
    actions = scan_actions(session.messages)
    assert [(a.command, a.status, a.run_id, a.polls, a.exit_code) for a in actions] == [
        (dev, "unknown", "devserver", None, None),
        (build, "unknown", "7", None, None),
        (build, "failed", None, "7", 1),
        (dev, "ok", None, "devserver", 0),
        ("git status --short", "ok", None, None, 0),
        ("npm run watch", "unknown", "9", None, None),
        ("npm run watch", "unknown", None, "9", None),  # stopped: neither passed nor failed, and no longer running
    ]
    ledger = extract_ledger(session.messages)
    assert [(e.text, e.command) for e in ledger.errors] == [("Type error: Property 'id' does not exist on type 'User'.", build)]
    assert ledger.running == []
    still_running = events[4]["data"]["result"]["content"]  # the harness's notice is not what the build printed
    assert first_meaningful_line(still_running, build) == "Creating an optimized production build ..."


def test_a_claude_code_background_run_is_polled_by_task_output_and_ended_by_task_stop():
    """Claude Code's background Bash answers `Command running in background with ID: X. Output is
    being written to: …`; TaskOutput {"task_id": X} polls that run, its result the task's state
    around what it printed (`<status>running</status>`, then `<exit_code>0</exit_code>` and
    `<output>…</output>`), and TaskStop ends it (@anthropic-ai/claude-code 2.1.197). marot/spotter
    (tests/fixtures, tune half): `mix test` polled twice while running, then its end; FSM1/cipher-box:
    dev servers started in the background, some stopped, the rest still running at the end."""
    spotter = load(FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl")
    test = "mix test test/spotter/services/transcript_renderer_test.exs 2>&1"
    assert [(a.status, a.exit_code, a.run_id, a.polls) for a in scan_actions(spotter.messages) if a.command == test] == [
        ("unknown", None, "be613ab", None), ("unknown", None, "be613ab", "be613ab"),
        ("unknown", None, "be613ab", "be613ab"), ("ok", 0, None, "be613ab")]
    assert extract_ledger(spotter.messages).running == []
    cipherbox = load(FIXTURES / "cc-cipherbox_2095544c-fa50-4027-b664-c37e578957ce.jsonl")
    stops = [a for a in scan_actions(cipherbox.messages) if a.polls]
    assert [(a.command, a.status) for a in stops][:1] == [("pnpm --filter api dev", "unknown")]
    still = [r.run_id for r in extract_ledger(cipherbox.messages).running]
    assert "b463a86" not in still and {"bd9f9ac", "b3d53de"} <= set(still)  # stopped / never stopped


def test_a_read_of_a_background_runs_output_file_is_a_poll_of_that_run():
    """Claude Code's notice names the file a background run writes, `…/tasks/<ID>.output`, and says
    to Read it for interim output: that Read is what the run printed (the Read tool's `N\t` line
    numbers off), so BuildKit's `#2 ERROR: …` is the build's error, not a file's content. A
    `<task-notification>` ends the run with its exit status; a Read after it still shows that run's
    output (darthzen/neuvector-mcp, tests/fixtures, tune half, lines 113-115 and 189-196)."""
    session = load(FIXTURES / "cc-neuvectormcp_49719c2a-c765-469e-9431-05c77e815291.jsonl")
    actions = scan_actions(session.messages)
    build = [a for a in actions if a.run_id == "bcwi5tjne" or a.polls == "bcwi5tjne"]
    assert build[0].command.startswith("kubectl -n ai exec nvmcp-build -- buildctl-daemonless.sh")
    assert [(a.status, a.exit_code, a.run_id, a.reads_output, a.errors[:1]) for a in build] == [
        ("unknown", None, "bcwi5tjne", False, []),  # started in the background
        ("ok", 0, None, False, []),  # the harness's notice: `completed (exit code 0)`
        ("failed", None, None, True, ["#2 ERROR: no match for platform in manifest: not found"])]  # then read
    reads = [a for a in actions if a.reads_output and a.polls == "bigojbloj"]
    assert reads and all(a.status == "unknown" and a.run_id == "bigojbloj" for a in reads[:-1])
    assert [r.run_id for r in extract_ledger(session.messages).running] == ["b9j781dgi"]  # no notice for it


def test_polls_that_do_not_speak_for_the_run():
    """A poll Claude Code refused (`<tool_use_error>`) leaves its run as it was; a Copilot notice quoted
    in another command's output (a `grep` over an events log) starts no run; a run its notice says was
    killed neither passed nor failed, and is no longer running."""
    start = "Command running in background with ID: b1. Output is being written to: /tmp/s/tasks/b1.output"
    session = (SessionBuilder().user("build it")
               .tool("Bash", {"command": "npm run build", "run_in_background": True}, start)
               .tool("Read", {"file_path": "/tmp/s/tasks/b1.output"}, "<tool_use_error>File does not exist.</tool_use_error>",
                     is_error=True)
               .tool("TaskStop", {"task_id": "b1"}, "<tool_use_error>Task b1 is not running (status: completed)</tool_use_error>",
                     is_error=True)
               .tool("Bash", {"command": "grep -h shellId events.jsonl"},
                     '{"content":"<command started in background with shellId: 7>"}').build())
    actions = scan_actions(session.messages)
    assert [(a.command, a.status, a.run_id, a.errors) for a in actions] == [
        ("npm run build", "unknown", "b1", []), ("npm run build", "unknown", "b1", []), ("npm run build", "unknown", "b1", []),
        ("grep -h shellId events.jsonl", "ok", None, [])]
    notice = ("<task-notification>\n<task-id>b1</task-id>\n<output-file>/tmp/s/tasks/b1.output</output-file>\n"
              "<status>killed</status>\n<summary>Background command \"Build\" was stopped</summary>\n</task-notification>")
    killed = SessionBuilder().user("build it").tool("Bash", {"command": "npm run build"}, start).user(notice).build()
    assert [(a.status, a.polls) for a in scan_actions(killed.messages)][1:] == [("unknown", "b1")]
    assert extract_ledger(killed.messages).running == []
    # After its notice (`failed with exit code 143`, behind another task's notice in the same message), a
    # refused Read does not bring it back, and a TaskOutput still polls that run: its error is the build's.
    notices = ("<task-notification>\n<task-id>m1</task-id>\n<summary>Monitor event</summary>\n</task-notification>\n"
               "<task-notification>\n<task-id>b1</task-id>\n<status>failed</status>\n<summary>Background command "
               "\"Build\" failed with exit code 143</summary>\n</task-notification>")
    output = ("<retrieval_status>success</retrieval_status>\n\n<task_id>b1</task_id>\n\n<task_type>local_bash</task_type>"
              "\n\n<status>failed</status>\n\n<exit_code>143</exit_code>\n\n<output>\nsrc/a.ts(3,1): error TS2304: "
              "Cannot find name 'x'.\n</output>")
    ended = (SessionBuilder().user("build it").tool("Bash", {"command": "npm run build"}, start).user(notices)
             .tool("Read", {"file_path": "/tmp/s/tasks/b1.output"}, "<tool_use_error>File content (40000 tokens) exceeds "
                   "maximum allowed tokens (25000).</tool_use_error>", is_error=True)
             .tool("TaskOutput", {"task_id": "b1"}, output).build())
    assert [(a.command, a.status, a.exit_code, a.run_id) for a in scan_actions(ended.messages)] == [
        ("npm run build", "unknown", None, "b1"), ("npm run build", "failed", 143, None),
        ("npm run build", "unknown", None, None), ("npm run build", "failed", 143, None)]
    ledger = extract_ledger(ended.messages)
    assert ledger.running == [] and [(e.text, e.command) for e in ledger.errors] == [
        ("src/a.ts(3,1): error TS2304: Cannot find name 'x'.", "npm run build")]


def test_a_code_mode_run_that_outlives_its_cell_yield_is_polled_by_wait():
    """Codex code mode: an `exec` cell still running when its yield ends answers `Script running
    with cell ID N`, and each `wait {"cell_id": N}` polls that cell (codex-rs core/src/tools/code_mode).
    The cell's run has no outcome until the wait that says `Script completed`; then rustfmt's
    `Diff in …` line and cargo's tallies belong to its command, not to a tool named `wait`
    (jdx/hk, tests/fixtures/codex_code_mode)."""
    session = load(FIXTURES / "codex_code_mode" / "hk_cell_wait.jsonl")
    actions = scan_actions(session.messages)
    script = "cargo fmt --check\ncargo test step::batching\nmise run test:bats test/auto_batch_large_files.bats\ngit diff --check"
    assert [(a.command, a.status, a.run_id, a.polls) for a in actions] == [
        (script, "unknown", "cell 39", None),  # the cell yielded
        (script, "unknown", "cell 39", "cell 39"),  # a wait: still running
        (script, "failed", None, "cell 39"),  # the wait that saw it end
    ]
    ledger = extract_ledger(session.messages)
    rustfmt = next(e for e in ledger.errors if e.text.startswith("Diff in "))
    assert rustfmt.command == script and rustfmt.sources == [actions[0].source]
    assert {t.command for t in ledger.tallies} == {script}
    assert ledger.running == []  # the cell ended


def test_a_run_still_going_at_a_checkpoint_is_the_run_its_later_polls_continue():
    """A unified exec run started before a checkpoint's boundary and polled after it: the ledger
    carries the runs still going (`running`), so the poll past the boundary is still `go test
    -race ./...` and its exit is that command's status. In code mode the run's id is in the result
    object the script printed (`{"chunk_id", "wall_time_seconds", "session_id", …}`, codex-rs
    ExecCommandToolOutput::code_mode_result): until it exits, the run has no outcome
    (codex-desktop-entiresem, tests/fixtures)."""
    session = load(FIXTURES / "codex-desktop-entiresem_019f8eab-feec-7043-8561-0821dd49e754.jsonl")
    started = next(i for i, m in enumerate(session.messages)
                   if any('"session_id":39705' in r.output for r in m.tool_results))
    first = extract_ledger(session.messages[: started + 1])
    assert [(r.run_id, r.command) for r in first.running] == [("39705", "go test -race ./...")]
    assert [c.status for c in first.commands if c.command == "go test -race ./..."] == ["unknown"]
    later = extract_ledger(session.messages[started + 1 :], previous=Ledger.from_dict(first.to_dict()))
    assert "ok" in [c.status for c in later.commands if c.command == "go test -race ./..."]
    assert "39705" not in [r.run_id for r in later.running]  # it exited
    polls = [a for a in scan_actions(session.messages[started + 1 :], running=first.running_runs()) if a.polls == "39705"]
    assert polls and {a.command for a in polls} == {"go test -race ./..."}
    assert [a.exit_code for a in polls][-1] == 0


def test_a_code_mode_script_that_prints_the_session_id_itself_is_polled_by_it():
    """codex-desktop-hk (tune half): the scripts print the run's id themselves, `if(r.session_id)
    text(`SESSION_ID=${r.session_id}`)`, not as the result object: a line of the field's name and value
    is that id too, so the `write_stdin {session_id: 77100}` that shows the URL is `gh pr create`'s
    poll, and #1067 was opened, not only looked at. Every one of its 207 polls is a command's run."""
    session = load(FIXTURES / "codex-desktop-hk_019f5cfd-b70b-73a1-ad47-32159be95bba.jsonl")
    polls = [a for a in scan_actions(session.messages) if a.polls == "77100"]
    assert polls and polls[0].command.startswith("gh pr create --base main --head codex/structured-argv")
    prs = {p.number: p.state for p in extract_ledger(session.messages).pull_requests}
    assert prs == {1066: "opened", 1067: "opened"}
    # A poll that prints only the run's output says nothing of how the run stands: the next poll of the
    # same id (54 of them for one `gh run watch`) is still that run, not a tool with no command.
    actions = scan_actions(session.messages)
    watch = [a for a in actions if a.polls == "39017"]
    assert len(watch) == 54 and {a.command for a in watch} == {"gh run watch 29283822474 --exit-status --interval 10"}
    assert all(a.command for a in actions if a.polls is not None)


def test_a_dense_summary_gives_the_users_messages_their_share_of_a_larger_window():
    # codex-cli-pretext (tune half): thirty-odd briefs of ~1k chars; at an 8k window's summary the dense
    # rendering keeps USER_BUDGET_CHARS of them, at a 32k window's a char per summary token, so the
    # session's first working rules (the oldest brief) are not cut for newer ones.
    from worker.facts.ledger import USER_BUDGET_CHARS
    from worker.pipeline.checkpoint import user_budget_chars

    b = Builder()
    rules = b.user("Important working rules:\n- Do not bundle unrelated work into one commit.\n" + "r" * 400)
    for i in range(20):
        b.user(f"Brief {i}:\n- Keep the OCR architecture unchanged.\n" + "x" * 900)
    ledger = extract_ledger(b.messages)

    def quoted(limit: int) -> str:
        return ledger_sections(ledger, "en", dense=True, summary_limit=limit)["Constraints & Preferences"].body()

    assert user_budget_chars(3000) == USER_BUDGET_CHARS and user_budget_chars(12_000) == 12_000
    assert "Do not bundle unrelated work" in quoted(12_000)  # the first brief, whole where the share allows
    assert len(quoted(12_000)) > len(quoted(3000)) + 4000
    assert rules in {u.message_id for u in ledger.user_instructions}


def test_an_error_printed_by_a_ci_job_a_task_or_a_stream_is_one_fact():
    # The kept line says where it was printed (`##[error]`, mise's `[lint] `, a log's `[stderr]`); the
    # failure is the same one a plain run printed.
    from worker.facts.ledger import ErrorFact

    keys = {ErrorFact(text=t).key for t in ("E501 Line too long", "##[error]E501 Line too long",
                                            "[lint] E501 Line too long", "[stderr]   E501 Line too long")}
    assert keys == {"E501 Line too long"}
