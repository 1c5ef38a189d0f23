"""Each convention row on real tool output (tests/fixtures/error_conventions, sources in NOTICE.md).

Each test asserts the line a developer would quote, with the location or project frame its row
keeps, and that the noise around it (`--- FAIL: TestX`, `FAIL\tpkg\t0.01s`, `exit status 1`,
`error: aborting due to …`) does not come first or at all.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from tests.fakes import SessionBuilder
from worker.facts.actions import scan_actions
from worker.facts.ledger import extract_ledger
from worker.facts.output import (
    CONVENTIONS,
    LINT_MORE,
    MAX_ERROR_LINES_PER_RESULT,
    MAX_LINT_LINES_PER_RULE,
    error_findings,
    error_lines,
    exit_code_of,
    first_meaningful_line,
    is_project_path,
    only_summaries,
    output_excerpt,
    split_error_findings,
)
from worker.formats import codex
from worker.pipeline.checkpoint import ledger_sections

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
    # eslint/eslint docs/src/use/formatters/index.md, the stylish example output: five errors of
    # five rules, each kept with its file.
    found = error_findings(read("eslint_stylish.txt"))
    path = "/var/lib/jenkins/workspace/eslint Release/eslint/fullOfProblems.js"
    assert found[0] == ("1:10  error    'addOne' is defined but never used                              no-unused-vars", path)
    assert [text.split()[-1] for text, _ in found] == [
        "no-unused-vars", "use-isnan", "space-unary-ops", "no-useless-assignment", "consistent-return"]
    assert all(at == path for _, at in found)
    assert not any("warning" in text or "problems" in text for text, _ in found)


def test_biome_keeps_the_rule_header_with_its_message():
    # biomejs/biome crates/biome_js_analyze/tests/specs/suspicious/noDoubleEquals/invalid.js.snap (first diagnostic)
    assert error_findings(read("biome_no_double_equals.txt")) == [
        ("invalid.js:3:5 lint/suspicious/noDoubleEquals × Using == may be unsafe if you are relying on type coercion.",
         None)]
    # crates/biome_cli/tests/snapshots/main_commands_lint/lint_error.snap: the termination summary is not a diagnostic.
    assert error_findings(read("biome_lint_error.snap")) == [
        ("check.js:1:6 lint/correctness/noConstantCondition × This condition always evaluates to the same value.", None)]


def test_biome_format_diagnostics_and_the_at_prefix():
    # cc-contextevaluator_8ecab05f (tune half; PackmindHub/context-evaluator, Apache-2.0), lines 344
    # and 381: `biome check` as bun ran it, each header after `at `: a whole-file format diagnostic
    # (no line:col), and a rule's, printed twice by two runs (one fact).
    assert error_lines(read("biome_format_at.txt")) == [
        "frontend/src/components/ContextTab.tsx format × Formatter would have printed the following content:",
        'error: script "lint" exited with code 1']
    assert error_lines(read("biome_check_at.txt")) == [
        "frontend/src/components/ContextTab.tsx:3:10 lint/correctness/noUnusedImports × Several of these imports "
        "are unused.",
        'error: script "lint:fix" exited with code 1']


def test_golangci_lint_keeps_one_line_per_linter():
    # cc-meow-ja_fc996c60 (tune half; 135yshr/meow, MIT), line 536: 58 issues from five linters,
    # each `file.go:line:col: msg (linter)`; a plain `go vet`/compiler line has no linter.
    assert error_lines(read("golangci_lint_run.txt")) == [
        'cmd/meow/main.go:106:24: emptyStringTest: replace `len(args[0]) > 0` with `args[0] != ""` (gocritic)',
        "pkg/token/doc.go:29:1: File is not properly formatted (gofmt)",
        'compiler/compiler.go:225:18: shadow: declaration of "err" shadows declaration at line 218 (govet)',
        "compiler/compiler.go:88:10: ST1005: error strings should not be capitalized (staticcheck)",
        "pkg/codegen/codegen.go:19:2: field indent is unused (unused)",
        LINT_MORE.format(n=53, rule="golangci-lint"),
    ]
    assert error_lines("main.go:3:2: undefined: x\nmain.go:4:2: undefined: y\n") == [
        "main.go:3:2: undefined: x", "main.go:4:2: undefined: y"]


def test_markdownlint_keeps_one_line_per_rule_and_counts_the_rest():
    # DavidAnson/markdownlint-cli2 formatter-default/README.md, the example output (13 violations
    # of 12 rules): the first six rules' lines, up to the per-result bound, then a count.
    found = error_findings(read("markdownlint_cli2_default.txt"))
    assert found[0][0].startswith("dir/about.md:1:1 MD021/no-multiple-space-closed-atx Multiple spaces")
    assert len(found) == MAX_ERROR_LINES_PER_RESULT + 1
    assert found[-1] == (LINT_MORE.format(n=13 - MAX_ERROR_LINES_PER_RESULT, rule="markdownlint"), None)
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
    # crates/cli/tests/suite/snapshots/suite__init__should_throw_on_existing_file.snap: the code (`Error:`),
    # then miette's report of it, kept with its cause (the miette row).
    assert error_findings(read("pnpm_init_exists.txt")) == [
        ("Error: ERR_PNPM_PACKAGE_JSON_EXISTS", None),
        ("initialize package.json", "╰─▶ package.json file already exists")]


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
    # Claude Code, quoted in Digital-Process-Tools/claude-remember PR #51; the row reads the message,
    # the kept line keeps the harness's tags, which say the harness refused the call.
    assert error_lines(read("claude_code_tool_use_error.txt")) == [
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"]
    # cc-langlearntts_0742cd3c (tune half; punt-labs/langlearn-tts, MIT), record 8a5944f4: Edit's
    # `String: <old_string>` line says which text was not found.
    assert error_lines(read("claude_code_edit_not_found.txt")) == [
        "<tool_use_error>String to replace not found in file. String: 21m00Tcm4TlvDq8ikWAM"]
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


def test_one_lint_run_gives_each_rule_once_and_a_count_of_the_rest() -> None:
    out = "\n".join(["/repo/articles/a.md"] + [f"  {i}:1  error  Disallow to use \"?\"  no-exclamation-question-mark"
                                                for i in range(1, 11)] + ["Error: lint failed"])
    lines = error_lines(out)
    lint = [x for x in lines if "  error  " in x]
    assert len(lint) == MAX_LINT_LINES_PER_RULE and lint[0].startswith("1:1  error")
    assert "Error: lint failed" in lines  # the other errors of the run are not crowded out
    assert LINT_MORE.format(n=10 - MAX_LINT_LINES_PER_RULE, rule="eslint") in lines


def test_textlint_multi_line_messages_are_one_rule_each():
    # cc-meow-ja_f29a7049 (tune half; 135yshr/meow, MIT), line 141: textlint's stylish output,
    # whose messages run over several lines with the rule id on the last (so a rule is its
    # message there); 52 violations, the first six distinct ones kept.
    lines = error_lines(read("textlint_stylish_ja.txt"))
    assert lines[:3] == [
        '60:26  error  一文に二回以上利用されている助詞 "が" がみつかりました。',
        "66:1   error  Line 66 sentence length(108) exceeds the maximum sentence length of 100.",
        '185:40  error  Disallow to use "?"' + " " * 75 + "ja-technical-writing/no-exclamation-question-mark",
    ]
    assert len(lines) == MAX_ERROR_LINES_PER_RESULT + 1 and lines[-1] == LINT_MORE.format(n=46, rule="eslint")
    assert not any("60:35" in line for line in lines)  # the same message again is the same rule


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


def test_a_file_tools_refusal_fails_it_without_an_error_flag():
    # Codex's apply_patch answers with a bare string (no success flag): the refusal is the failure.
    b = SessionBuilder()
    b.user("fix the test")
    b.tool("apply_patch", {"input": "*** Begin Patch\n*** Update File: a.ts\n*** End Patch"},
           read("codex_apply_patch_error.txt"))
    b.tool("apply_patch", {"input": "*** Begin Patch\n*** Update File: b.ts\n*** End Patch"},
           "Success. Updated the following files:\nM b.ts\n")
    failed, ok = [a for a in scan_actions(b.messages) if a.tool == "apply_patch"]
    assert failed.status == "failed" and failed.errors[0].startswith("apply_patch verification failed:")
    assert failed.files == []  # the edit did not happen
    assert ok.status == "ok" and ok.errors == [] and ok.files == [("b.ts", "modified")]


def test_codexs_exec_envelope_is_not_the_error():
    # codex-cli-agentv_019efc87 (tune half), line 68: `bd show … --json` exits 1 with no line any
    # row knows; the envelope (codex-rs unified_exec.rs format_response) is not what failed.
    out = ("Chunk ID: 9ac387\nWall time: 1.1419 seconds\nProcess exited with code 1\nOriginal token count: 36\n"
           "Output:\n{\n  \"error\": \"no issues found matching the provided IDs\",\n  \"schema_version\": 1\n}\n"
           "Error fetching av-raf.5: no issue found matching \"av-raf.5\"\n")
    assert first_meaningful_line(out) == 'Error fetching av-raf.5: no issue found matching "av-raf.5"'  # not the JSON


def test_anyhow_causes_are_kept_with_the_error():
    # codex-cli-agentv_019efc87 (tune half), line 1035: workmux (Rust, anyhow) failing; the cause
    # under `Caused by:` is what to fix.
    out = ("Chunk ID: d2438e\nWall time: 0.4965 seconds\nProcess exited with code 1\nOriginal token count: 106\n"
           "Output:\n⚠️  Warning: PR #1510 is a DRAFT.\nPR #1510: feat(results): signal auto-merged remote pushes\n"
           "Author: christso\nBranch: fix/av-raf-5-results-sync-merge-signal\n"
           "Error: Failed to create worktree environment for branch 'fix/av-raf-5-results-sync-merge-signal'\n\n"
           "Caused by:\n    A worktree for branch 'fix/av-raf-5-results-sync-merge-signal' already exists. "
           "Use 'workmux open fix/av-raf-5-results-sync-merge-signal' to open it.\n")
    assert error_lines(out) == [
        "Error: Failed to create worktree environment for branch 'fix/av-raf-5-results-sync-merge-signal'",
        "A worktree for branch 'fix/av-raf-5-results-sync-merge-signal' already exists. "
        "Use 'workmux open fix/av-raf-5-results-sync-merge-signal' to open it."]
    # anyhow's numbered chain (docs.rs/anyhow, the `{:?}` example); an unindented line ends it.
    chain = ("Error: Failed to read instrs from ./path/to/instrs.json\n\nCaused by:\n"
             "    0: failed to open\n    1: No such file or directory (os error 2)\nnot a cause\n")
    assert error_lines(chain) == ["Error: Failed to read instrs from ./path/to/instrs.json", "failed to open",
                                  "No such file or directory (os error 2)"]


def test_mise_errors_its_task_prefix_and_govulncheck():
    # pi-authgo_019e44d4 (tune half; entireio/auth-go, MIT), lines 152, 154 and 160.
    # mise's own ERROR lines, without its `Run with --verbose` hint:
    assert error_lines(read("mise_untrusted_config.txt")) == [
        "mise ERROR error parsing config file: ~/Work/entire/devenv/auth-go/mise.toml",
        "mise ERROR Config files in ~/Work/entire/devenv/auth-go/mise.toml are not trusted."]
    # govulncheck run as a mise task: its findings and summary, past mise's install progress, then
    # mise's `ERROR task failed` with the prefix that names the task.
    assert error_lines(read("govulncheck_mise_task.txt")) == [
        "Vulnerability #1: GO-2026-4971", "Vulnerability #2: GO-2026-4918",
        "Your code is affected by 2 vulnerabilities from the Go standard library.",
        "[lint:govulncheck] ERROR task failed"]
    # A task failing on a message no row knows: mise's line says which task, not why, so the
    # failure's first line is kept too: the task's own, not mise's progress, its `[task] $ cmd`
    # echo or the go command's downloads.
    out = read("mise_task_failed.txt")
    assert error_lines(out) == ["[lint:gomod] ERROR task failed"]
    assert only_summaries(error_lines(out)) and not only_summaries(error_lines(read("govulncheck_mise_task.txt")))
    assert first_meaningful_line(out) == "go module files modified, please commit result of 'go mod tidy'!"
    # The rows read past the task prefix (golangci-lint under `[lint:go] `); the kept line has it: it
    # names the task that printed the line.
    assert error_lines("[lint:go] cmd/x.go:244:6: func f is unused (unused)\n[lint:go] ERROR task failed\n") == [
        "[lint:go] cmd/x.go:244:6: func f is unused (unused)", "[lint:go] ERROR task failed"]
    # The same line from two tasks (or the same task again) is one line.
    assert error_lines("[test:a] rg: x: No such file or directory (os error 2)\n"
                       "[test:b] rg: x: No such file or directory (os error 2)\n") == [
        "[test:a] rg: x: No such file or directory (os error 2)"]
    # cc-orpheus_37b35585 (tune half; dougnukem/orpheus, MIT), record 5a438f8e: the failed task's
    # line, its ANSI-coloured output above it.
    assert "[rust:lint] ERROR task failed" in error_lines(read("rustfmt_check_mise_task.txt"))


def test_a_failed_mise_task_is_remembered_by_its_own_first_line_and_mises():
    # pi-authgo_019e44d4 (tune half), line 160, as a command's result.
    b = SessionBuilder()
    b.user("lint it")
    b.bash("mise run lint", read("mise_task_failed.txt"), is_error=True)
    assert [e.text for e in extract_ledger(b.messages).errors] == [
        "go module files modified, please commit result of 'go mod tidy'!", "[lint:gomod] ERROR task failed"]


def test_a_cancelled_parallel_call_is_no_error_and_no_outcome():
    # cc-cipherbox_2095544c and cc-spotter_8463c716 (tune half): Claude Code answers the batch-mates
    # of a failed parallel call with `Sibling tool call errored` (newer: `Cancelled: parallel tool
    # call Bash(…) errored`); only the sibling's own error is the work's.
    b = SessionBuilder()
    b.user("look at the plans")
    b.bash("ls .planning/phases/12-mfa/*-PLAN.md", "(eval):1: no matches found: .planning/phases/12-mfa/*-PLAN.md",
           is_error=True)
    b.bash("git log --oneline -3", "<tool_use_error>Sibling tool call errored</tool_use_error>", is_error=True)
    b.call("Read", {"file_path": "/repo/a.md"},
           "<tool_use_error>Cancelled: parallel tool call Bash(ls .planning/phases/12-mfa/…) errored</tool_use_error>",
           True)
    ledger = extract_ledger(b.messages)
    assert [e.text for e in ledger.errors] == ["(eval):1: no matches found: .planning/phases/12-mfa/*-PLAN.md"]
    log = next(c for c in ledger.commands if c.command == "git log --oneline -3")
    assert log.status == "unknown" and log.exit_code is None
    assert ledger.file("/repo/a.md") is None  # it was never read


def test_a_call_pi_skipped_for_a_queued_message_is_no_error_and_no_outcome():
    # preloopdev/preloop (MIT), an oh-my-pi session in pi's format: the user queued a message, so the
    # batch's next call never ran (its text in pi-mono's agent-loop.ts is the first sentence alone).
    show = "git show e901fa0 --stat"
    for skipped in (read("pi_skipped_queued_message.txt"), "Skipped due to queued user message."):
        b = SessionBuilder()
        b.user("why did the evaluator change?")
        b.bash(show, skipped, is_error=True)
        ledger = extract_ledger(b.messages)
        assert ledger.errors == []
        assert next(c for c in ledger.commands if c.command == show).status == "unknown"


def test_pi_bash_placeholder_for_no_output_is_not_the_error():
    # preloopdev/preloop (MIT): pi's bash tool writes `(no output)` where the command printed
    # nothing; the failed run is then known by its exit status, not by the placeholder.
    b = SessionBuilder()
    b.user("is the tree clean?")
    b.bash("git status --short | grep -v '^??' && git diff --stat", read("pi_bash_no_output_exit_1.txt"), is_error=True)
    assert [e.text for e in extract_ledger(b.messages).errors] == ["Command exited with code 1"]


def test_a_web_search_that_finds_error_text_did_not_fail():
    # jdx/hk (MIT), a Codex Desktop session: code mode's `tools.web__run` search returned the
    # execve(2) man page, whose `E2BIG` and `EACCES` lines are what the page says, not the tool failing.
    b = SessionBuilder()
    b.user("how long may one argv string be?")
    b.call("web__run", {"search_query": [{"q": "site:man7.org linux execve E2BIG MAX_ARG_STRLEN"}]},
           read("codex_web_run_search.txt"))
    # a page that documents a harness's timeout notice is not that notice
    b.call("WebFetch", {"url": "https://example.com/faq"}, "## Troubleshooting\nCommand timed out after 120000 ms\n")
    ledger = extract_ledger(b.messages)
    assert ledger.errors == []
    assert not any(c.status == "failed" for c in ledger.commands)


def test_a_tap_not_ok_line_is_the_failed_test():
    # jdx/hk (MIT): bats under a mise task, polled by Codex's write_stdin. TAP's `not ok 6 …` names
    # the failed test, and bats-core's `#   `cmd' failed` diagnostic the assertion that failed; the plan
    # line `1..7` and the other `#` diagnostics (the output the assertion saw) are not the error.
    assert error_lines(read("bats_tap_not_ok_mise.txt")) == [
        "[test:bats:libgit2] not ok 6 check_list_files with non-zero exit should be an error",
        "[test:bats:libgit2] #   `assert_output --partial \"other-step – aborted\"' failed"]
    # bats-core's own test (test/trace.bats): the failed command, and a `run` whose status was wrong.
    assert error_lines("not ok 1 a complex failing test\n# (in test file t.bats, line 4)\n#   `[ $status -eq 0 ]' failed\n"
                       "# 123\n") == ["not ok 1 a complex failing test", "#   `[ $status -eq 0 ]' failed"]
    assert error_lines("not ok 2 x\n#   `run -1 false' failed with status 0\n") == [
        "not ok 2 x", "#   `run -1 false' failed with status 0"]
    assert error_lines("not ok 3 - parses dates # TODO not yet") == []  # a TODO test is expected to fail


def test_escaped_output_is_read_as_the_lines_it_encodes():
    # codex-desktop-entiresem_019f8eab (tune half; entireio/entire-sem, MIT), lines 73, 267, 667.
    # Codex's own failure report quotes the error with Rust's {:?}: the rejection is its first line,
    # and the API error object it quotes says why (its `"message"` under `"error": {`).
    assert error_lines(read("codex_exec_rejected.txt")) == [
        "exec_command failed for `/bin/zsh -lc 'entire login'`: CreateProcess { message: \"Rejected(\"This action was "
        "rejected due to unacceptable risk.",
        "This model is not supported when using X-OpenAI-Internal-Codex-Responses-Lite."]
    # A code-mode cell returning `JSON.stringify(r)`: the exit code and the tool's lines are inside.
    out = read("codex_code_mode_json.txt")
    assert exit_code_of(out) == 1
    assert error_lines(out) == [
        "mise ERROR error parsing config file: /private/tmp/entire-graph-trail10.saEL7x/mise.toml",
        "mise ERROR Config files in /private/tmp/entire-graph-trail10.saEL7x/mise.toml are not trusted."]
    # ... and under mise's task prefix, a go build error.
    assert error_lines(read("codex_code_mode_go_build.txt")) == ["[test:ci] internal/sem/search.go:1839:6: undefined: containsString"]
    # A literal backslash-n in ordinary output is only split, never turned into an error.
    assert error_lines('printf("done\\n")') == []


def test_pnpm_audits_summary_is_the_error_and_its_table_and_json_are_not():
    # opencode-nimbus_ses_30bfbb6f (tune half; dayhaysoos/nimbus, MIT), message 10: `pnpm audit
    # --audit-level high` exits 1 after a box-drawn advisory table; message 12: the same with --json.
    assert error_lines(read("pnpm_audit_table.txt")) == ["7 vulnerabilities found Severity: 4 moderate | 3 high"]
    data = read("pnpm_audit_json.txt")
    assert error_lines(data) == [] and first_meaningful_line(data) is None  # all of it is the report's data
    assert not first_meaningful_line(read("pnpm_audit_table.txt")).startswith("┌")


def test_a_diffs_changed_lines_are_file_content_not_errors():
    # the same session, message 28: `git diff --staged; git diff` of a change that renames error
    # fields (`-      error: error.code,` / `+      error: 'internal_error',`); it exited 0.
    diff = read("git_diff_staged.txt")
    assert "error: error.code," in diff and "error: 'internal_error'," in diff
    assert error_lines(diff) == []


def test_a_failed_cargo_build_scripts_cause_is_its_own_message_not_cargo_directives():
    # cc-orpheus_37b35585 (tune half; dougnukem/orpheus, MIT), the `tauri build` result of record
    # 064c8907: under `Caused by:` cargo prints the build script's `--- stdout`, whose
    # `cargo:KEY=VALUE` lines are instructions to cargo; the script's own error comes last.
    assert error_lines(read("cargo_build_script_failed.txt"))[-1] == (
        "resource path `binaries/orpheus-aarch64-apple-darwin` doesn't exist")
    assert not [line for line in error_lines(read("cargo_build_script_failed.txt"))
                if line.startswith(("cargo:", "--- std"))]


def test_a_chained_typescript_error_keeps_its_first_level_past_the_overload_preamble():
    # opencode-nimbus_ses_31a4b912 (tune half; dayhaysoos/nimbus, MIT), message 38: `tsc -b` in a
    # pnpm build prints TS2769 with its chain indented under it.
    assert error_lines(read("tsc_overload_chain.txt"))[0] == (
        "vitest.config.ts(5,13): error TS2769: No overload matches this call. "
        "Type 'Plugin<any>[]' is not assignable to type 'PluginOption'.")


def test_vitest_keeps_the_failed_tests_line_without_its_duration():
    # opencode-nimbus_ses_31a4b912 (tune half; dayhaysoos/nimbus, MIT), message 33: vitest 2.1.9's
    # default reporter lists `× suite > test 50ms` under the module line `❯ file (2 tests | 1 failed)`.
    assert error_lines(read("vitest_failed_test_list.txt")) == [
        'TestingLibraryElementError: Found multiple elements with the role "button" and name "Copy fix prompt"',
        "ERR_PNPM_RECURSIVE_RUN_FIRST_FAIL\u2009 @dayhaysoos/nimbus-report-ui@0.0.1 test: `vitest run`",
        "× ReportPage > copies finding fix prompt and shows toast",
        "FAIL  src/components/ReportPage.test.tsx > ReportPage > copies finding fix prompt and shows toast"]
    # Biome's `× message` lines are not a test: they stay with their header (biome tests above).
    assert error_lines("  × Using == may be unsafe if you are relying on type coercion.\n") == []


def test_rustfmt_check_keeps_one_diff_line_per_file():
    # cc-orpheus_37b35585 (tune half; dougnukem/orpheus, MIT), record 5a438f8e: `cargo fmt --all --
    # --check` as a mise task prints `Diff in <file>:<line>:` over each hunk, two in one file.
    assert error_lines(read("rustfmt_check_mise_task.txt")) == [
        "Diff in /Users/ddaniels/Dropbox/orpheus/crates/orpheus-tauri/src-tauri/build.rs:20:",
        "[rust:lint] ERROR task failed",
        LINT_MORE.format(n=1, rule="rustfmt")]


def test_opencodes_shell_metadata_says_the_user_aborted_the_command():
    # opencode-bestcodes_ses_09378 (tune half; The-Best-Codes/bestcodes.dev, MIT), message 42: an
    # `npm install` the user stopped; opencode's note under `(no output)`, its tags taken off.
    assert error_lines(read("opencode_shell_aborted.txt")) == ["User aborted the command"]


def test_the_go_commands_own_errors_not_its_progress():
    # codex-exec-gitsync_019edb4d (tune half; entireio/git-sync, MIT), line 105: under the sandbox
    # the go command cannot write its module cache (exit 0); Codex's envelope around it is not.
    out = read("go_stat_cache_codex.txt")
    assert exit_code_of(out) == 0
    assert error_lines(out) == [
        "go: writing stat cache: open /Users/soph/go/pkg/mod/cache/download/entire.io/entire/git-sync/@v/"
        "v0.7.1-0.20260618151520-ffb3b67940f6.info199073342.tmp: operation not permitted"]
    # pi-authgo_019e44d4 (tune half), line 154: `go: downloading …` is progress (checked above).
    assert not [line for line in error_lines(read("govulncheck_mise_task.txt")) if line.startswith("go: ")]


def test_ruff_keeps_each_rule_once_with_its_location():
    # cc-langlearntts_0742cd3c (tune half; punt-labs/langlearn-tts, MIT), record 49cddfe6: `ruff
    # check` in its default `full` format, two E501s printed twice; each code line has its `-->`.
    assert error_findings(read("ruff_check_full.txt")) == [
        ("E501 Line too long (93 > 88)", "--> tests/conftest.py:150:89"),
        (LINT_MORE.format(n=2, rule="python lint"), None)]  # the repeat of the first is the same fact
    # The code frame's lines and `Found 2 errors.` are not errors; a code without a location is prose.
    assert error_lines("E501 is the line-length rule.\n") == []


def go_string(name: str, key: str) -> str:
    """The message a Go test expects (`wantErrMsg: "…"`): the line the tool prints."""
    m = re.search(key + r'\s*(?::|:=)?\s*"((?:[^"\\]|\\.)*)"', read(name))
    assert m, name
    return m.group(1)


def test_curl_keeps_its_exit_message():
    # curl's own test expectations (tests/data/test24, test749) and a docs page quoting a refused connection.
    assert error_lines(read("curl_http_error_22.txt")) == ["curl: (22) The requested URL returned error: 404"]
    assert error_lines(read("curl_connect_tunnel_failed_7.txt")) == ["curl: (7) CONNECT tunnel failed, response 400"]
    assert error_lines(read("curl_connect_refused_7.txt")) == [
        "curl: (7) Failed to connect to httpbin.kyma-goat.ga port 443: Connection refused"]


def test_postgres_messages_keep_their_position_line():
    # PostgreSQL's regression output (psql's): two spaces after the severity, `LINE n:` under it.
    assert error_findings(read("postgres_error_relation_does_not_exist.txt")) == [
        ('ERROR:  relation "nonesuch" does not exist', "LINE 1: select * from nonesuch;"),
        ('ERROR:  column "nonesuch" does not exist', "LINE 1: select nonesuch from pg_database;")]
    # The server's log at start-up (the docs' examples): the FATAL, and the bind failure that caused it.
    assert error_lines(read("postgres_fatal_address_already_in_use.txt")) == [
        'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use',
        "FATAL:  could not create any TCP/IP sockets"]
    assert error_lines(read("postgres_fatal_no_space_left_on_device.txt")) == [
        "FATAL:  could not create semaphores: No space left on device"]
    assert error_lines(read("postgres_fatal_role_does_not_exist_old.txt")) == [
        'createdb: could not connect to database postgres: FATAL:  role "joe" does not exist']
    assert error_lines(read("psql_error_connection_refused.txt")) == [
        'psql: error: connection to server at "server.joe.com" (123.123.123.123), port 5432 failed: Connection refused']


def test_github_cli_docker_and_kubectl_api_errors():
    # gh's and kubectl's own test expectations (the string each prints), docker's docs session.
    for name, key in (("gh_http_404_not_found.txt", "wantErrMsg"), ("gh_graphql_could_not_resolve.txt", "wantErrMsg"),
                      ("kubectl_error_from_server_notfound.txt", "expectedErr")):
        line = go_string(name, key)
        assert error_lines(line) == [line]
    assert error_lines(read("docker_error_response_from_daemon.txt")) == [
        "Error response from daemon: Container mycontainer is paused, unpause the container before exec"]
    assert error_lines(read("strerror_operation_not_permitted.txt")) == [
        "fuse: failed to open /dev/fuse: Operation not permitted", "fusermount: mount failed: Operation not permitted"]
    # The listing around it (`docker ps`, a container's status) and prose naming a status code are not errors.
    assert error_lines("HTTP 404 is what a missing page returns.\nGraphQL:is a query language\n") == []


def test_ruby_and_rspec_failures():
    # error_highlight's README (Ruby < 3.4 quoting): the line is its own location; the caret and `from` lines are not errors.
    assert error_lines(read("ruby_nomethoderror.txt")) == [
        "test.rb:2:in `extract_value': undefined method `[]' for nil:NilClass (NoMethodError)"]
    # rspec-core's README: the failing line with the matcher's expected/got and its spec frame, then the example.
    assert error_findings(read("rspec_failure.txt")) == [
        ("Failure/Error: expect(Calculator.new.add(1, 2)).to eq(3) expected: 3 got: nil",
         "# ./spec/calculator_spec.rb:6:in `block (3 levels) in <top (required)>'"),
        ("rspec ./spec/calculator_spec.rb:5 # Calculator#add returns the sum of its arguments", None)]


def test_phpunit_keeps_the_assertion_where_it_failed_then_the_test():
    # PHPUnit's end-to-end expectation (`%s` is the .phpt format's placeholder for the directory).
    assert error_findings(read("phpunit_failure.txt")) == [
        ("Failed asserting that false is true.", "%sIssue5493Test.php:19"),
        ("1) PHPUnit\\TestFixture\\Issue5493\\Issue5493Test::testOne", None)]
    assert error_lines("Steps:\n1) Foo::bar\n") == []  # a numbered list without PHPUnit's heading


def test_python_logging_errors_not_its_lower_levels_nor_a_passing_unittest_run():
    # CPython's logging HOWTO: DEBUG/INFO/WARNING lines are not errors.
    assert error_lines(read("python_logging_basic_format.txt")) == [
        "ERROR:root:And non-ASCII stuff, too, like Øresund and Malmö"]
    assert error_lines(read("python_unittest_verbose.txt")) == []  # the unittest docs' passing run


def test_gradle_keeps_what_went_wrong_before_its_summary():
    # Gradle's userguide snippet output: the message under `* What went wrong:`, then the summary line.
    out = read("gradle_build_failed.txt")
    assert error_lines(out) == ["* What went wrong: Execution failed for task ':taskX'.",
                                "FAILURE: Build failed with an exception."]
    assert not only_summaries(error_lines(out)) and only_summaries(["FAILURE: Build failed with an exception."])
    # A Kotlin compile under Gradle (issue threads): the compiler's `e:` line first, in both its forms.
    assert error_lines(read("kotlin_gradle_file_uri_unresolved.txt"))[0] == (
        "e: file:///C:/Users/..../AppData/Local/Pub/Cache/hosted/pub.dev/file_saver-0.2.9/android/src/main/kotlin/"
        "com/incrediblezayed/file_saver/Dialog.kt:79:33 Unresolved reference: FileUtils")
    assert error_lines(read("kotlin_gradle_legacy_unresolved.txt"))[:2] == [
        "e: /home/phelipe/Documentos/temp/TestCastle/node_modules/@castleio/react-native-castle/android/src/main/java/"
        "com/reactnativecastle/CastleModule.kt: (26, 35): Unresolved reference: VERSION_NAME",
        "* What went wrong: Execution failed for task ':castleio_react-native-castle:compileReleaseKotlin'."]
    # kotlinc's own CLI form is the GNU `file:line:col: error:` (Kotlin's test data).
    assert len(error_lines(read("kotlinc_cli_error.txt"))) == 2


def test_msbuild_errors_once_and_not_its_warnings():
    # dotnet build (an issue's log; MSBuild's spec doc): each error printed again under `Build FAILED.` is one fact.
    assert error_lines(read("dotnet_build_cs0103.txt")) == [
        "Controllers/MainController.cs(87,18): error CS0103: The name 'obj' does not exist in the current context "
        "[/opt/NBXplorer/NBXplorer/NBXplorer.csproj]"]
    assert [line[:40] for line in error_lines(read("dotnet_build_failed_msb4242.txt"))] == [
        "C:\\foo\\bar.csproj : error MSB4242: SDK R"]
    assert error_lines(read("dotnet_build_warning_cs0618.txt")) == []  # reviewdog's captured build: warnings only


def test_python_linters_and_type_checkers():
    # flake8's integration test: one line per code, a count of the rest.
    assert error_lines(read("flake8_f401.txt")) == [
        "./a.py:1:1: F401 'os' imported but unused", LINT_MORE.format(n=4, rule="python lint")]
    # ruff's CLI snapshots, concise and full: the same two diagnostics, the full one with its `-->`.
    assert error_lines(read("ruff_concise_f401.txt")) == [
        "input.py:1:8: F401 [*] `os` imported but unused", "input.py:2:5: F821 Undefined name `y`",
        "input.py:3:1: invalid-syntax: Cannot use `match` statement on Python 3.9 (syntax was added in Python 3.10)"]
    assert error_lines("invalid-syntax: is the rule ruff reports a parse error under\n") == []  # no location: prose
    assert error_findings(read("ruff_full_f401.txt")) == [
        ("F401 [*] `os` imported but unused", "--> input.py:1:8"), ("F821 Undefined name `y`", "--> input.py:2:5")]
    # pyright's CLI (a README's run): each error line; its indented continuation and the summary are not errors.
    assert [line.split(" - ")[0] for line in error_lines(read("pyright_cli_undefined_variable.txt"))] == [
        "xcp/xmlunwrap.py:32:13", "xcp/xmlunwrap.py:38:12", "xcp/xmlunwrap.py:81:38"]


def test_nextjs_type_error_keeps_its_location_and_shellcheck_one_line_per_code():
    # A Next.js maintainer's `next build` output: the type error with the `./file:line:col` above it.
    assert error_findings(read("nextjs_build_failed_to_compile.txt")) == [
        ("Type error: Type 'string' is not assignable to type 'number'.", "./app/page.tsx:3:5")]
    # ShellCheck's tty output (a PR's description): the finding with its `In file line N:` heading, once per message.
    assert error_findings(read("shellcheck_tty_sc2086.txt")) == [
        ("SC2086 (info): Double quote to prevent globbing and word splitting.", "In bin/run-tests.sh line 19:")]
    # ... and its gcc format (a linter plugin's docstring): four codes, four lines.
    assert [line.rsplit(" ", 1)[-1] for line in error_lines(read("shellcheck_gcc_sc2086.txt"))] == [
        "[SC2046]", "[SC2005]", "[SC2086]", "[SC2068]"]


def test_pre_commit_hook_failure_and_a_ci_annotation():
    # cc-lockcodemanager_ece33d9e (tune half; raman325/lock_code_manager, MIT), record ce090022: pre-commit's
    # hook statuses; only the failed one, with its hook id; Passed and Skipped hooks are no error.
    assert error_findings(read("precommit_hook_failed.txt")) == [
        ("fix requirements.txt.....................................................Failed"
         " - hook id: requirements-txt-fixer", None)]
    # ... record 95c2c0bc, `gh run view --log-failed`: github-script's core.setFailed message, annotated
    # `##[error]`; the step's `script:` input that quotes it is not the error.
    assert error_lines(read("gha_set_failed_log.txt")) == [
        "##[error]Repo is dirty after build! Run yarn build locally before pushing changes."]
    runner = "Python / Mypy\tUNKNOWN STEP\t2026-05-07T12:35:04.8455101Z ##[error]Process completed with exit code 1.\n"
    # Which step failed, not why: kept only where the log says nothing else.
    assert error_lines(runner) == ["##[error]Process completed with exit code 1."]
    assert error_lines(read("gha_set_failed_log.txt") + runner) == [
        "##[error]Repo is dirty after build! Run yarn build locally before pushing changes."]
    assert error_lines(runner.replace("##[error]", "##[warning]").replace("Process completed with exit code 1.",
                                                                          "Node.js 20 actions are deprecated.")) == []


def test_a_pytest_explanation_block_is_its_first_line():
    # pytest's reporting demo (doc/en/example/reportingdemo.rst): each failure's `E` block opens with what
    # failed; its diff lines under it (`- eggs`, `?     ^`) explain it. Three failures, three lines, each
    # with its crash location; before, the first two failures' diffs took the result's six lines.
    assert error_findings(read("pytest_reportingdemo.txt")) == [
        ("E       AssertionError: assert 'spam' == 'eggs'", "failure_demo.py:44: AssertionError"),
        ("E       AssertionError: assert 'foo 1 bar' == 'foo 2 bar'", "failure_demo.py:47: AssertionError"),
        ("E       assert [0, 1, 2] == [0, 1, 3]", "failure_demo.py:63: AssertionError")]


def test_a_go_module_error_is_read_to_the_end_of_its_requirement_path():
    # cc-safecastmcp_4df2f39a (tune half; Safecast/safecast-map-MCP, MIT), record b4572849: `go build` stops
    # on a module missing from go.sum; each error is `file:line:col: x requires`, then `\ty: msg`.
    assert error_lines(read("go_missing_sum_requires.txt"))[0] == (
        "/home/rob/go/pkg/mod/github.com/swaggo/files@v1.0.1/ab0x.go:15:2: github.com/swaggo/http-swagger@v1.3.4 "
        "requires golang.org/x/tools@v0.1.12: missing go.sum entry for go.mod file; to add it:")
    assert len(error_lines(read("go_missing_sum_requires.txt"))) == 3  # three importing files, the same path


def test_a_powershell_error_record_is_read_by_its_message():
    # cc-starcar_64c15364 (tune half; polecatspeaks/StarCar, MIT): a module's `throw` (line 124), a parse
    # error (line 590) and a native command's stderr (line 958), each an error record in PowerShell's
    # default view: message, position, excerpt, `+ CategoryInfo`, `+ FullyQualifiedErrorId`.
    assert error_lines(read("powershell_throw_record.txt")) == [
        "Unknown status 'Backlog'. Valid values: Done, In Progress, Todo"]
    assert error_lines(read("powershell_parser_error.txt")) == ["Missing expression after ','."]
    assert error_lines(read("powershell_native_command_error.txt")) == [
        'entire : no checkpoint or commit found matching "64c15364-0933-4d6d-9b2e-d1ddbc918f9f"']
    # the record's own lines are not messages: the position above the message of a parse error
    parse_at_prompt = ("At line:1 char:12\n+ Write-Host a,\n+             ~\nMissing expression after ','.\n"
                       "    + CategoryInfo          : ParserError: (:) [], ParentContainsErrorRecordException\n"
                       "    + FullyQualifiedErrorId : MissingExpressionAfterToken")
    assert error_lines(parse_at_prompt) == ["Missing expression after ','."]


def test_a_turbo_task_failure_is_kept_after_the_errors_that_caused_it():
    # cc-chkit_ae3fbe71 (tune half; obsessiondb/chkit, MIT), line 98: `npx turbo run typecheck --force`; tsc's
    # errors under turbo's `pkg:task: ` prefix, then turbo's own line naming the task that failed.
    lines = error_lines(read("turbo_typecheck_failed.txt"))
    assert lines[0].endswith("error TS2307: Cannot find module '@chkit/core' or its corresponding type declarations.")
    assert lines[-1] == ("@chkit/codegen:typecheck: ERROR: command finished with error: command "
                         "(/Users/marc/Workspace/chx/packages/codegen) /Users/marc/.bun/bin/bun run typecheck exited (2)")
    assert len(lines) == 4


def test_turbo_task_output_is_read_under_its_task_prefix():
    # cc-chkit_ae3fbe71 (tune half), line 288: `npx turbo run lint --force --filter='*'`; every line of a
    # task's output is prefixed `@chkit/plugin-typegen:lint: `, Biome's headers included.
    lines = error_lines(read("turbo_biome_lint_warnings.txt"))
    assert lines[0] == ("@chkit/plugin-typegen:lint: src/index.test.ts:337:11 lint/correctness/noUnusedVariables ! "
                        "This variable outFile is unused.")
    assert lines[-1] == "… 5 more lint errors in this output (biome)"
    # A location is not a task prefix: go test's `x_test.go:12: msg` keeps its file.
    assert error_lines("--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 3, want 4\nFAIL") == [
        "parse_test.go:12: got 3, want 4", "--- FAIL: TestParse (0.00s)"]


def test_a_module_tsc_could_not_resolve_is_kept_after_its_errors():
    # cc-chkit_ae3fbe71 (tune half), line 117: `npx tsc -p tsconfig.json --noEmit --traceResolution 2>&1 |
    # grep -A 20 "@chkit/core"`: the trace says why TS2307 `Cannot find module '@chkit/core'` failed.
    lines = error_lines(read("tsc_trace_resolution.txt"))
    assert lines[0] == "src/index.ts(9,8): error TS2307: Cannot find module '@chkit/core' or its corresponding type declarations."
    assert lines[-1] == "======== Module name '@chkit/core' was not resolved. ========"


def test_printing_a_source_or_doc_file_is_its_content_not_errors():
    # codex-cli-agentv_019efc87 (tune half), line 967: `sed -n '1,240p' …/SKILL.md` exits 0 and prints
    # a skill whose text quotes Copilot's `error: too many arguments. …`; line 1113 prints TypeScript
    # source. A log printed the same way, and the printer's own failure behind a pipe (cc-orpheus:
    # `cat x.sh | tail -15`, exit 0), are still errors.
    envelope = "Chunk ID: 0a7962\nWall time: 0.0000 seconds\nProcess exited with code 0\nOutput:\n"
    skill = ("1. **Launch syntax differs.** Copilot does NOT accept the prompt as argv:\n\n   ```text\n"
             "   error: too many arguments. Expected 0 arguments but got 1.\n   ```\n")
    b = SessionBuilder()
    b.user("spawn a review agent")
    b.tool("exec_command", {"cmd": "sed -n '1,240p' /home/entity/.agents/skills/workmux/SKILL.md"}, envelope + skill)
    b.tool("exec_command", {"cmd": "sed -n '2100,2220p' apps/cli/src/commands/eval/run-eval.ts"},
           envelope + "      error: budgetMsg,\n")
    b.tool("exec_command", {"cmd": "tail -20 /tmp/server.log"}, envelope + skill)
    b.tool("Bash", {"command": "cat scripts/build-cli-for-tauri.sh | tail -15"},
           "cat: scripts/build-cli-for-tauri.sh: No such file or directory")
    doc, source, log, missing = [a for a in scan_actions(b.messages) if a.command]
    assert doc.errors == [] and source.errors == [] and doc.status == source.status == "ok"
    assert log.errors == ["error: too many arguments. Expected 0 arguments but got 1."]
    assert missing.errors == ["cat: scripts/build-cli-for-tauri.sh: No such file or directory"]


def test_oxlint_miette_report_and_pnpm_lifecycle_failure():
    # opencode-prsui (tune half), message 7: `pnpm fix` runs oxlint, whose miette report off a
    # terminal uses the ASCII theme; the rule's line with its location and pnpm's summary; oxlint's count
    # where room is left (COUNT_ROWS).
    assert split_error_findings(read("oxlint_miette_ascii_pnpm.txt")) == ([
        ("eslint-plugin-import(consistent-type-specifier-style): Prefer using a top-level type-only import instead "
         "of inline type specifiers.", "registry/new-york/editable-chip.tsx:10:3"),
        ("[ELIFECYCLE] Command failed with exit code 1.", None),
    ], [("Found 0 warnings and 3 errors.", None)])  # the rule's two other lines say the same words: one fact
    assert error_lines("Found 0 warnings and 3 errors.\n") == ["Found 0 warnings and 3 errors."]  # all it says
    assert only_summaries(["Found 0 warnings and 3 errors.", "[ELIFECYCLE] Command failed with exit code 1."])
    # A line that opens with `x ` but has no miette snippet under it is no diagnostic.
    assert error_lines("x marks the spot\nnothing here\n") == []


def test_a_background_run_notice_is_the_harness_not_the_output():
    # cc-cipherbox_2095544c (tune half): Claude Code answers a `run_in_background` Bash call with its
    # own notice; the server's output is in the file it names, read by a later command.
    notice = ("Command running in background with ID: bad6bb9. Output is being written to: "
              "/private/tmp/claude-501/-Users-michael-Code-cipher-box/tasks/bad6bb9.output")
    assert output_excerpt(notice) is None and first_meaningful_line(notice) is None
    assert output_excerpt("Server ready on :3000\n" + notice) == "Server ready on :3000"


def test_miette_report_is_kept_with_its_cause():
    # uv's resolver: the `× message` says what failed, the `╰─▶` cause why.
    assert error_findings(read("uv_no_solution.txt")) == [(
        "No solution found when resolving dependencies:",
        "╰─▶ Because anyio was not found in the package registry and your project depends on anyio, we can "
        "conclude that your project's requirements are unsatisfiable.")]
    assert error_lines("× not a report without its cause\nplain text") == []


def test_terraform_diagnostic_box_with_its_range():
    assert error_findings(read("opentofu_diagnostic_error.txt")) == [("Error: Some error", "on source.tf line 1:")]


def test_vstest_failed_test_with_its_message():
    assert error_lines(read("vstest_failed_xunit.txt")) == [
        "Failed WindowLogger.Presentation.Tests.Forms.MainFormTests.RefreshActivityGrid_WithActivities_ShouldDisplayData"
        " Expected dataSource not to be <null>.",
        "Failed WindowLogger.Presentation.Tests.Forms.MainFormTests.RefreshActivityGrid_WithEmptyLog_ShouldDisplayCorrectly"
        " Expected dataSource not to be <null>."]
    assert error_lines("  Passed WindowLogger.Tests.Constructor_ShouldInitializeFormCorrectly [12 ms]") == []


def test_libtest_failures_and_a_rust_panic_with_its_message():
    # Rust 1.73+ prints the panic's message under its location; the failed tests' lines come after.
    assert error_lines(read("libtest_failed.txt")) == [
        "thread 'main' panicked at $DIR/test-panic-abort.rs:34:5: assertion failed: `(1 + 1 == 5)`",
        "test it_exits ... FAILED", "test it_fails ... FAILED"]


def test_go_race_report_with_its_first_project_frame():
    findings = error_findings(read("go_test_race.txt"))
    assert ("WARNING: DATA RACE",
            "/src/github.com/jstemmer/go-junit-report/testdata/src/race/race_test.go:9 +0x39") in findings
    assert error_lines(read("go_test_race.txt"))[-1] == "--- FAIL: TestRace (0.00s)"  # the test it failed


def test_jvm_uncaught_exception_as_printed():
    assert error_findings(read("jvm_uncaught_cats_effect.txt")) == [
        ('Exception in thread "main" java.lang.Throwable: Boom!', "at Example$.$anonfun$program$5(Main.scala:23)")]


def test_make_names_the_target_whose_recipe_failed():
    out = read("make_error1.txt")
    assert error_lines(out) == ["IndexError: list index out of range", "make: *** [results.txt] Error 1"]
    assert only_summaries(["make: *** [results.txt] Error 1"])  # which run failed, not why


def _snapshot_stderr(name: str) -> list[str]:
    """The `stderr` strings of a Jest snapshot file: what the CLI printed."""
    return re.findall(r'"stderr": "(.*?)",\n', read(name), re.S)


def test_prettier_check_files_and_syntax_errors():
    two, one = _snapshot_stderr("prettier_check_warn.snap")
    assert error_lines(two) == ["[warn] unformatted.js", "[warn] unformatted2.js",
                                "[warn] Code style issues found in 2 files. Run Prettier with --write to fix."]
    assert error_lines(one)[0] == "[warn] unformatted.js"
    (syntax,) = _snapshot_stderr("prettier_check_syntax_error.snap")
    assert error_lines(syntax) == ["invalid-1.js: SyntaxError: Unexpected token (1:8)",
                                   "invalid-2.js: SyntaxError: Unexpected token (1:8)"]
    assert error_lines("[warn] src/a.ts\nDone in 2s") == []  # a `[warn] x` with no check summary under it


def test_unittest_failure_report_names_each_test_after_its_error():
    lines = error_lines(textwrap.dedent(read("python_unittest_subtests.txt")))
    assert lines == ["AssertionError: 1 != 0", "FAIL: test_even (__main__.NumbersTest.test_even) (i=1)",
                     "FAIL: test_even (__main__.NumbersTest.test_even) (i=3)",
                     "FAIL: test_even (__main__.NumbersTest.test_even) (i=5)"]


def test_black_check_names_each_file_it_would_reformat():
    assert error_lines(read("black_check.txt")) == ["would reformat test.py"]  # not the summary or the `Oh no!`
    assert error_lines(read("black_cannot_format.txt")) == [
        "error: cannot format test.py: INTERNAL ERROR: Black produced code that is not equivalent to the source.  "
        "Please report a bug on https://github.com/psf/black/issues.  This diff might be helpful: /tmp/blk_kjdr1oog.log"]


def test_aws_cli_service_error_is_the_line():
    assert error_lines(read("aws_cli_access_denied.txt")) == [
        "An error occurred (AccessDenied) when calling the GetObject operation: Access Denied"]


def test_node_coded_error_is_the_exception_line_not_the_warning_or_the_source_excerpt():
    assert error_findings(read("node_err_module_not_found.out")) == [
        ("Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'i-dont-exist' imported from *", None)]  # node-internal frames only


def test_pytest_collection_error_summary_with_and_without_its_message():
    assert error_lines(read("pytest_collection_error_summary.txt")) == ["ERROR test_it.py - StopIteration: hello"]
    assert error_lines(read("pytest_collection_error_bare.txt")) == ["ERROR test_collecterror.py"]


def test_a_pydantic_validation_error_keeps_each_message_with_its_field():
    # pydantic's docs (docs/errors/errors.md, the printed `print(e)`): five errors, each message with its
    # `[type=…]` kept with the field location printed above it.
    # The header, which says what model they are about, comes after them (a heading).
    found = error_findings(read("pydantic_validation_errors.txt"))
    assert [at for _, at in found] == ["is_required", "gt_int", "list_of_ints.2", "a_float", "recursive_model.lng", None]
    assert found[-1][0] == read("pydantic_validation_errors.txt").split("\n", 1)[0]
    assert found[1] == ("Input should be greater than 42 [type=greater_than, input_value=21, input_type=int]", "gt_int")
    # cc-wakil_09cc95ef (tune half; ebridges/wakil, MIT), line 105: under pytest the lines carry `E`; the
    # block's first line is kept with its crash location, and the missing field's line after it.
    wakil = error_findings(read("pytest_pydantic_validation.txt"))
    assert wakil[0][1] == "src/wakil/skills/resolver.py:167: SkillResolutionError"
    assert wakil[1] == ("E             Field required [type=missing, input_value={'name': 'meeting-synthesis', "
                        "'skill_api': 1}, input_type=dict]", "description")
    # Without the `N validation errors for` header, a `[type=…]` line is someone's prose, not pydantic's.
    assert error_lines(read("pydantic_validation_errors.txt").split("\n", 1)[1]) == []


def test_git_usage_says_the_command_did_not_run():
    # cc-starcar_64c15364 (tune half; polecatspeaks/StarCar, MIT), line 247: `git revert … -q` printed its
    # usage and ran nothing; the script's next commands (`git log`, `ls`) printed on.
    assert error_lines(read("git_revert_usage.txt")) == [
        "usage: git revert [--[no-]edit] [-n] [-m <parent-number>] [-s] [-S[<keyid>]] <commit>..."]


def test_testify_keeps_what_failed_with_expected_and_actual():
    # HBOCodeLabs/infratest PR #6, quoted `go test` output: two failed testify assertions. The message
    # is the `Error:` label with its `expected:` / `actual  :` lines, located by `Error Trace:`; the
    # empty `foo_test.go:13:` line over the block is not a message, and the diff repeats the mismatch.
    assert error_findings(read("testify_not_equal.txt")) == [
        ('Error:          Not equal: expected: "a" actual  : "b"', "foo.go:11"),
        ("Error:          Should be true", "foo_test.go:13"),
        ("--- FAIL: TestAssertEqual (0.00s)", None),
    ]
    # Without `Error Trace:` above it, an `Error:` line is some other tool's (a shell's `Error: …`).
    assert all(at is None for _, at in error_findings("Error: connect ECONNREFUSED 127.0.0.1:5432"))


def test_a_missing_command_under_sh_and_jq_errors():
    # publi0/mikrotik-dns issue #13: a BuildKit plain-progress log (`#31 32.58 ` off each line); BusyBox
    # ash's `not found`, once though the build printed it three times.
    assert error_lines(read("buildkit_ash_not_found.txt")) == ["/bin/sh: pnpm: not found"]
    # jqlang/jq tests/shtest: each `jq: error` line, not the caret lines under them nor the count.
    lines = error_lines(read("jq_errors.txt"))
    assert len(lines) == 4 and all(line.startswith("jq: error") for line in lines)
    assert "jq: error (at <stdin>:1): Unfinished abandoned text at EOF at line 2, column 0" in lines


def test_a_suite_broken_one_way_is_named_by_its_first_failures_and_a_count():
    # cc-wakil (tune half), line 105: 19 FAILED lines, most of them one SkillResolutionError in one file.
    lines = error_lines(read("pytest_pydantic_validation.txt"))
    resolver = [x for x in lines if x.startswith("FAILED tests/unit/test_skills_resolver.py::")]
    assert len(resolver) <= 2
    assert lines[-1].startswith("… ") and lines[-1].endswith(" more failed tests in this output")


def test_zsh_glob_errors_stop_the_command():
    # cc-wakil_09cc95ef (tune half) line 15: Claude Code's Bash tool under zsh, `grep … --include=*.py`
    # unquoted; the harness did not flag it, but the command never ran.
    assert error_lines(read("zsh_no_matches.txt")) == ["(eval):1: no matches found: --include=*.py"]
    assert error_lines("no matches found: for the query") == []  # a program's own words, not zsh's


def test_sqlite3_yarn_mysql_and_vite_errors():
    # tursodatabase/turso issue #865: the sqlite3 shell's prepare error, not the caret lines under it.
    assert error_lines(read("sqlite3_parse_error.txt")) == ['Parse error: near "FROM": syntax error']
    # yarnpkg/yarn issue #5540 and meilisearch/meilisearch-js issue #147: yarn v1's `error` lines, not `info`.
    assert error_lines(read("yarn_unexpected_error.txt")) == [
        'error An unexpected error occurred: "https://registry.yarnpkg.com/material-design-icons/-/'
        'material-design-icons-3.0.1.tgz: ESOCKETTIMEDOUT".']
    assert error_lines(read("yarn_command_failed.txt")) == ["error Command failed with exit code 1."]
    assert error_lines("error handling is done in the middleware") == []  # prose, not yarn's category
    # shogo82148/actions-setup-mysql issue #1188: the mysql client refused the login, twice.
    assert len(error_lines(read("mysql_access_denied.txt"))) == 2
    # openai/openai-apps-sdk-examples issue #16 and unplugin/unplugin-vue-components issue #142: Vite's
    # logger tag stays (no task name), its time goes, the code frame under it is no error.
    assert error_lines(read("vite_import_analysis.txt")) == [
        '[vite] Internal server error: Failed to resolve import "/@fsC:/Users/user/openai-apps-sdk/'
        'openai-apps-sdk-examples/src/pizzaz/index.jsx" from "multi-entry:entry:pizzaz". Does the file exist?']
    assert error_lines(read("vite_timestamped.txt"))[0].startswith("[vite] Internal server error: Failed to resolve")


def test_git_push_names_the_ref_it_could_not_update_and_why():
    # keparlak/NumWordify session (a remote's branch protection) and chikachow/cyspbot (a lease gone stale)
    assert error_lines(read("git_push_remote_rejected.txt"))[0] == "! [remote rejected] master -> master (protected branch)"
    assert error_lines(read("git_push_stale_info.txt"))[0] == (
        "! [rejected]        github-app-token-exchange-selector -> github-app-token-exchange-selector (stale info)")


def test_xunit_failed_test_without_the_adapters_clock():
    # keparlak/NumWordify session: `dotnet test` with Turkish-localised VSTest output around xUnit's line
    assert error_lines(read("xunit_fail_dotnet_test_tr.txt")) == [
        "NumWordify.Tests.ValidationGapTests.Options_do_not_silently_drop_a_currency_code [FAIL]"]


def test_gh_auth_status_names_the_account_it_could_not_log_in():
    # chikachow/cyspbot session (Codex exec_command envelope around it); the host line above is no error
    assert error_lines(read("gh_auth_status_invalid_token.txt")) == [
        "X Failed to log in to github.com account cysp (default)"]


def test_oxfmt_check_lists_the_unformatted_files_and_its_count():
    # chikachow/cyspbot session; the second file's line has the config notice run on at its end
    lines = error_lines(read("oxfmt_check.txt"))
    assert lines[:2] == ["test/support/oidc.ts", "Format issues found in above 2 files. Run without `--check` to fix."]
    assert "Checking formatting..." not in lines


def test_actions_oidc_failure_keeps_the_services_answer_from_the_untimed_log_lines():
    # chikachow/cyspbot session: `gh run view --log`, where a message's later lines carry no timestamp
    assert error_lines(read("gha_oidc_id_token_log.txt")) == [
        "##[error]Error message: Failed to get ID Token.",
        "Error Message: {\"source\":\"actions-run-service\",\"statusCode\":400,\"errorMessage\":\"Can't issue ID_TOKEN "
        "for audience 'https://github.com/apps/cyspbot'\"}"]


def test_gh_run_watch_keeps_the_failure_annotation_not_its_refresh_banner():
    # jdx/mise session (Codex exec_command envelope): `gh run watch … --exit-status` of a canceled run
    lines = error_lines(read("gh_run_watch_canceled.txt"))
    assert lines[0] == "X Canceling since a higher priority waiting request for hyperfine-refs/pull/10722/merge exists"
    assert not any(line.startswith("Refreshing run status") for line in lines)


def test_a_run_stopped_by_ctrl_c_with_nothing_printed_neither_passed_nor_failed():
    # jdx/mise session, lines 512-513: Codex's write_stdin of Ctrl-C ends a `gh run watch` (exit 130)
    raw = (FIXTURES.parent / "codex-desktop-mise_019f2387-40a7-7151-a232-8ebb871f52ba.jsonl").read_text().split("\n")
    session = codex.load([json.loads(raw[n - 1]) for n in (1, 7, 512, 513)])
    [action] = [a for a in scan_actions(session.messages) if a.has_result]
    assert (action.exit_code, action.status, action.errors) == (130, "unknown", [])


def test_java_launcher_refusal_keeps_its_cause():
    # gmeligio/flutter-docker-image session: kotlinc's K2JVMCompiler run on a classpath missing kotlin-stdlib
    assert error_lines(read("java_launcher_main_class.txt"))[0] == (
        "Error: Unable to initialize main class org.jetbrains.kotlin.cli.jvm.K2JVMCompiler "
        "Caused by: java.lang.NoClassDefFoundError: kotlin/jvm/internal/markers/KMappedMarker")


def test_bats_says_how_many_tests_never_ran():
    # jdx/fnox: `mise run test:bats` with `-j` and no GNU parallel: bats ran none of its 20 tests
    assert error_lines(read("bats_count_mise_task.txt")) == [
        "/Users/jdx/src/fnox/test/bats/libexec/bats-core/bats-exec-suite: line 314: parallel: command not found",
        "# bats warning: Executed 0 instead of expected 20 tests", "[test:bats] ERROR task failed"]
    assert only_summaries(["# bats warning: Executed 0 instead of expected 20 tests"])


def test_hk_step_line_keeps_its_step_and_its_reprint_is_the_same_error():
    # jdx/fnox: `mise run lint` runs hk, which prints clippy's lines as `  cargo-clippy – …` among the
    # other steps' progress, then the failed step's stderr again, unprefixed
    assert error_findings(read("hk_clippy_step_mise_task.txt")) == [
        ("cargo-clippy – error: this `if` statement can be collapsed", "--> crates/fnox-core/src/providers/mod.rs:402:5"),
        ("[lint] ERROR task failed", None)]


def test_a_status_bullet_at_the_line_start_is_not_a_jest_failure():
    # Nomos-N4s/nomos: `entire status` prints `● Enabled · branch main`; Jest indents its `  ● test`
    assert error_lines(read("entire_status_bullet.txt")) == []
    assert "● use some imported macro to make assertion" in error_lines(read("jest_toequal.txt"))


def test_bash_unclosed_quote_named_by_the_shell_path():
    # Nomos-N4s/nomos: a heredoc whose quote never closes, under Git Bash's `/usr/bin/bash -c`
    assert error_lines(read("bash_unexpected_eof.txt")) == [
        "/usr/bin/bash: -c: line 176: unexpected EOF while looking for matching `''"]


def test_a_docstring_raises_entry_printed_with_the_source_is_not_an_exception():
    # Nomos-N4s/nomos: a patch script prints the edited class, whose Google-style docstring lists
    # `Raises:` / `    ValueError: If the threshold …`
    out = read("python_docstring_raises_printed.txt")
    assert "        ValueError: If the threshold or holder count is not a valid t-of-n" in out.splitlines()
    assert error_lines(out) == []


def test_rust_panics_and_stack_overflows_with_the_thread_id_of_rust_1_91():
    # preloopdev/preloop (MIT), an oh-my-pi session (tune half), lines 254 and 88: since Rust 1.91
    # (rust-lang/rust#115746) the panic and the stack-overflow lines carry the OS thread id.
    assert error_lines(read("rust_panic_thread_id.txt"))[0] == (
        "thread 'tests::fork_pr_runs_get_read_only_cache_access' (1483513954) panicked at "
        "crates/preloop-runner-server/src/lib_tests.rs:6699:5: assertion `left == right` failed: "
        "fork PR run must not reserve a cache entry")
    assert error_lines(read("rust_stack_overflow_thread_id.txt"))[0] == (
        "thread 'tests::official_semantics::expressions_within_depth_limit_still_parse' (1482512339) has overflowed its stack")
    assert error_lines("thread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n") == [
        "thread 'main' has overflowed its stack"]  # before Rust 1.91


def test_gh_failure_lines():
    # The same session, line 70: `gh pr merge` refused, gh's failure icon `X` before the message.
    assert error_lines(read("gh_pr_merge_not_mergeable.txt")) == [
        "X Pull request preloopdev/preloop#140 is not mergeable: the merge commit cannot be cleanly created."]
    # jdx/hk (MIT), a Codex Desktop session (tune half), line 898: `gh api graphql` on a GraphQL error.
    assert error_lines(read("gh_api_graphql_error.txt")) == ["gh: Parent comment is already in a thread, cannot reply to it"]
    # flop-labs/technocore-chat (Apache-2.0), a Claude Code session (tune half), line 18: `gh pr view` in a
    # checkout whose remotes gh cannot map to a GitHub host (its exit status hidden by `| head`).
    assert error_lines(read("gh_no_github_remote.txt")) == [
        "none of the git remotes configured for this repository point to a known GitHub host. To tell gh about a "
        "new GitHub host, please use `gh auth login`"]
    # A failed step in `gh run view`'s job tree is indented under its job: the annotation says why.
    assert error_lines("X main CI · 28607765286\nX Build in 2m (ID 1)\n  ✓ Set up job\n  X Run cargo build\n\n"
                       "ANNOTATIONS\nX Process completed with exit code 101.\nbuild: .github#12\n") == [
        "X Process completed with exit code 101."]  # the run header and the job line (RenderJobs) are not errors
    assert error_lines("X O X\nO X O\n") == []  # a board, not gh
    # A CI annotation and the same line printed plainly in one output are one line.
    assert error_lines("Error: boom happened\n##[error]Error: boom happened\n") == ["Error: boom happened"]


def test_esbuild_and_a_linters_closing_count():
    # eitatech/gatomia-vscode (MIT), an opencode export (tune half), message 46: vitest on a `.ts` test holding
    # JSX; vite's esbuild transform fails, `file:line:col: ERROR: text` under `Transform failed with 1 error:`.
    lines = error_lines(read("esbuild_transform_failed_vitest.txt"))
    assert lines[:2] == ["Error: Transform failed with 1 error:",
                         "/Users/t798157/Projects/lab/gatomia-vscode/tests/unit/webview/cloud-agent-progress-view.test.ts:11:31: "
                         "ERROR: Expected \">\" but found \"/\""]
    # ... message 55: `npm run check` (Biome through ultracite): the rules' lines first, the closing count where
    # room is left; ruff's count is the same sentence (crates/ruff printer.rs).
    first, further = split_error_findings(read("biome_check_found_errors.txt"))
    assert first[0][0].startswith("src/extension.ts:152:1 lint/style/useConsistentTypeDefinitions")
    assert [text for text, _ in further] == ["Found 29 errors."]
    assert split_error_findings("x.py:1:8: F401 [*] `os` imported but unused\nFound 1 error.\n")[1] == [
        ("Found 1 error.", None)]
    assert error_lines("Found 0 warnings and 0 errors.\n") == []


def test_codex_tool_failures_that_quote_the_output():
    # blackgirlbytes/pretext-handwriting-demo (MIT), a Codex CLI session (tune half), line 308: the sandbox stopped
    # `npm run dev`; Codex reports it with Rust's Debug, `SandboxDenied { message: "…\r\n…" }`, the output escaped
    # once (its quotes are not): node's `Error: listen EPERM …` is one of the lines it encodes.
    assert error_lines(read("codex_sandbox_denied_listen.txt")) == [
        "exec_command failed for `/bin/zsh -lc 'npm run dev'`: SandboxDenied { message: \"",
        "Error: listen EPERM: operation not permitted 0.0.0.0:3000"]
    # ... line 937: a poll of a session started without a tty.
    assert error_lines(read("codex_write_stdin_closed.txt")) == [
        "write_stdin failed: stdin is closed for this session; rerun exec_command with tty=true to keep stdin open"]


def test_claude_code_refusals_are_the_line_up_to_their_reason():
    # darthzen/neuvector-mcp (Apache-2.0), a Claude Code 2.1.220 session (tune half), line 75: the auto mode
    # classifier's denial; what follows the reason is Claude Code's instructions to the model, the same every time.
    assert error_lines(read("claude_code_auto_mode_denial.txt")) == [
        "Permission for this action was denied by the Claude Code auto mode classifier. Reason: Blocked by classifier."]
    # ... line 47: the user rejected the call; its first line (the note under it is for the model).
    assert error_lines(read("claude_code_tool_use_rejected.txt")) == [
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, "
        "the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how "
        "to proceed."]
    assert error_lines("Permission for this action has been denied. Reason: writes outside the project") == [
        "Permission for this action has been denied. Reason: writes outside the project"]


def test_a_refusal_of_several_calls_is_one_error():
    # The same denial of two different commands is one failure seen twice, not two long lines.
    denial = read("claude_code_auto_mode_denial.txt")
    session = (SessionBuilder().user("deploy it")
               .tool("Bash", {"command": "kubectl apply -f deploy.yaml"}, denial, is_error=True)
               .tool("Bash", {"command": "kubectl rollout restart deploy/api"}, denial, is_error=True).build())
    ledger = extract_ledger(session.messages)
    assert [(e.text, e.attempts) for e in ledger.errors] == [
        ("Permission for this action was denied by the Claude Code auto mode classifier. Reason: Blocked by classifier.", 2)]


def test_build_and_server_log_errors():
    # The same repository, another session (line 134): BuildKit's plain progress, a RUN step failing.
    assert error_lines(read("buildkit_plain_step_error.txt")) == [
        '#5 ERROR: process "/bin/sh -c python3 -c \\"import sys; print(sys.version)\\"" did not complete '
        "successfully: exit code: 1",
        'error: failed to solve: process "/bin/sh -c python3 -c \\"import sys; print(sys.version)\\"" did not '
        "complete successfully: exit code: 1"]
    # ... a third session, line 403: the server's log, uvicorn's `ERROR:    ` level prefix.
    assert error_lines(read("uvicorn_log_errors.txt")) == ["ERROR:    ASGI callable returned without completing response."]
    assert error_lines("CRITICAL: 0\nHIGH: 3\n") == []  # a scanner's severity counts, not a log line
    # ... the second session, line 482: an MCP tool call failing pydantic's validation; the header names the call.
    assert error_lines(read("pydantic_mcp_tool_call.txt")) == [
        "Missing required argument [type=missing_argument, input_value={'target': 'registry', 'name': 'ash4d-harbor'}, "
        "input_type=dict]",
        "Unexpected keyword argument [type=unexpected_keyword_argument, input_value='ash4d-harbor', input_type=str]",
        "2 validation errors for call[nv_trigger_scan]"]


def test_a_raw_job_log_keeps_the_runner_exit_only_where_it_says_nothing_else():
    # codex-desktop-mise (tune half; jdx/mise, MIT), line 718: `gh api …/actions/jobs/N/logs`, a job's raw
    # log (the runner's timestamp alone on each line): cargo-deny's report names no error line, so the
    # runner's annotation is what says the step failed.
    assert error_lines(read("gha_raw_log_runner_exit.txt")) == ["##[error]Process completed with exit code 1."]
    # ... line 1534: the tail of a nightly build; cargo's `process didn't exit successfully` says why, and
    # cargo's `could not compile` and the runner's exit only count it: kept past the bound, where room is left.
    kept, further = split_error_findings(read("gha_raw_log_cargo_failed.txt"))
    assert [line for line, _ in kept] == ["process didn't exit successfully: [… 4281 chars cut …] (exit status: 101)"]
    assert [line for line, _ in further] == ["error: could not compile `rattler_package_streaming` (lib)",
                                             "##[error]Process completed with exit code 101."]
    # Another program's ISO time (tracing's six fraction digits) is part of its line, not a runner's prefix.
    assert error_lines("2026-07-01T20:53:27.097221Z Process completed with exit code 1.\n") == []


def test_a_failed_bats_test_output_is_read_without_its_tap_comment():
    # codex-desktop-hk (tune half; jdx/hk, MIT), line 858: bats under mise tasks; under `not ok 209`, bats'
    # own diagnostics (`# (in test file …)`, the failed command), then what the test printed behind `# `:
    # git's unknown-command error. A passing test's `ok` ends the block.
    assert error_lines(read("bats_tap_output_git_lfs.txt")) == [
        "[test:bats] not ok 209 post-checkout hook_args works with git-lfs",
        "[test:bats] #   `git lfs install --local' failed",
        "[test:bats] git: 'lfs' is not a git command. See 'git --help'.",
        "[test:bats] not ok 211 post-merge hook_args works with git-lfs"]
    # Outside a failed test a `# ` line is a TAP comment, not output.
    assert error_lines("ok 1 a\n# git: 'lfs' is not a git command. See 'git --help'.\n") == []
    # Tasks run in parallel interleave: one task's failed test does not make another's comments output.
    assert error_lines("[test:a] not ok 1 x\n[test:b] # fatal: not a git repository\n") == ["[test:a] not ok 1 x"]


def test_journalctl_lines_are_read_without_the_syslog_prefix():
    # pi-preloop_01a025c5 (tune half; preloopdev/preloop, MIT), line 616:
    # `journalctl -u preloop`: time, host, `preloop[1701]: `, then the service's own lines.
    # short-iso with systemd 255's offset, short-iso-precise
    assert error_lines("2023-09-08T17:20:30+02:00 tarta app[20911]: Error: boom\n"
                       "2023-09-08T17:20:30.655028+0200 tarta app[20911]: Error: bust\n") == ["Error: boom", "Error: bust"]
    assert error_lines(read("journalctl_short_service_errors.txt")) == [
        "Error: agent operation failed: rejuvenate clone: identity reset could not be confirmed after 3 attempts: "
        "exec: io operation failed: Resource temporarily unavailable (os error 11)"]


def test_a_json_log_record_keeps_its_error_attribute():
    # cc-imessagemail (tune half; stat-guy/imessage-mail), line 41: Entire CLI's log (Go log/slog
    # JSONHandler); the INFO records without an error are not errors, the WARN one's `error` is.
    assert error_lines(read("slog_json_error_attribute.txt")) == [
        "failed to initialize session: failed to get HEAD: reference not found"]
    assert error_lines('{"level":"info","msg":"done","error":""}\n') == []
    # The record's own attribute, not a nested one; the record whole, though zap adds an escaped stack.
    assert error_lines('{"level":"warn","msg":"m","err":"top-level cause","details":{"error":"nested"}}\n') == [
        "top-level cause"]
    assert error_lines('{"level":"error","msg":"m","error":"apply: conflict","stacktrace":"main.run\\n\\tmain.go:42"}\n') == [
        "apply: conflict"]
    # Its time is no part of the error, which another row would otherwise take the whole line for.
    assert error_lines('{"time":"2026-07-02T16:22:39Z","level":"ERROR","msg":"w","error":"open /x: Permission denied"}\n') == [
        "open /x: Permission denied"]


def test_an_http_error_status_line_and_an_oauth_error_body():
    # cc-neuvectormcp_579f4d9b (tune half; darthzen/neuvector-mcp), line 114: `curl -i` on an MCP server:
    # the status line, then RFC 6750's `{"error": "invalid_token", "error_description": …}`.
    assert error_lines(read("curl_include_401_oauth.txt")) == [
        "HTTP/1.1 401 Unauthorized",
        "Authentication failed. The provided bearer token is invalid, expired, or no longer recognized by the server. "
        "To resolve: clear authentication tokens in your MCP client and reconnect. Your client should automatically "
        "re-register and obtain new tokens."]
    assert error_lines("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}\n") == []
    # `curl -v --digest`: the first answer asks for credentials, the second is the outcome.
    assert error_lines("< HTTP/1.1 401 Unauthorized\n< WWW-Authenticate: Digest realm=x\n> GET / HTTP/1.1\n"
                       "< HTTP/1.1 200 OK\n") == []


def test_zsh_refusing_to_run_a_command():
    # cc-orpheus (tune half; dougnukem/orpheus, MIT), line 731: Claude Code's Bash tool on a zsh login
    # shell runs the command under `eval`; the binary is not executable (exit 126).
    assert error_lines(read("zsh_eval_permission_denied.txt")) == [
        "(eval):1: permission denied: /Users/ddaniels/Dropbox/orpheus/target/release/bundle/macos/Orpheus.app/"
        "Contents/MacOS/orpheus"]


def test_powershell_command_not_found_as_the_console_wraps_it():
    # MicrosoftDocs/PowerShell-Docs @ 27138b2 (CC-BY-4.0), reference/docs-conceptual/learn/ps101/
    # 10-script-modules.md lines 42-51: Windows PowerShell 5.1's error record, wrapped at the console's
    # width; the line naming the command comes first.
    # The record's last wrapped line is no message of its own; the category line's wrapped continuation
    # is a bare exception name, which .NET and the JVM print as an error line of its own.
    assert error_lines(read("powershell_command_not_found.txt")) == [
        "Get-MrPSVersion : The term 'Get-MrPSVersion' is not recognized as the name", "CommandNotFoundException"]


def test_cmake_error_keeps_its_location_and_message():
    # Kitware/CMake @ 03676b0 (BSD-3-Clause), Tests/RunCMake/GeneratorInstance/NoInstance-stderr.txt: the
    # test's expected stderr, its regular-expression escapes removed; the call stack is not the error.
    assert error_lines(read("cmake_error_at_message.txt")) == [
        "CMake Error at NoInstance.cmake:2 (message): CMAKE_GENERATOR_INSTANCE is empty as expected."]
    # The message is on the header's line: the line under it (pip indents a build's output) is not it.
    assert error_lines("      CMake Error: The current CMakeCache.txt directory /b is different\n"
                       "      -- Configuring incomplete, errors occurred!\n") == [
        "CMake Error: The current CMakeCache.txt directory /b is different"]

