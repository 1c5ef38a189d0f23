"""Tool output as facts: exact error lines, test tallies, exit codes, commits, branches, pull requests.

Error lines come from one table, `CONVENTIONS`: each row is one tool's documented output format
(Go's testing package, pytest, rustc, tsc, ...), cites where that format is defined, and keeps
the line verbatim, with what a developer quotes next to it (rustc's `-->` location, a panic's
first frame inside the project). Rules follow the tools' conventions, never one transcript's
wording, so output nobody here tuned on is read the same way. A small summarizer paraphrases
errors, so they are never taken from it. Unknown output yields nothing rather than a guess.
Any text is accepted, not only tool results: a line's harness wrapping (`<bash-stdout>`, a
`<system-reminder>` around hook output, ANSI colours, a CI log's `job<TAB>step<TAB>time` prefix)
is taken off before the rules see it, so an error a hook or the harness printed counts too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from .text import cut_middle

Lines = list[tuple[str, str]]  # (indentation kept, unwrapped) per output line
LinePredicate = Callable[[str, str], object]

MAX_ERROR_LINES_PER_RESULT = 6  # one failing run can print hundreds; the first few identify it
# ... and the next few are carried too, shown only where a checkpoint has room left after every
# other fact: a run of ten failing tests is quoted by more than its first six (issue 22).
MAX_FURTHER_ERROR_LINES = 10
# A linter prints one line per rule violation (ESLint's stylish formatter, which textlint and
# markuplint reuse; Biome's headers; markdownlint's rule lines): the first line of each rule says
# what the run found, a count says the rest, so one lint run does not crowd out the other facts
# (issue 22). A rule is its id (`no-unused-vars`, `lint/style/useConst`, `MD040`) or, where the
# formatter wraps the id onto a later line (textlint's multi-line messages), the message.
# `rustfmt --check` prints one `Diff in <file>:<line>:` per hunk: its "rule" is the file, since
# every hunk is the same fix (`cargo fmt`).
LINT_ROWS = frozenset({"eslint", "biome", "markdownlint", "golangci-lint", "rustfmt", "python lint", "shellcheck",
                       "oxlint"})
MAX_LINT_LINES_PER_RULE = 1  # the same rule's next violation is the same fix in another place
LINT_MORE = "… {n} more lint errors in this output ({rule})"
# A linter's closing count (`Found 12 errors.`), cargo's `could not compile` and the Actions runner's
# `Process completed with exit code 1.` add no diagnostic: kept where room is left, after the lines
# they count, unless they are all the output says (a log cut to its tail, a step that printed nothing).
COUNT_ROWS = frozenset({"lint summary", "build summary", "ci step exit"})
# pytest's short summary names each failed test, `FAILED path::test - ExcType: msg`: a suite broken
# one way fails tens of tests in one file with one exception. The first few of each (file, exception)
# name it; a count stands for the rest, which a re-run lists again.
MAX_TESTS_PER_FAILURE = 2
TESTS_MORE = "… {n} more failed tests in this output"
PYTEST_SUMMARY_GROUP_RE = re.compile(r"^(?:FAILED|ERROR) ([^:\s]+)::\S+(?: - ([\w.]+))?")
LINT_RULE_RES = (  # tried in order: the first that matches names the rule
    re.compile(r"^(?:\S+:\d+:\d+: )?([A-Z]{1,4}\d{2,4}) "),  # ruff's / flake8's code starts the message
    re.compile(r"^(SC\d{4}) |\[(SC\d{4})\]$"),  # ShellCheck's code
    re.compile(r"\s{2,}([@\w/-]+)$"),  # stylish: the rule id ends the line
    re.compile(r":\d+:\d+ ((?:lint|assist|parse|format|check)\S*)|^\S+\.\w+ (format)\b"),  # Biome's category
    re.compile(r" (MD\d{3})/"),  # markdownlint's rule number
    re.compile(r" \(([\w-]+)\)$"),  # golangci-lint's linter
    re.compile(r"^Diff in (.+?)(?::\d+| at line \d+):$"),  # rustfmt's file
    re.compile(r"^\d+:\d+\s+error\s+(.+)$"),  # stylish without an id on the line: the message
    re.compile(r"^([\w@/-]+\([\w/-]+\)): "),  # oxlint's `plugin(rule): message`
)
ESCAPED_NEWLINE = "\\n"  # a backslash and an n: a newline inside a JSON or Rust-quoted string
ESCAPED_QUOTE = '\\"'  # ... and the quote such a string escapes around the strings it holds
# A Rust struct's Debug with a string field, as Codex reports a failed exec: `exec_command failed for `npm run dev`:
# SandboxDenied { message: "\r\n> node server/index.js\r\n…Error: listen EPERM…", … }` (codex-rs ToolError,
# SandboxErr::Denied): the command's output, escaped once, so its quotes are not.
RUST_DEBUG_STRING_RE = re.compile(r'\b[A-Z]\w* \{ \w+: "')
UNESCAPE_DEPTH = 3  # a Debug string inside a JSON string inside a script's output: three layers at most
ERROR_LINE_MAX_CHARS = 400  # a minified-JS or HTML dump on one line is not an error message
OUTPUT_EXCERPT_MAX_CHARS = 160  # a short output (like `345`) is a fact; a long one is a log
OUTPUT_EXCERPT_MAX_LINES = 2  # ... and so is a two-line answer; a third line makes it a log

# Lines that carry no information when picking an is_error result's first meaningful line.
# Harness wrapping around a line: leading/trailing tags (`<bash-stdout>`, `<system-reminder>`),
# ANSI colour codes, a GitHub Actions log prefix (`job<TAB>step<TAB>2026-…Z `).
WRAPPER_TAG_RE = re.compile(r"^(?:<[\w-]+>\s*)+|(?:\s*</[\w-]+>)+$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A log's own prefix on each line: the GitHub Actions one above, or BuildKit's plain progress
# (`docker build --progress=plain`, what a non-TTY gets), `#31 32.58 msg`, step number and seconds
# (moby/buildkit util/progress/progressui printer.go). Either way it is the log's, not the message's.
# `gh run view --log` puts `job<TAB>step<TAB>` before every line of the job's log (cli/cli
# pkg/cmd/run/view/view.go), and the runner timestamps only a message's first line: the lines a
# multi-line message runs on (`Error Code : 400`, a stack) carry the step's prefix alone.
# A job's raw log (the REST API's "Download job logs", the web UI's "View raw logs") has the
# runner's timestamp alone, `DateTime.ToString("O")` with its seven fraction digits (actions/runner
# src/Runner.Common/Logging.cs PagingLogger): another program's ISO time (tracing's six digits) stays.
GHA_STEP = r"[^\t\n]*\t[^\t\n]*\t"
GHA_TIME = r"\ufeff?\d{4}-\d\d-\d\dT[\d:.]+Z "  # the log file's first line has its UTF-8 byte order mark
GHA_RAW_TIME = r"\ufeff?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z "
# journalctl's default output, `short` (`short-precise`, `short-iso`, `short-iso-precise`; the offset
# `+0200`, `+02:00` from systemd 255), is classic syslog's line: time, host, then `identifier[pid]: `
# before each message (systemd journalctl(1) --output; RFC 3164).
JOURNAL_PREFIX = (r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:?\d\d)"
                  r" \S+ [^\s\[\]:]+(?:\[\d+\])?: ")
CI_LOG_PREFIX_RE = re.compile(rf"^(?:{GHA_STEP}{GHA_TIME}|{GHA_RAW_TIME}|#\d+ \d+\.\d+ |{JOURNAL_PREFIX})")
CI_STEP_PREFIX_RE = re.compile(rf"^({GHA_STEP}){GHA_TIME}")
CI_STEP_RE = re.compile(rf"^{GHA_STEP}")
# A workflow command's annotation in the log (`::error::msg` shows as `##[error]msg`; docs.github.com
# "Workflow commands for GitHub Actions", @actions/core setFailed): the rows read the message; the
# marker stays on the unwrapped line's raw form, where the annotation row looks for it.
GHA_ANNOTATION_RE = re.compile(r"^##\[(?:error|warning)\]")
# Claude Code's refusal of a tool call (a validation or permission error, not the tool's output)
# is wrapped in `<tool_use_error>…</tool_use_error>` (worker/formats/claude_code.py). The rows read
# the message inside; the kept line shows the tags, which say who refused: the harness, not the
# program. Only Claude Code writes them, so one refusal always reads the same.
TOOL_USE_ERROR_OPEN, TOOL_USE_ERROR_CLOSE = "<tool_use_error>", "</tool_use_error>"
# mise runs a task with its output lines prefixed by the task's name, `[lint:go] msg`, and ends a
# failed one with `[lint:go] ERROR task failed` (mise's task.output "prefix"/"interleave"; names
# are lowercase, `ns:task`); Maven's `[ERROR]` and NestJS's `[Nest]` are not task names, nor a
# logger's level (`[warn] `, `[error] `: Prettier's CLI), nor Vite's logger tag (`[vite] `).
MISE_TASK_PREFIX_RE = re.compile(r"^\[(?!(?:warn|error|info|debug|vite)\] )[a-z][\w.-]*(?::[\w.-]+)*\] ")
# Turborepo prefixes each line of a task's output with `<package>:<task>: ` (`turbo run --log-prefix`,
# default "auto" outside CI; turbo.build/docs/reference/run): npm names are lowercase (`@scope/name`),
# a task is a package.json script name. A `file:12: ` location has a digit where the task is.
TURBO_TASK_PREFIX_RE = re.compile(r"^(?:@[a-z0-9][\w.~-]*/)?[a-z0-9][\w.~-]*:[A-Za-z][\w:.-]*:(?: |$)")
# hk (jdx/hk) runs a hook's steps in parallel and, outside a terminal, prints each line a step's
# command wrote as `  <step> – <line>` (src/step_job.rs, its `body_text`: `  {{name}} – {{ensembler_stdout}}`).
# Interleaved, the step is what says which linter printed a line: a kept line keeps it, as printed.
HK_STEP_PREFIX_RE = re.compile(r"^  [\w.:-]+ – ")
TASK_PREFIX_RE = re.compile(f"{MISE_TASK_PREFIX_RE.pattern}|{TURBO_TASK_PREFIX_RE.pattern}|{HK_STEP_PREFIX_RE.pattern}")
# Gemini CLI's and Qwen Code's run_shell_command envelope (docs/tools/shell.md: Command,
# Directory, Output, Error, Exit Code, Signal, Background PIDs, Process Group PGID): a field
# that is "(none)" says nothing happened.
SHELL_ENVELOPE_NONE = r"(?:Error|Signal|Background PIDs|Process Group PGID|Directory): \(none\)$"
SHELL_ENVELOPE_NONE_RE = re.compile(SHELL_ENVELOPE_NONE)
# Progress a tool prints while it works: mise installing a tool (`mise go@1.26.3  [1/3] install`,
# `… ✓ installed`), the go command fetching modules (`go: downloading golang.org/x/vuln v1.3.0`).
# `gh run watch` / `gh pr checks --watch` open each refresh with `Refreshing run status every 20
# seconds. Press Ctrl+C to quit.` (cli/cli pkg/cmd/run/watch/watch.go, pkg/cmd/pr/checks/checks.go).
PROGRESS = (r"mise \S+@\S+\s+(?:\[\d+/\d+\]|✓)|go: downloading \S"
            r"|Refreshing (?:run|checks) status every [\d.]+ seconds\. Press Ctrl\+C to quit\.")
# Codex's exec envelope around a command's output: `Chunk ID`, `Wall time: 0.1486 seconds`,
# `Process exited with code 1` (an exit code, read as one), `Process running with session ID`,
# `Original token count`, `Output:` (codex-rs core/src/tools/handlers/unified_exec.rs
# format_response); the older `Exit code: 1` / `Wall time` / `Output:` (format_exec_output_str)
# and its truncation note `Total output lines: N`; code mode's cell header `Script completed` /
# `Wall time 0.3 seconds` / `Output:` (codex-rs code-mode).
# A unified exec run still going when its yield ends: `write_stdin {"session_id": N}` polls it (actions.py).
SESSION_RUNNING = r"Process running with session ID (\d+)\s*$"
SESSION_RUNNING_RE = re.compile("^" + SESSION_RUNNING, re.MULTILINE)
# The same in code mode, where a script prints exec_command's result object: its fields in their
# declared order, `session_id` in place of `exit_code` while the run goes on (codex-rs
# core/src/tools/context.rs, ExecCommandToolOutput::code_mode_result: `{"chunk_id", "wall_time_seconds",
# "exit_code"?, "session_id"?, "original_token_count"?, "output"}`).
# A script may print the field itself, a line of its name and value (`text(`SESSION_ID=${r.session_id}`)`).
CODE_MODE_SESSION_RE = re.compile(r'"wall_time_seconds"\s*:\s*[\d.eE+-]+\s*,\s*"session_id"\s*:\s*"?(\d+)'
                                  r"|^\W*session[_ ]?id\W{1,3}(\d+)\s*$", re.IGNORECASE | re.MULTILINE)
# A code-mode `exec` cell still running when its yield ends: `wait {"cell_id": N}` polls it, and the
# cell's header says how it ended, `Script completed` / `Script failed` / `Script terminated`
# (codex-rs core/src/tools/code_mode, format_script_status).
CELL_RUNNING = r"Script running with cell ID (\S+)\s*$"
CELL_RUNNING_RE = re.compile(r"\A\s*" + CELL_RUNNING, re.MULTILINE)
# Between openai/codex#13860 and its revert #17031 (April 2026; codex-cli 0.118 writes it) unified
# exec's envelope (format_response, above) opened with the command as the shell ran it, heredoc and
# all: `Command: /bin/zsh -lc '…'`, then `Chunk ID` and `Wall time`.
CODEX_COMMAND_HEADER_RE = re.compile(r"\A\s*Command: .*?\n(?=Chunk ID: \w+\nWall time: )", re.DOTALL)
CODEX_ENVELOPE = (r"Chunk ID: \w+$|Wall time:? [\d.]+ seconds$|Script completed$|" + SESSION_RUNNING + "|" + CELL_RUNNING
                  + r"|Original token count: \d+$|Total output lines: \d+$|Output:$")
# Claude Code's Bash tool appends, to a command it runs in the background, where its output goes
# (`Command running in background with ID: b3d53de. Output is being written to: …`, or `Command
# was manually backgrounded by user with ID: …`; its tool_result builder, 2.1.197): the harness's
# notice, as Codex's `Process running with session ID`, not the command's output.
CLAUDE_CODE_ENVELOPE = r"Command (?:running in background|was manually backgrounded by user) with ID: (\S+?)\. "
CLAUDE_BACKGROUND_RE = re.compile("^" + CLAUDE_CODE_ENVELOPE, re.MULTILINE)
# Its TaskOutput tool polls such a run by `task_id` and answers with the
# task's state around what it printed: `<retrieval_status>…</retrieval_status>`, `<task_id>`,
# `<task_type>local_bash</task_type>`, `<status>running|completed|failed|killed</status>`, the
# `<exit_code>N</exit_code>` once it ended, then `<output>\n…\n</output>` (@anthropic-ai/claude-code
# 2.1.197, its bundled TaskOutput result builder); TaskStop ends it with `{"message": "Successfully
# stopped task: ID (command)", …}`, and when it ends by itself the harness says so in a user message:
# `<task-notification><task-id>ID</task-id>…<status>completed|failed|killed</status><summary>Background
# command "…" completed (exit code 0)</summary>` (`… failed with exit code 143`; `killed` if interrupted).
CLAUDE_TASK_RE = re.compile(r"\A\s*<retrieval_status>[^<]*</retrieval_status>\s*<task_id>[^<]+</task_id>\s*"
                            r"<task_type>local_bash</task_type>\s*<status>(\w+)</status>\s*"
                            r"(?:<exit_code>(-?\d+)</exit_code>\s*)?(?:<output>\n?(.*?)\n?(?:</output>\s*)?)?\Z", re.DOTALL)
CLAUDE_TASK_STOPPED_RE = re.compile(r'"message"\s*:\s*"Successfully stopped task: \S+ \(')
CLAUDE_TASK_NOTIFICATION_RE = re.compile(
    r"<task-notification>\s*<task-id>([^<]+)</task-id>(?:(?!</task-notification>).)*?<status>(\w+)</status>"
    r"(?:\s*<summary>[^<]*?(?:\(exit code |with exit code )(-?\d+)[^<]*</summary>)?", re.S)
# GitHub Copilot CLI's shells (its bash and powershell tools; @github/copilot 1.0.0 index.js, 1.0.60
# app.js on npm): a command run with `mode: "async"` answers `<command started in background with
# shellId: ID>` (`detached background` with `detach: true`), a sync one still going when its
# `initial_wait` ends `<command with shellId: ID is still running after N seconds. …>`; then
# `read_bash` / `write_bash {"shellId": ID}` poll it (actions.py). The harness's notice, not output.
COPILOT_SHELL_RUNNING = (r"<command (?:started in (?:detached )?background with shellId: ([^>\s]+)>"
                         r"|with shellId: (\S+) is still running after\b)")
COPILOT_SHELL_RUNNING_RE = re.compile("^" + COPILOT_SHELL_RUNNING, re.MULTILINE)  # its own line, not a quote of one
# `stop_bash {"shellId": ID}` ends that run: `<command with id: ID stopped>`, with no exit status.
COPILOT_SHELL_STOPPED = r"<command with id: \S+ stopped>$"
COPILOT_SHELL_STOPPED_RE = re.compile(COPILOT_SHELL_STOPPED, re.MULTILINE)
# pi's bash tool answers a command that printed nothing with `(no output)`, then its exit status
# (pi-mono packages/coding-agent/src/core/tools/bash.ts, `truncation.content || "(no output)"`).
EMPTY_OUTPUT = r"\(no output\)$"
NOISE_LINE_RE = re.compile(
    r"^(?:>|\$ |bash-\$|\(Open file: |\(Current directory: |Debugger attached\.|Waiting for the debugger"
    r"|For help, see: |\(Use `node --trace-warnings|Your command ran successfully|" + SHELL_ENVELOPE_NONE
    + "|" + CODEX_ENVELOPE + "|" + CLAUDE_CODE_ENVELOPE + "|" + COPILOT_SHELL_RUNNING + "|" + COPILOT_SHELL_STOPPED
    + "|" + EMPTY_OUTPUT + "|" + PROGRESS + ")")
# Exit status as agents print it: Claude Code `Exit code 1`, pi `Command exited with code 1`,
# Codex `Exit code: 1` / `Process exited with code 1`, Gemini CLI and Qwen Code `Exit Code: 1`,
# GitHub Copilot CLI's shell tools `<shellId: 0 completed with exit code 1>` (the `shell_exit`
# content item's `exitCode` in its session-events schema, worker/formats/copilot.py), in 1.0.0
# `<exited with exit code 1>` and, from a poll, `<command with id: ID exited with exit code 1>`
# (COPILOT_SHELL_RUNNING above), plain `exit status 1`.
EXIT_CODE_RE = re.compile(
    r"^\s*(?:Command exited with code|Process exited with code|Exit [Cc]ode:?|exit code:?|exit status:?"
    r"|<shellId: [^>\n]+ completed with exit code|<(?:command with id: [^>\n]+ )?exited with exit code)\s*(-?\d+)\b",
    re.MULTILINE)
JSON_LINE_RE = re.compile(r'^(?:[\[\]{},]+|"[^"]*"\s*:.*|"(?:[^"\\]|\\.)*",?)$')  # a pretty-printed JSON document's line
# A line that reports something passed, by its format: a TAP test line `ok 3 - name` (testanything.org,
# TAP 13/14; bats, node --test), Go's `--- PASS: TestX (0.01s)`, `PASS` and `ok  \tpkg\t0.2s` (cmd/go
# test), the Rust harness's `test name ... ok` and `test result: ok.` (library/test formatters/pretty.rs),
# pytest -v's `a.py::t PASSED`, and the row `gh pr checks` prints off a terminal for a check that passed
# or was skipped (cli/cli pkg/cmd/pr/checks/output.go: name, `pass`/`fail`/`pending`/`skipping`/`cancel`,
# elapsed, link, description; a pending check is what an exit 8 waited on, so it stays). Never the line a
# failed run is remembered by. (After a nested task runner's `[name] ` prefixes: unwrap_line takes one off.)
PASS_LINE_RE = re.compile(r"^(?:\[[^\]\s]+\]\s*)*(?:ok \d+\b|--- PASS: |PASS$|ok  \t\S|test \S+ \.\.\. ok$|test result: ok\.|\S+::\S+ PASSED\b"
                          r"|[^\t]+\t(?:pass|skipping)\t[^\t]*\t[^\t]*(?:\t|$))")
BOX_RULE_RE = re.compile(r"^[\u2500-\u257f\s]+$")  # a table's border drawn in box-drawing characters
EXIT_CODE_JSON_RE = re.compile(r'"exit_code"\s*:\s*(-?\d+)')  # Codex function_call_output JSON
ABORTED_RE = re.compile(r"^\s*Command (?:aborted|timed out)\b", re.MULTILINE)
# A call the harness cancelled, so it never ran: Claude Code's StreamingToolExecutor answers the
# batch-mates of a failed parallel call with `Cancelled: parallel tool call Bash(…) errored`
# (older: `Sibling tool call errored`), and a discarded streaming attempt with `Streaming
# fallback - tool execution discarded`. Not an error of the work: its sibling's error is.
# pi skips the calls left in a batch once the user queued a message (steering), each answered with
# an error result `Skipped due to queued user message.` (pi-mono packages/agent/src/agent-loop.ts,
# skipToolCall, 0.25.1); oh-my-pi, writing the same session format, adds `Do not count this skipped
# result as completed work or verification. …` and names other interrupts (its agent-loop.ts,
# createSkippedToolResult). The call never ran: the user's message is what happened.
CANCELLED_CALL_RE = re.compile(r"^(?:Sibling tool call errored|Cancelled: parallel tool call .* errored"
                               r"|Streaming fallback - tool execution discarded"
                               r"|Skipped due to (?:queued user message|steering message|pending system advisory"
                               r"|pending peer interrupt)\.(?: Do not count this skipped result as completed work\b.*)?)$")
# SWE-agent shell footer and "no output" notice: not part of the command's real output.
# SWE-agent 1.x's function-calling observations open with its `next_step_template`'s
# `OBSERVATION:` line (config/default.yaml `next_step_template: "OBSERVATION:\n{{observation}}"`).
SWE_FOOTER_RE = re.compile(r"^\((?:Open file|Current directory): .*\)$|^bash-\$$|^OBSERVATION:$")
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
# `git commit`'s summary: `[main 1a2b3c4] subject`, `[detached HEAD 1a2b3c4] subject` off a branch (builtin/commit.c
# print_commit_summary), `(root-commit)` for the first.
DETACHED_HEAD = "detached HEAD"
COMMIT_OUTPUT_RE = re.compile(rf"^\[({DETACHED_HEAD}|[\w./+-]+)(?: \(root-commit\))? ([0-9a-f]{{7,40}})\] (.+)$", re.MULTILINE)
# git's diffstat (diff.c show_stats(): `git diff --stat`, `git show --stat`, `git log --stat`, and what
# `git merge` / `git pull` print after a merge): ` name | N +++--`, ` name | Bin A -> B bytes`,
# ` name | Unmerged` (which git 2.39 runs into the next line), the name padded to a column, and
# always closed by the summary line ` N files changed, …` (print_stat_summary): only such a block
# counts, and none inside a patch (`diff --git` up to the next `commit <sha>`), since a patch's
# context lines also open with a space. A name cut to fit the column starts with `...` (not a whole
# path); a rename is `old => new` or `dir/{old => new}/f` (the file is the new name now);
# `--compact-summary` adds ` (new)`, ` (gone)`, ` (mode +x)`; a name with special characters is
# C-quoted (quote.c quote_c_style).
DIFFSTAT_LINE_RE = re.compile(r"^ ((?:(?! \| )\S)(?:(?:(?! \| ).)*\S)?) +\| +"
                              r"(?:\d+(?: [+-]+)?|Bin(?: \d+ -> \d+ bytes)?|Unmerged(?: .*)?)$")
DIFFSTAT_SUMMARY_RE = re.compile(r"^ \d+ files? changed(?:, \d+ insertions?\(\+\))?(?:, \d+ deletions?\(-\))?$")
DIFFSTAT_RENAME_RE = re.compile(r"\{[^{}]* => ([^{}]*)\}")
DIFFSTAT_TAG_RE = re.compile(r" \((?:new|gone|mode [+-]\w|new \+\w|gone -\w)\)$")
PATCH_START_RE = re.compile(r"^diff --(?:git|cc|combined) ")
LOG_COMMIT_RE = re.compile(r"^commit [0-9a-f]{7,64}\b")
C_QUOTED_RE = re.compile(r'^"((?:[^"\\]|\\.)*)"$')
C_ESCAPE_RE = re.compile(r"\\([0-7]{3}|.)")
C_ESCAPES = {"n": "\n", "t": "\t", "a": "\a", "b": "\b", "f": "\f", "r": "\r", "v": "\v"}
# git commit exits 1 with nothing staged (wt-status.c): the work was committed already, nothing refused it.
NOTHING_TO_COMMIT_RE = re.compile(r"\bnothing (?:added )?to commit\b")
# `git log --oneline` prints `<abbrev sha> <subject>` per commit, `(HEAD -> dev, origin/dev)` between
# them where decorations are on (git-log(1), --oneline = --pretty=oneline --abbrev-commit): how a
# quiet `git commit -q` run followed by `git log --oneline -1` names the commit it made.
ONELINE_COMMIT = r"^([0-9a-f]{{7,40}})(?: \([^)\n]*\))? {subject}$"


ONELINE_LINE_RE = re.compile(ONELINE_COMMIT.format(subject=r"(\S.*?)"), re.MULTILINE)
# `git reset --hard` / `git checkout` naming where HEAD went (builtin/reset.c print_new_head_line, checkout.c).
HEAD_NOW_RE = re.compile(r"^HEAD is now at ([0-9a-f]{7,40}) (\S.*?)$", re.MULTILINE)
LOGGED_COMMITS_MAX = 50  # a `git log --oneline` is read this far: the session's own commits are the newest


def _unquote_c(name: str) -> str:
    """A name as git C-quotes it (`"\\303\\251t\\303\\251.txt"`), as the file is named (`été.txt`)."""
    m = C_QUOTED_RE.match(name)
    if not m:
        return name
    # one pass: an octal byte (`\\303`) or a C escape (`\\t`, `\\"`, `\\\\`), each byte one latin-1 char
    raw = C_ESCAPE_RE.sub(lambda e: chr(int(e.group(1), 8)) if len(e.group(1)) == 3 else C_ESCAPES.get(e.group(1), e.group(1)),
                          m.group(1))
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


def diffstat_paths(output: str) -> list[str]:
    """The files a git diffstat in `output` lists (DIFFSTAT_LINE_RE), each once, renames by their new name."""
    paths: list[str] = []
    block: list[str] = []  # the names of the diffstat lines since the last other line
    in_patch = False
    for line in output.splitlines():
        patch = PATCH_START_RE.match(line)
        if patch or LOG_COMMIT_RE.match(line):
            in_patch, block = bool(patch), []
            continue
        if in_patch:
            continue
        m = DIFFSTAT_LINE_RE.match(line)
        if m:
            block.append(m.group(1))
            continue
        if DIFFSTAT_SUMMARY_RE.match(line):
            for raw in block:
                name = DIFFSTAT_TAG_RE.sub("", DIFFSTAT_RENAME_RE.sub(lambda r: r.group(1), raw))
                name = _unquote_c(name.rsplit(" => ", 1)[-1]).replace("//", "/")
                if not name.startswith("...") and name not in paths:
                    paths.append(name)
        block = []
    return paths


def logged_commits(output: str, *, log: bool, moved_back: bool) -> list[tuple[str, str]]:
    """(sha, subject) of the commits git named in `output`: each line of a `git log --oneline` where
    the command ran one (`log`), and `HEAD is now at …` unless HEAD moved back (`HEAD~1`: the parent,
    not the commit made)."""
    logged = [(m.group(1), m.group(2)) for m in ONELINE_LINE_RE.finditer(output)][:LOGGED_COMMITS_MAX] if log else []
    return logged + ([] if moved_back else [(m.group(1), m.group(2)) for m in HEAD_NOW_RE.finditer(output)])


def oneline_sha(output: str, subject: str) -> str | None:
    """The sha `git log --oneline` printed in `output` for the commit with this subject."""
    m = re.search(ONELINE_COMMIT.format(subject=re.escape(subject)), output, re.MULTILINE)
    return m.group(1) if m else None


BRANCH_OUTPUT_RE = re.compile(
    r"^(?:On branch ([\w./+-]+)|Switched to (?:a new )?branch '([\w./+-]+)')$", re.MULTILINE)
# What the GitHub CLI prints once a pull request exists or is merged: `gh pr create` its URL on
# stdout (cli/cli pkg/cmd/pr/create/create.go, `fmt.Fprintln(opts.IO.Out, pr.URL)`), `gh pr merge`
# `✓ Squashed and merged pull request owner/repo#65 (title)` (pkg/cmd/pr/merge/merge.go, `%s %s pull
# request %s#%d (%s)`; before v2.x's repo name, `✓ Merged pull request #65 (title)`).
PR_URL_RE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/pull/(\d+)\b")
PR_MERGED_RE = re.compile(r"^\W*(?:Merged|Squashed and merged|Rebased and merged) pull request (?:[\w.-]+/[\w.-]+)?#(\d+)"
                          r" \((.*)\)$", re.MULTILINE)
# `gh pr close` / `gh pr reopen`: `✓ Closed pull request owner/repo#46 (title)`, `✓ Reopened pull request
# owner/repo#46 (title)` (pkg/cmd/pr/close/close.go, pkg/cmd/pr/reopen/reopen.go; before the
# repository name, `#46 (title)`).
PR_CLOSED_RE = re.compile(r"^\W*(Closed|Reopened) pull request (?:[\w.-]+/[\w.-]+)?#(\d+) \((.*)\)$", re.MULTILINE)
# The pull request `gh pr view` showed, where the command named none: on a terminal its footer `View
# this pull request on GitHub: <url>` (pkg/cmd/pr/view/view.go printHumanPrPreview), to a pipe (an
# agent's shell) its `url:\t<url>` line (printRawPrPreview), with `--json url` its `url` field (a
# comment's `url` goes on to `#issuecomment-…`).
PR_SHOWN_URL_RE = re.compile(r"^(?:View this pull request on GitHub: |url:\t)(" + PR_URL_RE.pattern + r")$"
                             r'|"url":\s*"(' + PR_URL_RE.pattern + r')"', re.MULTILINE)
# GitButler's `but commit`: `✓ Created commit ae90dc5 on branch update-feed-docs` (0.18.8-0.21), and
# from 0.22 `Created commit tpm on branch 'A'` / `… on new branch 'A'` / `Created commit tpm`
# (gitbutlerapp/gitbutler crates/but/src/command/legacy/commit.rs, command/commit2). The id is the
# 7-hex sha (`to_hex_with_len(7)`), or from 0.21.1 the change id where the commit has one, its first
# 3 characters (MIN_DISPLAYED_CHANGE_ID_CHARS): only the sha names the git commit.
BUT_SHA_RE = re.compile(r"[0-9a-f]{7}")
BUT_COMMIT_RE = re.compile(r"^(?:✓ )?Created commit ([0-9a-z]+)(?: on (?:new )?branch '?([\w./+-]+?)'?)?$", re.MULTILINE)
# `but pr new` once the forge made the review: `✓ Created PR #19` (to 0.19.2), `✓ Created review #19`
# (0.19.3 on), then `  Title: …`, `  Branch: …`, `  URL: <url>`; one block per branch of a stack
# (command/legacy/forge/review.rs). GitHub's only: GitLab's `!19` is no pull request PR_URL_RE reads.
BUT_REVIEW_RE = re.compile(r"^(?:✓ )?Created (?:PR|review) #(\d+)$((?:\n[ \t]+\S.*)*)", re.MULTILINE)
# A branch of the stack that already had one is listed first: `PR already exists for <branch> #12`,
# then its `  URL:` (print_existing_pr_info): a pull request the session works on, not one it opened.
BUT_EXISTING_REVIEW_RE = re.compile(r"^PR already exists for \S+ #(\d+)$((?:\n[ \t]+\S.*)*)", re.MULTILINE)
BUT_REVIEW_TITLE_RE = re.compile(r"^[ \t]+Title: (.+)$", re.MULTILINE)


# ---------------------------------------------------------------------------- error lines
# Where a stack frame or a location points into code that is not the project's own: installed
# packages and the toolchains' standard libraries. The first frame outside these is the one a
# developer opens.
NOT_PROJECT_PATH_RE = re.compile(
    r"/(?:site|dist)-packages/|/lib/python\d[\d.]*/|^<frozen |^<string>$"  # Python: sysconfig purelib / stdlib
    r"|/node_modules/|^node:|^internal/"  # Node: installed packages, node's own `node:internal/…` modules
    r"|/pkg/mod/|/go[^/]*/src/[a-z0-9_]+/|^/usr/lib/go|(?:^|/)_testmain\.go$"  # Go: GOMODCACHE, GOROOT/src, go test's main
    r"|/rustc/[0-9a-f]{7,}/|/\.cargo/registry/|/\.rustup/toolchains/")  # Rust: remapped std, crates.io sources
GO_FRAME_RE = re.compile(r"^\s+(\S+\.(?:go|s)):\d+(?: \+0x[0-9a-f]+)?\s*$")  # runtime/traceback.go: `\tfile:line +0xpc`
GO_TEST_VERDICT_RE = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ")  # a test's verdict; its messages are its own
GO_TEST_START_RE = re.compile(r"^\s*=== (?:RUN|CONT|NAME) ")  # -v: the messages that follow precede the verdict
# Unified diff (GNU diffutils "Detailed Unified"; git diff): a hunk `@@ -l,s +l,s @@`, then lines
# that open with ` `, `-` or `+` (and `\ No newline at end of file`) until the next header.
DIFF_HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
DIFF_LINE_MARKS = (" ", "\t", "-", "+", "\\")
# What a script prints itself: the quoted literal of an `echo` (options `-e`/`-n` before it); a
# label among them opens with a rule of `=`, `-`, `#` or `*` (`=== status ===`, `--- logs ---`).
ECHO_LITERAL_RE = re.compile(r"""\becho\s+(?:-[neE]+\s+)*(?:"([^"$`\\\n]*)"|'([^'\n]*)')""")
ECHO_LABEL_RE = re.compile(r"^[=#*-]{2,}\s")
RAISES_LOOKBACK = 20  # lines above an indented exception name searched for its docstring's `Raises:` heading
TRACEBACK_START_RE = re.compile(r"^Traceback \(most recent call last\):")  # its frames are not errors
# `AssertionError [ERR_ASSERTION]: ...` is node's: the code in brackets is part of the name, and
# node's own errors are a plain `Error [ERR_REQUIRE_ESM]: …` (lib/internal/errors.js, `${name} [${key}]`).
EXCEPTION_LINE_RE = re.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?: \[[A-Z_]+\])?"
    r"|Error \[ERR_[A-Z_]+\])(?::\s.*)?$")
# mocha lists failing tests as `1) title` once it printed `N failing`; alone, `1) x` is any list.
MOCHA_FAILING_RE = re.compile(r"^\s*\d+ failing\s*$")
RUST_THREAD_ID = r"(?: \(\d+\))?"  # Rust 1.91+: the OS thread id after a thread's name (rust-lang/rust#115746)
RUSTC_LOCATION_RE = re.compile(r"^\s*--> \S")  # rustc's primary span, `  --> file:line:col`
PYTEST_CRASH_RE = re.compile(r"^\S+:\d+: \w[\w.]*$")  # pytest's reprcrash line under the `E` block
PY_FRAME_RE = re.compile(r'^File "([^"]+)", line \d+')  # traceback's frame line (traceback.StackSummary.format)
RUSTC_LOCATION_LOOKAHEAD = 2  # rustc prints `-->` right under the headline
PYTEST_CRASH_LOOKAHEAD = 40  # an `E` block (a long assertion diff) before `path:N: ExcType`
TSC_CHAIN_LOOKAHEAD = 3  # the chain's first levels: an overload's preamble, then what did not match
TSC_PREAMBLE = "gave the following error."  # TS2770 / TS2772: which overload, not why
CAUSE_LOOKBACK = 60  # anyhow numbers a few causes; cargo prints a failed build script's whole output under one
GO_FRAMES_LOOKAHEAD = 60  # goroutine traces list a few frames per goroutine; the first project frame is near


def is_project_path(path: str) -> bool:
    return not NOT_PROJECT_PATH_RE.search(path)


# The coding agents' own edit-tool refusals (sources in the "agent tool error" row). A file tool
# answers with one in place of its result, so it marks that result failed even where the agent
# sent no error flag (Codex's apply_patch output is a bare string).
AGENT_TOOL_ERROR_RE = re.compile(
    r"^(?:File has not been read yet\b|File has been modified since read\b|String to replace not found in file\b"
    r"|Found \d+ matches of the string to replace\b|Could not find (?:the exact text|edits\[\d+\]) in \S"
    r"|Found \d+ occurrences of the text in \S|No changes made to \S|oldString not found in content\b"
    r"|Could not find oldString in the file\b|Found multiple matches for oldString\b|apply_patch verification failed: \S"
    r"|exec_command failed for `|write_stdin failed: \S)")
GOLANGCI_LINE_RE = re.compile(r"^\S+\.go:\d+:\d+: \S.* \([\w-]+\)$")
# stylish: `line:col  error  msg  rule`; a multi-line message (textlint's) ends with the rule
# id on its last line, so the id is not required on the first.
ESLINT_LINE_RE = re.compile(r"^\d+:\d+\s+error\s+\S.*$")
# Biome's header: `path:line:col category` (a rule's), or `path format ━━━` for a whole-file
# format diagnostic; some CLI versions print it after `at ` (cc-contextevaluator, tune half).
BIOME_HEADER_RE = re.compile(r"^(?:at )?(\S+:\d+:\d+ (?:lint|assist|parse|format|check)(?:/[\w-]+)*(?=\s|$)"
                             r"|\S+\.\w+ format(?= ━{3}))")
MARKDOWNLINT_LINE_RE = re.compile(r"^\S+:\d+(?::\d+)? (?:error )?MD\d{3}(?:/[\w-]+)+ \S.*$")
NPM_MESSAGE_RE = re.compile(r"^npm (?:ERR!|error) (?!(?:code|errno|syscall|path|dest)\b)\S")
JEST_FRAME_RE = re.compile(r"^at (?:.+ \()?([^()\s]+):\d+:\d+\)?$")  # V8 stack frame, as jest prints it
VITEST_FRAME_RE = re.compile(r"^❯ (\S+):\d+:\d+")  # vitest's error location (`❯ file:line:col`)
VITEST_MODULE_RE = re.compile(r"^❯ (?:\S+ )*?\S+\.[cm]?[jt]sx? \(\d+ tests?(?: \| \d+ \w+)*? \| \d+ failed\b")
JAVA_FRAME_RE = re.compile(r"^at ([\w$.]+)\([\w$]+\.(?:java|kt|scala|groovy):\d+\)$")  # Throwable.printStackTrace
NOT_PROJECT_JAVA_RE = re.compile(r"^(?:java|javax|jdk|sun|kotlin|scala|junit|org\.junit|org\.opentest4j|org\.testng"
                                 r"|org\.assertj|org\.hamcrest)\.")
ASSERTION_CONTEXT_RE = re.compile(r"^(?:● |expect\b|error: expect\(|FAIL\s)|AssertionError\b")  # bun: `error: expect(…)`
PY_LINT_LOCATION_RE = re.compile(r"^\S+\.pyi?:\d+:\d+: ")  # flake8's and ruff concise's `path:row:col: `
GO_REQUIRES_MAX_STEPS = 8  # a requirement path is a few modules deep
RSPEC_FRAME_LOOKAHEAD = 8  # the matcher's expected/got lines and `(compared using ==)` come first
RSPEC_EXPECTED_LOOKAHEAD = 3  # the matcher's `expected:` comes right under `Failure/Error:` (blank lines are not counted)
PHP_FRAME_LOOKAHEAD = 4  # PHPUnit prints the `file.php:line` under the message (a diff may come between)
PHP_FRAME_RE = re.compile(r"^\S*\.php:\d+$")  # PHPUnit's location of a failed assertion
PHPUNIT_TEST_RE = re.compile(r"^\d+\) [\w\\]+::\w+")  # `1) Tests\\FooTest::testBar`
PHPUNIT_FAILURES_RE = re.compile(r"^There (?:was|were) \d+ (?:failures?|errors?):$")
NEXT_LOCATION_RE = re.compile(r"^\./\S+:\d+:\d+$")
# testify's failed assertion (stretchr/testify assert/assertions.go Fail, labeledOutput): under the
# `x_test.go:N: ` line (empty: the message is the block), tab-aligned labels `Error Trace:` (the
# frames), `Error:` (what failed, continued on label-less lines: `expected: 1` / `actual  : 2`),
# `Test:`, `Messages:`.
TESTIFY_TRACE_RE = re.compile(r"^Error Trace:\s+(\S+)")
TESTIFY_ERROR_RE = re.compile(r"^Error:\s+\S")
TESTIFY_LABEL_RE = re.compile(r"^(?:Error Trace|Error|Test|Messages):\s")
TESTIFY_TRACE_LOOKBACK = 12  # the frames of a helper chain between `Error Trace:` and `Error:`
TESTIFY_MESSAGE_LINES = 2  # `expected:` and `actual  :` name the mismatch; a `Diff:` under them repeats it
# pydantic's ValidationError prints `N validation errors for Model`, then per error its location
# (`items.3.name`), the message indented under it with `[type=…, input_value=…, input_type=…]`, and
# a `For further information visit` link (pydantic-core src/errors/validation_exception.rs,
# `display_errors`; `[type=…]` alone with hide_input). Under pytest each line carries its `E`.
PYDANTIC_HEADER_RE = re.compile(r"\b\d+ validation errors? for \S")
PYDANTIC_ERROR_RE = re.compile(r"^(?:E\s+)?\S.*? \[type=[\w.-]+(?:, input_value=.*?)?(?:, input_type=\w+)?\]$")
PYDANTIC_LOOKBACK = 60  # three lines per error: a header 20 errors up still counts them
NEXT_LOCATION_LOOKBACK = 2  # Next.js prints the `./file:line:col` right above `Type error:`; one line of slack
SHELLCHECK_HEADING_RE = re.compile(r"^In \S.* line \d+:$")
JS_FRAMES_LOOKAHEAD = 30  # jest/vitest print the failing code frame between the message and the stack
ASSERTION_CONTEXT_LOOKBACK = 8  # `Expected:`/`Received:` follow the matcher hint by a line or two


def _ahead(lines: Lines, i: int, n: int, hit: LinePredicate, stop: LinePredicate | None = None) -> str | None:
    """The first of the `n` lines after line i that `hit(raw, line)` accepts, unless `stop`
    accepts one before it (the block it belongs to ended)."""
    for raw, line in lines[i + 1:i + 1 + n]:
        if hit(raw, line):
            return line
        if stop is not None and stop(raw, line):
            return None
    return None


def _above(lines: Lines, i: int, n: int | None, hit: LinePredicate) -> str | None:
    """The nearest of the `n` lines before line i (all of them: None) that `hit(raw, line)` accepts."""
    for raw, line in reversed(lines[max(0, i - n) if n is not None else 0:i]):
        if hit(raw, line):
            return line
    return None


def _eslint_file(lines: Lines, i: int) -> str | None:
    """The stylish formatter's file heading: the unindented line above a file's message lines."""
    return _above(lines, i, None, lambda raw, _line: not raw[:1].isspace())


def _eslint_message(lines: Lines, i: int) -> bool:
    return lines[i][0][:1].isspace() and _eslint_file(lines, i) is not None  # stylish indents messages under the file


def _biome_message(lines: Lines, i: int) -> str | None:
    """The `× message` line right under the header."""
    return _ahead(lines, i, 3, lambda _raw, line: line.startswith(("×", "✖", "!", "i ")))


# An HTTP response's status line, as `curl -i`/`-I` print it, or `curl -v` after `< ` (RFC 9112 section 4).
HTTP_STATUS_LINE = r"^(?:< )?HTTP/\d(?:\.\d)? "
HTTP_STATUS_LINE_RE = re.compile(HTTP_STATUS_LINE + r"([1-5])\d\d\b")


def _final_http_status(lines: Lines, i: int) -> bool:
    """Is no later status line of this output a success or a redirect (curl's `--digest` or
    `--retry` runs more than one request; the last answer is the outcome)?"""
    return not any((m := HTTP_STATUS_LINE_RE.match(line)) and m.group(1) in "123" for _raw, line in lines[i + 1:])


def _cmake_message(lines: Lines, i: int) -> str | None:
    """The first line of the message CMake indents two spaces under its `CMake Error at file:line
    (command):`; none where the header holds the message (`CMake Error: msg`)."""
    raw = lines[i][0]
    depth = len(raw) - len(raw.lstrip())
    if not raw.rstrip().endswith(":"):
        return None
    return _ahead(lines, i, 1, lambda below, _line: len(below) - len(below.lstrip()) > depth)


# unittest's failure report opens each failed test with `separator1`, 70 `=` (Lib/unittest/runner.py).
UNITTEST_SEPARATOR = "=" * 70
# `prettier --check`: each unformatted file as `[warn] path`, then `[warn] Code style issues found in
# 2 files. Run Prettier with --write to fix.` (prettier src/cli/format.js; the logger's `[warn] ` prefix).
PRETTIER_CHECK_RE = re.compile(r"^\[warn\] Code style issues found in (?:the above file|\d+ files)\. Run Prettier\b")
PRETTIER_FILES_LOOKAHEAD = 50  # the summary follows the file list
# oxfmt (oxc apps/oxfmt, Prettier-compatible) `--check`: each unformatted file as `path (3ms)`, then
# `Format issues found in above N files. Run without `--check` to fix.`; it exits 1.
OXFMT_FILE_RE = re.compile(r"^(\S+) \(\d+(?:\.\d+)?m?s\)")  # stderr may run on at its end
OXFMT_CHECK_RE = re.compile(r"^Format issues found in above \d+ files?\. Run without `--check` to fix\.$")
# @actions/core's OIDC client (packages/core/src/oidc-utils.ts getCall): `Failed to get ID Token.`,
# then `Error Code : 400` and `Error Message: <the service's answer>` on lines of their own.
OIDC_ERROR_CODE_RE = re.compile(r"^Error Code : \d+$")
# `gh run view`/`gh run watch` list a run's annotations under ANNOTATIONS: the level's icon (`X` for
# a failure) and the message, then `job: path#line` (cli/cli pkg/cmd/run/shared/presentation.go
# RenderAnnotations, shared.go AnnotationSymbol).
GH_ANNOTATION_AT_RE = re.compile(r"^\S[^:]*: \S+#\d+$")
# miette's cause chain under a `× message`: `╰─▶ cause`, `├─▶` for each but the last (miette
# GraphicalReportHandler render_causes).
MIETTE_CAUSE_RE = re.compile(r"^[╰├]─▶ \S")
# Terraform's / OpenTofu's diagnostic box: `│ Error: summary`, `│`, then `│   on main.tf line 12, in
# resource "x" "y":` (internal/command/format/diagnostic.go: "  on %s line %d%s:").
TF_RANGE_RE = re.compile(r"^│\s+on \S.* line \d+(?:, in .+)?:$")
TF_RANGE_LOOKAHEAD = 3
# miette's graphical report (oxlint's default output): `× message` (`x` in its ASCII theme, when
# not writing to a terminal), then the source snippet's header `╭─[file:line:col]` (`,-[…]`).
MIETTE_SNIPPET_RE = re.compile(r"^(?:╭─|,-)\[(\S+:\d+:\d+)\]$")


def _miette_location(lines: Lines, i: int) -> str | None:
    """The `file:line:col` of the snippet header right under a miette `×` line."""
    line = _ahead(lines, i, 1, lambda _raw, line: bool(MIETTE_SNIPPET_RE.match(line)))
    m = MIETTE_SNIPPET_RE.match(line) if line else None
    return m.group(1) if m else None


def _audit_severity(lines: Lines, i: int) -> str | None:
    """pnpm audit's `Severity: …` line right under its count."""
    return _ahead(lines, i, 1, lambda _raw, line: line.startswith("Severity: "))


def _tsc_chain(lines: Lines, i: int) -> str | None:
    """The first level of a chained TypeScript message that says more than which overload."""
    return _ahead(lines, i, TSC_CHAIN_LOOKAHEAD, lambda raw, line: raw[:1] == " " and not line.endswith(TSC_PREAMBLE),
                  lambda raw, _line: raw[:1] != " ")


def _npm_message(lines: Lines, i: int) -> str | None:
    return _ahead(lines, i, 7, lambda _raw, line: NPM_MESSAGE_RE.match(line),
                  lambda _raw, line: not line.startswith("npm "))


def _project_match(m: re.Match[str] | None) -> bool:
    return m is not None and is_project_path(m.group(1))


def _js_frame(lines: Lines, i: int) -> str | None:
    """The first project frame of a jest (`at f (file:line:col)`) or vitest (`❯ file:line:col`) failure."""
    return _ahead(lines, i, JS_FRAMES_LOOKAHEAD,
                  lambda _raw, line: _project_match(JEST_FRAME_RE.match(line) or VITEST_FRAME_RE.match(line)),
                  lambda _raw, line: line.startswith(("● ", "FAIL ")))


def _jvm_cause(lines: Lines, i: int) -> str | None:
    """The root cause under a JVM exception: the last `Caused by: …` line of its trace (java.lang.Throwable
    printStackTrace prints the chain outermost first, each cause with its frames and `... N more`)."""
    cause = None
    for raw, line in lines[i + 1:i + 1 + GO_FRAMES_LOOKAHEAD]:
        if line.startswith("Caused by: "):
            cause = line
        elif not (raw[:1].isspace() or JAVA_FRAME_RE.match(line) or line.startswith("...")):
            break
    return cause


def _java_frame(lines: Lines, i: int) -> str | None:
    """The first frame of a Java stack trace outside the JDK and the test frameworks."""
    for raw, line in lines[i + 1:i + 1 + GO_FRAMES_LOOKAHEAD]:
        m = JAVA_FRAME_RE.match(line)
        if not m:
            if raw[:1].isspace() or line.startswith("Caused by:"):
                continue
            return None
        if not NOT_PROJECT_JAVA_RE.match(m.group(1)):
            return line
    return None


def _exception_location(lines: Lines, i: int) -> str | None:
    return _python_frame(lines, i) or _js_frame(lines, i) or _java_frame(lines, i)


def _jest_context(lines: Lines, i: int) -> bool:
    """Is this line inside a jest/vitest failure (a `●` or `FAIL` heading, matcher hint or AssertionError above)?"""
    return any(ASSERTION_CONTEXT_RE.search(line) for _, line in lines[max(0, i - ASSERTION_CONTEXT_LOOKBACK):i])


def _jest_failure(lines: Lines, i: int) -> bool:
    return any(line.startswith("● ") for _, line in lines[max(0, i - ASSERTION_CONTEXT_LOOKBACK):i])


def _python_frame(lines: Lines, i: int) -> str | None:
    """The innermost project frame of the traceback that ends at line i (its frames, indented,
    run outermost first)."""
    for raw, line in reversed(lines[:i]):
        if not raw[:1].isspace():
            return None
        m = PY_FRAME_RE.match(line)
        if m and is_project_path(m.group(1)):
            return line
    return None


def _mocha_failing(lines: Lines, i: int) -> bool:
    return any(MOCHA_FAILING_RE.match(raw) for raw, _ in lines)  # the spec reporter numbers failures as it runs


def _rustc_location(lines: Lines, i: int) -> str | None:
    return _ahead(lines, i, RUSTC_LOCATION_LOOKAHEAD, lambda raw, _line: RUSTC_LOCATION_RE.match(raw))


def _python_lint_located(lines: Lines, i: int) -> bool:
    """A ruff/flake8 code line with its location: on the line, or ruff's `-->` under it."""
    return PY_LINT_LOCATION_RE.match(lines[i][1]) is not None or _rustc_location(lines, i) is not None


def _postgres_position(lines: Lines, i: int) -> str | None:
    """libpq's `LINE n: <query line>` right under an error with a position."""
    return _ahead(lines, i, 1, lambda _raw, line: line.startswith("LINE ") and ": " in line)


def _rspec_expectation(lines: Lines, i: int) -> str | None:
    """RSpec's `expected: 3` and `got: nil` under `Failure/Error: …`, on one line."""
    for k in range(i + 1, min(len(lines), i + 1 + RSPEC_EXPECTED_LOOKAHEAD)):
        line = lines[k][1]
        if line.startswith("expected"):
            got = lines[k + 1][1] if k + 1 < len(lines) and lines[k + 1][1].startswith("got:") else ""
            return f"{line} {got}".strip()
    return None


def _rspec_frame(lines: Lines, i: int) -> str | None:
    """The `# ./spec/x_spec.rb:6:in …` frame RSpec prints under a failure's message."""
    return _ahead(lines, i, RSPEC_FRAME_LOOKAHEAD, lambda _raw, line: line.startswith("# ./"))


def _php_frame(lines: Lines, i: int) -> str | None:
    """PHPUnit's `/path/FooTest.php:19` under the failure's message."""
    return _ahead(lines, i, PHP_FRAME_LOOKAHEAD, lambda _raw, line: PHP_FRAME_RE.match(line),
                  lambda _raw, line: PHPUNIT_TEST_RE.match(line))


def _phpunit_failures(lines: Lines, i: int) -> bool:
    return any(PHPUNIT_FAILURES_RE.match(line) for _, line in lines[:i])


def _next_line(lines: Lines, i: int) -> str | None:
    """The line right under a heading (Gradle's `* What went wrong:`)."""
    return lines[i + 1][1] if i + 1 < len(lines) else None


def _location_above(lines: Lines, i: int) -> str | None:
    """The `./path:line:col` Next.js prints right above its `Type error:`."""
    return _above(lines, i, NEXT_LOCATION_LOOKBACK, lambda _raw, line: NEXT_LOCATION_RE.match(line))


def _shellcheck_file(lines: Lines, i: int) -> str | None:
    """ShellCheck's `In file line N:` heading above a finding."""
    return _above(lines, i, None, lambda _raw, line: SHELLCHECK_HEADING_RE.match(line))


def _hook_id(lines: Lines, i: int) -> str | None:
    """pre-commit's `- hook id: <id>` under a failed hook's status line."""
    return _ahead(lines, i, 1, lambda _raw, line: line.startswith("- hook id: "))


def _not_raises_entry(lines: Lines, i: int) -> bool:
    """False for an indented `ValueError: If …` whose nearest less indented line above is `Raises:`."""
    raw = lines[i][0]
    depth = len(raw) - len(raw.lstrip())
    if not depth:
        return True
    for above, line in reversed(lines[max(0, i - RAISES_LOOKBACK):i]):
        if len(above) - len(above.lstrip()) < depth:
            return line != "Raises:"
    return True


def _jest_title(lines: Lines, i: int) -> bool:
    return lines[i][0].startswith("  ● ")


def _annotated_error(lines: Lines, i: int) -> bool:
    return lines[i][0].lstrip().startswith("##[error]")


def _pytest_block_start(lines: Lines, i: int) -> bool:
    """The first line of pytest's `E` block, not one of the lines that explain it."""
    return i == 0 or not lines[i - 1][0].startswith("E ")


def _testify_trace(lines: Lines, i: int) -> str | None:
    """The first frame of the `Error Trace:` label above testify's `Error:` (the frames between
    have no label), or None where the nearest label above is not one."""
    label = _above(lines, i, TESTIFY_TRACE_LOOKBACK, lambda _raw, line: TESTIFY_LABEL_RE.match(line))
    m = TESTIFY_TRACE_RE.match(label or "")
    return m.group(1) if m else None


def _go_test_message(lines: Lines, i: int) -> bool:
    """A failing test's `x_test.go:N: msg`, not the empty one testify's block follows."""
    empty = lines[i][1].endswith(":") and i + 1 < len(lines) and TESTIFY_TRACE_RE.match(lines[i + 1][1])
    return not empty and _go_test_failed(lines, i)


def _testify_more(lines: Lines, i: int) -> str | None:
    """The label-less lines that continue testify's `Error:` (`expected: …` / `actual  : …`)."""
    more = []
    for _raw, line in lines[i + 1:i + 1 + TESTIFY_MESSAGE_LINES]:
        if not line or TESTIFY_LABEL_RE.match(line) or line.startswith("Diff:"):
            break
        more.append(line)
    return " ".join(more) or None


def _pydantic_validation(lines: Lines, i: int) -> bool:
    """A `[type=…]` line under pydantic's `N validation errors for Model` header."""
    return _above(lines, i, PYDANTIC_LOOKBACK, lambda _raw, line: PYDANTIC_HEADER_RE.search(line)) is not None


def _pydantic_location(lines: Lines, i: int) -> str | None:
    """The field location pydantic prints above the message (`items.3.name`): one word, not
    another error's message nor the header."""
    above = lines[i - 1][1].removeprefix("E").strip() if i else ""
    if not above or " " in above or PYDANTIC_ERROR_RE.match(lines[i - 1][1]) or PYDANTIC_HEADER_RE.search(above):
        return None
    return above


def _go_requires_chain(lines: Lines, i: int) -> str | None:
    """The rest of Go's `x requires` / `\ty requires` / `\tz: msg` path: the error is at its end."""
    if not lines[i][1].endswith(" requires"):
        return None
    steps = []
    for raw, line in lines[i + 1:i + 1 + GO_REQUIRES_MAX_STEPS]:
        if not raw.startswith("\t"):
            break
        steps.append(line)
        if not line.endswith(" requires"):
            break
    return " ".join(steps) or None


def _pytest_crash_location(lines: Lines, i: int) -> str | None:
    return _ahead(lines, i, PYTEST_CRASH_LOOKAHEAD, lambda _raw, line: PYTEST_CRASH_RE.match(line),
                  lambda raw, _line: not raw.startswith("E "))


def _go_panic_frame(lines: Lines, i: int) -> str | None:
    return _ahead(lines, i, GO_FRAMES_LOOKAHEAD, lambda raw, _line: _project_match(GO_FRAME_RE.match(raw)),
                  lambda _raw, line: line.startswith(("exit status", "FAIL")))


def _under_caused_by(lines: Lines, i: int) -> bool:
    """Is this line an indented cause under anyhow's `Caused by:` heading?"""
    if not lines[i][0][:1].isspace():
        return False
    for raw, line in reversed(lines[max(0, i - CAUSE_LOOKBACK):i]):
        if line == "Caused by:":
            return True
        if not raw[:1].isspace():
            return False
    return False


# An HTTP API's JSON error object pretty-printed (a CLI quoting the body it got): the message says
# what went wrong.
API_ERROR_OPEN_RE = re.compile(r'^"error"\s*:\s*\{$')
API_ERROR_LOOKBACK = 4  # the object's few keys (type, code, param) come before or after its message


def _in_api_error(lines: Lines, i: int) -> bool:
    """Is this pretty-printed `"message": "…"` line a key of an `"error": {` object?"""
    for _raw, line in reversed(lines[max(0, i - API_ERROR_LOOKBACK):i]):
        if API_ERROR_OPEN_RE.match(line):
            return True
        if line.startswith(("}", "{")) or line.endswith(("{", "[")):
            return False
    return False


# An HTTP API's error body printed on one line (`curl` without `| jq`): a JSON object whose status
# is an HTTP error, or that names an error, says what went wrong in its `message` (or RFC 9457's
# `detail`).
HTTP_ERROR_STATUS = range(400, 600)
ERROR_NAME_RE = re.compile(r"(?:Error|Exception)$")


# A structured logger's JSON record on one line, with the error it was given as an attribute: Go's
# log/slog JSONHandler (`time`, `level`, `msg`, then attributes), logrus's JSONFormatter (`WithError`,
# ErrorKey "error"), zap (`zap.Error`, key "error"). The attribute is the error chain a developer
# quotes; the level is the logger's judgement, not the error's.
LOG_LEVEL_KEYS = ("level", "lvl", "severity")
LOG_MESSAGE_KEYS = ("msg", "message")
LOG_ERROR_KEYS = ("error", "err")
LOG_RECORD_ERROR_RE = re.compile(r'^\{.*?"err(?:or)?"\s*:\s*"((?:[^"\\]|\\.)+)"')


def _log_record(data: object) -> bool:
    """Is this parsed JSON a structured logger's record: a level and a message?"""
    return (isinstance(data, dict) and any(k in data for k in LOG_LEVEL_KEYS)
            and any(k in data for k in LOG_MESSAGE_KEYS))


def _json_log_record(lines: Lines, i: int) -> bool:
    """Is this line a JSON log record (a level and a message) whose first error attribute is its
    own, a string (not one in a nested object)?"""
    line = lines[i][1]
    m = LOG_RECORD_ERROR_RE.match(line)
    try:
        data = json.loads(line)
        said = json.loads(f'"{m.group(1)}"') if m else None
    except ValueError:
        return False
    return _log_record(data) and bool(said and said.strip()) and any(data.get(k) == said for k in LOG_ERROR_KEYS)


def _http_error_body(lines: Lines, i: int) -> bool:
    """Is this line a JSON error response: an object with an HTTP error `status`/`code`/`statusCode`,
    an `"error"`, or a `name`/`type` that ends in Error, whose own or whose `error` object's
    `message`/`detail`/`error_description` is the one the row keeps?"""
    try:
        data = json.loads(lines[i][1])
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("error"), dict) and isinstance(data["error"].get("message"), str):
        return True  # OpenAI's, Anthropic's and Google's envelope: {"error": {"code", "message", …}}
    statuses = [data.get(k) for k in ("status", "code", "statusCode")]
    status = any(str(v).isdigit() and int(v) in HTTP_ERROR_STATUS for v in statuses if isinstance(v, (int, str)))
    named = any(isinstance(data.get(k), str) and ERROR_NAME_RE.search(data[k]) for k in ("name", "type"))
    said = any(isinstance(data.get(k), str) and data[k].strip() for k in ("message", "detail", "error_description"))
    return said and (status or named or bool(data.get("error")))


def _go_test_failed(lines: Lines, i: int) -> bool:
    """Is this `x_test.go:N:` line a failing test's message? A passing or skipped test's t.Log
    prints the same format; go test prints it before the verdict (-v) or after it."""
    for raw, _ in reversed(lines[:i]):
        m = GO_TEST_VERDICT_RE.match(raw)
        if m:
            return m.group(1) == "FAIL"
        if GO_TEST_START_RE.match(raw):
            break
    else:
        return True  # no test around it: a compile error in a test file
    for raw, _ in lines[i + 1:]:
        m = GO_TEST_VERDICT_RE.match(raw)
        if m:
            return m.group(1) == "FAIL"
    return True


def _vitest_failed_module(lines: Lines, i: int) -> bool:
    """Is this `× name` line under a vitest module line with failures (`❯ file (2 tests | 1 failed)`)?
    Biome prints its messages with the same `×`."""
    return any(VITEST_MODULE_RE.match(line) for _, line in lines[:i])


def _panic_message(lines: Lines, i: int) -> str | None:
    """Rust 1.73+: the panic's message on the line under `thread 'main' panicked at file:line:col:`."""
    return _next_line(lines, i) if lines[i][1].endswith(":") else None


def _miette_cause(lines: Lines, i: int) -> str | None:
    """The `╰─▶ cause` (`├─▶` where more follow) right under a miette `× message`."""
    return _ahead(lines, i, 1, lambda _raw, line: bool(MIETTE_CAUSE_RE.match(line)))


def _diagnostic_range(lines: Lines, i: int) -> str | None:
    """The `on main.tf line 12, in resource "x" "y":` a Terraform diagnostic box names, within the box."""
    line = _ahead(lines, i, TF_RANGE_LOOKAHEAD, lambda _raw, line: bool(TF_RANGE_RE.match(line)),
                  lambda _raw, line: not line.startswith("│"))
    return line.removeprefix("│").strip() if line else None


def _vstest_message(lines: Lines, i: int) -> str | None:
    """The first line under the `Error Message:` banner that follows a VSTest `Failed …` line."""
    if i + 2 < len(lines) and lines[i + 1][1] == "Error Message:":
        return lines[i + 2][1]
    return None


# PowerShell's error record in its default view (NormalView; Windows PowerShell 5.1's only one):
# the message, the position (`At C:\\x\\Board.psm1:58 char:5` or `At line:1 char:1`, then `+ code`
# and `+ ~~~~`; a parse error puts the message under them), then `    + CategoryInfo : …` and
# `    + FullyQualifiedErrorId : …` (PowerShell's ErrorRecord view, InvocationInfo.PositionMessage).
PS_POSITION_RE = re.compile(r"^At (?:line:\d+|\S.*:\d+) char:\d+$")
PS_CATEGORY_RE = re.compile(r"^\+ CategoryInfo\s+: ")
PS_RECORD_LOOKAHEAD = 8  # the position, the code excerpt (a line or a few) and its underline
PS_NOT_RECOGNIZED_RE = re.compile(r"\bThe term '[^']+' is not recognized as (?:the|a) name\b")
PS_WRAPPED_LINES = 4  # CommandNotFoundException's message is four lines at 80 columns


def _powershell_message(lines: Lines, i: int) -> bool:
    """Is this line the message of an error record: only position and excerpt lines between it
    and the record's `+ CategoryInfo`?"""
    line = lines[i][1]
    if line.startswith("+") or PS_POSITION_RE.match(line):
        return False
    if _above(lines, i, PS_WRAPPED_LINES, lambda _raw, above: PS_NOT_RECOGNIZED_RE.search(above) is not None):
        return False  # the end of a message the console wrapped, whose first line the command-not-found row keeps
    for _raw, below in lines[i + 1:i + 1 + PS_RECORD_LOOKAHEAD]:
        if PS_CATEGORY_RE.match(below):
            return True
        if not (below.startswith("+") or PS_POSITION_RE.match(below)):
            return False
    return False


def _unittest_report(lines: Lines, i: int) -> bool:
    """Is this `FAIL: …` line right under unittest's `separator1`, the row of 70 `=`?"""
    return i > 0 and lines[i - 1][1] == UNITTEST_SEPARATOR


def _prettier_unformatted(lines: Lines, i: int) -> bool:
    """Is this `[warn] path` line one of the files a `prettier --check` summary below it counts?"""
    return _ahead(lines, i, PRETTIER_FILES_LOOKAHEAD, lambda _raw, line: bool(PRETTIER_CHECK_RE.match(line)),
                  lambda _raw, line: not line.startswith("[warn] ")) is not None


def _oxfmt_unformatted(lines: Lines, i: int) -> bool:
    """Is this `path (3ms)` line one of the files an oxfmt `--check` summary below it counts?"""
    return _ahead(lines, i, PRETTIER_FILES_LOOKAHEAD, lambda _raw, line: bool(OXFMT_CHECK_RE.match(line)),
                  lambda _raw, line: not OXFMT_FILE_RE.match(line)) is not None


def _after_error_code(lines: Lines, i: int) -> bool:
    """Is this `Error Message:` line under the `Error Code : 400` line of the same error?"""
    return i > 0 and bool(OIDC_ERROR_CODE_RE.match(lines[i - 1][1]))  # blank lines are not in `lines`


def _unindented(lines: Lines, i: int) -> bool:
    return not lines[i][0][:1].isspace()


def _gh_annotation(lines: Lines, i: int) -> bool:
    """Is this `X message` line a run annotation, as `gh run view`/`watch` prints one: the message,
    then `job: path#line` under it?"""
    return i + 1 < len(lines) and bool(GH_ANNOTATION_AT_RE.match(lines[i + 1][1]))


def _edit_string(lines: Lines, i: int) -> str | None:
    """Claude Code's `String: <old_string>` line under its edit refusal: which text was not found."""
    return _ahead(lines, i, 1, lambda _raw, line: line.startswith("String: "))


@dataclass(frozen=True)
class Convention:
    """One tool's error line. `at` finds what else a developer quotes with it (the `-->` location,
    the first project frame); `message` finds the line that says what a header line is about
    (Biome's `× message`), kept on the header's line, since neither is the error alone; `when`
    rejects a match its context shows is not a failure; a `heading` only names the failure, so
    the lines under it come first; a `summary` says which run failed, not why, so a
    result with nothing else is also remembered by its first meaningful line (`only_summaries`)."""

    name: str
    line: re.Pattern[str]  # searched in one unwrapped line; with a group, the group is what is kept
    source: str
    at: Callable[[list[tuple[str, str]], int], str | None] | None = None
    message: Callable[[list[tuple[str, str]], int], str | None] | None = None
    when: Callable[[list[tuple[str, str]], int], bool] | None = None
    heading: bool = False
    summary: bool = False


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


CONVENTIONS: tuple[Convention, ...] = (
    # First: a JSON log record's other fields (a time, a path) are no part of its error, which rows
    # below would take the whole line for (`Permission denied`, `fatal: …`, `Cannot find module`).
    Convention("log record error", LOG_RECORD_ERROR_RE,
               "a JSON log record's error attribute: Go log/slog's JSONHandler `{\"time\":…,\"level\":\"WARN\",\"msg\":…,"
               "\"error\":\"failed to get HEAD: reference not found\"}`, logrus's JSONFormatter (ErrorKey), zap's "
               "`zap.Error`", when=_json_log_record),
    # ExUnit's `3) test name (Module)` is kept without the counter, which changes from run to
    # run, so a re-run of the same failing test is the same fact (and resolves it).
    Convention("exunit failure", _rx(r"^\d+\) (test .+ \([\w.]+\))$"),
               "ExUnit CLIFormatter: `N) test name (Module)` then `file:line` (ExUnit.Formatter.format_test_failure)"),
    Convention("mocha failure", _rx(r"^\d+\) \S"),
               "mocha spec reporter: after `N failing`, `1) suite` / `title:` per failure (Base.list, reporters/base.js)",
               when=_mocha_failing),
    Convention("exception", EXCEPTION_LINE_RE,
               "Python's traceback last line `ExcType: msg` (traceback.format_exception_only), Java Throwable.toString "
               "`java.lang.X: msg`, node's `AssertionError [ERR_ASSERTION]: msg`; kept with the innermost "
               "project frame `File \"…\", line N, in f`; jest's `at f (file:line:col)` / vitest's `❯ file:line:col` "
               "(@vitest/runner, vitest `AssertionError: expected 1 to be 2`), Java's first frame outside the JDK and "
               "the test frameworks; not an entry of a Google-style docstring's `Raises:` section (source printed "
               "by `sed`, `cat`: `    ValueError: If …` under `Raises:`, Google Python Style Guide 3.8.3)",
               at=_exception_location, when=_not_raises_entry),
    Convention("go test message", _rx(r"^(?:\S+/)?[\w.-]+_test\.go:\d+:(?: |$)"),
               "Go testing package: t.Errorf/t.Fatalf print `file_test.go:LINE: msg` (pkg.go.dev/testing, decorate)",
               when=_go_test_message),
    Convention("testify assertion", TESTIFY_ERROR_RE,
               "testify's failed assertion under `x_test.go:N: `: `Error Trace:\t<file:line>` frames, `Error:\t<what "
               "failed>` continued by `expected: …` / `actual  : …`, then `Test:` and `Messages:` (stretchr/testify "
               "assert/assertions.go Fail, labeledOutput)", at=_testify_trace, message=_testify_more,
               when=lambda lines, i: _testify_trace(lines, i) is not None),
    Convention("go test failure", _rx(r"^--- FAIL: \S"),
               "Go testing package: `--- FAIL: TestName (0.00s)` per failed test (pkg.go.dev/testing)", heading=True),
    Convention("go panic", _rx(r"^panic: "),
               "Go runtime: `panic: msg`, then `goroutine N [running]:` frames `func(...)` / `\\tfile:line +0xpc` "
               "(runtime/panic.go printpanics, runtime/traceback.go)", at=_go_panic_frame),
    Convention("golangci-lint", _rx(GOLANGCI_LINE_RE.pattern),
               "golangci-lint's default text output: `file.go:line:col: msg (linter)`, the linter that reported "
               "it last (golangci-lint.run/docs/configuration/cli, output.formats.text)"),
    Convention("go build/vet", _rx(r"^\S+\.go:\d+:\d+: \S"),
               "go/scanner ErrorList and go vet `file.go:line:col: msg`; a module error's requirement path "
               "`x requires` / `\\ty: msg`, one tab-indented step per line, is read to its end (golang.org/x/mod "
               "module.ModuleError, cmd/go/internal/mvs BuildListError.Error)", message=_go_requires_chain),
    Convention("python lint", _rx(r"^(?:\S+\.pyi?:\d+:\d+: )?(?:[A-Z]{1,4}\d{2,4} (?:\[\*\] )?|invalid-syntax: )\S"),
               "ruff's default `full` output: `E501 Line too long (93 > 88)` then ` --> path:row:col` and the "
               "code frame (ruff_db diagnostic/render/full.rs); ruff `--output-format concise`, flake8's and "
               "pycodestyle's default `path:row:col: CODE message` (flake8 formatting/default.py "
               "`%(path)s:%(row)d:%(col)d: %(code)s %(text)s`); ruff's syntax errors are `invalid-syntax: msg`", at=_rustc_location, when=_python_lint_located),
    Convention("go command", _rx(r"^go: (?!(?:downloading|finding|found|added|upgraded|downgraded|removed|extracting)\s"
                                 r"|creating new go\.mod|warning: |module \S+ is deprecated)\S"),
               "the go command's own errors: `go: msg` (cmd/go/internal/base Fatalf/Errorf, `base.Fatalf(\"go: %v\", "
               "err)`), `go: writing stat cache: …` (modfetch/cache.go); not its progress and reports `go: downloading`, "
               "`go: finding module for package`, `go: found` (modfetch, modload/import.go), `go: added`/`upgraded`/"
               "`downgraded`/`removed` (modget reportChanges), `go: creating new go.mod` (modload/init.go), "
               "`go: warning: … matched no packages`"),
    Convention("pytest assertion", _rx(r"^E {2,}\S"),
               "pytest: the failing assertion's explanation lines start with `E` (FormattedExcinfo, _pytest/_code/code.py); "
               "the crash location `path:line: ExcType` follows; the block's first line says what failed, the lines "
               "under it (`+  where …`, a diff) explain it", at=_pytest_crash_location, when=_pytest_block_start),
    Convention("pydantic validation header", _rx(r"^(?:E\s+)?(\d+ validation errors? for \S.*)$"),
               "pydantic's ValidationError's first line, `2 validation errors for call[nv_trigger_scan]`: which model "
               "or call the errors under it are about (pydantic-core src/errors/validation_exception.rs, "
               "`{count} validation error{s} for {title}`)", heading=True),
    Convention("pydantic validation", PYDANTIC_ERROR_RE,
               "pydantic's ValidationError: under `N validation errors for Model`, each error's location line, then "
               "`  msg [type=missing, input_value={…}, input_type=dict]` (pydantic-core src/errors/"
               "validation_exception.rs display_errors; docs.pydantic.dev errors/validation_errors); under pytest "
               "each line carries its `E`", at=_pydantic_location, when=_pydantic_validation),
    Convention("pytest summary", _rx(r"^(?:(?:FAILED|ERROR) \S+::\S+|ERROR \S+\.py(?: - \S.*)?$)"),
               "pytest short test summary (-r, default `fE`): `FAILED path::test - ExcType: msg` (docs how-to/output); "
               "a module that failed to collect is `ERROR path.py - ExcType: msg`, or `ERROR path.py` alone where the "
               "error has no crash line (an ImportError's CollectErrorRepr; src/_pytest/terminal.py "
               "_get_line_with_reprcrash_message)"),
    Convention("rustc", _rx(r"^(?:\S+:\d+(?::\d+)?:?\s+)?(?:fatal )?error(?:\[[\w-]+\])?: (?!aborting due to|could not compile)\S"),
               "rustc diagnostics `error[E0382]: msg` then ` --> file:line:col` (rustc-dev-guide, Diagnostics); "
               "gcc/go/esbuild `file:line:col: error: msg` (GNU Coding Standards, Formatting Error Messages); "
               "rustc's `aborting due to` and cargo's `could not compile` only count them", at=_rustc_location),
    Convention("rustfmt", _rx(r"^Diff in \S.*?(?::\d+| at line \d+):$"),
               "rustfmt `--check` (`cargo fmt --check`): `Diff in <file>:<line>:` over each hunk it would change "
               "(src/emitter/diff.rs; `Diff in <file> at line N:` before rustfmt 1.7.1), then the hunk's ` `/`-`/`+` lines; "
               "it exits 1"),
    Convention("eslint", _rx(ESLINT_LINE_RE.pattern),
               "ESLint stylish formatter (the default): the file path, then `  line:col  error  message  rule-id` "
               "(lib/cli-engine/formatters/stylish.js; docs use/formatters#stylish); warnings are not errors",
               at=_eslint_file, when=_eslint_message),
    Convention("biome", BIOME_HEADER_RE,
               "Biome diagnostics: `path:line:col lint/group/ruleName  FIXABLE  ━━━` then `× message` "
               "(biome_diagnostics PrintHeader; biomejs.dev/reference/diagnostics)", message=_biome_message),
    Convention("markdownlint", MARKDOWNLINT_LINE_RE,
               "markdownlint-cli2's default formatter, markdownlint-cli's output: `file:line[:col] [error] "
               "MDnnn/rule-name description [details] [Context: …]` (markdownlint-cli2 formatter-default/README.md); "
               "a `warning` line is not an error"),
    Convention("npm", _rx(r"^npm (?:ERR!|error) code \S+$"),
               "npm's error handler: `npm ERR! code E404` (npm < 10.8: `npm error code …`), then the message lines "
               "`npm ERR! 404 Not Found - GET …` (lib/utils/error-message.js, lib/cli/exit-handler.js)", at=_npm_message),
    Convention("pnpm", _rx(r"^\[?ERR_PNPM_[A-Z0-9_]+\]?(?:\s+\S.*)?$"),
               "pnpm's default reporter: ` ERR_PNPM_CODE  message` (pnpm < 11) or `[ERR_PNPM_CODE] message` "
               "(cli/default-reporter/src/reportError.ts formatErrorSummary); the codes are listed at pnpm.io/errors"),
    Convention("pnpm lifecycle", _rx(r"^\[?ELIFECYCLE\]?\s+\S.*$"),
               "pnpm's reporter for a failed script: ` ELIFECYCLE  Command failed with exit code 1.` or, from pnpm 11, "
               "`[ELIFECYCLE] …` (the same formatErrorSummary with the lifecycle error's code): which run failed",
               summary=True),
    Convention("oxlint", _rx(r"^[×x] (\S.*)$"),
               "oxlint's default output, miette's graphical report: `× plugin(rule): message` (`x` in the ASCII "
               "theme off a terminal), then `╭─[file:line:col]` (`,-[…]`) (miette GraphicalReportHandler; "
               "oxc apps/oxlint output_formatter/default.rs); kept with its location", at=_miette_location,
               when=lambda lines, i: _miette_location(lines, i) is not None),
    Convention("lint summary", _rx(r"^Found (?:\d+ warnings? and )?[1-9]\d* errors?\.$"),
               "a linter's closing count: oxlint's `Found 0 warnings and 3 errors.` (oxc apps/oxlint output_formatter/"
               "default.rs), ruff's `Found 12 errors.` (crates/ruff printer.rs, `Found {remaining} error{s}.`), Biome's "
               "`Found 29 errors.` (biome_cli's summary)", summary=True),
    Convention("package audit", _rx(r"^(?:\d+ vulnerabilities found|\d+ vulnerabilit(?:y|ies) \((?:\d+ \w+(?:, )?)+\))$"),
               "pnpm audit's summary `7 vulnerabilities found` then `Severity: 4 moderate | 3 high` (lockfile/"
               "plugin-commands-audit audit.ts reportSummary); npm audit's `7 vulnerabilities (4 moderate, 3 high)` "
               "(lib/utils/audit-error.js, npm-audit-report); its table above is the advisories", message=_audit_severity),
    Convention("jest failure", _rx(r"^● (?!(?:Validation|Deprecation) Warning)\S"),
               "Jest: each failed test as `  ● Suite › test name`, indented (jest-message-util formatResultsErrors, "
               "TITLE_INDENT + TITLE_BULLET); a `● ` at the line's start is another CLI's status bullet",
               heading=True, when=_jest_title),
    Convention("jest matcher", _rx(r"^expect(?:\(.*?\))?(?:\.(?:not|resolves|rejects))*\.\w+\(.*?\)(?: //.*)?$"),
               "Jest's matcher hint `expect(received).toBe(expected)` (jest-matcher-utils matcherHint), kept with "
               "the failing test's first project frame `at f (file:line:col)`", at=_js_frame, when=_jest_failure),
    Convention("jest expected/received", _rx(r"^(?:Expected|Received)(?: value)?(?: [\w ]+)?: \S"),
               "Jest/Vitest: `Expected: 2` / `Received: 1` under the matcher hint or AssertionError "
               "(jest-matcher-utils printExpected/printReceived; @vitest/expect)", when=_jest_context),
    Convention("vitest failure", _rx(r"^FAIL\s+\S+\.[cm]?[jt]sx?\s+>\s+\S"),
               "Vitest's default reporter: ` FAIL  file > suite > test` per failed test (packages/vitest reporters "
               "base.ts printTaskErrors)", heading=True),
    # kept without its duration, like bun's, so a re-run of the same failing test is the same fact
    Convention("vitest test", _rx(r"^(× \S.*?)(?: \d+ms)?(?: \((?:retry|repeat) x\d+\))*$"),
               "Vitest's default reporter: under the module line `❯ file (2 tests | 1 failed) 123ms`, each failed "
               "test as `× suite > test 50ms` and its `→ message` (packages/vitest/src/node/reporters/base.ts "
               "printTask, v2; v3 indents `× test` under its suites, printTestCase)",
               heading=True, when=_vitest_failed_module),
    Convention("surefire test", _rx(r"^(?:\[ERROR\] )?\S.*\s(?:-- )?Time elapsed: [\d.,]+ s(?:ec)?\s+<<< (?:FAILURE|ERROR)!$"),
               "Maven Surefire: `[ERROR] testName(Class)  Time elapsed: 0.01 s  <<< FAILURE!` per failed test "
               "(maven-surefire-common TestSetStats / ConsoleReporter, surefire-reports/*.txt)", heading=True),
    Convention("surefire tally", _rx(r"^(?:\[ERROR\] )?Tests run: \d+, Failures: \d+, Errors: \d+, Skipped: \d+.*<<< (?:FAILURE|ERROR)!"),
               "Maven Surefire test set: `Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: … <<< FAILURE!` "
               "(TestSetStats FAILURE_MARKER)", heading=True),
    Convention("agent tool error", AGENT_TOOL_ERROR_RE,
               "coding agents' edit-tool refusals: Claude Code `<tool_use_error>File has not been read yet…` / "
               "`String to replace not found in file.` (FileEditTool validateInput); pi `Could not find the exact text in "
               "<path>. The old text must match exactly…` (pi-mono coding-agent/src/core/tools/edit.ts); opencode "
               "`Could not find oldString in the file…` / `oldString not found in content` (packages/opencode/src/tool/edit.ts); Codex's and opencode's apply_patch `apply_patch verification failed: "
               "Failed to find expected lines in <path>` (codex-rs/core/src/tools/handlers/apply_patch.rs, "
               "packages/opencode/src/tool/apply_patch.ts); Codex's `exec_command failed for `cmd`: {err:?}` when the "
               "process was not run (a sandbox denial, a rejected approval; codex-rs tools/handlers/unified_exec.rs), and "
               "`write_stdin failed: stdin is closed for this session; rerun exec_command with tty=true …` (the same "
               "handler, a poll that could not write); "
               "Claude Code's `String: <old_string>` under the first two is kept with them", message=_edit_string),
    # The refusal is what the harness said; the rest of the result, its instructions to the model.
    Convention("agent permission denial",
               _rx(r"^(Permission for this action (?:was denied by the Claude Code auto mode classifier|has been denied)"
                   r"\. Reason: .+?(?:\.(?= If you have other tasks\b)|$)"
                   r"|The user doesn't want to proceed with this tool use\. The tool use was rejected \(eg\. if it was a "
                   r"file edit, the new_string was NOT written to the file\)\..*)"),
               "Claude Code's refusals of a tool call: `Permission for this action was denied by the Claude Code auto "
               "mode classifier. Reason: <why>` (or `… has been denied. Reason: <why>`) then `. If you have other tasks "
               "…`, and a rejected call `The user doesn't want to proceed with this tool use. The tool use was rejected "
               "(eg. if it was a file edit, the new_string was NOT written to the file).` then `STOP what you are doing "
               "…` or `To tell you how to proceed, the user said:` (@anthropic-ai/claude-code 2.1.197, its bundled "
               "strings); a denial up to its reason, a rejection its first line, each one fact whichever call it refused"),
    Convention("agent shell metadata", _rx(r"^(?:User aborted the command$|(?:shell|bash) tool terminated command after "
                                           r"exceeding timeout \d+ ms)"),
               "opencode's shell tool's `<shell_metadata>` (older `<bash_metadata>`) note under the output: `User "
               "aborted the command` when the user stopped it, `shell tool terminated command after exceeding "
               "timeout N ms` (packages/opencode/src/tool/shell.ts, earlier tool/bash.ts)"),
    # bun's `(fail) name [1208.98ms]` is kept without its time, so a re-run is the same fact.
    Convention("bun test failure", _rx(r"^(\(fail\) \S.*?)(?: \[[\d.]+m?s\])?$"),
               "bun test's default reporter: `(pass)` / `(fail) describe > test [12.00ms]` per test, the failure's "
               "`error: expect(received).toBe(expected)` and `Expected: …` / `Received: …` above it (bun.com/docs/cli/test)"),
    Convention("git unknown command", _rx(r"^git: '[^']+' is not a git command\. See 'git --help'\.$"),
               "git on a subcommand it has neither built in nor as `git-<name>` on PATH (an extension not installed: "
               "`git: 'lfs' is not a git command. See 'git --help'.`, git help.c help_unknown_cmd); exits 1"),
    Convention("http status", _rx(HTTP_STATUS_LINE + r"[45]\d\d\b"),
               "an HTTP response's status line with a client or server error (RFC 9112 section 4, `HTTP/1.1 401 "
               "Unauthorized`; HTTP/2 has no reason phrase), as `curl -i`/`-I` print the response head and `curl -v` "
               "prints it after `< `; not where a later response of the same run succeeded (an auth handshake's "
               "401, a retried 503)", when=_final_http_status),
    Convention("git usage", _rx(r"^usage: git [\w-]+ \S"),
               "git's parse-options: a command given an option it does not take prints `usage: git <cmd> …` (after "
               "`error: unknown switch`, where the shell keeps it) and exits 129 without running (parse-options.c "
               "usage_with_options)", heading=True),
    Convention("git conflict", _rx(r"^CONFLICT \([\w/ -]+\): \S"),
               "git merge/rebase/cherry-pick: `CONFLICT (content): Merge conflict in <path>` per conflicted path "
               "(merge-ort.c, `CONFLICT (%s): Merge conflict in %s`)"),
    Convention("git push refused", _rx(r"^! \[(?:remote )?(?:rejected|failure)\]\s+\S.*? -> \S+ \(.+\)$"),
               "git push's status line for a ref it could not update: `! [rejected] src -> dst (stale info | fetch "
               "first | non-fast-forward)` and, refused by the remote, `! [remote rejected] src -> dst (protected "
               "branch)` (transport.c print_ref_status / print_one_push_report; git-push(1) OUTPUT); the `error: "
               "failed to push some refs` under it says only that one failed"),
    Convention("shell syntax", _rx(r"^(?:/\S*/)?(?:zsh|bash|sh|dash)(?:: -c:|:| -c:)(?: line)? ?\d+: "
                                   r"(?:parse error|syntax error|unexpected EOF while looking for matching)\b"),
               "the shell's own diagnostics, the shell named as it was run (`/usr/bin/bash: -c: line 3:`): zsh `zsh:1: parse error "
               "near `|'` (zerr, `%s:%d: %s`), bash `bash: line 1: syntax error near unexpected token` "
               "(print_offending_line / report_syntax_error) and an unclosed quote, `unexpected EOF while looking "
               "for matching `''` (parse.y parse_matched_pair)"),
    Convention("zsh exec", _rx(r"^(?:/\S*/)?(?:zsh|\(eval\))(?::\d+)?: (?:permission denied|no such file or directory|"
                               r"exec format error|not a directory|is a directory): \S"),
               "zsh refusing to run a command: `zsh: permission denied: ./x.sh`, `(eval):1: permission denied: <path>` "
               "(Src/exec.c execute, `zerr(\"%e: %s\", …)`; Src/utils.c zerrmsg prints errno's text lowercased), exit 126 "
               "or 127"),
    Convention("powershell command not found", PS_NOT_RECOGNIZED_RE,
               "PowerShell's CommandNotFoundException: `x : The term 'x' is not recognized as the name of a cmdlet, "
               "function, script file, or operable program.` (Windows PowerShell 5.1; 7.x: `x: The term 'x' is not "
               "recognized as a name of a cmdlet, function, script file, or executable program.`; PowerShell "
               "src/System.Management.Automation/resources/DiscoveryExceptions.resx), however the host wraps it"),
    Convention("cmake error", _rx(r"^CMake Error(?: \(dev\))?(?: (?:at|in) .+?(?::\d+)?(?: \(\w+\))?)?:"),
               "CMake's error: `CMake Error at CMakeLists.txt:12 (find_package):` with the message indented under it, "
               "then `Call Stack (most recent call first):`; `CMake Error at CMakeLists.txt:3:` (a parse error), "
               "`CMake Error in CMakeLists.txt:` (at generate time), `CMake Error: msg` where it has no location "
               "(Source/cmMessenger.cxx DisplayMessage, cmListFileContext's `file:line (command)`)", message=_cmake_message),
    Convention("zsh glob", _rx(r"^(?:zsh|\(eval\))(?::\d+)?: (?:no matches found|bad pattern): \S"),
               "zsh's filename-generation errors, which stop the command before it runs: `zsh: no matches found: "
               "*.py` (NOMATCH) and `bad pattern: …` (Src/glob.c zerr), `(eval):1: …` where the command ran under "
               "`eval` (Claude Code's Bash tool on a zsh login shell)"),
    Convention("esbuild", _rx(r"✘ \[ERROR\] |^\S.*?:\d+:\d+: ERROR: \S"),
               "esbuild's terminal log: `✘ [ERROR] msg` (pkg/logger/logger.go); its failure as the JS API throws it (vite's "
               "`vite:esbuild` plugin, vitest, tsx): `Transform failed with 1 error:`, then `file:line:col: ERROR: text` "
               "for each (lib/shared/common.ts failureErrorWithLog)"),
    Convention("sqlite3 shell", _rx(r"^(?:Parse|Runtime) error(?: near line \d+(?: of \S+)?| in \S+ command line argument)?: \S"),
               "the sqlite3 shell's statement errors: `Parse error: near \"FROM\": syntax error` (prepare: no such "
               "table, syntax), `Runtime error: database is locked (5)` (step), ` near line N` from a script "
               "(sqlite src/shell.c.in runOneSqlLine, `%s:` / `%s near line %d:`)"),
    Convention("yarn classic", _rx(r"^error (?=[A-Z\"])\S.*$"),
               "yarn v1's console reporter: `error <Sentence>` on stderr, the category word without a colon "
               "(yarnpkg/yarn src/reporters/console/console-reporter.js error(); messages from "
               "src/reporters/lang/en.js: `Command failed with exit code 1.`, `An unexpected error occurred: …`)"),
    Convention("mysql client", _rx(r"^ERROR \d{4} \([0-9A-Z]{5}\)(?: at line \d+)?: \S"),
               "the mysql and mariadb clients: `ERROR 1045 (28000): Access denied for user …`, ` at line N` in "
               "batch mode (client/mysql.cc put_info, `ERROR %d (%s)`)"),
    Convention("vite", _rx(r"^(?:\d{1,2}:\d{2}:\d{2}(?: [AP]M)? )?(\[vite\] Internal server error: \S.*?)\s*$"),
               "Vite's dev server on a request that failed: `[vite] Internal server error: msg` after the logger's "
               "time (packages/vite/src/node/server/middlewares/error.ts logError; logger.ts `[vite]` prefix); the "
               "time goes, the same error at another time is the same fact"),
    Convention("tsc", _rx(r"\berror TS\d+: "),
               "TypeScript: `file(line,col): error TS2322: msg` (--pretty false) or `file:line:col - error TS…` (--pretty); "
               "a chained message's next level is indented under it (flattenDiagnosticMessageText), the first one not "
               "an overload's preamble (`The last overload gave the following error.`, TS2770/TS2772) kept with it",
               message=_tsc_chain),
    Convention("tsc trace", _rx(r"^======== (?:Module name|Type reference directive) '[^']+' was not resolved\. ========$"),
               "tsc --traceResolution: each lookup ends `======== Module name 'x' was not resolved. ========` (TypeScript "
               "diagnosticMessages.json Module_name_0_was_not_resolved, Type_reference_directive_0_was_not_resolved; "
               "tests/baselines/reference/*.trace.json); why a TS2307 `Cannot find module` failed, kept after it",
               heading=True),
    Convention("rust panic", _rx(r"^thread '.*'" + RUST_THREAD_ID + " panicked at "),
               "Rust std: `thread 'main' panicked at src/main.rs:9:5:` and, from Rust 1.73, the message on the "
               "next line (std/src/panicking.rs default_hook: `thread '{name}' panicked at {location}:\\n{msg}`); "
               "from Rust 1.91 the OS thread id after the name, `thread 'main' (6543) panicked at` (rust-lang/rust#115746)",
               message=_panic_message),
    Convention("rust stack overflow", _rx(r"^thread '.*'" + RUST_THREAD_ID + " has overflowed its stack$"),
               "Rust std's guard-page handler: `thread 'main' has overflowed its stack`, then `fatal runtime error: "
               "stack overflow` and SIGABRT (std/src/sys/pal/unix/stack_overflow.rs; the thread id from Rust 1.91, "
               "rust-lang/rust#115746): which thread recursed, where cargo only says the test binary aborted"),
    Convention("go race", _rx(r"^WARNING: DATA RACE$"),
               "Go's race detector report: `WARNING: DATA RACE`, the two accesses' goroutine stacks, then "
               "`testing.go:N: race detected during execution of test` (ThreadSanitizer's report as Go prints it; "
               "go.dev/doc/articles/race_detector); kept with its first project frame", at=_go_panic_frame),
    Convention("jvm uncaught", _rx(r'^Exception in thread "[^"]*" \S'),
               "The JVM's default handler for an uncaught exception: `Exception in thread \"main\" "
               "java.lang.X: msg`, then the `at` frames (java.lang.ThreadGroup.uncaughtException); kept as printed, "
               "with its first project frame and its root cause", at=_java_frame, message=_jvm_cause),
    Convention("jvm launcher", _rx(r"^Error: (?:Unable to initialize main class|Could not find or load main class) \S+$"),
               "the java launcher refusing a main class (sun.launcher.LauncherHelper: `Error: Unable to initialize "
               "main class X`, `Caused by: java.lang.NoClassDefFoundError: …` under it), with that cause",
               message=_jvm_cause),
    Convention("unittest failure", _rx(r"^(?:FAIL|ERROR): \S"),
               "Python unittest's failure report: `separator1` (70 `=`), then `FAIL: test_x (module.Class.test_x)` "
               "(Lib/unittest/runner.py TextTestResult.printErrorList; nose2 prints the same)",
               heading=True, when=_unittest_report),
    Convention("make", _rx(r"^make(?:\[\d+\])?: \*\*\* \S"),
               "GNU make: `make: *** [Makefile:4: main] Error 1`, `make: *** No rule to make target 'x'.  Stop.` "
               "(src/job.c `%s[%s: %s] Error %d%s%s` after `*** `, src/remake.c): which target failed",
               summary=True),
    Convention("tap failure", _rx(r"^not ok(?: \d+)?(?: -)? (?!.*# (?i:todo)\b)\S"),
               "a TAP producer's failed test, `not ok 6 check_list_files with non-zero exit` (bats-core, node --test's "
               "TAP reporter, prove): the Test Anything Protocol's test line, `not ok <number> - <description>`, "
               "where a `# TODO` test was expected to fail (testanything.org, TAP version 13/14 specification)"),
    Convention("bats failed command", _rx(r"^# {1,3}`.*' failed(?: with status \d+)?$"),
               "bats-core's diagnostic under a `not ok` test: `# (in test file t.bats, line 4)`, then `#   `[ $status "
               "-eq 0 ]' failed` (lib/bats-core/tracing.bash bats_print_failed_command; bats-core test/trace.bats): "
               "the assertion or command that failed, which the test's name does not say"),
    Convention("bats count", _rx(r"^# bats warning: Executed \d+ instead of expected \d+ tests$"),
               "bats-core's test-count check: `# bats warning: Executed 0 instead of expected 20 tests`, then exit 1 "
               "(libexec/bats-core/bats, bats_test_count_validator): tests that never ran (a setup_file that failed, "
               "`-j` without GNU parallel)", summary=True),
    Convention("prettier error", _rx(r"^\[error\] (\S+: \w*Error: .+)$"),
               "Prettier's CLI on a file it cannot parse: `[error] file: SyntaxError: msg (1:8)`, then the code "
               "frame, each line with the logger's `[error] ` prefix (src/cli/format.js handleError)"),
    Convention("prettier check", _rx(r"^\[warn\] \S+$"),
               "`prettier --check`: `[warn] path` for each unformatted file, above `[warn] Code style issues found "
               "in 2 files. Run Prettier with --write to fix.` (src/cli/format.js)", when=_prettier_unformatted),
    Convention("prettier summary", PRETTIER_CHECK_RE, "`prettier --check`'s closing count (src/cli/format.js)",
               summary=True),
    Convention("oxfmt check", _rx(OXFMT_FILE_RE.pattern + "$"),
               "oxfmt `--check`: `path (3ms)` for each unformatted file, above its closing count (oxc apps/oxfmt)",
               when=_oxfmt_unformatted),
    Convention("oxfmt summary", OXFMT_CHECK_RE, "oxfmt `--check`'s closing count: `Format issues found in above 2 "
               "files. Run without `--check` to fix.` (oxc apps/oxfmt, the check mode's mismatch result)", summary=True),
    Convention("black check", _rx(r"^would reformat \S"),
               "Black's `--check`: `would reformat path` per file it would change, then `Oh no! 💥 💔 💥` and `1 file would "
               "be reformatted.`; it exits 1 (psf/black src/black/report.py Report.done, `would reformat {src}`; "
               "docs/usage_and_configuration/the_basics.md)"),
    Convention("libtest failure", _rx(r"^test \S+(?: - should panic)? \.\.\. FAILED$"),
               "Rust's test harness under `cargo test`: `test name ... FAILED` per failed test (library/test/src/"
               "formatters/pretty.rs: `test {} ... ` then `FAILED`)", heading=True),
    Convention("miette", _rx(r"^× (\S.*)$"),
               "miette's graphical report, as uv prints its errors: `× message`, then `╰─▶ cause` (miette "
               "GraphicalReportHandler; uv's crates/uv/src/lib.rs sets the hook, uv-resolver error.rs `No solution "
               "found when resolving dependencies:`); kept with its cause", at=_miette_cause,
               when=lambda lines, i: _miette_cause(lines, i) is not None),
    Convention("terraform", _rx(r"^│ (Error: \S.*)$"),
               "Terraform's and OpenTofu's diagnostic box: `╷`, `│ Error: summary`, `│   on main.tf line 12, in "
               "resource …:` (internal/command/format/diagnostic.go); kept with that range", at=_diagnostic_range),
    Convention("xunit failure", _rx(r"^(?:\[xUnit\.net [\d:.]+\]\s+)?(\S.*? \[FAIL\])$"),
               "xUnit.net's runner: `    Namespace.Class.Test [FAIL]` (DefaultRunnerReporterMessageHandler "
               "HandleTestFailed, `{DisplayName} [FAIL]`), under `dotnet test` behind the VSTest adapter's "
               "`[xUnit.net 00:00:00.40]` (kept without it, which changes from run to run)"),
    Convention("vstest failure", _rx(r"^(Failed \S+) \[[\d.]+ (?:ms|s|m|h)\]$"),
               "`dotnet test` (VSTest's console logger): `Failed Namespace.Class.Test [12 ms]`, then `Error Message:` "
               "and the message (microsoft/vstest src/vstest.console/Resources/Resources.resx FailedTestIndicator, "
               "ErrorMessageBanner; ConsoleLogger.cs); kept without its duration, with the message's first line",
               message=_vstest_message),
    Convention("turbo task failure", _rx(r"(?:^|: )ERROR: command finished with error: command \(.+\) \S.* exited \(\d+\)$"),
               "Turborepo's failed task, under the task's own `pkg:task: ` log prefix: `pkg:task: ERROR: command finished "
               "with error: command (dir) npm run build exited (1)` (vercel/turborepo turborepo-tests/integration/tests/"
               "run/continue.t); which task failed, its output above says why", summary=True),
    Convention("powershell error", _rx(r"^(\S.*)$"),
               "PowerShell's error record (NormalView): the message, `At file:line char:col`, the `+ code` excerpt, then "
               "`+ CategoryInfo : …` and `+ FullyQualifiedErrorId : …` (PowerShell ErrorRecord view; a native "
               "command's stderr reads `cmd : message`, category NativeCommandError)", when=_powershell_message),
    Convention("git", _rx(r"(?:^|: )fatal: \S"), "git's die(): `fatal: msg` (usage.c), also quoted inside a wrapper's message"),
    Convention("error cause", _rx(r"^(?:\d+: )?(?!--- std(?:out|err)$|cargo::?[\w-]+(?:=|$))(\S.*)$"),
               "anyhow's report of an error returned from main: `Error: msg`, a blank line, `Caused by:` and the "
               "indented causes, numbered `0: …` where there are several (anyhow Debug for Error, docs.rs/anyhow "
               "\"Display representations\"); the root cause is what to fix. Cargo prints a failed build script's "
               "output there under `--- stdout` / `--- stderr`: its `cargo:KEY=VALUE` lines are instructions to "
               "cargo (doc.rust-lang.org/cargo/reference/build-scripts.html), not causes", when=_under_caused_by),
    Convention("mise task failure", _rx(r"^ERROR task failed$"),
               "mise run: a failed task ends with `[task] ERROR task failed`, the task's prefix naming it "
               "(jdx/mise src/task/task_results_display.rs exit_if_failed)", summary=True),
    Convention("mise", _rx(r"^mise ERROR (?!Run with --verbose)\S"),
               "mise's logger: `mise ERROR msg`, then `mise ERROR Run with --verbose or MISE_VERBOSE=1 for more "
               "information` (a hint, not an error; jdx/mise src/logger.rs)"),
    Convention("govulncheck", _rx(r"^(?:Your code is affected by \d+ vulnerabilit(?:y|ies)\b|Vulnerability #\d+: GO-\d{4}-\d+)"),
               "govulncheck's text output: `Vulnerability #1: GO-2026-4971` per finding and the summary `Your code "
               "is affected by N vulnerabilities …` (golang.org/x/vuln internal/scan/text.go); it exits 3"),
    Convention("ruby exception", _rx(r"^\S+:\d+:in [`'][^']*': .+ \([A-Z]\w*(?:::[A-Z]\w*)*\)$"),
               "Ruby's uncaught exception: `file:line:in 'meth': message (Class)`, then `\\tfrom …` frames "
               "(ruby eval_error.c print_errinfo; Ruby < 3.4 quotes the method as `` `meth' ``); the line is its own location"),
    Convention("rspec failure", _rx(r"^Failure/Error: \S"),
               "RSpec's failure: `Failure/Error: <the failing line>`, the matcher's `expected: 3` / `got: nil` under it, "
               "then the `# ./spec/x_spec.rb:6:in …` frame (rspec-core formatters/exception_presenter.rb "
               "failure_slash_error_lines)", at=_rspec_frame, message=_rspec_expectation),
    Convention("rspec example", _rx(r"^rspec \./\S+:\d+ # \S"),
               "RSpec's `Failed examples:` list, `rspec ./spec/x_spec.rb:5 # description` per failed example (rspec-core "
               "formatters/base_text_formatter.rb)", heading=True),
    Convention("phpunit assertion", _rx(r"^Failed asserting that \S"),
               "PHPUnit's default result printer: `There was 1 failure:`, `1) Class::method`, the message `Failed "
               "asserting that …` and the `file.php:line` it failed at (src/TextUI/Output/Default/ResultPrinter.php)",
               at=_php_frame),
    Convention("phpunit test", _rx(PHPUNIT_TEST_RE.pattern),
               "PHPUnit's numbered failed test `1) Tests\\FooTest::testBar` under `There was 1 failure:` (as above)",
               heading=True, when=_phpunit_failures),
    Convention("python logging", _rx(r"^(?:ERROR|CRITICAL):[\w.]+:\S"),
               "Python logging's default format `%(levelname)s:%(name)s:%(message)s` (Lib/logging/__init__.py "
               "BASIC_FORMAT): `ERROR:root:msg`; lower levels are not errors"),
    Convention("gradle", _rx(r"^\* What went wrong:$"),
               "Gradle's build failure report: `* What went wrong:` and the message under it (`Execution failed for "
               "task ':app:compileJava'.`; gradle BuildExceptionReporter)", message=_next_line),
    Convention("gradle summary", _rx(r"^(?:FAILURE: Build failed with an exception\.|> Task \S+ FAILED)$"),
               "Gradle's `FAILURE: Build failed with an exception.` heading (BuildExceptionReporter) and a console "
               "task's `> Task :x:compileKotlin FAILED`: which build failed, not why", heading=True, summary=True),
    Convention("msbuild", _rx(r"(?:\)|\S) ?: (?:fatal )?error [A-Z]{2,}\d{3,5}: \S"),
               "MSBuild's canonical diagnostic `file(line,col): error CS0103: msg [project]`, `project : error MSB4242: "
               "msg` (dotnet/msbuild src/Framework/Utilities/EventArgsFormatting.cs FormatEventMessage); warnings are "
               "not errors"),
    Convention("pyright", _rx(r"^\S+:\d+:\d+ - error: \S"),
               "pyright's CLI: `  /path/x.py:3:5 - error: msg (rule)` (packages/pyright-internal/src/pyright.ts "
               "logDiagnosticToConsole)"),
    Convention("kotlin", _rx(r"^e: (?:file://)?\S+?(?::\d+:\d+|: \(\d+, \d+\):) \S"),
               "the Kotlin Gradle plugin's compiler messages `e: file:///…/Main.kt:3:5 msg` (GradleStyleMessageRenderer; "
               "before Kotlin 1.8 `e: /…/Main.kt: (3, 5): msg`); `w:` warnings are not errors"),
    Convention("next.js", _rx(r"^Type error: \S"),
               "next build's type check: `Failed to compile.`, `./app/page.tsx:3:5`, `Type error: msg` "
               "(packages/next/src/lib/typescript/diagnosticFormatter.ts getFormattedDiagnostic); kept with its location",
               at=_location_above),
    Convention("shellcheck", _rx(r"(SC\d{4} \((?:error|warning|info|style)\): \S.*$|^\S+:\d+:\d+: (?:error|warning|note): .* \[SC\d{4}\]$)"),
               "ShellCheck's default tty output `In file line N:`, the line, `^--^ SC2086 (info): msg` (src/ShellCheck/"
               "Formatter/TTY.hs), and `--format gcc` `file:line:col: note: msg [SC2086]` (Formatter/GCC.hs); it exits "
               "1 on any finding; kept with its `In file line N:`", at=_shellcheck_file),
    Convention("pre-commit", _rx(r"^\S.*?\.{3,}(?:\([^)]*\))?Failed$"),
               "pre-commit's (and prek's) hook status `name…………Failed`, then `- hook id: <id>` and `- exit code: N` "
               "(pre-commit/commands/run.py _run_single_hook, `_full_msg`; the dots fill the line to the status)",
               message=_hook_id),
    Convention("generic error", _rx(r"^(?:[A-Z]\w* )?(?:Error|ERROR|FATAL|Fatal error): \S"),
               "node's uncaught `Error: msg` (util.inspect of an Error) and CLIs' `Error: …`, `API Error: 400 …`"),
    Convention("framework log", _rx(r"^\[\w+\]\s.*\s(?:ERROR|FATAL)\s"),
               "NestJS Logger: `[Nest] pid - time   ERROR [Context] msg` (@nestjs/common ConsoleLogger)"),
    Convention("logfmt", _rx(r"^level=(?:error|fatal) "), "logrus TextFormatter / golangci-lint: `level=error msg=…`"),
    Convention("http 5xx", _rx(r"=> \[5\d\d\]"), "Playwright MCP network log `[POST] url => [500] …` (server errors only)"),
    Convention("localized", _rx(r"^(?:致命错误|错误|エラー|오류)\s*[:：]|^\S{0,16}失败(?:[:：]|$)"),
               "git's zh_CN/ja/ko translations of `fatal:`/`error:` (po/*.po), CLIs' `…失败`"),
    Convention("exunit exception", _rx(r"^\*\* \([\w.]+\) \S"), "ExUnit formatter: `** (RuntimeError) msg` (ExUnit.Formatter)"),
    Convention("exunit code", _rx(r"^code:\s+(?:assert|refute)\b"), "ExUnit formatter: the failing assertion's `code:` line"),
    Convention("curl", _rx(r"^curl: \(\d+\) \S"),
               "curl's exit message `curl: (7) Failed to connect to … port 443: Connection refused`, `curl: (22) The "
               "requested URL returned error: 404` (src/tool_operate.c post_check_result, `curl: (%d) %s`; the codes "
               "in docs/cmdline-opts/_EXITCODES.md)"),
    Convention("postgres", _rx(r"(?:^|: )(?:ERROR|FATAL|PANIC):  \S"),
               "PostgreSQL's messages as libpq prints them: the severity, a colon and two spaces, `ERROR:  relation \"x\" "
               "does not exist`, then `LINE 1: …` and a `^` under the error's position (src/interfaces/libpq/"
               "fe-protocol3.c pqBuildErrorMessage3 `%s:  `, reportErrorPosition); kept with its `LINE n:`",
               at=_postgres_position),
    Convention("program error", _rx(r"^[\w.-]+: (?:error|fatal): \S"),
               "a program naming itself: `psql: error: connection to server … failed: …` (PostgreSQL src/common/"
               "logging.c pg_log_generic_v, `%s: error: `), Python argparse's `prog: error: msg` "
               "(ArgumentParser.error)"),
    Convention("github cli", _rx(r"(?:^|: )(?:HTTP [45]\d\d(?:: \S.*)? \(https?://\S+\)$|GraphQL: \S)|^gh: \S"
                                 r"|^none of the git remotes configured for this repository point to a known GitHub host\."),
               "gh's API errors: `HTTP 404: Not Found (https://api.github.com/…)` and `GraphQL: msg (path)` "
               "(cli/go-gh pkg/api/errors.go HTTPError.Error `HTTP %d: %s (%s)`, GraphQLError.Error `GraphQL: %s`), "
               "also wrapped: `pull request create failed: GraphQL: …` (cli/cli pkg/cmd/pr/create/create.go); `gh api`'s "
               "`gh: <the server's error message>` / `gh: HTTP 422` (pkg/cmd/api/api.go processResponse); a repository "
               "whose remotes gh cannot map to a host: `none of the git remotes configured for this repository point to "
               "a known GitHub host. …` (gh's base-repository resolution, cli/cli context; exit 1)"),
    Convention("buildkit step error", _rx(r"^#\d+ ERROR: \S"),
               "BuildKit's plain progress (`docker build --progress=plain`, buildctl, what a non-TTY gets): a step "
               "that failed ends `#N ERROR: <its error>` (moby/buildkit util/progress/progressui printer.go, "
               "`#%d ERROR: %s`), before the build's `error: failed to solve: …`"),
    # uvicorn's default log format is `%(levelprefix)s %(message)s`, the level name and a colon padded
    # to nine: `ERROR:    msg` (uvicorn/logging.py, ColourizedFormatter), as an ASGI server's log shows it.
    Convention("uvicorn log error", _rx(r"^ERROR: {4}\S"),
               "uvicorn's log lines at ERROR: `ERROR:    Exception in ASGI application`, "
               "`ERROR:    ASGI callable returned without completing response.` (uvicorn/logging.py "
               "ColourizedFormatter levelprefix; uvicorn/protocols/http)"),
    Convention("docker daemon", _rx(r"(?:^|: )Error response from daemon: \S"),
               "the Docker client's `Error response from daemon: msg`, the daemon's JSON `message` (moby client/"
               "request.go checkResponseErr), `docker: Error response …` from run/create (docker/cli "
               "cli/command/container/run.go)"),
    Convention("aws cli", _rx(r"(?:^|: )An error occurred \([\w.]+\) when calling the \w+ operation(?: \([^)]*\))?: \S"),
               "the AWS CLI's service errors, botocore's ClientError `An error occurred (AccessDenied) when calling the "
               "GetObject operation: Access Denied` (boto/botocore botocore/exceptions.py MSG_TEMPLATE, its `{retry_info}` "
               "` (reached max retries: 4)` after retries), `fatal error: …` / `download failed: … …` from `aws s3` "
               "(aws/aws-cli awscli/customizations/s3/results.py)"),
    Convention("kubectl", _rx(r"^Error from server(?: \(\w+\))?: \S"),
               "kubectl's API errors: `Error from server (NotFound): pods \"x\" not found` (kubernetes/kubectl "
               "pkg/cmd/util/helpers.go StandardErrorMessage, `Error from server (%s): %s`)"),
    Convention("os error", _rx(r"No such file or directory|command not found|Permission denied|\bEACCES\b|^ENOENT: |Segmentation fault"
                               r"|: (?:Connection refused|Connection timed out|Connection reset by peer|Address already in use"
                               r"|No space left on device|Operation not permitted|Network is unreachable)$"),
               "strerror(3) ENOENT/EACCES texts, libuv/node's `EACCES: permission denied, open '…'` / `ENOENT: no such file…`, bash's "
               "`command not found`, SIGSEGV's psignal text; the network, disk and EPERM texts where perror(3) puts "
               "them, after `: ` at the end (`fusermount: mount failed: Operation not permitted`)"),
    Convention("sh not found", _rx(r"^(?:/bin/)?(?:sh|dash|ash)(?:: \d+)?: \S.*: not found$"),
               "a POSIX sh that is not bash, on a missing command: dash (Debian's and Ubuntu's /bin/sh) `sh: 1: pnpm: "
               "not found` (src/exec.c `%s: not found` after error.c's `sh: <line>: `), BusyBox ash (Alpine's) "
               "`/bin/sh: pnpm: not found` (shell/ash.c)"),
    Convention("jq error", _rx(r"^jq: error\b"),
               "jq's runtime error `jq: error (at <stdin>:0): Cannot index string with \"x\"` and compile error "
               "`jq: error: syntax error, … at <top-level>, line 1:`, not the `jq: 1 compile error` count under it "
               "(jq src/main.c, src/util.c; jqlang.github.io/jq/manual)"),
    Convention("node resolution", _rx(r"\bCannot find module\b|\bModule not found\b"),
               "node's MODULE_NOT_FOUND `Cannot find module 'x'`, webpack's `Module not found:`"),
    Convention("api error message", _rx(r'^"message"\s*:\s*"((?:[^"\\]|\\.)+)",?$'),
               "an HTTP API's JSON error object, pretty-printed: OpenAI's `{\"error\": {\"message\": …}}` (API "
               "reference, Error codes), Anthropic's `{\"type\": \"error\", \"error\": {\"type\", \"message\"}}` "
               "(API, Errors): its `\"message\"` key under `\"error\": {`", when=_in_api_error),
    Convention("http error body", _rx(r'^\{.*?"(?:message|detail|error_description)"\s*:\s*"((?:[^"\\]|\\.)+)".*\}$'),
               "an HTTP API's JSON error response on one line, as curl prints it: GitHub REST's `{\"message\": "
               "\"Not Found\", \"status\": \"404\"}` (docs.github.com \"Troubleshooting the REST API\"), RFC 9457 "
               "problem details' `status` and `detail`, Fastify's/NestJS's `{\"statusCode\": 400, \"error\": \"Bad "
               "Request\", \"message\": …}`, OpenAI's/Google's `{\"error\": {\"code\", \"message\"}}`, a thrown "
               "error's `name` (`…Error`) with its `message`; OAuth 2.0's `{\"error\": \"invalid_token\", "
               "\"error_description\": …}` (RFC 6749 section 5.2, RFC 6750 section 3)", when=_http_error_body),
    Convention("auth", _rx(r"^(?:(?:Invalid|Missing|Expired|Revoked) (?:API key|access token|credentials)|Not logged in"
                           r"|You are not logged in(?:to)?|X Failed to log in to \S+ (?:account \S+|using token) \()"),
               "MCP tools' and API CLIs' auth refusals (`Invalid API key. …`), a CLI's `Not logged in. Run 'x login' …` "
               "/ gh's `You are not logged into any GitHub hosts`, and `gh auth status` on a token it cannot use: "
               "`X Failed to log in to github.com account octocat (keyring)` (cli/cli pkg/cmd/auth/status/status.go)"),
    Convention("gh run annotation", _rx(r"^X \S"),
               "a run's failure annotation as `gh run view`/`watch` print it: `X Canceling since a higher priority "
               "waiting request for … exists`, then `job: .github#1` (cli/cli pkg/cmd/run/shared/presentation.go "
               "RenderAnnotations)", when=_gh_annotation),
    Convention("gh failure", _rx(r"^X [A-Z][a-z]+ (?!.*(?:\(ID \d+\)| · \d+)$)[^\t]*$"),
               "gh's failure line on stderr, its FailureIcon `X` (cli/cli pkg/iostreams/color.go) before the message: "
               "`X Pull request owner/repo#140 is not mergeable: the merge commit cannot be cleanly created.` "
               "(pkg/cmd/pr/merge/merge.go), `X Failed to …`; not a job or step of `gh run view`'s tree (`X build in 2m "
               "(ID 1)`, RenderJobs; its steps indented under it) nor its run header (`… · 123`)", when=_unindented),
    Convention("actions oidc", _rx(r"^Error Message: \S"),
               "@actions/core's OIDC client in a job's log: `Error Code : 400`, then `Error Message: <the service's "
               "answer>` (packages/core/src/oidc-utils.ts getCall, `Failed to get ID Token.`)", when=_after_error_code),
    Convention("build summary", _rx(r"^error: (?:aborting due to|could not compile `[^`]+`)"),
               "rustc's closing `error: aborting due to 2 previous errors` and cargo's `error: could not compile `crate` "
               "(lib) due to 2 previous errors` (cargo src/cargo/core/compiler/mod.rs): which crate failed, counted",
               summary=True),
    Convention("ci step exit", _rx(r"^Process completed with exit code -?\d+\.$"),
               "the Actions runner's annotation on a step whose process exited non-zero, `##[error]Process completed "
               "with exit code 1.` (actions/runner src/Runner.Worker/Handlers/ScriptHandler.cs): which step failed",
               when=_annotated_error, summary=True),
    Convention("ci annotation", _rx(r"^\S"),
               "a GitHub Actions error annotation `##[error]msg` in a job's log (`::error::msg`, @actions/core "
               "setFailed; docs.github.com \"Workflow commands for GitHub Actions\") that no row above recognizes "
               "(the runner's own exit is \"ci step exit\")", when=_annotated_error),
)


def _lint_rule(text: str) -> str:
    for rx in LINT_RULE_RES:
        m = rx.search(text)
        if m:
            return next(g for g in m.groups() if g)
    return text


def _json_strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _json_strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in _json_strings(v)]
    return []


def _logical(line: str) -> list[str]:
    """One printed line as the lines it encodes. A script that returns a tool's result as JSON
    (Codex code mode's `text(JSON.stringify(r))`: `{"exit_code":1,"output":"…\\n…"}`) or an
    error quoted with Rust's `{:?}` (`exec_command failed for …: Rejected(\"…\\n…\")`) prints
    the tool's lines escaped on one line; rows read the lines, not the escapes."""
    if ESCAPED_NEWLINE not in line:
        return [line]
    stripped = line.strip()
    if JSON_LINE_RE.match(stripped):
        return [line]  # a pretty-printed JSON document's `"key": "…\n…"`: data, one line
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if _log_record(data):  # a log record's escaped lines (zap's stacktrace, a joined error) are its fields
            return [line]
        if isinstance(data, dict):  # a unified-exec result: its `output`; any other object: its strings
            texts = [data["output"]] if isinstance(data.get("output"), str) else _json_strings(data)
            return [t for text in texts for t in text.splitlines()]
    if ESCAPED_QUOTE not in line and not RUST_DEBUG_STRING_RE.search(line):
        return [line]  # a literal `\\n` in printed source code, not an escaped string
    for _ in range(UNESCAPE_DEPTH):
        line = (line.replace("\\\\", "\x00").replace("\\r\\n", "\n").replace("\\n", "\n").replace('\\"', '"')
                .replace("\\t", "\t").replace("\x00", "\\"))
        if ESCAPED_NEWLINE not in line:
            break
    return line.splitlines()


def _without_step_prefix(lines: list[str]) -> list[str]:
    """The lines with the `job<TAB>step<TAB>` prefix of a GitHub Actions log taken off the untimed
    lines too, where the same prefix opens a timestamped line of this output (CI_STEP_PREFIX_RE)."""
    steps = {m.group(1) for line in lines if (m := CI_STEP_PREFIX_RE.match(line))}
    if not steps:
        return lines
    untimed = [None if CI_LOG_PREFIX_RE.match(line) else CI_STEP_RE.match(line) for line in lines]
    return [line[m.end():] if m and m.group() in steps else line for line, m in zip(lines, untimed, strict=True)]


# TAP's diagnostics are `#` lines (testanything.org, TAP 13/14). Under a `not ok`, bats-core prints
# where the test failed and the failed command (the "bats failed command" row's lines), then what the
# test printed, each line behind `# ` (libexec/bats-core/bats-exec-test, `bats_print_failed_command`
# and the test's output through `sed -e 's/^/# /'`): that output is a program's, read without it.
TAP_NOT_OK_RE = re.compile(r"^not ok\b")
BATS_OWN_DIAGNOSTIC_RE = re.compile(r"^#(?: \(in |   ?`| bats warning: |$)")


def _without_tap_comment(kept: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(task prefix, line) pairs with the `# ` of a failed TAP test's output taken off its lines."""
    if not any("not ok" in raw for _, raw in kept):
        return kept  # no failed test: most outputs, read as they are
    out: list[tuple[str, str]] = []
    in_failure: dict[str, bool] = {}  # per task (its prefixes): tasks run in parallel interleave their lines
    for prefix, raw in kept:
        body = raw
        while m := TASK_PREFIX_RE.match(body):  # a task run by a task: `[test:bats] [test:bats:nogit] # …`
            body = body[m.end():]
        task = prefix + raw[:len(raw) - len(body)]
        if TAP_NOT_OK_RE.match(body):
            in_failure[task] = True
        elif not body.startswith("#"):
            in_failure[task] = False
        elif in_failure.get(task) and not BATS_OWN_DIAGNOSTIC_RE.match(body):
            raw = raw[:len(raw) - len(body)] + body.removeprefix("# ")
        out.append((prefix, raw))
    return out


def logical_lines(output: str) -> list[str]:
    return [t for line in output.splitlines() for t in _logical(line)]


def output_lines(output: str, *, decoded: bool = True) -> list[str]:
    """Stripped, non-empty lines without the SWE-agent footer; escaped lines decoded (`_logical`)
    unless a quote must be verbatim."""
    lines = logical_lines(output) if decoded else output.splitlines()
    return [s for s in (line.strip() for line in lines) if s and not SWE_FOOTER_RE.match(s)]


def _task_prefix(raw: str) -> str:
    """A mise task's `[name] ` or a Turborepo task's `pkg:task: ` prefix of a line, or nothing."""
    m = TASK_PREFIX_RE.match(CI_LOG_PREFIX_RE.sub("", ANSI_RE.sub("", raw)))
    return m.group(0) if m else ""


def _unprefixed(raw: str) -> str:
    """A line without its ANSI colours and the CI log's or task runner's prefix, indentation kept."""
    return TASK_PREFIX_RE.sub("", CI_LOG_PREFIX_RE.sub("", ANSI_RE.sub("", raw)))


def quoted_line(raw: str, line: str) -> str:
    """The unwrapped `line` as the output shows it, for keeping: with the `<tool_use_error>` tags or
    the GitHub Actions `##[error]` its raw form has, which say where it was printed (the harness, a
    CI job). The same error run locally is still the same fact (`ErrorFact.key` drops the marker)."""
    shown = raw.strip()
    start = TOOL_USE_ERROR_OPEN if shown.startswith(TOOL_USE_ERROR_OPEN) else ""
    annotation = GHA_ANNOTATION_RE.match(shown)  # `line` has it off (unwrap_line)
    start += annotation.group(0) if annotation else ""
    end = TOOL_USE_ERROR_CLOSE if shown.endswith(TOOL_USE_ERROR_CLOSE) else ""
    return start + line + end


def unwrap_line(raw: str) -> str:
    """A line without its harness wrapping (tags, ANSI colours, CI log or task prefix), stripped."""
    return WRAPPER_TAG_RE.sub("", GHA_ANNOTATION_RE.sub("", _unprefixed(raw).strip())).strip()


def error_findings(output: str) -> list[tuple[str, str | None]]:
    """(exact error line, its location or first project frame) in output order, headings after
    the lines under them, deduplicated and bounded. `output` may be any text: a tool result,
    hook output, a system reminder, a log the user pasted."""
    return split_error_findings(output)[0]


def split_error_findings(output: str) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """`error_findings`, and the further error lines past its bound (not lint lines, which a count
    stands for), up to MAX_FURTHER_ERROR_LINES: what a checkpoint with room left may still show."""
    kept = _without_tap_comment([(_task_prefix(r), _unprefixed(r)) for r in _without_step_prefix(logical_lines(output))])
    kept = [(prefix, raw) for prefix, raw in kept if raw.strip()]
    lines = [(raw, unwrap_line(raw)) for _, raw in kept]  # (indentation kept, unwrapped)
    found: list[tuple[bool, str, str | None, str, str]] = []  # (heading, line, at, row, what makes it the same)
    in_traceback = in_hunk = False
    for i, (raw, line) in enumerate(lines):
        if not line or SHELL_ENVELOPE_NONE_RE.match(line):
            continue
        if DIFF_HUNK_RE.match(raw):
            in_hunk = True
            continue
        if in_hunk and raw[:1] in DIFF_LINE_MARKS:
            continue  # a changed or context line of a diff is file content, not what the run printed
        in_hunk = False
        if TRACEBACK_START_RE.match(line):
            in_traceback = True
            continue
        indented = raw[:1] in (" ", "\t")
        if in_traceback:
            # Frames are indented; the exception line is the first unindented line after them.
            if indented or line.startswith(("File ", "During handling", "The above")):
                continue
            in_traceback = False
        for rule in CONVENTIONS:
            m = rule.line.search(line)
            if m and (rule.when is None or rule.when(lines, i)):
                text = m.group(1) if m.groups() else quoted_line(raw, line)
                said = rule.message(lines, i) if rule.message else None
                text = f"{text} {said}" if said else text
                # The task runner's prefix stays on the line: it names the task that printed it (mise's
                # `[test:bats:nogit] `). The line without it is what makes two lines the same: two
                # tasks printing it, hk reprinting a failed step's stderr unprefixed at its end.
                same, text = GHA_ANNOTATION_RE.sub("", text), kept[i][0].lstrip() + text
                found.append((rule.heading, text, rule.at(lines, i) if rule.at else None, rule.name, same))
                break
    out: list[tuple[str, str | None]] = []
    further: list[tuple[str, str | None]] = []
    per_rule: dict[tuple[str | None, ...], int] = {}  # (lint row, rule) or (row, file, exception): its lines seen
    left_out: dict[str, int] = {}  # per lint row: the lines not kept
    tests_left_out = 0  # pytest summary lines past MAX_TESTS_PER_FAILURE of their (file, exception)
    shown: set[str] = set()  # the lines kept, each once
    for _, text, at, name, same in sorted(found, key=lambda f: f[0]):  # stable: output order within each kind
        text, same = cut_middle(text, ERROR_LINE_MAX_CHARS), cut_middle(same, ERROR_LINE_MAX_CHARS)
        if same in shown:
            continue
        if name in LINT_ROWS:
            rule = (name, _lint_rule(same))
            per_rule[rule] = per_rule.get(rule, 0) + 1
            if per_rule[rule] > MAX_LINT_LINES_PER_RULE or len(out) >= MAX_ERROR_LINES_PER_RESULT:
                left_out[name] = left_out.get(name, 0) + 1
                continue
        group = PYTEST_SUMMARY_GROUP_RE.match(same) if name == "pytest summary" else None
        if group:
            key = (name, *group.groups())
            per_rule[key] = per_rule.get(key, 0) + 1
            if per_rule[key] > MAX_TESTS_PER_FAILURE:
                tests_left_out += 1
                continue
        counts_others = name in COUNT_ROWS and any(f[3] not in COUNT_ROWS for f in found)
        if len(out) < MAX_ERROR_LINES_PER_RESULT and not counts_others:
            out.append((text, at and cut_middle(at, ERROR_LINE_MAX_CHARS)))
            shown.add(same)
        elif len(further) < MAX_FURTHER_ERROR_LINES and all(text != t for t, _ in further):
            further.append((text, at and cut_middle(at, ERROR_LINE_MAX_CHARS)))
    out += [(LINT_MORE.format(n=n, rule=name), None) for name, n in left_out.items()]
    if tests_left_out:
        out.append((TESTS_MORE.format(n=tests_left_out), None))
    return out, further


def only_summaries(errors: list[str]) -> bool:
    """Do these error lines only say which run failed (mise's `[lint] ERROR task failed`)?"""
    return bool(errors) and all(any(c.summary and c.line.search(unwrap_line(e)) for c in CONVENTIONS) for e in errors)


def error_lines(output: str) -> list[str]:
    """The exact error lines of `error_findings`."""
    return [text for text, _ in error_findings(output)]


def first_meaningful_line(output: str, command: str | None = None) -> str | None:
    """The line a failed run without a known error line is remembered by: not the harness's
    envelope, not JSON, which is a `--json` CLI's data on stdout (its diagnostic is prose), and not
    a label the `command` printed itself (`echo "=== status ==="`): that says where, not what failed
    (an echoed `tests failed` is the script's own word on it, and stays), nor a line that says
    something passed (PASS_LINE_RE)."""
    own = {a or b for a, b in ECHO_LITERAL_RE.findall(command or "") if ECHO_LABEL_RE.match(a or b)}
    for line in map(unwrap_line, output_lines(output)):
        if line and (not NOISE_LINE_RE.match(line) and not EXIT_CODE_RE.match(line) and not ABORTED_RE.match(line)
                and not JSON_LINE_RE.match(line) and not BOX_RULE_RE.match(line) and not PASS_LINE_RE.match(line)
                and line not in own):
            return cut_middle(line, ERROR_LINE_MAX_CHARS)
    return None


def exit_code_of(output: str) -> int | None:
    m = EXIT_CODE_RE.search(output)
    if m:
        return int(m.group(1))
    m = EXIT_CODE_JSON_RE.search(output)  # a unified-exec result as JSON, alone or returned by a script
    if m:
        return int(m.group(1))
    return None


def claude_task_output(output: str) -> tuple[str, str] | None:
    """A Claude Code TaskOutput result of a background shell as (what the run printed, with its
    exit status as the Bash tool prints it, `Exit code N`, once it ended; the task's status), or
    None for anything else (a sub-agent's task, another tool's output)."""
    m = CLAUDE_TASK_RE.match(output)
    if not m:
        return None
    status, exit_code, printed = m.groups()
    return (printed or "") + (f"\nExit code {exit_code}" if exit_code is not None else ""), status


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
    lines = [s for s in output_lines(output, decoded=False)  # quoted as the tool printed it
             if not SWE_OK_RE.match(s) and not EXIT_CODE_RE.match(s) and not NOISE_LINE_RE.match(s)]
    text = "\n".join(lines)
    if lines and len(lines) <= OUTPUT_EXCERPT_MAX_LINES and len(text) <= OUTPUT_EXCERPT_MAX_CHARS:
        return text
    return None
