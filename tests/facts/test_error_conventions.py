"""Each convention row on real tool output (tests/fixtures/error_conventions, sources in NOTICE.md).

Each test asserts the line a developer would quote, with the location or project frame its row
keeps, and that the noise around it (`--- FAIL: TestX`, `FAIL\tpkg\t0.01s`, `exit status 1`,
`error: aborting due to …`) does not come first or at all.
"""

from __future__ import annotations

from pathlib import Path

from worker.facts.output import CONVENTIONS, error_findings, error_lines, is_project_path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "error_conventions"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_row_cites_its_convention():
    assert len({c.name for c in CONVENTIONS}) == len(CONVENTIONS)
    assert all(len(c.source) > 20 for c in CONVENTIONS)


def test_go_test_messages_come_before_the_verdict_and_passing_logs_are_not_errors():
    # go-junit-report testdata/001-pass-fail-skip.txt: `go test -v` of passing, failing, skipped tests.
    assert error_findings(read("go_test.txt")) == [
        ("fail_test.go:6: Error message", None),
        ("fail_test.go:7: Longer", None),
        ("--- FAIL: TestOne (0.151s)", None),
    ]


def test_go_panic_keeps_the_first_project_frame():
    # go-junit-report testdata/105-panic.gojson.txt (the `Output` of each event): a panic in init.
    assert error_findings(read("go_panic.txt")) == [("panic: init", "/src/package/name/panic/main_test.go:6 +0x27")]
    # 108-paniclate: TestMain panics; `_testmain.go` (go test's generated main) is not the project.
    assert error_findings(read("go_panic_late.txt")) == [("panic: panic", "/src/package/name/paniclate/main_test.go:9")]


def test_rustc_error_keeps_its_location_not_the_abort_summary():
    # rust-lang/rust tests/ui/borrowck/borrowck-move-out-of-vec-tail.stderr
    assert error_findings(read("rustc_e0508.stderr")) == [
        ("error[E0508]: cannot move out of type `[Foo]`, a non-copy slice",
         "--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19")]


def test_pytest_assertion_keeps_its_crash_location_and_the_summary_lines():
    # pytest doc/en/how-to/output.rst, `pytest -ra` example.
    assert error_findings(read("pytest_ra.txt")) == [
        ("E       assert 0", "test_example.py:6: AssertionError"),
        ("ERROR test_example.py::test_error - assert 0", None),
        ("FAILED test_example.py::test_fail - assert 0", None),
    ]
    assert not any(line.startswith(("SKIPPED", "XFAIL", "XPASS")) for line in error_lines(read("pytest_ra.txt")))


def test_project_paths_exclude_installed_packages_and_toolchains():
    assert not is_project_path("/usr/local/go/src/os/exec/exec.go")
    assert not is_project_path("/home/mafredri/sdk/go1.20rc1/src/testing/testing.go")
    assert not is_project_path("/root/go/pkg/mod/github.com/stretchr/testify@v1.8.4/assert/assertions.go")
    assert not is_project_path("/usr/lib/python3.11/json/decoder.py")
    assert not is_project_path("/repo/.venv/lib/python3.11/site-packages/yaml/__init__.py")
    assert not is_project_path("/app/node_modules/jest-circus/build/utils.js")
    assert not is_project_path("/rustc/9d1b2106e23b1bdd4d0a49d1ee6e7bc4d3d3a8f1/library/core/src/panicking.rs")
    assert is_project_path("/Users/me/go/src/github.com/bcicen/grmon/parse.go")  # GOPATH: a dotted path is not std
    assert is_project_path("/src/package/name/panic/main_test.go")
    assert is_project_path("scripts/load_config.py")


def test_the_location_travels_with_the_error_into_the_checkpoint():
    from tests.fakes import SessionBuilder
    from worker.facts.ledger import extract_ledger
    from worker.pipeline.checkpoint import ledger_sections

    b = SessionBuilder()
    b.user("fix the build")
    b.bash("cargo build", read("rustc_e0508.stderr") + "\nExit code 101", is_error=True)
    ledger = extract_ledger(b.messages)
    err = ledger.unresolved_errors()[0]
    assert (err.text, err.at) == ("error[E0508]: cannot move out of type `[Foo]`, a non-copy slice",
                                  "--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19")
    rendered = "\n".join(line for s in ledger_sections(ledger).values() for blk in s.blocks
                         for bullet in blk.bullets for line in bullet.lines())
    assert "`--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19`" in rendered


def test_eslint_stylish_keeps_each_error_with_its_file_and_rule_not_warnings():
    from worker.facts.output import LINT_MORE, MAX_LINT_LINES_PER_RESULT

    # eslint/eslint docs/src/use/formatters/index.md, the stylish example output.
    found = error_findings(read("eslint_stylish.txt"))
    path = "/var/lib/jenkins/workspace/eslint Release/eslint/fullOfProblems.js"
    assert found[0] == ("1:10  error    'addOne' is defined but never used                              no-unused-vars", path)
    # Five errors: the first MAX_LINT_LINES_PER_RESULT kept with their file, the rest counted (issue 22).
    lint = [(text, at) for text, at in found if "  error  " in text]
    assert len(lint) == MAX_LINT_LINES_PER_RESULT and all(at == path for _, at in lint)
    assert found[-1] == (LINT_MORE.format(n=5 - MAX_LINT_LINES_PER_RESULT, rule="eslint"), None)
    assert not any("warning" in text or "problems" in text for text, _ in found)


def test_biome_keeps_the_rule_header_with_its_message():
    # biomejs/biome crates/biome_js_analyze/tests/specs/suspicious/noDoubleEquals/invalid.js.snap (first diagnostic)
    assert error_findings(read("biome_no_double_equals.txt")) == [
        ("invalid.js:3:5 lint/suspicious/noDoubleEquals", "× Using == may be unsafe if you are relying on type coercion.")]
    # crates/biome_cli/tests/snapshots/main_commands_lint/lint_error.snap: the termination summary is not a diagnostic.
    assert error_findings(read("biome_lint_error.snap")) == [
        ("check.js:1:6 lint/correctness/noConstantCondition", "× This condition always evaluates to the same value.")]


def test_markdownlint_keeps_its_rule_lines_capped_like_every_lint_run():
    from worker.facts.output import LINT_MORE, MAX_LINT_LINES_PER_RESULT

    # DavidAnson/markdownlint-cli2 formatter-default/README.md, the example output (13 violations).
    found = error_findings(read("markdownlint_cli2_default.txt"))
    assert found[0][0].startswith("dir/about.md:1:1 MD021/no-multiple-space-closed-atx Multiple spaces")
    assert len(found) == MAX_LINT_LINES_PER_RESULT + 1
    assert found[-1] == (LINT_MORE.format(n=13 - MAX_LINT_LINES_PER_RESULT, rule="markdownlint"), None)
    # Not a markdownlint line: a path with a line number in prose, a warning, a heading id.
    assert error_findings("see README.md:12 for the setup\nviewme.md:5 warning MD012/no-multiple-blanks x\n"
                          "## MD012 rule\n") == []


def test_npm_keeps_the_code_line_with_its_message():
    # npm/cli docs/lib/content/commands/npm-ping.md (npm < 10.8 `npm ERR!`)
    assert error_findings(read("npm_ping_e404.txt")) == [
        ("npm ERR! code E404", "npm ERR! 404 Not Found - GET http://www.foo.com/-/ping?write=true")]
    # npm/cli smoke-tests/tap-snapshots/test/index.js.test.cjs, `npm ci` out of sync (`npm error`)
    text, at = error_findings(read("npm_ci_eusage.txt"))[0]
    assert text == "npm error code EUSAGE" and at.startswith("npm error \\`npm ci\\` can only install packages")
    assert error_findings(read("npm_ping_ok.txt")) == []  # the same docs' successful ping


def test_pnpm_error_codes_with_their_message():
    # a real `pnpm -r exec` failure (opencode-sessionbridge fixture, tune half): pnpm < 11 pads the code with U+2009.
    assert error_lines(read("pnpm_recursive_exec.txt")) == ['ERR_PNPM_RECURSIVE_EXEC_FIRST_FAIL\u2009 Command "mocha" not found']
    # pnpm/pnpm crates/cli/src/cli_args/dedupe/tests.rs: pnpm 11's bracketed form.
    assert error_lines(read("pnpm_dedupe_check.txt")) == [
        "[ERR_PNPM_DEDUPE_CHECK_ISSUES] Dedupe --check found changes to the lockfile"]
    # crates/cli/tests/suite/snapshots/suite__init__should_throw_on_existing_file.snap (miette, via `Error:`)
    assert error_lines(read("pnpm_init_exists.txt")) == ["Error: ERR_PNPM_PACKAGE_JSON_EXISTS"]


def test_jest_keeps_the_matcher_hint_expected_received_then_the_test_name():
    # jestjs/jest e2e/__tests__/__snapshots__/failures.test.ts.snap, `works with assertions in separate files`
    assert error_findings(read("jest_toequal.txt")) == [
        ("expect(received).toEqual(expected) // deep equality", "at toEqual (macros.js:10:15)"),
        ("Expected: 2", None),
        ("Received: 1", None),
        ("● use some imported macro to make assertion", None),
    ]
    # `not throwing Error objects 4`: the `✕` list and the code frame are not errors.
    assert error_findings(read("jest_assertion_count.txt")) == [
        ("expect(received).toBeTruthy()", "at Object.toBeTruthy (__tests__/assertionCount.test.js:12:17)"),
        ("Received: false", None),
        ("● .assertions() › throws", None),
    ]


def test_vitest_keeps_the_assertion_its_location_and_the_test():
    # vitest-dev/vitest test/e2e/test/reporters/__snapshots__/default.test.ts.snap: the `- Expected`/`+ Received`
    # diff is not a message.
    assert error_findings(read("vitest_default.txt")) == [
        ("AssertionError: expected 1 to be +0 // Object.is equality", "❯ basic.test.ts:5:13"),
        ("FAIL  basic.test.ts > test-a 1", None),
    ]
    # docs/api/vi.md
    assert error_findings(read("vitest_vi_docs.txt")) == [
        ("AssertionError: expected 'left' to deeply equal 'right'", "❯ example.test.ts:8:3"),
        ('Expected: "right"', None),
        ('Received: "left"', None),
        ("FAIL  example.test.ts > example", None),
    ]


def test_surefire_keeps_the_assertion_its_test_frame_and_the_failed_test():
    # apache/maven-surefire surefire-its/.../surefire-reports2/...MyClassTest.txt
    assert error_findings(read("surefire_report.txt")) == [
        ("junit.framework.AssertionFailedError: expected:<18> but was:<42>",
         "at org.apache.maven.surefireReport.surefireReportTest.module1.MyDummyClassTest.testGetFooKO(MyClassTest.java:10)"),
        ("Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.049 sec <<< FAILURE!", None),
        ("org.apache.maven.surefireReport.surefireReportTest.module1.MyDummyClassTest.testGetFooKO"
         "  Time elapsed: 0.01 sec  <<< FAILURE!", None),
    ]
    # surefire-report-parser/.../TEST-org.acme.FlakyTest.xml: JUnit 5's stack trace; junit-jupiter frames skipped.
    assert error_findings(read("junit5_assertion_failed.txt")) == [
        ("org.opentest4j.AssertionFailedError: expected: <1> but was: <0>",
         "at org.acme.FlakyTest.testFlaky(FlakyTest.java:18)")]


def test_agents_edit_tool_refusals_are_errors():
    # Claude Code, quoted in Digital-Process-Tools/claude-remember PR #51; the harness tags come off.
    assert error_lines(read("claude_code_tool_use_error.txt")) == [
        "File has not been read yet. Read it first before writing to it."]
    # pi, quoted in earendil-works/pi issue #4430 (the multi-edit form of edit.ts's message)
    assert error_lines(read("pi_edit_error.txt")) == [
        "Could not find edits[1] in [some file]. The oldText must match exactly including all whitespace and newlines."]
    # opencode, quoted in anomalyco/opencode issue #15515: the `← Edit` call lines and the agent's prose are not.
    assert error_lines(read("opencode_edit_errors.txt")) == [
        "Error: Found multiple matches for oldString. Provide more surrounding context to make the match unique.",
        "Error: Could not find oldString in the file. It must match exactly, including whitespace, indentation, "
        "and line endings.",
    ]


def test_new_rows_do_not_fire_on_passing_output():
    # go-junit-report's passing tests, the pytest session's passing lines, npm's successful ping.
    passing = "\n".join(read("go_test.txt").splitlines()[:9]) + "\n" + read("npm_ping_ok.txt")
    assert error_lines(passing) == []


def test_one_lint_run_gives_its_first_lines_and_a_count_of_the_rest() -> None:
    from worker.facts.output import LINT_MORE, MAX_LINT_LINES_PER_RESULT, error_lines

    out = "\n".join(["/repo/articles/a.md"] + [f"  {i}:1  error  Disallow to use \"?\"  no-exclamation-question-mark"
                                                for i in range(1, 11)] + ["Error: lint failed"])
    lines = error_lines(out)
    lint = [x for x in lines if "  error  " in x]
    assert len(lint) == MAX_LINT_LINES_PER_RESULT and lint[0].startswith("1:1  error")
    assert "Error: lint failed" in lines  # the other errors of the run are not crowded out
    assert LINT_MORE.format(n=10 - MAX_LINT_LINES_PER_RESULT, rule="eslint") in lines


def test_bun_git_conflict_and_shell_syntax_rows():
    # codex-cli-agentv_019f1d64 (tune half; EntityProcess/agentv, MIT): bun test's failures print
    # their error above the `(fail) describe > test [time]` line; the time is not part of the fact.
    assert error_lines(read("bun_test_fail.txt")) == [
        "(fail) agentv eval CLI > passes run-level budget tracking through to the evaluator",
        "ENOENT: no such file or directory, open '/tmp/agentv-cli-test-SokJRn/diagnostics.json'",
        "(fail) agentv eval CLI > lets --budget-usd override evaluate_options.budget_usd",
    ]
    # `git rebase origin/main`: one CONFLICT line per conflicted path; `Auto-merging x` is not an error.
    assert error_lines(read("git_rebase_conflict.txt")) == [
        f"CONFLICT (content): Merge conflict in {p}" for p in (
            "README.md", "apps/cli/src/commands/eval/run-eval.ts",
            "packages/core/src/evaluation/validation/eval-file.schema.ts",
            "packages/core/src/evaluation/validation/eval-validator.ts")]
    assert error_lines(read("zsh_parse_error.txt")) == ["zsh:1: parse error near `|'"]


def test_codex_apply_patch_refusal_is_an_error():
    # codex-cli-agentv_019efc87 (tune half; EntityProcess/agentv, MIT), message line00283: the
    # patch's expected lines that follow are the agent's own input, not more errors.
    assert error_lines(read("codex_apply_patch_error.txt")) == [
        "apply_patch verification failed: Failed to find expected lines in /home/entity/projects/EntityProcess/"
        "agentv__worktrees/av-raf-5-results-sync-merge-signal/packages/core/test/evaluation/results-repo.test.ts:"]
