"""Exact error lines from real transcript excerpts (tests/fixtures, NOTICE.md), per format.

Each excerpt is copied verbatim from the tool result (or harness text) named in its comment;
the extractor must keep the error line itself, verbatim, and nothing around it.
"""

from __future__ import annotations

from worker.facts.output import error_lines, unwrap_line

# cc-meow-ja line 536: `golangci-lint run` on all code (gocritic finding), Claude Code Bash result.
MEOW_GOCRITIC = (
    "Exit code 1\n"
    "cmd/meow/main.go:106:24: emptyStringTest: replace `len(args[0]) > 0` with `args[0] != \"\"` (gocritic)\n"
    "\t\tif len(args) >= 1 && len(args[0]) > 0 && args[0][0] != '-' {\n"
    "\t\t         ^\n"
)
# cc-meow-ja line 521: `gh run view --log-failed` output, GitHub Actions log prefix and ANSI.
MEOW_CI_LOG = (
    "lint\tRun golangci-lint\t2026-03-03T08:32:11.9188410Z level=warning msg=\"[runner] Can't process results by "
    "diff processor: can't prepare diff by revgrep: could not read git repo: error executing \\\"git diff --color=never "
    "--no-ext-diff --default-prefix --relative origin/main --\\\": exit status 128: fatal: bad revision 'origin/main'\\n\"\n"
    "lint\tRun golangci-lint\t2026-03-03T08:32:11.9225654Z ##[error]compiler/compiler.go:100:20: Error return value "
    "of `os.RemoveAll` is not checked (errcheck)\n"
    "lint\tRun golangci-lint\t2026-03-03T08:32:11.9227487Z \tdefer os.RemoveAll(tmpDir)\n"
)
# cc-meow-ja line 350: the same log format, golangci-lint v1 refusing Go 1.26.
MEOW_GO_VERSION = (
    "lint\tRun golangci-lint\t2026-03-03T08:19:14.9938423Z Error: can't load config: the Go language version (go1.24) "
    "used to build golangci-lint is lower than the targeted Go version (1.26.0)\n"
    "lint\tRun golangci-lint\t2026-03-03T08:19:14.9950000Z Failed executing command with error: can't load config\n"
)
# cc-meow-ja line 289: a `!git rm --cached meow` the user ran; Claude Code wraps it as user text.
MEOW_BASH_STDOUT = ("<bash-stdout>fatal: pathspec 'meow' did not match any files\n</bash-stdout>"
                    "<bash-stderr>fatal: pathspec 'meow' did not match any files\n</bash-stderr>")
# cc-spotter line 1327: `mix test` (ExUnit) failures.
SPOTTER_EXUNIT = (
    "  1) test subagent rendering subagent click updates clicked_subagent state (SpotterWeb.SessionLiveTest)\n"
    "     test/spotter_web/live/session_live_test.exs:163\n"
    "     ** (ArgumentError) expected selector \".subagent-badge\" to return a single element, but got none within: \n"
    "\n"
    "     <div class=\"header\"><a href=\"/\">Spotter</a></div>\n"
    "\n"
    "     code: assert html =~ \"is-user\"\n"
)
# pi_large-session line 62: `npm run check` (tsgo).
PI_TSC = (
    "\n> @mariozechner/pi-coding-agent@0.7.29 check\n> tsgo --noEmit\n\n"
    "../tui/test/chat-simple.ts(28,2): error TS2739: Type '{ description: ChalkInstance; noMatch: any; }' is missing "
    "the following properties from type 'SelectListTheme': selectedPrefix, selectedText, scrollInfo\n"
)
# codex-desktop-sessionbridge line 1002: `pnpm test` (mocha) with one failure.
CODEX_MOCHA = (
    "    ✔ provider child rows expose transcript actions for checkpoint sessions\n"
    "    1) provider derives duration from timestamps when stored duration is zero\n"
    "    ✔ provider child rows expose attribution for checkpoint-backed sessions\n"
    "  45 passing (6s)\n"
    "  1 failing\n"
    "  1) Sessions UI\n"
    "       provider derives duration from timestamps when stored duration is zero:\n"
    "     AssertionError [ERR_ASSERTION]: The expression evaluated to a falsy value:\n"
    "\n"
    "  assert.ok(durationRow)\n"
)
# cc-cipherbox: a NestJS log with ANSI colours, and a Playwright network log.
CIPHERBOX_NEST = ("\x1b[31m[Nest] 87957  - \x1b[39m02/13/2026, 3:21:14 AM \x1b[31m  ERROR\x1b[39m \x1b[38;5;3m[IpnsService] "
                  "\x1b[39m\x1b[31mFailed to parse IPNS record: Error: Unsupported wire type 4\x1b[39m\n")
CIPHERBOX_NETWORK = ("[GET] http://localhost:3000/health => [200] OK\n"
                     "[POST] http://localhost:3000/ipfs/upload => [500] Internal Server Error\n")
CIPHERBOX_CLI = "Error: connect ECONNREFUSED ::1:5432\n    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1611:16)\n"


def test_go_lint_findings_are_kept_verbatim():
    assert error_lines(MEOW_GOCRITIC) == [
        "cmd/meow/main.go:106:24: emptyStringTest: replace `len(args[0]) > 0` with `args[0] != \"\"` (gocritic)"]


def test_a_ci_log_prefix_comes_off_the_line_and_the_annotation_stays():
    # The job, step and timestamp prefix is the log's; `##[error]` says a CI job printed the line.
    lines = error_lines(MEOW_CI_LOG)
    assert lines[1] == "##[error]compiler/compiler.go:100:20: Error return value of `os.RemoveAll` is not checked (errcheck)"
    assert "fatal: bad revision 'origin/main'" in lines[0] and lines[0].startswith("level=warning msg=")
    assert error_lines(MEOW_GO_VERSION)[0] == (
        "Error: can't load config: the Go language version (go1.24) used to build golangci-lint is lower than the "
        "targeted Go version (1.26.0)")


def test_harness_wrapped_text_is_mined_too():
    assert error_lines(MEOW_BASH_STDOUT) == ["fatal: pathspec 'meow' did not match any files"]
    reminder = "<system-reminder>\nPostToolUse:Edit hook output:\n" + PI_TSC + "</system-reminder>"
    assert error_lines(reminder) == [error_lines(PI_TSC)[0]]
    assert unwrap_line("<bash-stdout>error: x</bash-stdout>") == "error: x"


def test_exunit_failures_keep_the_test_without_its_counter():
    assert error_lines(SPOTTER_EXUNIT) == [
        "test subagent rendering subagent click updates clicked_subagent state (SpotterWeb.SessionLiveTest)",
        "** (ArgumentError) expected selector \".subagent-badge\" to return a single element, but got none within:",
        "code: assert html =~ \"is-user\"",
    ]


def test_typescript_error_line():
    assert error_lines(PI_TSC) == [
        "../tui/test/chat-simple.ts(28,2): error TS2739: Type '{ description: ChalkInstance; noMatch: any; }' is "
        "missing the following properties from type 'SelectListTheme': selectedPrefix, selectedText, scrollInfo"]


def test_mocha_failing_titles_and_node_assertion():
    assert error_lines(CODEX_MOCHA) == [
        "1) provider derives duration from timestamps when stored duration is zero",
        "1) Sessions UI",
        "AssertionError [ERR_ASSERTION]: The expression evaluated to a falsy value:",
    ]
    # Without mocha's `N failing`, a numbered line is just a list item.
    assert error_lines("Steps:\n1) build it\n2) ship it\n") == []


def test_logs_network_and_cli_errors():
    assert error_lines(CIPHERBOX_NEST) == [
        "[Nest] 87957  - 02/13/2026, 3:21:14 AM   ERROR [IpnsService] Failed to parse IPNS record: Error: "
        "Unsupported wire type 4"]
    assert error_lines(CIPHERBOX_NETWORK) == ["[POST] http://localhost:3000/ipfs/upload => [500] Internal Server Error"]
    assert error_lines(CIPHERBOX_CLI) == ["Error: connect ECONNREFUSED ::1:5432"]
    # cc-meow-ja line 143: the API error Claude Code printed, then the user pasted.
    api = ('API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by '
           'content filtering policy"},"request_id":"req_011CYfokuSwCgyRxW4fWzEWw"}')
    assert error_lines(api) == [api]
    # opencode-darkfactory: the context7 MCP tool's whole (status "completed") result.
    auth = "Invalid API key. Please check your API key. API keys should start with 'ctx7sk' prefix."
    assert error_lines(auth) == [auth]
    assert error_lines("Invalid input: expected a list") == []  # not every "Invalid" is an error line


def test_go_rust_and_localized_formats():
    # No fixture has these; the lines are the tools' own formats (go test, rustc, git zh_CN).
    # Issue 22: the `_test.go:N:` message is the line a developer quotes, not the `--- FAIL` heading
    # (real `go test` output: tests/facts/test_error_conventions.py).
    go = "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 1, want 2\npanic: runtime error: index out of range [3]\n"
    assert error_lines(go) == ["parse_test.go:12: got 1, want 2", "panic: runtime error: index out of range [3]",
                               "--- FAIL: TestParse (0.00s)"]
    rust = ("error[E0382]: borrow of moved value: `v`\n --> src/main.rs:4:20\n"
            "thread 'main' panicked at src/main.rs:9:5:\n")
    assert error_lines(rust) == ["error[E0382]: borrow of moved value: `v`", "thread 'main' panicked at src/main.rs:9:5:"]
    zh = "致命错误：不是 git 仓库（或者任何父目录）：.git\n构建失败\n全部测试通过\n"
    assert error_lines(zh) == ["致命错误：不是 git 仓库（或者任何父目录）：.git", "构建失败"]


def test_a_log_line_repeated_with_new_timestamps_is_one_error():
    """cc-cipherbox's API log: the same NestJS error every few seconds, each with its own time."""
    from tests.fakes import SessionBuilder
    from worker.facts.ledger import extract_ledger

    log = "\n".join(f"[Nest] 8795{i}  - 02/13/2026, 3:21:{10 + i} AM   ERROR [IpnsService] Failed to parse IPNS "
                    "record: Error: Unsupported wire type 4" for i in range(5))
    b = SessionBuilder()
    b.user("any ideas why the uploads are failing?")
    b.bash("tail -20 api.log", log)
    b.bash("tail -20 api.log", "[stderr] " + log.splitlines()[0].replace("3:21:10", "3:25:00"))
    errors = extract_ledger(b.messages).errors
    assert [e.text for e in errors] == [log.splitlines()[0]]


def test_codex_shell_command_calls_are_commands():
    """Codex Desktop runs its shell through a `shell_command` tool (codex-desktop fixture)."""
    from pathlib import Path

    from worker.facts.ledger import extract_ledger
    from worker.formats import load

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / (
        "codex-desktop-sessionbridge_019d7e8e-fef6-7481-9a1b-d8d36a852ac4.jsonl")
    commands = [c.command for c in extract_ledger(load(fixture).messages).commands]
    assert "pnpm test" in commands and "pnpm check-types" in commands


# pi-pidev line 47 (tune half): a `curl` of a reader API that answered with its JSON error body on one line.
PIDEV_JSON_ERROR = (
    '{"data":null,"code":451,"name":"SecurityCompromiseError","status":45102,"message":"Anonymous access to domain '
    'github.com blocked until Fri Apr 24 2026 07:17:51 GMT+0000 (Coordinated Universal Time) due to previous abuse '
    'found on https://github.com/JustArchiNET/ArchiSteamFarm/wiki/Configuration-zh-HK: DDoS attack suspected: Too '
    'many requests"}'
)


def test_a_json_error_body_on_one_line_keeps_its_message():
    assert error_lines(PIDEV_JSON_ERROR) == [
        "Anonymous access to domain github.com blocked until Fri Apr 24 2026 07:17:51 GMT+0000 (Coordinated Universal "
        "Time) due to previous abuse found on https://github.com/JustArchiNET/ArchiSteamFarm/wiki/Configuration-zh-HK: "
        "DDoS attack suspected: Too many requests"]
    # Fastify's validation reply (its test/schema-feature tests: statusCode, error, message) and RFC 9457's detail.
    assert error_lines('{"statusCode":400,"error":"Bad Request","message":"body must have required property \'name\'"}') == [
        "body must have required property 'name'"]
    assert error_lines('{"type":"about:blank","title":"Not Found","status":404,"detail":"order 12 does not exist"}') == [
        "order 12 does not exist"]
    # A success body, and JSON data that merely has a message, are no error.
    assert error_lines('{"ok":true,"status":200,"message":"created"}') == []
    assert error_lines('{"id":7,"message":"fix: typo","author":"x"}') == []
