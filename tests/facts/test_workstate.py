"""Work state from evidence: Done only with proof, never the model's guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import Builder, swe_messages
from worker.facts.ledger import extract_ledger
from worker.facts.workstate import WorkState, approved_plans, derive_work_state, request_text, split_deferred
from worker.formats import load
from worker.pipeline.checkpoint import progress_section, render_summary
from worker.session import Message


def render_markdown(state: WorkState, lang: str = "en") -> str:
    """The Progress section as the summary shows it."""
    return render_summary({"Progress": progress_section(state, lang)}, lang, reference_prefix=False)

FIXTURES = Path(__file__).parent.parent / "fixtures"
PI = FIXTURES / "pi_large-session.jsonl"


def state_of(messages: list[Message]) -> WorkState:
    return derive_work_state(messages, extract_ledger(messages))



def test_swe_trace_done_with_reproduce_evidence():
    state = state_of(swe_messages())
    assert [i.message_id for i in state.done] == ["m00001"]
    assert state.done[0].evidence == ["`python reproduce.py` → 345 (m00023)"]
    assert state.in_progress == [] and state.blocked == []
    assert state.changed_since_green == []  # removing the scratch reproduce.py is cleanup, not work
    md = render_markdown(state)
    assert "— evidence: `python reproduce.py` → 345 (m00023)" in md
    assert "### In Progress\n(none)" in md and "### Blocked\n(none)" in md


def test_swe_trace_cut_before_the_verifying_run_is_in_progress():
    messages = swe_messages()[:22]  # the fix is edited (m00021), not yet re-run
    state = state_of(messages)
    assert state.done == []
    assert [i.message_id for i in state.in_progress] == ["m00001"]
    assert "`src/marshmallow/fields.py`" in state.in_progress[0].evidence[0]
    # The `344` run (m00013) ran cleanly after reproduce.py was written, but before the fix.
    assert state.changed_since_green == ["src/marshmallow/fields.py"]
    assert state.last_green == "`python reproduce.py` → 344 (m00013)"
    assert "### Done\n(none)" in render_markdown(state)


def test_last_request_without_evidence_is_never_done():
    b = Builder()
    b.user("make test_round pass")
    b.bash("pytest -q", "E       AssertionError: assert 1 == 2\n1 failed in 0.1s\nExit code 1", True)
    b.edit("src/money.py")
    green = b.bash("pytest -q", "3 passed in 0.1s")
    b.user("now also add a CHANGELOG entry")
    b.edit("CHANGELOG.md")
    state = state_of(b.messages)
    assert [i.text for i in state.done] == ["make test_round pass"]
    assert state.done[0].evidence == [f"`pytest -q` → `3 passed in 0.1s` ({green})"]
    assert [i.text for i in state.in_progress] == ["now also add a CHANGELOG entry"]
    assert "no passing run or commit after it" in state.in_progress[0].evidence[0]
    assert state.changed_since_green == ["CHANGELOG.md"]


def test_question_only_last_request_is_in_progress_not_done():
    b = Builder()
    b.user("what does money.py do?")
    b.call("Read", {"file_path": "src/money.py"}, "def round_money(x): ...")
    state = state_of(b.messages)
    assert state.done == [] and [i.text for i in state.in_progress] == ["what does money.py do?"]


def test_commit_after_last_edit_is_evidence_and_edit_after_green_is_not():
    b = Builder()
    b.user("rename the helper")
    b.edit("src/a.py")
    commit = b.bash('git commit -am "Rename helper"', "[main 1a2b3c4] Rename helper\n 1 file changed")
    b.user("and fix the docstring")
    b.edit("src/b.py")
    b.bash("pytest -q", "3 passed in 0.1s")
    b.edit("src/b.py")  # edited again after the green run
    state = state_of(b.messages)
    assert state.done[0].text == "rename the helper"
    assert state.done[0].evidence == [f"commit `1a2b3c4` `Rename helper` ({commit})"]
    assert [i.text for i in state.in_progress] == ["and fix the docstring"]


def test_green_then_failing_run_in_last_turn_is_in_progress():
    b = Builder()
    b.user("release it")
    b.edit("package.json")
    b.bash("npm run check", "Checked 22 files. No fixes applied.")
    b.bash("npm run build", "src/x.ts(5,15): error TS2305: Module has no exported member 'X'.\n"
           "Command exited with code 2", True)
    state = state_of(b.messages)
    assert state.done == []
    assert state.in_progress[0].evidence == [
        "green `npm run check` → `Checked 22 files. No fixes applied.` (m00004), then failed `npm run build` → "
        "`src/x.ts(5,15): error TS2305: Module has no exported member 'X'.` (m00006)"]


def test_repeated_failure_without_edit_is_blocked_and_unblocks_on_edit():
    b = Builder()
    b.user("publish the package")
    err = "src/theme.ts(5,15): error TS2305: Module has no exported member 'EditorTheme'."
    first = b.bash("npm run build", err + "\nCommand exited with code 2", True)
    second = b.bash("npm run build 2>&1 | head -30", err)
    state = state_of(b.messages)
    assert [i.text for i in state.blocked] == [f"`{err}`"]
    assert state.blocked[0].evidence[0] == f"`npm run build 2>&1 | head -30` failed 2× ({first}, {second})"
    assert f"`{err}`" in render_markdown(state).split("### Blocked")[1]
    b.edit("src/theme.ts")  # someone is working on it: not blocked any more
    assert state_of(b.messages).blocked == []


def test_chinese_render_and_round_trip():
    b = Builder()
    b.user("请修复 yaml 导入错误")
    b.bash("python app.py", "ModuleNotFoundError: No module named 'yaml'\nExit code 1", True)
    state = state_of(b.messages)
    md = render_markdown(state, lang="zh")
    assert "## 进展\n### 已完成\n(无)\n### 进行中\n- 请修复 yaml 导入错误 (m00000) — 证据:" in md
    assert "### 受阻\n(无)" in md
    assert WorkState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["edit", "pass", "fail", "read", "user"]), max_size=12))
def test_done_always_has_evidence_after_the_last_edit(steps):
    b = Builder()
    b.user("start")
    for step in steps:
        if step == "edit":
            b.edit("src/a.py")
        elif step == "pass":
            b.bash("pytest -q", "1 passed in 0.1s")
        elif step == "fail":
            b.bash("pytest -q", "E       assert 0\n1 failed in 0.1s\nExit code 1", True)
        elif step == "read":
            b.call("Read", {"file_path": "src/a.py"}, "x")
        else:
            b.user(f"request {len(b.messages)}")
    state = state_of(b.messages)
    last_user = max(i for i, m in enumerate(b.messages) if m.role == "user")
    tail = b.messages[last_user:]
    edits = [i for i, m in enumerate(tail) if any(c.name == "Edit" for c in m.tool_calls)]
    passes_after = [i for i, m in enumerate(tail) if m.role == "tool" and "passed" in m.tool_results[0].output
                    and (not edits or i > edits[-1])]
    last_id = b.messages[last_user].id
    if not passes_after:
        assert last_id not in [i.message_id for i in state.done]
        assert last_id in [i.message_id for i in state.in_progress]
    for item in state.done:
        assert item.evidence and "(m" in item.evidence[0]


def test_pi_trace_last_request_is_not_done():
    pi = pytest.importorskip("worker.formats.pi", reason="pi importer not written yet")
    session = pi.load(PI)
    ledger = extract_ledger(session.messages, cwd=session.meta.get("cwd"))
    state = derive_work_state(session.messages, ledger, cwd=session.meta.get("cwd"))
    # "yeah, do it all": the check passed, then the publish build failed repeatedly.
    assert [i.text for i in state.in_progress][:1] == ["yeah, do it all"]
    assert "yeah, do it all" not in [i.text for i in state.done]
    assert any("error TS2305" in i.text for i in state.blocked)


def test_documentation_edit_is_done_once_the_user_moves_on():
    b = Builder()
    b.user("add a note on empty config files to README.md")
    readme = b.edit("README.md")
    b.user("now make the port configurable")
    b.edit("src/config.py")
    state = state_of(b.messages)
    assert [i.text for i in state.done] == ["add a note on empty config files to README.md"]
    assert state.done[0].evidence == [f"edited `README.md` ({readme}); documentation, no run checks it"]
    assert [i.text for i in state.in_progress] == ["now make the port configurable"]
    b = Builder()
    b.user("add a CHANGELOG entry")
    b.edit("CHANGELOG.md")
    assert state_of(b.messages).done == []  # it may still be being written
    b.user("Thanks!")
    assert [i.text for i in state_of(b.messages).done] == ["add a CHANGELOG entry"]


def test_documentation_edit_no_commit_took_is_open_where_the_session_commits_its_work():
    b = Builder()
    b.user("fix the off-by-one in src/pager.py")
    b.edit("src/pager.py")
    b.bash('git commit -am "pager: last page"', "[main 1a2b3c4] pager: last page\n 1 file changed")
    b.user("document the pager in README.md")
    b.edit("README.md")
    b.user("thanks")
    state = state_of(b.messages)
    assert [i.text for i in state.done] == ["fix the off-by-one in src/pager.py"]
    item = next(i for i in state.in_progress if i.text == "document the pager in README.md")
    assert item.evidence[0].startswith("last edit `README.md` (") and item.evidence[0].endswith("no passing run or commit after it")
    # What changed after the last commit is the repository's open work, until a commit takes it.
    assert state.uncommitted == ["README.md"]
    b.bash("git commit -am docs", "[main 5d6e7f8] docs\n 1 file changed")
    assert state_of(b.messages).uncommitted == []


def test_a_session_that_never_commits_lists_nothing_as_uncommitted():
    b = Builder()
    b.user("fix the pager")
    b.edit("src/pager.py")
    assert state_of(b.messages).uncommitted == [] and state_of(b.messages).in_progress


def test_a_branch_says_git_holds_the_files_so_a_session_without_commits_lists_its_changes():
    # A known branch (here `git checkout -b`; an importer's gitBranch the same) means the files are
    # in a repository: what the session changed and never committed is its open work. A file
    # outside the repository (a plan under ~/.claude, an absolute path) is not git's to hold.
    b = Builder()
    b.user("fix the pager")
    b.bash("git checkout -b fix-pager", "Switched to a new branch 'fix-pager'")
    b.edit("src/pager.py")
    b.edit("/Users/me/.claude/plans/pager.md")
    b.edit("~/.cache/pager/index.db")
    assert state_of(b.messages).uncommitted == ["src/pager.py"]


def test_chit_chat_is_not_a_request():
    b = Builder()
    b.user("make test_round pass")
    b.edit("src/money.py")
    b.user("Thanks. What is still open?")
    b.user("好的，明天继续。")
    state = state_of(b.messages)
    # The edit is still unverified: the real request stays In Progress, the chit-chat is no item.
    assert [i.text for i in state.in_progress] == ["make test_round pass"]
    assert state.unverified == [] and state.done == []


def test_green_unrelated_test_is_no_evidence_for_one_still_failing():
    b = Builder()
    b.user("tests/test_discounts.py fails, please fix it")
    b.bash("pytest tests/test_discounts.py", "E  TypeError: unsupported operand\n1 failed in 0.1s", True)
    b.edit("src/discounts.py")
    failing = b.bash("pytest tests/test_discounts.py", "E  AssertionError: assert 9.99 == 10\n1 failed in 0.1s", True)
    b.user("leave that for now; add a regression test to tests/test_invoice.py")
    b.edit("tests/test_invoice.py")
    green = b.bash("pytest tests/test_invoice.py", "13 passed in 0.2s")
    state = state_of(b.messages)
    assert [(i.text, i.evidence) for i in state.done] == [
        ("leave that for now; add a regression test to tests/test_invoice.py",
         [f"`pytest tests/test_invoice.py` → `13 passed in 0.2s` ({green})"])]
    assert [i.text for i in state.in_progress] == ["tests/test_discounts.py fails, please fix it"]
    assert f"({failing})" in state.in_progress[0].evidence[-1]
    b.bash("pytest", "20 passed in 0.4s")  # a broader run covers the failed one
    assert [i.text for i in state_of(b.messages).done][-1] == "tests/test_discounts.py fails, please fix it"


def test_the_part_of_a_request_put_off_for_later_is_not_done():
    """codex-desktop line 769: the turn removed the active-session code and `pnpm test` passed, but
    its request also says "We'll handle active session in a different view tree later": that
    sentence stays open work, not a Done item."""
    request = ("[sessionsTreeView.ts](src/components/sessionsTreeView.ts) should have nothing to do with active "
               "sessions. We'll handle active session in a different view tree later. For now remove all active "
               "session functionalities and anything related \n")
    b = Builder()
    asked = b.user(request)
    b.edit("src/components/sessionsTreeView.ts")
    green = b.bash("pnpm test", "42 passing")
    state = state_of(b.messages)
    assert [i.text for i in state.done] == [request_text(
        "[sessionsTreeView.ts](src/components/sessionsTreeView.ts) should have nothing to do with active sessions. "
        "For now remove all active session functionalities and anything related")]
    assert green in state.done[0].evidence[0]
    assert [(i.text, i.message_id) for i in state.in_progress] == [
        ("We'll handle active session in a different view tree later.", asked)]
    # All of it put off: the request itself is for later, left whole.
    assert split_deferred("Let's do the docs later.") == ("Let's do the docs later.", "")


def test_a_request_to_push_is_done_only_once_something_was_pushed():
    """cc-tij-ja (tune half) asks `plan.md, README更新後にcommit,push,publishしてください`; the turn
    commits e793411 and stops: the fact list says "not yet pushed or published", so the request is
    In Progress. The same request before it was pushed (`jj git push`, `git push origin v0.4.5`),
    and is Done. A push through `git -C <repo>` is a push (git(1): `-C <path>`); "don't push" asks
    for none, nor does "the push handler"; in a long brief "push" is content."""
    s = load(FIXTURES / "cc-tij-ja_19512375-5c9f-4947-a8a2-72c341bdfe21.jsonl")
    state = derive_work_state(s.messages, extract_ledger(s.messages))
    asked = "確認OKでした。plan.md, README更新後にcommit,push,publishしてください"
    assert [i.text for i in state.in_progress if i.text == asked]
    assert "nothing pushed or published after it" in next(i for i in state.in_progress if i.text == asked).evidence[0]
    assert "大丈夫そうです。plan.md,README更新後にcommit,push,publishしてください" in [i.text for i in state.done]
    for push, request, done in [
            ("git -C /Users/marc/Workspace/chx push", "if so commit and push the changes", True),  # cc-chkit
            (None, "commit and push the changes", False),
            (None, "commit this, but don't push yet", True),
            (None, "コミットしてください。pushしないでください", True),
            (None, "提交就行，先不要推送", True),
            (None, "커밋만 하고 푸시하지 마세요", True),
            (None, "コミットしてpushしてください", False),
            (None, "fix the push handler and commit", True),  # a noun: it asks for no push
            (None, "Fix the bug. " + "The push handler drops events. " * 20, True)]:
        b = Builder()
        b.user(request)
        b.edit("src/a.py")
        b.bash('git commit -am "Fix"', "[main 1a2b3c4] Fix\n 1 file changed")
        if push:
            b.bash(push, "To github.com:a/b.git\n   1a2b3c4..5d6e7f8  main -> main")
        b.user("thanks")
        assert bool(state_of(b.messages).done) is done, request


def test_a_request_only_to_publish_is_done_by_the_run_that_published():
    """cc-linkblog (tune half): "push it and create a PR" edits nothing; `but pr new` pushed and opened
    #19, and that is its evidence, as a `git push` is for "push it". A request for a pull request
    needs one opened: a push alone is not it."""
    s = load(FIXTURES / "cc-linkblog_541f3bdd-a886-4bd8-82eb-31db274f7451.jsonl")
    state = state_of(s.messages)
    done = next(i for i in state.done if i.text == "push it and create a PR")
    assert "but pr new update-feed-docs" in done.evidence[0]
    assert state.in_progress == [] and state.uncommitted == []  # `but commit ae90dc5` took the docs edits
    for request, runs, done in [
            ("push it", [("git push origin main", "To github.com:a/b.git\n   1a2b3c4..5d6e7f8  main -> main")], True),
            ("push it", [("git push origin main", "error: failed to push some refs\nExit code 1")], False),
            ("can you open a pr for me?", [("git push -u origin x", "branch 'x' set up to track 'origin/x'.")], False),
            ("can you open a pr for me?", [("git push -u origin x", ""),
                                           ('gh pr create --title "x"', "https://github.com/a/b/pull/5")], True),
            ("push it", [("git push --dry-run origin main", "To github.com:a/b.git")], False),
            ("run the tests and open a PR", [("pytest", "3 passed in 0.1s"), ("git push -u origin x", "")], False)]:
        b = Builder()
        b.user(request)
        for command, output in runs:
            b.bash(command, output, is_error="Exit code 1" in output)
        assert bool(state_of(b.messages).done) is done, (request, runs)


def test_a_pasted_document_request_is_named_by_its_title_and_instruction():
    """agent-stuff-ko: each pasted guide (ending in 수정해줘.) was committed; its Done item names
    the guide and the instruction, not the guide's opening <meta> block, and the guides' own
    "… optimize later" lines are no deferral of the user's."""
    session = load(FIXTURES / "cc-agentstuff-ko_2b3756eb-8c69-4980-ac0a-8d2c534931d8.jsonl")
    state = state_of(session.messages)
    assert "# Version Control [… 3769 chars cut …] 수정해줘." in [i.text for i in state.done]
    assert state.in_progress == [] and all("<meta>" not in i.text for i in state.done)


def test_a_commit_that_failed_leaves_the_work_open_until_one_takes_it():
    # git-commit(1) exits non-zero when a hook or GPG signing refuses the commit: the work it was
    # to record is not recorded, whatever ran green before it, and whether or not the user spoke again.
    b = Builder()
    b.user("add the verify-docs check and commit it")
    b.edit("src/verify_docs.py")
    b.bash("pytest -q", "3 passed in 0.12s")
    b.bash('git add -A && git commit -m "feat: verify-docs"',
           "error: gpg failed to sign the data\nfatal: failed to write commit object", is_error=True)
    b.user("I'll sign it myself later; now update the changelog")
    state = state_of(b.messages)
    item = next(i for i in state.in_progress if i.text == "add the verify-docs check and commit it")
    assert "then failed `git add -A && git commit -m \"feat: verify-docs\"`" in item.evidence[0]
    # A commit that then took it: done.
    b2 = Builder()
    b2.user("add the verify-docs check and commit it")
    b2.edit("src/verify_docs.py")
    b2.bash("pytest -q", "3 passed in 0.12s")
    b2.bash('git commit -am "feat: verify-docs"', "error: gpg failed to sign the data", is_error=True)
    b2.bash('git commit --no-gpg-sign -am "feat: verify-docs"', "[main 1a2b3c4] feat: verify-docs\n 1 file changed")
    assert [i.text for i in state_of(b2.messages).done] == ["add the verify-docs check and commit it"]
    # "nothing to commit" (exit 1): committed already, nothing refused.
    b3 = Builder()
    b3.user("add the verify-docs check and commit it")
    b3.edit("src/verify_docs.py")
    b3.bash("pytest -q", "3 passed in 0.12s")
    b3.bash('git commit -am "feat: verify-docs"', "On branch main\nnothing to commit, working tree clean", is_error=True)
    assert [i.text for i in state_of(b3.messages).done] == ["add the verify-docs check and commit it"]


def test_a_plan_the_user_approved_is_quoted_and_a_rejected_one_is_not() -> None:
    """cc-ccbackend puts two plans to the user through Claude Code's ExitPlanMode: the first is
    rejected (an error result), the second approved. Only the approved one is the agreed design."""
    session = load(FIXTURES / "cc-ccbackend_e301df65-155e-4d0f-b250-3476f2f15115.jsonl")
    calls = [c for m in session.messages for c in m.tool_calls if c.name == "ExitPlanMode"]
    assert len(calls) == 2
    plans = approved_plans(session.messages)
    assert [p.text.splitlines()[0] for p in plans] == ["# Fix Shutdown Timeout & Add Shutdown Logging"]
    assert "walShardChs" in plans[0].text or "WAL sharding" in plans[0].text
    rejected = calls[0].argument_dict()["plan"]
    assert all(p.text != rejected[: len(p.text)] for p in plans)
    state = derive_work_state(session.messages, extract_ledger(session.messages))
    assert state.plans == plans and WorkState.from_dict(state.to_dict()).plans == plans
    text = render_summary({"Progress": progress_section(state)}, "en")
    assert "### Plans the user approved (newest first)" in text and "> # Fix Shutdown Timeout" in text
