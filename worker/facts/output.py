"""Tool output as facts: exact error lines, test tallies, exit codes, commits and branches.

Each rule matches one stripped output line of one known tool (pytest, ExUnit, mocha, jest, cargo,
tsc, go, golangci-lint, git, ...) and keeps the line verbatim: a small summarizer paraphrases
errors, so they are never taken from it. Unknown output yields nothing rather than a guess.
Any text is accepted, not only tool results: a line's harness wrapping (`<bash-stdout>`, a
`<system-reminder>` around hook output, ANSI colours, a CI log's `job<TAB>step<TAB>time` prefix)
is taken off before the rules see it, so an error a hook or the harness printed counts too.
"""

from __future__ import annotations

import re

from .text import cut_middle

MAX_ERROR_LINES_PER_RESULT = 6  # one failing run can print hundreds; the first few identify it
ERROR_LINE_MAX_CHARS = 400  # a minified-JS or HTML dump on one line is not an error message
OUTPUT_EXCERPT_MAX_CHARS = 160  # a short output (like `345`) is a fact; a long one is a log
OUTPUT_EXCERPT_MAX_LINES = 2  # ... and so is a two-line answer; a third line makes it a log

# Error lines. Each matches one stripped output line; the line is kept verbatim.
TRACEBACK_START_RE = re.compile(r"^Traceback \(most recent call last\):")
# `AssertionError [ERR_ASSERTION]: ...` is node's: the code in brackets is part of the name.
EXCEPTION_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?: \[[A-Z_]+\])?(?::\s.*)?$")
ERROR_LINE_RES = (
    re.compile(r"^E {2,}\S"),  # pytest assertion detail: `E       AssertionError: ...`
    re.compile(r"^(?:FAILED|ERROR) \S+::\S+"),  # pytest short summary
    re.compile(r"✘ \[ERROR\] "),  # esbuild
    re.compile(r"\berror TS\d+: "),  # TypeScript
    re.compile(r"^(?:\S+:\d+(?::\d+)?:?\s+)?(?:fatal )?error(?:\[[\w-]+\])?: \S"),  # gcc/rustc/go/esbuild
    re.compile(r"^(?:[A-Z]\w* )?(?:Error|ERROR|FATAL|Fatal error): \S"),  # node, CLIs, `API Error: 400 …`
    re.compile(r"(?:^|: )fatal: \S"),  # git, also quoted inside a wrapper's message
    re.compile(r"^\S+\.go:\d+:\d+: \S"),  # go build / vet / golangci-lint (`x.go:12:3: msg (linter)`)
    re.compile(r"^--- FAIL: \S"),  # go test
    re.compile(r"^\[\w+\]\s.*\s(?:ERROR|FATAL)\s"),  # framework logs: `[Nest] 123 - <time>   ERROR [Svc] …`
    re.compile(r"^level=(?:error|fatal) "),  # logrus / golangci-lint
    re.compile(r"=> \[5\d\d\]"),  # a browser/network log's server error `[POST] url => [500] …`
    re.compile(r"^(?:致命错误|错误|エラー|오류)\s*[:：]|^\S{0,16}失败(?:[:：]|$)"),  # localized (git zh, CLIs)
    re.compile(r"^\*\* \([\w.]+\) \S"),  # Elixir/ExUnit `** (RuntimeError) ...`
    re.compile(r"^code:\s+(?:assert|refute)\b"),  # ExUnit failing assertion source
    re.compile(r"^thread '.*' panicked at "),  # Rust
    re.compile(r"^panic: "),  # Go
    re.compile(r"No such file or directory|command not found|Permission denied|Segmentation fault"),
    re.compile(r"\bCannot find module\b|\bModule not found\b"),
    re.compile(r"^(?:Invalid|Missing|Expired|Revoked) (?:API key|access token|credentials)\b"),  # auth (MCP tools)
)
# Lines that carry no information when picking an is_error result's first meaningful line.
# Harness wrapping around a line: leading/trailing tags (`<bash-stdout>`, `<system-reminder>`),
# ANSI colour codes, a GitHub Actions log prefix (`job<TAB>step<TAB>2026-…Z `) and `##[error]`.
WRAPPER_TAG_RE = re.compile(r"^(?:<[\w-]+>\s*)+|(?:\s*</[\w-]+>)+$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CI_LOG_PREFIX_RE = re.compile(r"^[^\t\n]*\t[^\t\n]*\t\d{4}-\d\d-\d\dT[\d:.]+Z (?:##\[(?:error|warning)\])?")
# mocha lists failing tests as `1) title` once it printed `N failing`; alone, `1) x` is any list.
MOCHA_FAILING_RE = re.compile(r"^\s*\d+ failing\s*$", re.MULTILINE)
MOCHA_TITLE_RE = re.compile(r"^\d+\) \S")
# ExUnit's failure header `3) test name (Module)`: kept without the counter, which changes from
# run to run, so a re-run of the same failing test is the same fact (and resolves it).
EXUNIT_FAILURE_RE = re.compile(r"^\d+\) (test .+ \([\w.]+\))$")
NOISE_LINE_RE = re.compile(
    r"^(?:>|\$ |bash-\$|\(Open file: |\(Current directory: |Debugger attached\.|Waiting for the debugger"
    r"|For help, see: |\(Use `node --trace-warnings|Your command ran successfully)")
# Exit status as agents print it: Claude Code `Exit code 1`, pi `Command exited with code 1`,
# Codex `Exit code: 1` / `Process exited with code 1`, plain `exit status 1`.
EXIT_CODE_RE = re.compile(
    r"^\s*(?:Command exited with code|Process exited with code|Exit code:?|exit code:?|exit status:?)\s*(-?\d+)\b",
    re.MULTILINE)
EXIT_CODE_JSON_RE = re.compile(r'"exit_code"\s*:\s*(-?\d+)')  # Codex function_call_output JSON
ABORTED_RE = re.compile(r"^\s*Command (?:aborted|timed out)\b", re.MULTILINE)
# SWE-agent shell footer and "no output" notice: not part of the command's real output.
SWE_FOOTER_RE = re.compile(r"^\((?:Open file|Current directory): .*\)$|^bash-\$$")
SWE_OK_RE = re.compile(r"^Your command ran successfully and did not produce any output\.$")
SWE_CWD_RE = re.compile(r"^\(Current directory: (/[^)]*)\)$", re.MULTILINE)
SWE_FILE_HEADER_RE = re.compile(r"^\[File: (\S[^\n]*?) \(\d+ lines total\)\]$", re.MULTILINE)

# Test tallies, kept as the verbatim line.
PYTEST_TALLY_RE = re.compile(
    r"^=*\s*((?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+"
    r"(?: in [\d.]+s(?: \([\d:.]+\))?)?)\s*=*$")
# esbuild's bare `1 error` is not a test tally: a pytest one names passed/failed or a duration.
PYTEST_TALLY_NEEDS_RE = re.compile(r"\b(?:passed|failed)\b| in [\d.]+s")
EXUNIT_TALLY_RE = re.compile(r"^((?:\d+ \w+, )*\d+ tests?, \d+ failures?(?:, \d+ \w+)*)\b.*$")
UNITTEST_RAN_RE = re.compile(r"^Ran \d+ tests? in [\d.]+s$")
UNITTEST_RESULT_RE = re.compile(r"^(?:OK|FAILED)(?: \(.*\))?$")
JEST_TALLY_RE = re.compile(r"^Tests:?\s+(?:\d+ \w+[,|]?\s*)+(?:\(\d+\)|\d+ total)$")
NODE_TALLY_RE = re.compile(r"^(?:#|ℹ)\s+(tests|pass|fail)\s+(\d+)$")
CARGO_TALLY_RE = re.compile(r"^test result: (?:ok|FAILED)\. .*$")
FAIL_COUNT_RE = re.compile(r"\b[1-9]\d* (?:failed|failures?|errors?)\b|\bfail [1-9]|\bFAILED\b")
# A failing test's identity: pytest node id, ExUnit file:line under a numbered failure.
PYTEST_ID_RE = re.compile(r"^(?:FAILED|ERROR) (\S+::\S+)")
EXUNIT_ID_RE = re.compile(r"^(test/\S+_test\.exs):\d+$")
# What `git commit` and `git checkout`/`git status` print: the commit and the branch.
COMMIT_OUTPUT_RE = re.compile(r"^\[([\w./+-]+)(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.+)$", re.MULTILINE)
BRANCH_OUTPUT_RE = re.compile(
    r"^(?:On branch ([\w./+-]+)|Switched to (?:a new )?branch '([\w./+-]+)')$", re.MULTILINE)


def output_lines(output: str) -> list[str]:
    """Stripped, non-empty lines without the SWE-agent footer."""
    return [s for s in (line.strip() for line in output.splitlines()) if s and not SWE_FOOTER_RE.match(s)]


def unwrap_line(raw: str) -> str:
    """A line without its harness wrapping (tags, ANSI colours, CI log prefix), stripped."""
    line = CI_LOG_PREFIX_RE.sub("", ANSI_RE.sub("", raw))
    return WRAPPER_TAG_RE.sub("", line.strip()).strip()


def error_lines(output: str) -> list[str]:
    """Exact error lines, in output order, deduplicated and bounded. `output` may be any text:
    a tool result, hook output, a system reminder, a log the user pasted."""
    found: list[str] = []
    in_traceback = False
    mocha = bool(MOCHA_FAILING_RE.search(output))
    for raw in output.splitlines():
        line = unwrap_line(raw)
        raw = CI_LOG_PREFIX_RE.sub("", ANSI_RE.sub("", raw))
        if not line:
            continue
        if TRACEBACK_START_RE.match(line):
            in_traceback = True
            continue
        if in_traceback:
            # The exception line is the first unindented line after the frames.
            if raw[:1] not in (" ", "\t") and EXCEPTION_LINE_RE.match(line):
                found.append(line)
                in_traceback = False
            elif raw[:1] not in (" ", "\t") and not line.startswith(("File ", "During handling", "The above")):
                in_traceback = False
            continue
        m = EXUNIT_FAILURE_RE.match(line)
        if m:
            found.append(m.group(1))
        elif (EXCEPTION_LINE_RE.match(line) or any(rx.search(line) for rx in ERROR_LINE_RES)
                or (mocha and MOCHA_TITLE_RE.match(line))):
            found.append(line)
    out: list[str] = []
    for line in found:
        line = cut_middle(line, ERROR_LINE_MAX_CHARS)
        if line not in out:
            out.append(line)
        if len(out) >= MAX_ERROR_LINES_PER_RESULT:
            break
    return out


def first_meaningful_line(output: str) -> str | None:
    for line in output_lines(output):
        if not NOISE_LINE_RE.match(line) and not EXIT_CODE_RE.match(line) and not ABORTED_RE.match(line):
            return cut_middle(line, ERROR_LINE_MAX_CHARS)
    return None


def exit_code_of(output: str) -> int | None:
    m = EXIT_CODE_RE.search(output)
    if m:
        return int(m.group(1))
    if output.lstrip().startswith("{"):
        m = EXIT_CODE_JSON_RE.search(output)
        if m:
            return int(m.group(1))
    return None


def find_tallies(output: str) -> list[tuple[str, bool]]:
    """(verbatim tally line, failed) for every test-runner summary in the output."""
    out: list[tuple[str, bool]] = []
    lines = output_lines(output)
    node: dict[str, str] = {}
    ran: str | None = None
    for line in lines:
        m = PYTEST_TALLY_RE.match(line)
        if m and not PYTEST_TALLY_NEEDS_RE.search(m.group(1)):
            m = None
        m = m or EXUNIT_TALLY_RE.match(line)
        if m:
            out.append((m.group(1), bool(FAIL_COUNT_RE.search(m.group(1)))))
        elif JEST_TALLY_RE.match(line) or CARGO_TALLY_RE.match(line):
            out.append((line, bool(FAIL_COUNT_RE.search(line))))
        elif UNITTEST_RAN_RE.match(line):
            ran = line
        elif ran and UNITTEST_RESULT_RE.match(line):
            out.append((f"{ran} … {line}", line.startswith("FAILED")))
            ran = None
        else:
            m = NODE_TALLY_RE.match(line)
            if m:
                node[m.group(1)] = m.group(2)
    if {"tests", "pass", "fail"} <= node.keys():
        out.append((f"tests {node['tests']}, pass {node['pass']}, fail {node['fail']}", node["fail"] != "0"))
    return out


def failing_test_ids(output: str) -> list[str]:
    ids: list[str] = []
    for line in output_lines(output):
        m = PYTEST_ID_RE.match(line) or EXUNIT_ID_RE.match(line)
        if m and m.group(1) not in ids:
            ids.append(m.group(1))
    return ids


def output_excerpt(output: str) -> str | None:
    lines = [s for s in output_lines(output)
             if not SWE_OK_RE.match(s) and not EXIT_CODE_RE.match(s) and not NOISE_LINE_RE.match(s)]
    text = "\n".join(lines)
    if lines and len(lines) <= OUTPUT_EXCERPT_MAX_LINES and len(text) <= OUTPUT_EXCERPT_MAX_CHARS:
        return text
    return None
