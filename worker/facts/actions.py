"""Tool calls as `Action`s: the one scan of a window's messages that both fact stages read.

Each tool call is paired with its result (or a result stands alone when its call is outside the
window) and turned into facts: files touched, the command and its run key, status and exit
code, error lines, test tallies, commits and branches. `worker.facts.ledger` folds them into
the carried ledger and `worker.facts.workstate` decides Done / In Progress / Blocked from them;
the pipeline scans once and hands the same list to both.

What a harness injected into user messages is mined too (the importers mark it, see
worker/formats/_common.py): a command the user ran itself (`!cmd`, meta "shell_command" and
"shell_output") is an action like the agent's, and error lines in other injected content
(a system reminder carrying hook output, a failed background task) are errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any

from ..session import Message
from .output import (
    ABORTED_RE,
    AGENT_TOOL_ERROR_RE,
    BRANCH_OUTPUT_RE,
    BUT_COMMIT_RE,
    BUT_EXISTING_REVIEW_RE,
    BUT_REVIEW_RE,
    BUT_REVIEW_TITLE_RE,
    BUT_SHA_RE,
    CANCELLED_CALL_RE,
    CELL_RUNNING_RE,
    CLAUDE_BACKGROUND_RE,
    CLAUDE_TASK_NOTIFICATION_RE,
    CLAUDE_TASK_STOPPED_RE,
    CODE_MODE_SESSION_RE,
    CODEX_COMMAND_HEADER_RE,
    COMMIT_OUTPUT_RE,
    COPILOT_SHELL_RUNNING_RE,
    COPILOT_SHELL_STOPPED_RE,
    DETACHED_HEAD,
    EXIT_CODE_RE,
    NOTHING_TO_COMMIT_RE,
    PR_CLOSED_RE,
    PR_MERGED_RE,
    PR_SHOWN_URL_RE,
    PR_URL_RE,
    SESSION_RUNNING_RE,
    SWE_CWD_RE,
    SWE_FILE_HEADER_RE,
    claude_task_output,
    diffstat_paths,
    error_findings,
    exit_code_of,
    failing_test_ids,
    find_tallies,
    first_meaningful_line,
    logged_commits,
    oneline_sha,
    only_summaries,
    output_excerpt,
    split_error_findings,
    unwrap_line,
)
from .shell import (
    BRANCH_CMD_RE,
    BUT_COMMIT_SUBCOMMANDS,
    BUT_REVIEW_SUBCOMMANDS,
    COMMAND_MAX_CHARS,
    DQUOTE_ESCAPE_RE,
    GH_PR_CMD_RE,
    GH_PR_TITLE_RE,
    GIT_COMMIT_CMD_RE,
    GIT_DIFFSTAT_CMD_RE,
    GIT_LOG_CMD_RE,
    GIT_PICK_CMD_RE,
    READ_COMMANDS,
    RELATIVE_REV_RE,
    but_runs,
    clean_tool_path,
    commit_subject,
    gh_pr_targets,
    is_verify_command,
    last_program,
    normalize_path,
    only_looks,
    patch_file_actions,
    run_key,
    shell_command,
    shell_file_actions,
)
from .text import cut_middle

# What a run did to a file that is no edit of it: read it, staged it (`git add`: changed before), or
# printed its name in a git diffstat ("listed": a commit's or the tree's change, not this run's).
NOT_EDITS = ("read", "staged", "listed")
# Lower-cased tool names across agents (Claude Code, pi, Codex, SWE-agent, OpenHands, Cursor).
READ_TOOLS = {"read", "read_file", "view", "open", "view_file", "readfile", "cat", "notebookread"}
WRITE_TOOLS = {"write", "write_file", "create_file", "create", "writefile"}
EDIT_TOOLS = {"edit", "multiedit", "edit_file", "str_replace", "insert", "replace", "notebookedit",
              "replace_in_file", "search_replace"}
EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "text_editor"}  # `command` arg
PATCH_TOOLS = {"apply_patch", "patch", "applypatch"}
# A web tool's result is a page or search results, as a read's is a file: an `E2BIG` or `Error:` in a
# man page it found is not the tool failing. Claude Code WebFetch / WebSearch, opencode webfetch /
# websearch, Gemini CLI web_fetch / google_web_search, Qwen Code web_fetch / web_search, Codex code
# mode's `tools.web__run` (the `web.run` tool: search_query, open, find).
WEB_TOOLS = {"webfetch", "websearch", "web_fetch", "web_search", "google_web_search", "web__run"}
SHELL_TOOLS = {"bash", "shell", "shell_command", "execute", "execute_command", "run_command", "exec_command", "terminal",
               "local_shell", "run_terminal_cmd", "run_shell_command", "container.exec", "cmd",
               "powershell"}  # Claude Code's PowerShell tool and Copilot CLI's on Windows: `command`, as bash
PATH_KEYS = ("file_path", "path", "filename", "file", "target_file", "notebook_path", "filepath",
             "filePath")  # opencode
# str_replace_editor `command` values that change a file vs only show it.
EDITOR_WRITE_COMMANDS = {"create"}
EDITOR_EDIT_COMMANDS = {"str_replace", "insert", "undo_edit", "edit", "replace"}
EDITOR_READ_COMMANDS = {"view"}
# Pull requests opened or merged through a GitHub tool rather than `gh`: GitHub's MCP server
# (github/github-mcp-server pkg/github/pullrequests.go: `create_pull_request` {title, head, base},
# answering the PR's `url` or, before its minimal responses, the PR object with `number` and
# `html_url`; `merge_pull_request` {pullNumber}, answering the REST merge response `{"sha", "merged":
# true, "message"}`) and Codex's GitHub connector (namespace `mcp__codex_apps__github`,
# `_create_pull_request` {repository_full_name, title}, answering the PR's `url` and `number`). A
# client prefixes the server's tool name (Claude Code `mcp__<server>__<tool>`, opencode `<server>_<tool>`).
PR_TOOLS = {"create_pull_request": "opened", "merge_pull_request": "merged"}
PR_NUMBER_KEYS = ("pullNumber", "pull_number", "pr_number")
# A pull request the session only looked at or worked on (`gh pr view 22`, `gh pr checks 22`): which one
# the work is about. It never replaces what the session did to it (opened, merged, closed).
PR_SEEN = "seen"
# A run stopped by Ctrl-C exits 128 + SIGINT (POSIX XCU 2.8.2, "Exit Status for Commands"): Codex's
# `write_stdin` of `\u0003` ending a `gh run watch`, the user's interrupt. With nothing printed it
# neither passed nor failed; its status stays unknown.
INTERRUPTED_EXIT = 130
# Programs whose exit status 1 means "no match / differs", not failure.
EXIT_1_OK_PROGRAMS = {"grep", "egrep", "fgrep", "rg", "ag", "diff", "cmp", "test", "["}
# Codex's unified exec (codex-rs core/src/unified_exec): an `exec_command` still running when its
# `yield_time_ms` ends answers `Process running with session ID N`; `write_stdin {"session_id": N}`
# then polls it (or types into it: `\u0003` stops it) and gets its later output, at the end
# `Process exited with code N`. Every poll is that one run: it takes the command's name, and the
# run has no outcome while it is still running (output.SESSION_RUNNING_RE, or in code mode the
# result object a script printed, output.CODE_MODE_SESSION_RE).
STDIN_TOOLS = {"write_stdin"}
# GitHub Copilot CLI's shells: a run still going answers with its `shellId` (output.COPILOT_SHELL_RUNNING),
# and these tools poll it by `shellId` (or type into it), the last one with its exit code.
SHELL_ID_TOOLS = {"read_bash", "write_bash", "stop_bash", "read_powershell", "write_powershell", "stop_powershell"}
# Claude Code's background Bash runs (output.CLAUDE_BACKGROUND_RE): polled by TaskOutput, stopped by
# TaskStop, each naming the run by its `task_id`. A TaskOutput, TaskStop or output-file Read answered with
# an error (`<tool_use_error>`: no such file or task, not running) is the harness's answer, not the run's.
TASK_TOOLS = {"taskoutput", "taskstop"}
TASK_GOING = {"running", "pending"}  # a TaskOutput status of a run not ended yet
TASK_KILLED = "killed"  # ended by someone (TaskStop, the user): neither passed nor failed
# Its notice names the file the run writes to, `…/tasks/<ID>.output`, and says "To check interim output,
# use Read on that file path": such a Read is a poll of the run, what it printed so far, with the
# Read tool's line numbers (`1\t…`, before 2.1 `     1→…`) in front of each line.
TASK_OUTPUT_FILE = "{}.output"
TASK_OUTPUT_DIR = "tasks"
READ_LINE_NUMBER_RE = re.compile(r"^ *\d+(?:\t|→)", re.MULTILINE)
# Codex code mode: an `exec` cell still running when its yield ends answers `Script running with
# cell ID N`; `wait {"cell_id": N}` then polls it and gets the rest of its output (codex-rs
# core/src/tools/code_mode, wait_handler.rs). Every wait is that cell, the same run as its last
# tool. (Codex's other `wait`, for sub-agents, takes `ids`, not `cell_id`.)
CELL_WAIT_TOOLS = {"wait"}
CELL_RUN_ID = "cell {}"  # a cell's run id, apart from the unified exec session ids (numbers)
# A shell command that only prints source or documentation files (`sed -n '1,240p' SKILL.md`,
# `cat src/x.ts | head`) shows their content, as a read tool does: an error line in it (a README's
# example, a test's expected output) is not what the run printed. A log (`.log`, `.output`,
# `.txt`, no extension) is what some run printed, and is read for errors like any output.
CONTENT_EXTENSIONS = frozenset({
    "md", "mdx", "rst", "adoc", "py", "pyi", "ts", "tsx", "js", "jsx", "mjs", "cjs", "go", "rs", "java", "kt", "kts",
    "scala", "rb", "php", "c", "h", "cc", "cpp", "hpp", "cs", "swift", "ex", "exs", "sh", "bash", "zsh", "ps1",
    "yaml", "yml", "toml", "json", "jsonc", "ini", "cfg", "html", "css", "scss", "sql", "proto", "vue", "svelte",
    "lua", "zig", "dart", "gradle", "xml", "tf", "nix",
})
PRINTERS = READ_COMMANDS | {"sed"}  # they report their own failures as `prog: message` on stderr (POSIX utilities)
# A harness's own markup around injected content (`<system-reminder>`): not part of an error line.
MARKUP_TAG_RE = re.compile(r"</?[A-Za-z][\w-]*>")
# Argument names of a search/replace edit, per agent.
EDIT_KEYS = (("old_str", "new_str"), ("old_string", "new_string"), ("search", "replace"), ("old", "new"))


@dataclass
class Action:
    """One tool call with its result (or a result without a call), as facts."""

    pos: int  # index of the message where the outcome is (the result, else the call)
    message_id: str  # that message's id
    call_message_id: str | None
    tool: str
    script: str | None = field(default=None, repr=False)  # the shell command, whole: a commit deep in a long script counts
    source: str = ""  # what re-running means: `run_key(command)`, or "tool path" for other tools
    files: list[tuple[str, str]] = field(default_factory=list)  # (path, read/created/modified/deleted)
    has_result: bool = False
    is_error: bool = False
    status: str = "unknown"  # ok / failed / unknown
    exit_code: int | None = None
    output: str | None = None  # short output excerpt
    errors: list[str] = field(default_factory=list)
    further_errors: list[str] = field(default_factory=list)  # a long failing run's lines past `errors` (output.py)
    error_at: dict[str, str] = field(default_factory=dict)  # error line -> its location / first project frame
    exit_only: bool = False  # errors holds only an exit/first line, no real error line
    tallies: list[tuple[str, bool]] = field(default_factory=list)  # (text, failed)
    test_ids: list[str] = field(default_factory=list)
    commits: list[tuple[str | None, str, str | None]] = field(default_factory=list)  # (sha, subject, branch)
    logged: list[tuple[str, str]] = field(default_factory=list)  # (sha, subject) git named (output.logged_commits)
    branches: list[str] = field(default_factory=list)
    pull_requests: list[tuple[int, str, str | None, str | None]] = field(default_factory=list)  # (number, state, title, url)
    pr_call: tuple[str, int | None, str | None] | None = None  # a PR_TOOLS call's (state, number, title), until its result
    edit: tuple[str, str] | None = None  # (old text, new text) of a search/replace edit
    # A `git commit` that failed and made no commit: a hook or GPG signing refused it, so the work
    # it was to record is not recorded ("nothing to commit" refuses nothing: it was recorded already).
    commit_refused: bool = False
    run_id: str | None = None  # a run still going: the id its polls name (run_polled)
    polls: str | None = None  # the run id a poll continued (run_polled)
    started_by: str | None = None  # a poll's or an end notice's: the message whose call started the run
    in_cell: bool = False  # a tool a Codex code-mode `exec` cell ran, or a wait on such a cell
    reads_output: bool = False  # a poll that read the run's output file (TASK_OUTPUT_FILE): it may still be going

    @cached_property
    def command(self) -> str | None:
        """The shell command as facts name it: verbatim, bounded (heredoc scripts are not its identity)."""
        return cut_middle(self.script.strip(), COMMAND_MAX_CHARS) if self.script else None

    @property
    def verifies(self) -> bool:
        """A test/build/script run whose success is evidence about the work."""
        return bool(self.command) and is_verify_command(self.command)

    @property
    def passed(self) -> bool:
        return self.status == "ok" and not any(failed for _, failed in self.tallies)

    @property
    def changes(self) -> list[tuple[str, str]]:
        """The edits: a path `git add` named ("staged") was changed before, not by this run."""
        return [(p, a) for p, a in self.files if a not in NOT_EDITS]


def _call_files(name: str, args: dict[str, Any], cwds: list[str]) -> list[tuple[str, str]]:
    lname = name.lower()
    path = next((p for p in (clean_tool_path(args.get(k)) for k in PATH_KEYS) if p), None)
    files: list[tuple[str, str]] = []
    if lname in EDITOR_TOOLS:
        sub = str(args.get("command", "")).lower()
        action = ("created" if sub in EDITOR_WRITE_COMMANDS else "modified" if sub in EDITOR_EDIT_COMMANDS
                  else "read" if sub in EDITOR_READ_COMMANDS else None)
        if path and action:
            files.append((path, action))
    elif lname in READ_TOOLS and path:
        files.append((path, "read"))
    elif lname in WRITE_TOOLS and path:
        files.append((path, "created"))
    elif lname in EDIT_TOOLS and path:
        files.append((path, "modified"))
    elif lname in PATCH_TOOLS:
        # Codex: the freeform `input` (or a JSON `patch`); opencode tool/apply_patch.ts: `patchText`.
        text = next((v for v in (args.get("input"), args.get("patch"), args.get("patchText"), args.get("_raw"))
                     if isinstance(v, str)), "")
        files += patch_file_actions(text)
    return [(normalize_path(p, cwds), a) for p, a in files]


def _set_errors(action: Action, findings: Sequence[tuple[str, str | None]],
                further: Sequence[tuple[str, str | None]] = ()) -> None:
    action.errors = [text for text, _ in findings]
    action.further_errors = [text for text, _ in further]
    action.error_at = {text: at for text, at in [*findings, *further] if at}


def _prints_content(action: Action) -> bool:
    """Does this shell command only print source or documentation files (CONTENT_EXTENSIONS)?"""
    return (bool(action.command and only_looks(action.command)) and bool(action.files)
            and all(what == "read" and PurePosixPath(path).suffix[1:].lower() in CONTENT_EXTENSIONS
                    for path, what in action.files))


def _analyze_result(action: Action, output: str, is_error: bool, cwds: list[str]) -> None:
    action.has_result = True
    output = CODEX_COMMAND_HEADER_RE.sub("", output)  # the harness's echo of the command, not output
    if CANCELLED_CALL_RE.match(unwrap_line(output.strip())):
        action.files = []  # it never ran: no outcome, no error, nothing read or changed
        return
    action.is_error = is_error
    lname = action.tool.lower()
    file_tool = lname in READ_TOOLS | WRITE_TOOLS | EDIT_TOOLS | EDITOR_TOOLS | PATCH_TOOLS
    fetched = file_tool or lname in WEB_TOOLS  # its result is a file's or a page's content, not a program's output
    action.exit_code = exit_code_of(output) if not fetched else None
    if file_tool and not is_error:  # a refusal is the result's first line; file content is not scanned
        first = next((line for line in output.splitlines() if line.strip()), "")
        is_error = bool(AGENT_TOOL_ERROR_RE.match(unwrap_line(first)))
    if action.exit_code == 1 and action.command and last_program(action.command) in EXIT_1_OK_PROGRAMS:
        action.exit_code = 0  # `grep` found nothing: an answer, not an error
        is_error = False
    # A file or web tool prints content: scan it for errors only when the tool itself failed.
    content = fetched or (not is_error and action.exit_code in (None, 0) and _prints_content(action))
    if not content or is_error:
        _set_errors(action, *split_error_findings(output))
    elif not fetched:  # the printer's own complaint (`cat: x: No such file or directory`, a pipe hid its status)
        _set_errors(action, [f for f in error_findings(output) if f[0].split(": ", 1)[0] in PRINTERS])
    action.tallies = find_tallies(output) if not content else []
    action.test_ids = failing_test_ids(output) if not content else []
    # git prints `[branch sha] subject` once the commit exists (git-commit(1)); a pre-commit hook
    # that fails stops it before. What such a hook printed on the way (a test suite's logged
    # `error: …` lines under `1274 pass`) did not fail the run.
    by_but = bool(action.script and but_runs(action.script, BUT_COMMIT_SUBCOMMANDS))  # GitButler's `but commit`
    is_commit = by_but or bool(action.script and GIT_COMMIT_CMD_RE.search(action.script))
    picks = bool(action.script and GIT_PICK_CMD_RE.search(action.script))
    created = list(COMMIT_OUTPUT_RE.finditer(output)) if is_commit or picks else []
    if created and action.exit_code in (None, 0) and not is_error:
        action.errors, action.further_errors, action.error_at = [], [], {}
    failed = (
        is_error
        or (action.exit_code is not None and action.exit_code != 0)
        or (not fetched and bool(ABORTED_RE.search(output)))
        or any(f for _, f in action.tallies)
        or (bool(action.errors) and action.exit_code is None)
    )
    # stopped, with no error said (a watch's status lines), or by Copilot's stop_bash or Claude Code's TaskStop:
    # neither passed nor failed
    stopped = ((failed and not action.errors and action.exit_code == INTERRUPTED_EXIT)
               or (action.polls is not None and bool(COPILOT_SHELL_STOPPED_RE.search(output)
                                                     or CLAUDE_TASK_STOPPED_RE.search(output))))
    failed = failed and not stopped
    # Only a code-mode cell's result has a cell header or a script-printed result object; another
    # tool may print either as data (a `cat` of notes, a `jq` over a rollout).
    cell = CELL_RUNNING_RE.match(output) if action.in_cell else None
    session = None
    if action.script and action.exit_code is None:
        session = (SESSION_RUNNING_RE.search(output) or COPILOT_SHELL_RUNNING_RE.search(output)
                   or CLAUDE_BACKGROUND_RE.search(output)
                   or (CODE_MODE_SESSION_RE.search(output) if action.in_cell else None))
    action.run_id = CELL_RUN_ID.format(cell.group(1)) if cell else session.group(session.lastindex) if session else None
    # still running (`Process running with session ID N`, `Script running with cell ID N`, Copilot's
    # and Claude Code's background notices) and no error yet: no outcome
    action.status = "unknown" if stopped or (action.run_id and not failed) else "failed" if failed else "ok"
    if failed and only_summaries(action.errors):
        # `[lint:gomod] ERROR task failed` names the task that failed; a script's own message
        # (`go module files modified, …`) follows no convention, so its first line says why.
        line = first_meaningful_line(output, action.command)
        if line and line not in {unwrap_line(e) for e in action.errors}:
            action.errors.insert(0, line)
    if failed and not action.errors:
        line = first_meaningful_line(output, action.command)
        if line is None:
            m = EXIT_CODE_RE.search(output) or ABORTED_RE.search(output)
            line = m.group(0).strip() if m else None
        if line:
            action.errors = [line]
            action.exit_only = True
    if action.command:
        action.output = output_excerpt(output)
    if failed and file_tool:
        action.files = []  # the read or edit did not happen
    elif file_tool and not action.files and lname in EDIT_TOOLS | WRITE_TOOLS | READ_TOOLS:
        # SWE-agent `edit`/`insert` name no path; the result header names the open file.
        m = SWE_FILE_HEADER_RE.search(output)
        if m:
            action.files = [(normalize_path(m.group(1), cwds), "read" if lname in READ_TOOLS else "modified")]
    # A commit git made is a fact even where a later link of the command failed (`&& git push`).
    action.commits += [(m.group(2), m.group(3).strip(), None if m.group(1) == DETACHED_HEAD else m.group(1)) for m in created]
    if by_but:  # printed once the commit exists; its id is a sha only where it has no change id (BUT_COMMIT_RE)
        subject = commit_subject(action.script or "", "but")
        action.commits += [(m.group(1) if BUT_SHA_RE.fullmatch(m.group(1)) else None, subject, m.group(2))
                           for m in BUT_COMMIT_RE.finditer(output) if subject or BUT_SHA_RE.fullmatch(m.group(1))]
    if is_commit and not failed and not action.commits:
        subject = commit_subject(action.script or "")
        if subject:
            action.commits.append((oneline_sha(output, subject), subject, None))
    action.commit_refused = is_commit and failed and not action.commits and not NOTHING_TO_COMMIT_RE.search(output)
    if action.script:
        action.logged = logged_commits(output, log=bool(GIT_LOG_CMD_RE.search(action.script)),
                                       moved_back=bool(RELATIVE_REV_RE.search(action.script)))
    if action.script and not failed:
        action.pull_requests = _pull_requests(action.script, output)
    elif action.pr_call and not failed:
        action.pull_requests = _tool_pull_requests(action.pr_call, output)
    if action.script and GIT_DIFFSTAT_CMD_RE.search(action.script):  # the ledger keeps only those met no other way
        action.files += [(normalize_path(n, cwds), "listed") for n in diffstat_paths(output)]
    if action.command:
        action.branches += [a or b for a, b in BRANCH_OUTPUT_RE.findall(output)]
        action.branches += [sha_branch for _, _, sha_branch in action.commits if sha_branch]


def _pull_requests(command: str, output: str) -> list[tuple[int, str, str | None, str | None]]:
    """The pull requests a `gh pr create` or `but pr new` opened (its URL, its summary), a `gh pr merge`
    merged or a `gh pr close` closed (its line), and those another `gh pr` subcommand acted on
    (PR_SEEN): the number or URL it named, else the one its output shows."""
    verbs = set(GH_PR_CMD_RE.findall(command))
    m = GH_PR_TITLE_RE.search(command) if "create" in verbs else None
    title = m and (DQUOTE_ESCAPE_RE.sub(r"\1", m.group(1)) if m.group(1) is not None else m.group(2))
    opened = [(int(u.group(1)), "opened", title, u.group(0)) for u in PR_URL_RE.finditer(output)][-1:] if "create" in verbs else []
    reviews = but_runs(command, BUT_REVIEW_SUBCOMMANDS)
    if reviews:  # GitButler's `but pr new`: a summary block per review
        opened += [(int(m.group(1)), "opened", t.group(1).strip() if (t := BUT_REVIEW_TITLE_RE.search(m.group(2))) else None,
                    u.group(0) if (u := PR_URL_RE.search(m.group(2))) else None) for m in BUT_REVIEW_RE.finditer(output)]
    merged = [(int(n), "merged", t, None) for n, t in PR_MERGED_RE.findall(output)] if "merge" in verbs else []
    targets = gh_pr_targets(command)
    closed = ([(int(n), "closed" if verb == "Closed" else "opened", t, None) for verb, n, t in PR_CLOSED_RE.findall(output)]
              if any(v in ("close", "reopen") for v, _ in targets) else [])
    seen = []
    if reviews:  # and one per branch of the stack that had its review already
        seen += [(int(m.group(1)), PR_SEEN, None, u.group(0) if (u := PR_URL_RE.search(m.group(2))) else None)
                 for m in BUT_EXISTING_REVIEW_RE.finditer(output)]
    for verb, named in targets:
        if named is not None and named.isdigit():
            seen.append((int(named), PR_SEEN, None, None))
            continue
        shown = PR_SHOWN_URL_RE.search(output) if named is None and verb == "view" else None
        url = (shown.group(1) or shown.group(3)) if shown else named
        page = PR_URL_RE.fullmatch(url) if url else None
        if page:
            seen.append((int(page.group(1)), PR_SEEN, None, url))
    done = {n for n, *_ in opened + merged + closed}
    return opened + merged + closed + [p for p in seen if p[0] not in done]


def pr_tool_state(name: str) -> str | None:
    """What a GitHub tool does to a pull request (PR_TOOLS), by its own name inside the client's prefix."""
    own = name.rsplit("__", 1)[-1].lstrip("_").lower()
    return next((state for tool, state in PR_TOOLS.items() if own == tool or own.endswith("_" + tool)), None)


def _tool_pull_requests(call: tuple[str, int | None, str | None], output: str) -> list[tuple[int, str, str | None, str | None]]:
    """The pull request a PR_TOOLS call opened (its number and URL from the answer) or merged."""
    state, number, title = call
    try:  # the JSON the tool answered, after any envelope the harness put before it (Codex's `Output:`)
        answer = json.JSONDecoder().raw_decode(output, output.index("{"))[0]
    except ValueError:
        answer = None
    answer = answer if isinstance(answer, dict) else {}
    url = next((u for u in (answer.get("html_url"), answer.get("url")) if isinstance(u, str) and PR_URL_RE.fullmatch(u)),
               None)
    if url is None and not answer:
        m = PR_URL_RE.search(output)
        url = m.group(0) if m else None
    if url is not None:
        number = int(PR_URL_RE.fullmatch(url).group(1))
    elif type(answer.get("number")) is int:
        number = answer["number"]
    if number is None or (state == "merged" and answer.get("merged") is not True):
        return []
    return [(number, state, title, url)]


def _edit_pair(args: dict) -> tuple[str, str] | None:
    """The (old, new) text of a search/replace edit: what the fix actually was."""
    for old_key, new_key in EDIT_KEYS:
        old, new = args.get(old_key), args.get(new_key)
        if isinstance(old, str) and isinstance(new, str) and old != new:
            return old, new
    return None


# Message.meta key: the tools a script-running call ran (Codex code mode `exec`), by call id, as
# [{"name", "arguments"}] (worker/formats/codex.py reads them out of the script).
NESTED_CALLS = "nested_calls"


def run_polled(name: str, args: dict[str, Any]) -> str | None:
    """The run id a poll continues: a unified exec session's (STDIN_TOOLS), a Copilot shell's
    (SHELL_ID_TOOLS), a Claude Code background task's (TASK_TOOLS) or a cell's (CELL_WAIT_TOOLS)."""
    lname = name.lower()
    if lname in STDIN_TOOLS and "session_id" in args:
        return str(args["session_id"])
    if lname in SHELL_ID_TOOLS and "shellId" in args:
        return str(args["shellId"])
    if lname in TASK_TOOLS and "task_id" in args:
        return str(args["task_id"])
    if lname in CELL_WAIT_TOOLS and "cell_id" in args:
        return CELL_RUN_ID.format(args["cell_id"])
    return None


def track_run(running: dict[str, Action], action: Action) -> None:
    """Keep `running` (run id -> the run still going, newest last) current after `action`'s outcome:
    a run still going takes its id; a poll that saw its run end frees it."""
    if action.run_id:
        running.pop(action.run_id, None)
        running[action.run_id] = action
    elif action.polls and action.has_result:
        running.pop(action.polls, None)


def _call_action(name: str, args: dict[str, Any], pos: int, message_id: str, cwds: list[str],
                 running: dict[str, Action], in_cell: bool, ended: dict[str, Action] | None = None) -> Action:
    """One tool call as an Action without its result yet: command, files, edit, run key. `running`:
    the runs still going, by run id (run_polled); `in_cell`: a tool a code-mode cell ran; `ended`:
    the background runs the harness said ended, whose output file a Read may still show."""
    ended = ended or {}
    polls = run_polled(name, args)
    read = next((p for p in map(clean_tool_path, (args.get(k) for k in PATH_KEYS)) if p), None) \
        if name.lower() in READ_TOOLS else None
    if read and polls is None and PurePosixPath(read).parent.name == TASK_OUTPUT_DIR:
        polls = next((rid for rid in [*running, *ended] if PurePosixPath(read).name == TASK_OUTPUT_FILE.format(rid)), None)
    in_cell = in_cell or (name.lower() in CELL_WAIT_TOOLS and polls is not None)
    started = (running.get(polls) or ended.get(polls)) if polls else None
    if started is not None:  # a poll of a run (still going, or ended by a notice): the same run, its files named once
        return Action(pos=pos, message_id=message_id, call_message_id=message_id, tool=started.tool,
                      script=started.script, source=started.source, polls=polls, in_cell=in_cell or started.in_cell,
                      reads_output=read is not None, started_by=started.started_by or started.call_message_id)
    command = shell_command(args) if name.lower() in SHELL_TOOLS else None
    action = Action(pos=pos, message_id=message_id, call_message_id=message_id, tool=name, script=command, polls=polls,
                    in_cell=in_cell)
    action.files = _call_files(name, args, cwds)
    action.edit = _edit_pair(args)
    pr_state = pr_tool_state(name)
    if pr_state is not None:
        number = next((args[k] for k in PR_NUMBER_KEYS if type(args.get(k)) is int), None)  # not a bool
        action.pr_call = (pr_state, number, args["title"] if isinstance(args.get("title"), str) else None)
    action.source = run_key(command, cwds) if command else " ".join([name] + [p for p, _ in action.files[:1]])
    if command:
        action.files += shell_file_actions(command, cwds)
        action.branches += BRANCH_CMD_RE.findall(command)
    return action


def scan_actions(messages: list[Message], cwd: str | None = None,
                 running: dict[str, Action] | None = None) -> list[Action]:
    """Every tool call (with its result) as an Action, in the order outcomes were seen. `running`:
    the runs started before `messages` and still going, by run id (a ledger's `running_runs()`),
    so that a poll past a checkpoint's boundary is still the run it polls."""
    cwds = [cwd] if cwd else []
    pending: dict[str, Action] = {}
    running = dict(running or {})  # run id -> the run that started it
    # Claude Code background runs its notices said ended (_notified_ends), and code-mode runs whose poll
    # said nothing of how they stand: a later poll or Read of the id is still that run.
    ended: dict[str, Action] = {}
    actions: list[Action] = []
    user_shell: Action | None = None  # a `!cmd` whose output comes in a later message
    for pos, msg in enumerate(messages):
        if msg.is_summary:
            continue
        if msg.role == "user":
            user_shell = _harness_action(msg, pos, cwds, actions, user_shell)
            _notified_ends(msg, pos, running, actions, ended)
        meta_cwd = msg.meta.get("cwd")
        if isinstance(meta_cwd, str) and meta_cwd not in cwds:
            cwds.append(meta_cwd)
        nested = msg.meta.get(NESTED_CALLS)
        for part in msg.tool_calls:
            inner = nested.get(part.id) if isinstance(nested, dict) else None
            calls = [(str(c.get("name") or ""), c.get("arguments")) for c in inner if isinstance(c, dict)] if inner else []
            in_cell = inner is not None
            made = ([_call_action(name, args if isinstance(args, dict) else {}, pos, msg.id, cwds, running, in_cell, ended)
                     for name, args in calls]
                    or [_call_action(part.name, part.argument_dict(), pos, msg.id, cwds, running, in_cell, ended)])
            # A script's tools share its one result: the last one it ran takes it (its outcome
            # and errors), the earlier ones keep their command and files with no status.
            pending[part.id] = made[-1]
            actions.extend(made)
        for res in msg.tool_results:
            output = res.output.replace("\r\n", "\n")  # SWE-agent observations use CRLF
            for m in SWE_CWD_RE.finditer(output):
                if m.group(1) not in cwds:
                    cwds.append(m.group(1))
            action = pending.pop(res.call_id, None)
            if action is None:  # a result whose call is not in this window
                action = Action(pos=pos, message_id=msg.id, call_message_id=None, tool=res.name or "tool",
                                source=res.name or "tool")
                actions.append(action)
            action.pos, action.message_id = pos, msg.id
            refused = action.polls is not None and res.is_error and (action.reads_output or res.name.lower() in TASK_TOOLS)
            task = claude_task_output(output) if action.polls is not None else None
            if action.reads_output:
                output = READ_LINE_NUMBER_RE.sub("", output)
            _analyze_result(action, task[0] if task else output, res.is_error, cwds)
            if refused:  # the harness's answer, not the run's: it goes on as it was
                action.errors, action.further_errors, action.status = [], [], "unknown"
                action.run_id = action.polls if action.polls in running else None
            elif (task and task[1] in TASK_GOING) or action.reads_output:  # no outcome, unless it failed
                action.run_id = action.polls if action.polls in running else None  # still going, as far as it tells
                action.status = "failed" if action.status == "failed" else "unknown"
            elif task and task[1] == TASK_KILLED:
                action.status = "unknown"
            track_run(running, action)
            if action.in_cell and action.polls and not action.run_id and action.exit_code is None and action.script:
                # A script that prints only the poll's output (`text(r.output)`) says neither that the run
                # goes on nor how it ended: a later poll of the same id is still that run.
                ended[action.polls] = action
    actions.sort(key=lambda a: a.pos)  # stable: calls without results keep their place
    return actions


def _notified_ends(msg: Message, pos: int, running: dict[str, Action], actions: list[Action],
                   ended: dict[str, Action]) -> None:
    """The background runs a Claude Code `<task-notification>` in this user message says have ended
    (output.CLAUDE_TASK_NOTIFICATION_RE): each ends with its exit status, from `running` to `ended`."""
    if "<task-notification>" not in msg.text:
        return
    for task_id, status, exit_code in CLAUDE_TASK_NOTIFICATION_RE.findall(msg.text):
        task_id = task_id.strip()
        if status in TASK_GOING or task_id not in running:
            continue
        started = ended[task_id] = running.pop(task_id)
        code = int(exit_code) if exit_code else None
        actions.append(Action(pos=pos, message_id=msg.id, call_message_id=None, tool=started.tool, script=started.script,
                              source=started.source, polls=task_id, has_result=True, exit_code=code,
                              started_by=started.started_by or started.call_message_id,
                              status={"completed": "ok", "failed": "failed"}.get(status, "unknown")))


def _harness_action(msg: Message, pos: int, cwds: list[str], actions: list[Action],
                    user_shell: Action | None) -> Action | None:
    """Facts in what a harness injected into one user message; returns the `!cmd` still waiting
    for its output."""
    command = msg.meta.get("shell_command")
    if isinstance(command, str) and command.strip():
        user_shell = Action(pos=pos, message_id=msg.id, call_message_id=msg.id, tool="user_shell",
                            script=command, source=run_key(command, cwds))
        user_shell.files = shell_file_actions(command, cwds)
        user_shell.branches += BRANCH_CMD_RE.findall(command)
        actions.append(user_shell)
    output = msg.meta.get("shell_output")
    if user_shell is not None and isinstance(output, str):
        exit_code = msg.meta.get("shell_exit")
        text = output + (f"\nExit code {exit_code}" if isinstance(exit_code, int) and exit_code else "")
        user_shell.pos, user_shell.message_id = pos, msg.id
        _analyze_result(user_shell, text.replace("\r\n", "\n"), False, cwds)
        return None
    if msg.meta.get("harness") and not isinstance(command, str):
        findings = error_findings(MARKUP_TAG_RE.sub("", msg.text))
        if findings:
            source = "harness " + " ".join(msg.meta["harness"])
            harness = Action(pos=pos, message_id=msg.id, call_message_id=None, tool="harness", source=source,
                             has_result=True, status="failed")
            _set_errors(harness, findings)
            actions.append(harness)
    return user_shell


def _bare_words(key: str) -> list[str]:
    return [w for w in key.split() if not w.startswith("-")]


def reruns(source: str, failed: str) -> bool:
    """Does running `source` re-run what `failed` ran: the same run key, or a broader one
    (`pytest` covers a failed `pytest tests/test_a.py -x`)?"""
    mine = _bare_words(source)
    return source == failed or (bool(mine) and _bare_words(failed)[: len(mine)] == mine)
