"""Dense rendering (issue 22): where the normal rendering of the facts does not fit whole, the
same facts without repeats: no message id on a fact that is its own search key (a path, a
command, an error line), each command once with its latest outcome
(exit 0 said once, in the heading),
an error line alone (not the run that printed or fixed it), column padding collapsed, paths grouped by their directory, and a
work item whose request is quoted under Constraints & Preferences named by its id only."""

from __future__ import annotations

from worker.facts.ledger import CommandFact, ErrorFact, FileFact, Ledger, UserInstruction
from worker.facts.workstate import WorkItem, WorkState
from worker.pipeline.checkpoint import (
    RANK_CHANGED,
    RANK_DETAIL,
    RANK_OPEN_ERROR,
    RANK_OPEN_WORK,
    RANK_RULE,
    RANK_SPARE,
    Section,
    fit_dense,
    fit_sections,
    grouped_paths,
    ledger_sections,
    progress_section,
    render_summary,
    said_once,
    shared_evidence,
    user_labelled,
)


def count(text: str) -> int:
    return len(text) // 4


def ledger() -> Ledger:
    return Ledger(
        files=[FileFact("apps/web/src/stores/auth.store.ts", ["read", "modified"], ["m1", "m2"], "modified", 2,
                        edits=["`a` → `b`"]),
               FileFact("apps/web/src/hooks/useAuth.ts", ["modified"], ["m3"], "modified", 3),
               FileFact("README.md", ["read"], ["m4"], "read", 4)],
        errors=[ErrorFact("12:3   error  Unexpected var          no-var", ["m5", "m6"], "npx eslint .", attempts=2),
                ErrorFact("14:1   error  Missing semicolon      semi", ["m6"], "npx eslint .", attempts=1)],
        commands=[CommandFact("pytest -q", "failed", 1, None, ["m7"], 1, 7),
                  CommandFact("npx eslint .", "failed", 1, None, ["m5", "m6"], 2, 8),
                  CommandFact("pytest -q", "ok", 0, None, ["m9"], 1, 9)],
    )


def test_dense_says_each_command_once_with_its_latest_outcome_and_no_id() -> None:
    normal = ledger_sections(ledger(), "en")["Critical Context"].body()
    dense = ledger_sections(ledger(), "en", dense=True)["Critical Context"].body()
    assert normal.count("`pytest -q`") == 2 and dense.count("`pytest -q`") == 1
    assert "- Commands (exit 0 unless shown):\n" in dense and dense.endswith("  - `pytest -q`")  # exit 0: the heading
    assert "  - `npx eslint .` → exit 1\n" in dense
    assert "(m5, m6, 2 attempts)" in normal and "no-var` (2 attempts)" in dense and "(m6" not in dense
    # An error line alone: Commands names its run, once, and the line is its own search key.
    assert normal.count("— from `npx eslint .`") == 2 and "— from" not in dense
    assert dense.count("`npx eslint .`") == 1
    assert "`12:3  error  Unexpected var  no-var`" in dense  # the formatter's padding, not its words


def test_scripts_that_open_alike_are_one_line() -> None:
    """cc-wakil (tune half): three scripts opening `SC=/private/tmp/…/scratchpad` showed as three
    identical cut lines; shown once, with the latest outcome."""
    sc = "SC=/private/tmp/claude-501/-Users-ebridges-Projects-wakil/09cc95ef/scratchpad\n"
    scripts = [sc + "cd $SC && qmd collection list", sc + "cd $SC && qmd status", sc + "cd $SC && qmd sync"]
    facts = Ledger(commands=[CommandFact(c, "ok", 0, None, [f"m{i}"], 1, i) for i, c in enumerate(scripts)])
    dense = ledger_sections(facts, "en", dense=True)["Critical Context"].body()
    assert dense.count("SC=/private/tmp/") == 1


def test_paths_are_grouped_under_their_common_directory_keeping_their_own() -> None:
    body = grouped_paths(ledger_sections(ledger(), "en", dense=True))["Relevant Files"].body()
    assert body.splitlines()[:3] == ["- `apps/web/src/`", "  - `stores/auth.store.ts` — modified",
                                     "  - `hooks/useAuth.ts` — modified"]
    assert "- `README.md` — read" in body and "`a` → `b`" not in body  # edit snippets are detail


def test_grouped_paths_keep_their_own_ranks() -> None:
    """A file only read, or only named in a git diffstat, ranks below a changed one under the
    same directory heading: grouping does not promote it."""
    facts = ledger()
    facts.files.append(FileFact("apps/web/src/lib/api.ts", ["read"], ["m5"], "read", 5))
    facts.files.append(FileFact("apps/web/src/lib/env.ts", ["listed"], ["m6"], "listed", 6))
    files = grouped_paths(ledger_sections(facts, "en", dense=True))["Relevant Files"]
    group = next(b for block in files.blocks for b in block.bullets if b.group)
    assert group.rank == RANK_CHANGED and group.sub_ranks == [RANK_CHANGED, RANK_CHANGED, RANK_DETAIL, RANK_SPARE]
    assert group.subs[3] == "`lib/env.ts` — in a git diffstat"


def test_the_dense_rendering_only_where_the_normal_one_does_not_fit_whole() -> None:
    normal = ledger_sections(ledger(), "en")
    dense = ledger_sections(ledger(), "en", dense=True)
    whole = count(render_summary(normal, "en"))
    _, roomy, _ = fit_dense(normal, "en", whole, count, dense=dense)
    assert roomy == render_summary(normal, "en")
    _, tight, n = fit_dense(normal, "en", whole - 20, count, dense=dense)
    assert n <= whole - 20 and "- `apps/web/src/`" in tight and "`hooks/useAuth.ts`" in tight


REQUEST = "Rename the Intent section to Policy in the report page, and keep the old anchor working"


def test_a_request_quoted_under_constraints_is_named_by_its_id_in_progress() -> None:
    facts = ledger()
    facts.user_instructions = [UserInstruction("m10", REQUEST)]
    state = WorkState(done=[WorkItem(REQUEST, ["commit `e2c15e5` `rename Intent to Policy` (m12)"], "m10")],
                      in_progress=[WorkItem("Add a changelog entry", ["no verification or commit after the request"],
                                            "m13")])
    normal = {**ledger_sections(facts, "en"), "Progress": progress_section(state, "en")}
    dense = {**normal, **ledger_sections(facts, "en", dense=True)}
    assert render_summary(normal, "en").count(REQUEST) == 2  # a roomy checkpoint says it in both places
    whole = count(render_summary(normal, "en"))
    _, tight, n = fit_dense(normal, "en", whole - 20, count, dense=dense)
    assert n <= whole - 20 and tight.count(REQUEST) == 1  # quoted once, as typed
    assert "- m10 — evidence: commit `e2c15e5` `rename Intent to Policy` (m12)" in tight
    assert "- Add a changelog entry (m13) — evidence:" in tight  # not quoted above: the item says it
    # A reader that cannot look ids up (cite_ids False: they are stripped) gets the request itself.
    _, plain, _ = fit_dense(normal, "en", whole - 20, count, dense=dense, cite_ids=False)
    assert "- m10 — evidence:" not in plain and f"- {REQUEST} (m10) — evidence:" in plain
    # The repository's open work goes with the open requests.
    state.uncommitted = ["src/report.py", "docs/policy.md"]
    body = progress_section(state, "en").body()
    assert "- Changed after the last commit, not committed: `src/report.py`, `docs/policy.md`" in body
    assert body.index("not committed") < body.index("### Blocked")
    # Where the fit left the quote out, the item names the request again.
    unquoted = said_once({**dense, "Constraints & Preferences": Section()})["Progress"].body()
    assert f"- {REQUEST} (m10) — evidence:" in unquoted


def test_a_fixed_error_keeps_where_it_failed() -> None:
    """The location a convention names (rustc's `-->`, the first project frame) is part of the
    error, fixed or not: it is the place the fix went to."""
    facts = ledger()
    facts.errors.append(ErrorFact("AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:", ["m10"],
                                  "pnpm test", attempts=1, resolved=True, resolved_by="m11",
                                  resolved_by_command="pnpm test",
                                  at="at Object.runReviewCommandTests (src/commands/review/review.test.js:751:20)"))
    where = ("`AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:` "
             "`at Object.runReviewCommandTests (src/commands/review/review.test.js:751:20)`")
    normal = ledger_sections(facts, "en")["Critical Context"].body()
    assert f"{where} — resolved by `pnpm test` (m11)" in normal
    dense = ledger_sections(facts, "en", dense=True)["Critical Context"].body()
    assert f"- Resolved errors:\n  - {where}\n" in dense  # the heading says it was fixed; Commands names the run



def test_requests_one_commit_finished_share_one_bullet() -> None:
    """Eight requests done by one commit: the evidence is said once, after their ids, and the
    merge can be applied again (fit_dense applies it before and after the fit)."""
    facts = ledger()
    requests = ["Migrate the context guide", "Migrate the security guide", "Add a changelog entry"]
    facts.user_instructions = [UserInstruction(f"m{20 + i}", r) for i, r in enumerate(requests[:2])]
    commit = "commit `a09bda4` `docs(guides): migrate the guides` (m30)"
    state = WorkState(done=[WorkItem(r, [commit], f"m{20 + i}") for i, r in enumerate(requests)]
                      + [WorkItem("Fix the typo", ["`pytest -q` → `3 passed`"], "m31")])
    normal = {**ledger_sections(facts, "en"), "Progress": progress_section(state, "en")}
    dense = {**normal, **ledger_sections(facts, "en", dense=True)}
    whole = count(render_summary(normal, "en"))
    _, tight, n = fit_dense(normal, "en", whole - 20, count, dense=dense)
    assert n <= whole - 20 and tight.count("a09bda4") == 1
    assert f"- m20; m21; Add a changelog entry (m22) — evidence: {commit}" in tight  # quoted ones by id
    assert "- Fix the typo (m31) — evidence: `pytest -q` → `3 passed`" in tight  # its own evidence: alone
    once = shared_evidence(said_once(dense))
    assert shared_evidence(said_once(once)) == once
    # Where the fit left the quotes out, the shared bullet names the requests again.
    unquoted = said_once({**once, "Constraints & Preferences": Section()})["Progress"].body()
    assert f"- {requests[0]} (m20); {requests[1]} (m21); Add a changelog entry (m22) — evidence: {commit}" in unquoted


def test_a_list_of_extras_with_none_shown_goes_whole():
    """The agent's reports are extras: where the fit keeps none, their heading and `… N more` go too
    (the left-out note counts them); a list that says `(none)` when empty keeps its heading."""
    state = WorkState(done=[WorkItem("Fix the typo", ["`pytest -q` → `3 passed`"], "m31")],
                      reports=[WorkItem("Done: " + "the long report. " * 40, [], "m40")])
    normal = {**ledger_sections(ledger(), "en"), "Progress": progress_section(state, "en")}
    whole = count(render_summary(normal, "en"))
    # the report's opening is ~75 tokens: leaving it out makes room for the left-out note (~60)
    _, tight, n = fit_dense(normal, "en", whole - 10, count)
    assert n <= whole - 10 and "Reported by the agent" not in tight and "### Done" in tight
    assert "Progress 1" in tight  # the left-out note counts the report


def test_a_long_report_is_quoted_whole_only_in_the_room_left_at_the_end():
    """A report longer than its opening is quoted by the opening; the rest is shown only where every
    fact (and every other opening) went in and room is left, so it never costs a fact."""
    closing = "Kept the old anchor because external links point at it."
    report = "Done: renamed Intent to Policy. " + "The page now reads Policy everywhere. " * 12 + closing
    state = WorkState(done=[WorkItem("Fix the typo", ["`pytest -q` → `3 passed`"], "m31")],
                      reports=[WorkItem(report, [], "m40"), WorkItem("Short note.", [], "m41")])
    normal = {**ledger_sections(ledger(), "en"), "Progress": progress_section(state, "en")}
    openings = count(render_summary(normal, "en"))
    _, roomy, _ = fit_dense(normal, "en", openings * 2, count)
    assert closing in roomy and "Short note." in roomy and "Left out" not in roomy
    _, tight, n = fit_dense(normal, "en", openings, count)
    assert n <= openings and closing not in tight and "Done: renamed Intent to Policy." in tight
    assert "Short note." in tight and "Left out" not in tight  # the rest went, nothing else did


def test_words_typed_again_are_quoted_once_under_every_id() -> None:
    # cc-wakil_09cc95ef (tune half): a prompt re-sent unanswered; "proceed" said three times (pi).
    facts = ledger()
    facts.user_instructions = [UserInstruction("m10", REQUEST), UserInstruction("m11", REQUEST),
                               UserInstruction("m12", "proceed"), UserInstruction("m14", "proceed")]
    state = WorkState(in_progress=[WorkItem(REQUEST, ["no verification or commit after the request"], "m11")])
    sections = {**ledger_sections(facts, "en"), "Progress": progress_section(state, "en")}
    text = render_summary(sections, "en")
    assert text.count(REQUEST) == 2 and "- m10, m11:\n" in text and "- m12, m14:\n  > proceed" in text
    # The item asked by either id is named by its id where the words are quoted.
    assert "- m11 — evidence:" in render_summary(said_once(sections), "en")
    # A reader without the ids sees the words labelled as the user's, once.
    labelled = user_labelled(sections, {"m10", "m11", "m12", "m14"}, "User:")
    assert render_summary(labelled, "en").count("- User:\n") == 2


def test_an_error_of_a_run_that_only_looked_ranks_after_the_users_words() -> None:
    # cc-wakil_09cc95ef (tune half): zsh's `no matches found` on a `grep` is exploration, not the
    # work's failure; the test run's error is.
    facts = Ledger(errors=[
        ErrorFact("(eval):1: no matches found: --include=*.py", ["m1"], 'grep -rn "snippet" src --include=*.py',
                  attempts=1),
        ErrorFact("E   AssertionError: assert 'title' == 'snippet'", ["m2"], "uv run pytest -q", attempts=1)])
    bullet = ledger_sections(facts, "en")["Critical Context"].blocks[0].bullets[0]
    ranks = dict(zip([s.split("`")[1] for s in bullet.subs], bullet.sub_ranks, strict=True))
    assert ranks == {"(eval):1: no matches found: --include=*.py": RANK_OPEN_WORK,
                     "E   AssertionError: assert 'title' == 'snippet'": RANK_OPEN_ERROR}
    assert RANK_OPEN_ERROR < RANK_RULE < RANK_OPEN_WORK


def test_an_edit_snippet_that_ranks_before_its_file_follows_it_in() -> None:
    """A file the verbatim tail shows ranks last, and its edit snippet (a detail) comes up before it
    in the fill: it goes in right after its file, where the room is left, not never."""
    facts = ledger()
    looked = "cat " + " ".join(f"docs/chapter-{k:02}/index.md" for k in range(40))  # a long read, to leave out
    facts.commands.insert(0, CommandFact(looked, "ok", 0, None, ["m0"], 1, 0))
    sections = ledger_sections(facts, "en", shown=frozenset({"m1", "m2"}))
    full = render_summary(sections, "en")
    _, text, n = fit_sections(sections, "en", count(full) - 20, count, left_out="(left out: {what})")
    assert n <= count(full) - 20 and "(left out: Critical Context 1)" in text
    assert "`apps/web/src/stores/auth.store.ts` — read, modified" in text and "`a` → `b`" in text


def test_a_dense_file_line_does_not_say_a_changed_file_was_read() -> None:
    """Whether the session read a file before it changed it says nothing a reader needs: the dense
    line gives what was done to it; a file only read is still said to be read."""
    normal = ledger_sections(ledger(), "en")["Relevant Files"].body()
    dense = ledger_sections(ledger(), "en", dense=True)["Relevant Files"].body()
    assert "`apps/web/src/stores/auth.store.ts` — read, modified" in normal
    assert "`apps/web/src/stores/auth.store.ts` — modified" in dense and "`README.md` — read" in dense
