"""The fact ledger: exact facts pulled from raw messages by rules, never by the model.

A small summarizer loses exact error lines and paths, so the pipeline owns them: the files
read and changed, exact error lines, commands with their exit status, test tallies, commits,
branches and the user's own words are extracted here, each pointing at the message id(s) it
came from, and carried verbatim across compactions (`extract_ledger(..., previous=...)`).

Two layers: `scan_actions` turns messages into a chronological list of `Action`s (one per
tool call with its result: files touched, command, status, error lines, tallies, commits),
which `worker.workstate` also reads; `extract_ledger` folds actions into a bounded,
deduplicated, ranked `Ledger`. Precision beats recall: a string is reported as a path only
when a tool argument or a clear shell form says it is one.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from .session import Message

# ---------------------------------------------------------------------------- bounds
# Every list is bounded so a carried ledger cannot grow without limit across compactions.
MAX_FILES = 60  # Relevant Files must fit next to the verbatim tail in a small model's prompt
MAX_UNRESOLVED_ERRORS = 24  # open errors are the work itself: keep many
MAX_RESOLVED_ERRORS = 12  # fixed errors are history: the newest few explain recent edits
MAX_COMMANDS = 30  # the recent run history; older runs stay searchable in the raw session
MAX_TALLIES = 10  # only the latest test results matter for the state of the work
MAX_COMMITS = 10  # recent commits identify the work; older ones are in `git log`
MAX_BRANCHES = 5  # the current branch plus a few it came from
MAX_IDS_PER_FACT = 6  # first occurrence + the newest ones: enough to find it again
MAX_ERROR_LINES_PER_RESULT = 6  # one failing run can print hundreds; the first few identify it
EDITS_PER_FILE = 3  # the newest changes say what was fixed; older ones are in the history
EDIT_SIDE_MAX_CHARS = 240  # a replaced line or two, not a whole rewritten function
ERROR_LINE_MAX_CHARS = 400  # a minified-JS or HTML dump on one line is not an error message
COMMAND_MAX_CHARS = 400  # heredoc scripts inside a command are not the command's identity
OUTPUT_EXCERPT_MAX_CHARS = 160  # a short output (like `345`) is a fact; a long one is a log
OUTPUT_EXCERPT_MAX_LINES = 2
USER_BUDGET_CHARS = 6000  # like Codex's re-inserted user messages, but in chars (~1.5k tokens)
USER_MESSAGE_MAX_CHARS = 2000  # one pasted log must not eat the whole user-message budget
USER_MIN_KEEP_CHARS = 200  # a remainder smaller than this is not worth a cut-down quote
RENDER_MAX_COMMANDS = 10  # Critical Context shows the newest runs only
RENDER_MAX_RESOLVED = 5  # resolved errors are context, not work: a few are enough

CUT_MARKER = "[… {n} chars cut …]"
# A line of a user's message that states a rule: kept when a long message is cut.
RULE_LINE_RE = re.compile(
    r"\b(?:do not|don't|never|must|cannot|can't|always|should(?:n't| not)?|only|make sure|avoid|keep|without|important)\b"
    r"|不要|不能|不得|禁止|必须|务必|只能|保持|不许|勿|一定要", re.IGNORECASE)

# ---------------------------------------------------------------------------- tool names
# Lower-cased tool names across agents (Claude Code, pi, Codex, SWE-agent, OpenHands, Cursor).
READ_TOOLS = {"read", "read_file", "view", "open", "view_file", "readfile", "cat", "notebookread"}
WRITE_TOOLS = {"write", "write_file", "create_file", "create", "writefile"}
EDIT_TOOLS = {"edit", "multiedit", "edit_file", "str_replace", "insert", "replace", "notebookedit",
              "replace_in_file", "search_replace"}
EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "text_editor"}  # `command` arg
PATCH_TOOLS = {"apply_patch", "patch", "applypatch"}
SHELL_TOOLS = {"bash", "shell", "execute", "execute_command", "run_command", "exec_command", "terminal",
               "local_shell", "run_terminal_cmd", "run_shell_command", "container.exec", "cmd"}
PATH_KEYS = ("file_path", "path", "filename", "file", "target_file", "notebook_path", "filepath")
# str_replace_editor `command` values that change a file vs only show it.
EDITOR_WRITE_COMMANDS = {"create"}
EDITOR_EDIT_COMMANDS = {"str_replace", "insert", "undo_edit", "edit", "replace"}
EDITOR_READ_COMMANDS = {"view"}

# ---------------------------------------------------------------------------- regexes
# Error lines. Each matches one stripped output line; the line is kept verbatim.
TRACEBACK_START_RE = re.compile(r"^Traceback \(most recent call last\):")
EXCEPTION_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::\s.*)?$")
ERROR_LINE_RES = (
    re.compile(r"^E {2,}\S"),  # pytest assertion detail: `E       AssertionError: ...`
    re.compile(r"^(?:FAILED|ERROR) \S+::\S+"),  # pytest short summary
    re.compile(r"✘ \[ERROR\] "),  # esbuild
    re.compile(r"\berror TS\d+: "),  # TypeScript
    re.compile(r"^(?:\S+:\d+(?::\d+)?:?\s+)?(?:fatal )?error(?:\[[\w-]+\])?: \S"),  # gcc/rustc/go/esbuild
    re.compile(r"^(?:Error|ERROR|FATAL|Fatal error): \S"),  # node, generic CLIs
    re.compile(r"^fatal: \S"),  # git
    re.compile(r"^\*\* \([\w.]+\) \S"),  # Elixir/ExUnit `** (RuntimeError) ...`
    re.compile(r"^code:\s+(?:assert|refute)\b"),  # ExUnit failing assertion source
    re.compile(r"^thread '.*' panicked at "),  # Rust
    re.compile(r"^panic: "),  # Go
    re.compile(r"No such file or directory|command not found|Permission denied|Segmentation fault"),
    re.compile(r"\bCannot find module\b|\bModule not found\b"),
)
# Lines that carry no information when picking an is_error result's first meaningful line.
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
# Programs whose exit status 1 means "no match / differs", not failure.
EXIT_1_OK_PROGRAMS = {"grep", "egrep", "fgrep", "rg", "ag", "diff", "cmp", "test", "["}
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
TEST_ID_LINE_RE = re.compile(r":\d+$")  # `test/x_test.exs:728` is run as `mix test test/x_test.exs`

# Commands that verify work: test runners, type checkers, builds, running a script.
VERIFY_COMMAND_RE = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|jest|vitest|mocha|ava|tsc|tsgo|mypy|pyright|ruff|eslint|biome"
    r"|go (?:test|build|vet)|cargo (?:test|build|check|clippy|run)|mix (?:test|compile|credo)"
    r"|(?:npm|pnpm|yarn|bun) (?:test|build|run [\w:-]*(?:test|check|build|lint|tsc|type)[\w:-]*)|npx (?:tsc|jest|vitest|mocha)|node --test"
    r"|deno test|bun test|make|ctest|gradle|mvn|rspec|phpunit|dotnet (?:test|build)"
    r"|python3?(?: -m \w+| -\w)* \S+\.py|node \S+\.[cm]?[jt]s|tsx \S+\.[jt]s)\b")
GIT_COMMIT_CMD_RE = re.compile(r"\bgit\b(?:\s+-\S+(?:\s+\S+)?)*\s+commit\b")
COMMIT_OUTPUT_RE = re.compile(r"^\[([\w./+-]+)(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.+)$", re.MULTILINE)
BRANCH_CMD_RE = re.compile(r"\bgit\s+(?:checkout\s+-[bB]|switch\s+-[cC]|switch)\s+([\w./+-]+)")
BRANCH_OUTPUT_RE = re.compile(
    r"^(?:On branch ([\w./+-]+)|Switched to (?:a new )?branch '([\w./+-]+)')$", re.MULTILINE)

# Patch headers (Codex apply_patch and unified diffs) inside a patch tool's input.
PATCH_FILE_RE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.MULTILINE)
DIFF_OLD_RE = re.compile(r"^--- (?:a/)?(\S+)", re.MULTILINE)
DIFF_NEW_RE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
PATCH_COMMAND_RE = re.compile(r"\b(?:apply_patch|git apply|patch -p\d)\b")

# Programs that only filter a run's output: `npm run check 2>&1 | grep error` is `npm run check`.
FILTER_PROGRAMS = {"head", "tail", "grep", "egrep", "fgrep", "rg", "wc", "sort", "uniq", "less", "more", "cat",
                   "cut", "tee", "tr", "column"}
STDERR_MERGE_RE = re.compile(r"\s*\b2>&1\b")
CD_PREFIX_RE = re.compile(r"^\s*cd\s+(\S+)\s*&&\s*")

BARE_TOKEN_RE = re.compile(r"[^\s`]+")  # an output like `345` that needs no quoting

# Shell parsing. Paths from shell text must look like paths: no spaces, globs, variables.
SHELL_PATH_RE = re.compile(r"^[\w.~@+/-][\w.~@+,=/-]*$")
FILE_EXT_RE = re.compile(r"\.[A-Za-z][\w-]{0,9}$")
BARE_FILE_NAMES = {"Makefile", "Dockerfile", "Gemfile", "Rakefile", "Procfile", "LICENSE", "README", "Justfile"}
HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")
REDIRECT_RE = re.compile(r"(?<![\d&>])(>>?)\s*([^\s;&|<>()]+)")
URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
SEGMENT_SEPARATORS = {"&&", "||", ";", "|", "&", ";;", "|&", "(", ")"}
READ_COMMANDS = {"cat", "head", "tail", "less", "more", "bat", "nl", "wc"}
OPTION_WITH_VALUE = {"-n", "-c", "--lines", "--bytes"}  # head/tail options that take a value
# User text that is a harness command, not an instruction (e.g. pi's bare `/mode`).
SLASH_COMMAND_RE = re.compile(r"^/[\w:-]+\s*$")
CHITCHAT_MAX_CHARS = 80  # an instruction can be short ("跑一下全部测试"); chit-chat is also short
CHITCHAT_RE = re.compile(
    r"\b(?:ok(?:ay)?|thanks?(?: you)?(?: (?:a lot|so much))?|thx|great|good|nice|cool|perfect|awesome|"
    r"sounds good|looks good|lgtm|yes|yep|sure|got it|alright|good night|bye|"
    r"(?:let's |we'll )?(?:continue|pick (?:this|it) up) (?:tomorrow|later)|that's all for (?:now|today)|"
    r"what(?:'s| is| are)(?: still)? (?:open|left|pending|remaining|next)|where are we|what remains)\b"
    r"|好的?|好吧|谢谢|多谢|收到|可以|行|嗯|明白了?|了解|不错|很好|辛苦了|明天继续|稍后继续|先这样|"
    r"还有什么(?:没做|没完成|问题)?|进展如何|还剩什么",
    re.IGNORECASE,
)
CHITCHAT_PUNCT = " \t.,!?;:~…-，。！？；：、"


# ---------------------------------------------------------------------------- dataclasses
@dataclass
class FileFact:
    path: str
    actions: list[str] = field(default_factory=list)  # read / created / modified / deleted, first-seen order
    message_ids: list[str] = field(default_factory=list)
    last_action: str = ""  # the newest change ("deleted" means gone now), else "read"
    last_seq: int = 0
    edits: list[str] = field(default_factory=list)  # "`old` → `new`", newest last

    @property
    def changed(self) -> bool:
        return any(a in ("created", "modified", "deleted") for a in self.actions)

    @property
    def rank(self) -> int:
        """0: changed and still there, 1: changed then deleted, 2: only read."""
        if not self.changed:
            return 2
        return 1 if self.last_action == "deleted" else 0


@dataclass
class ErrorFact:
    text: str  # the exact line
    message_ids: list[str] = field(default_factory=list)
    command: str | None = None  # the shell command whose output held it (latest occurrence)
    sources: list[str] = field(default_factory=list)  # run keys that showed it (see `run_key`)
    test_ids: list[str] = field(default_factory=list)
    attempts: int = 0  # how many results showed it
    resolved: bool = False
    resolved_by: str | None = None  # message id of the passing run
    resolved_by_command: str | None = None
    exit_only: bool = False  # no error line found: the text is the exit status / first line
    last_seq: int = 0

    @property
    def key(self) -> str:
        # "Exit code 1" from two different commands are two different failures.
        return f"{self.text}\x00{self.sources[-1] if self.sources else ''}" if self.exit_only else self.text


@dataclass
class CommandFact:
    command: str
    status: str = "unknown"  # ok / failed / unknown (no result seen)
    exit_code: int | None = None
    output: str | None = None  # the whole output when it is short (e.g. `345`)
    message_ids: list[str] = field(default_factory=list)
    count: int = 0
    last_seq: int = 0

    @property
    def key(self) -> str:
        return f"{self.command}\x00{self.status}\x00{self.exit_code}\x00{self.output}"


@dataclass
class TallyFact:
    text: str
    failed: bool = False
    command: str | None = None
    message_ids: list[str] = field(default_factory=list)
    last_seq: int = 0


@dataclass
class CommitFact:
    text: str  # commit subject line
    sha: str | None = None
    branch: str | None = None
    message_ids: list[str] = field(default_factory=list)
    last_seq: int = 0

    @property
    def key(self) -> str:
        return self.sha or self.text


@dataclass
class BranchFact:
    name: str
    message_ids: list[str] = field(default_factory=list)
    last_seq: int = 0


@dataclass
class UserInstruction:
    message_id: str
    text: str
    cut: bool = False  # True when the middle was cut (the marker is in the text)
    seq: int = 0


@dataclass
class Ledger:
    files: list[FileFact] = field(default_factory=list)  # changed first, then read; newest first
    errors: list[ErrorFact] = field(default_factory=list)  # unresolved first; newest first
    commands: list[CommandFact] = field(default_factory=list)  # chronological
    tallies: list[TallyFact] = field(default_factory=list)  # chronological
    commits: list[CommitFact] = field(default_factory=list)  # chronological
    branches: list[BranchFact] = field(default_factory=list)  # chronological; last is current
    user_instructions: list[UserInstruction] = field(default_factory=list)  # newest first
    user_instructions_omitted: int = 0  # older user messages left out by the budget
    seq: int = 0  # events folded in so far; new messages continue from here
    last_message_id: str | None = None  # newest message folded in: re-passing it is a no-op

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        def build(kind: type, items: Any) -> list[Any]:
            names = {f.name for f in dataclasses.fields(kind)}
            return [kind(**{k: v for k, v in item.items() if k in names}) for item in items or []]

        return cls(
            files=build(FileFact, data.get("files")),
            errors=build(ErrorFact, data.get("errors")),
            commands=build(CommandFact, data.get("commands")),
            tallies=build(TallyFact, data.get("tallies")),
            commits=build(CommitFact, data.get("commits")),
            branches=build(BranchFact, data.get("branches")),
            user_instructions=build(UserInstruction, data.get("user_instructions")),
            user_instructions_omitted=int(data.get("user_instructions_omitted") or 0),
            seq=int(data.get("seq") or 0),
            last_message_id=data.get("last_message_id"),
        )

    def file(self, path: str) -> FileFact | None:
        return next((f for f in self.files if f.path == path), None)

    def changed_files(self) -> list[FileFact]:
        return [f for f in self.files if f.changed]

    def read_files(self) -> list[FileFact]:
        return [f for f in self.files if not f.changed]

    def unresolved_errors(self) -> list[ErrorFact]:
        return [e for e in self.errors if not e.resolved]

    def resolved_errors(self) -> list[ErrorFact]:
        return [e for e in self.errors if e.resolved]


@dataclass
class Action:
    """One tool call with its result (or a result without a call), as facts."""

    pos: int  # index of the message where the outcome is (the result, else the call)
    message_id: str  # that message's id
    call_message_id: str | None
    tool: str
    command: str | None = None  # shell command, verbatim (bounded)
    source: str = ""  # what re-running means: `run_key(command)`, or "tool path" for other tools
    files: list[tuple[str, str]] = field(default_factory=list)  # (path, read/created/modified/deleted)
    has_result: bool = False
    is_error: bool = False
    status: str = "unknown"  # ok / failed / unknown
    exit_code: int | None = None
    output: str | None = None  # short output excerpt
    errors: list[str] = field(default_factory=list)
    exit_only: bool = False  # errors holds only an exit/first line, no real error line
    tallies: list[tuple[str, bool]] = field(default_factory=list)  # (text, failed)
    test_ids: list[str] = field(default_factory=list)
    commits: list[tuple[str | None, str, str | None]] = field(default_factory=list)  # (sha, subject, branch)
    branches: list[str] = field(default_factory=list)
    edit: tuple[str, str] | None = None  # (old text, new text) of a search/replace edit

    @property
    def verifies(self) -> bool:
        """A test/build/script run whose success is evidence about the work."""
        # Quoted text is blanked: `git commit -m "make it pass"` runs nothing.
        return bool(self.command) and bool(VERIFY_COMMAND_RE.search(_mask_quotes(self.command)))

    @property
    def passed(self) -> bool:
        return self.status == "ok" and not any(failed for _, failed in self.tallies)

    @property
    def changes(self) -> list[tuple[str, str]]:
        return [(p, a) for p, a in self.files if a != "read"]


# ---------------------------------------------------------------------------- small helpers
def cut_middle(text: str, limit: int) -> str:
    """Cut the middle of a long text, leaving a marker that says how much went (never silent)."""
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(n=len(text) - limit)
    keep = max(limit - len(marker), 2)
    head = keep * 2 // 3
    tail = keep - head
    return f"{text[:head]}{marker}{text[len(text) - tail:]}"


def condense_user_message(text: str, limit: int) -> str:
    """Cut a long user message to `limit` chars keeping what matters most: its opening (the
    request), its end, and in between the lines that state a rule ("Always …", "do not …",
    "不要 …"); each cut leaves a marker. A plain middle cut drops the rules of a long brief."""
    if len(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    head_left = limit * 2 // 5
    tail_left = limit // 5
    keep = [False] * len(lines)
    for i, line in enumerate(lines):  # the opening
        if len(line) > head_left:
            break
        keep[i], head_left = True, head_left - len(line)
    for i in range(len(lines) - 1, -1, -1):  # the end
        if keep[i] or len(lines[i]) > tail_left:
            break
        keep[i], tail_left = True, tail_left - len(lines[i])
    left = limit - sum(len(x) for x, k in zip(lines, keep, strict=True) if k)
    for i, line in enumerate(lines):  # the rules, in order, while they fit with their markers
        if not keep[i] and RULE_LINE_RE.search(line) and len(line) + len(CUT_MARKER) + 8 <= left:
            keep[i], left = True, left - len(line) - len(CUT_MARKER) - 8
    if not any(keep):
        return cut_middle(text, limit)
    out: list[str] = []
    cut = ""
    for line, k in zip(lines, keep, strict=True):
        if k:
            if cut.strip():  # a cut blank line needs no marker
                out.append(CUT_MARKER.format(n=len(cut)) + "\n")
            cut = ""
            out.append(line)
        else:
            cut += line
    if cut.strip():
        out.append(CUT_MARKER.format(n=len(cut)))
    result = "".join(out)
    return result if len(result) <= limit * 11 // 10 else cut_middle(text, limit)


def code(text: str) -> str:
    """Inline code that survives backticks inside the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def one_line(text: str) -> str:
    first, _, rest = text.strip().partition("\n")
    return first + (" …" if rest.strip() else "")


def _add_id(ids: list[str], mid: str) -> bool:
    """Add an id keeping the first one and the newest ones; False when already present."""
    if mid in ids:
        return False
    ids.append(mid)
    if len(ids) > MAX_IDS_PER_FACT:
        del ids[1]
    return True


def _shell_command(args: dict[str, Any]) -> str | None:
    value = args.get("command", args.get("cmd"))
    if isinstance(value, list):  # Codex: ["bash", "-lc", "..."]
        items = [str(v) for v in value]
        if len(items) >= 3 and items[0] in ("bash", "sh", "zsh") and items[1] in ("-lc", "-c"):
            return items[2]
        return shlex.join(items)
    return value if isinstance(value, str) and value.strip() else None


def _clean_tool_path(value: Any) -> str | None:
    """A path given in a tool argument: trusted to be a path, but not a URL or prose."""
    if not isinstance(value, str):
        return None
    path = value.strip().strip("'\"")
    if not path or "\n" in path or len(path) > 300 or URL_RE.match(path) or "*" in path:
        return None
    return path


def looks_like_path(token: str) -> bool:
    """A token from shell text that is clearly a path (conservative: precision over recall)."""
    if not SHELL_PATH_RE.match(token) or token.startswith("-") or URL_RE.match(token):
        return False
    if not re.search(r"[A-Za-z]", token):  # 1/2, 3.14, 2024-01-01
        return False
    if token.endswith("/"):  # a directory
        return False
    parts = [p for p in token.split("/") if p]
    if "/" in token:
        # `a/b`, `and/or` read as prose; a real path has a file name or a longer component.
        return bool(FILE_EXT_RE.search(token)) or any(len(p) > 3 for p in parts[:-1] or parts)
    return bool(FILE_EXT_RE.search(token)) or token in BARE_FILE_NAMES


def normalize_path(path: str, cwds: list[str]) -> str:
    """Strip `./` and a known working-directory prefix so one file has one name."""
    for cwd in cwds:
        root = cwd.rstrip("/") + "/"
        if path.startswith(root) and len(path) > len(root):
            path = path[len(root):]
            break
    while path.startswith("./"):
        path = path[2:]
    return path


# ---------------------------------------------------------------------------- shell parsing
def _strip_heredocs(command: str) -> tuple[str, list[str]]:
    """The command without heredoc bodies, and the bodies (a patch may be inside one)."""
    lines = command.split("\n")
    out: list[str] = []
    bodies: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in HEREDOC_RE.finditer(line):
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != m.group(2):
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


def _mask_quotes(text: str) -> str:
    """Same-length text with quoted content blanked, so `>` inside a string is not a redirect."""
    out = []
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
                out.append(ch)
            else:
                out.append("\x01")
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        else:
            out.append(ch)
    return "".join(out)


def _unquoted_newlines_to_semicolons(text: str) -> str:
    masked = _mask_quotes(text)
    return "".join(";" if ch == "\n" and m == "\n" else ch for ch, m in zip(text, masked, strict=True))


def _segments(command: str) -> list[list[str]]:
    lexer = shlex.shlex(_unquoted_newlines_to_semicolons(command), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: do not guess
        return []
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in SEGMENT_SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    return [s for s in segments if s]


def _without_redirects(tokens: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for tok in tokens:
        if skip:
            skip = False
            continue
        if tok in (">", ">>", "<", ">&", "<<", "<<<", "&>", ">|"):
            skip = True
            continue
        out.append(tok)
    return out


def _sed_files(args: list[str]) -> tuple[bool, list[str]]:
    """(in_place, files) of a sed invocation."""
    in_place = False
    has_script_option = False
    positional: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-i", "--in-place") or a.startswith("-i") or a.startswith("--in-place="):
            in_place = True
            # BSD sed: `-i ''` or `-i .bak` takes the suffix as the next argument.
            if a == "-i" and i + 1 < len(args) and (args[i + 1] == "" or re.match(r"^\.\w+$", args[i + 1])):
                i += 1
        elif a in ("-e", "-f", "--expression", "--file"):
            has_script_option = True
            i += 1
        elif a.startswith("-"):
            pass
        else:
            positional.append(a)
        i += 1
    files = positional if has_script_option else positional[1:]
    return in_place, files


def shell_file_actions(command: str, cwds: list[str]) -> list[tuple[str, str]]:
    """Files a shell command clearly reads, creates, changes or removes."""
    found: list[tuple[str, str]] = []
    stripped, bodies = _strip_heredocs(command)
    if PATCH_COMMAND_RE.search(command):
        for body in bodies or [command]:
            found += patch_file_actions(body)
    masked = _mask_quotes(stripped)
    for m in REDIRECT_RE.finditer(masked):
        target = stripped[m.start(2):m.end(2)].strip("'\"")
        if target.startswith("/dev/") or not looks_like_path(target):
            continue
        found.append((target, "modified" if m.group(1) == ">>" else "created"))
    for tokens in _segments(stripped):
        has_heredoc = "<<" in tokens or "<<<" in tokens
        words = _without_redirects(tokens)
        while words and re.match(r"^\w+=", words[0]):  # FOO=1 cmd ...
            words = words[1:]
        if words and words[0] in ("sudo", "command", "time", "nohup"):
            words = words[1:]
        if not words:
            continue
        prog, args = words[0].rsplit("/", 1)[-1], words[1:]
        if prog in READ_COMMANDS and not has_heredoc:
            skip_next = False
            for a in args:
                if skip_next:
                    skip_next = False
                elif a in OPTION_WITH_VALUE:
                    skip_next = True
                elif looks_like_path(a):
                    found.append((a, "read"))
        elif prog == "sed":
            in_place, files = _sed_files(args)
            found += [(f, "modified" if in_place else "read") for f in files if looks_like_path(f)]
        elif prog == "rm":
            found += [(a, "deleted") for a in args if looks_like_path(a)]
        elif prog == "touch":
            found += [(a, "created") for a in args if looks_like_path(a)]
    return [(normalize_path(p, cwds), a) for p, a in found]


def patch_file_actions(text: str) -> list[tuple[str, str]]:
    """Files named by apply_patch headers or unified-diff headers."""
    found: list[tuple[str, str]] = []
    for m in PATCH_FILE_RE.finditer(text):
        if m.group(3):
            found.append((m.group(3), "created"))
        else:
            action = {"Update": "modified", "Add": "created", "Delete": "deleted"}[m.group(1)]
            found.append((m.group(2), action))
    # Each `--- old` header is followed by its `+++ new` header; pair them in order.
    for old, new in zip(DIFF_OLD_RE.findall(text), DIFF_NEW_RE.findall(text), strict=False):
        if new == "/dev/null":
            found.append((old, "deleted"))
        elif old == "/dev/null":
            found.append((new, "created"))
        else:
            found.append((new, "modified"))
    return [(p, a) for p, a in found if _clean_tool_path(p)]


# ---------------------------------------------------------------------------- output parsing
def output_lines(output: str) -> list[str]:
    """Stripped, non-empty lines without the SWE-agent footer."""
    return [s for s in (line.strip() for line in output.splitlines()) if s and not SWE_FOOTER_RE.match(s)]


def error_lines(output: str) -> list[str]:
    """Exact error lines, in output order, deduplicated and bounded."""
    found: list[str] = []
    in_traceback = False
    for raw in output.splitlines():
        line = raw.strip()
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
        if EXCEPTION_LINE_RE.match(line) or any(rx.search(line) for rx in ERROR_LINE_RES):
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


# ---------------------------------------------------------------------------- actions
def _call_files(name: str, args: dict[str, Any], cwds: list[str]) -> list[tuple[str, str]]:
    lname = name.lower()
    path = next((p for p in (_clean_tool_path(args.get(k)) for k in PATH_KEYS) if p), None)
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
        text = next((v for v in (args.get("input"), args.get("patch"), args.get("_raw")) if isinstance(v, str)), "")
        files += patch_file_actions(text)
    return [(normalize_path(p, cwds), a) for p, a in files]


def _analyze_result(action: Action, output: str, is_error: bool, cwds: list[str]) -> None:
    action.has_result = True
    action.is_error = is_error
    lname = action.tool.lower()
    file_tool = lname in READ_TOOLS | WRITE_TOOLS | EDIT_TOOLS | EDITOR_TOOLS | PATCH_TOOLS
    action.exit_code = exit_code_of(output) if not file_tool else None
    if action.exit_code == 1 and action.command and last_program(action.command) in EXIT_1_OK_PROGRAMS:
        action.exit_code = 0  # `grep` found nothing: an answer, not an error
        is_error = False
    # A file tool prints file content: scan it for errors only when the tool itself failed.
    if not file_tool or is_error:
        action.errors = error_lines(output)
    action.tallies = find_tallies(output) if not file_tool else []
    action.test_ids = failing_test_ids(output) if not file_tool else []
    failed = (
        is_error
        or (action.exit_code is not None and action.exit_code != 0)
        or (not file_tool and bool(ABORTED_RE.search(output)))
        or any(f for _, f in action.tallies)
        or (bool(action.errors) and action.exit_code is None)
    )
    action.status = "failed" if failed else "ok"
    if failed and not action.errors:
        line = first_meaningful_line(output)
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
    if action.command and GIT_COMMIT_CMD_RE.search(action.command) and not failed:
        for m in COMMIT_OUTPUT_RE.finditer(output):
            action.commits.append((m.group(2), m.group(3).strip(), m.group(1)))
        if not action.commits:
            subject = _commit_subject(action.command)
            if subject:
                action.commits.append((None, subject, None))
    if action.command:
        action.branches += [a or b for a, b in BRANCH_OUTPUT_RE.findall(output)]
        action.branches += [sha_branch for _, _, sha_branch in action.commits if sha_branch]


def run_key(command: str, cwds: list[str] | tuple[str, ...] = ()) -> str:
    """A command without its output filters, `2>&1` and a `cd` into the session's own working
    directory: what "the same run" means."""
    text = _strip_heredocs(command)[0]
    m = CD_PREFIX_RE.match(text)
    if m and m.group(1).strip("'\"").rstrip("/") in {c.rstrip("/") for c in cwds}:
        text = text[m.end():]
    masked = _mask_quotes(text)
    cuts = [i for i, ch in enumerate(masked)
            if ch == "|" and masked[i - 1:i] != "|" and masked[i + 1:i + 2] not in ("|", "&")]
    pieces = [text[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(text)], strict=True)]
    while len(pieces) > 1 and (pieces[-1].split() or [""])[0] in FILTER_PROGRAMS:
        pieces.pop()
    return " ".join(STDERR_MERGE_RE.sub("", "|".join(pieces)).split())


def last_program(command: str) -> str | None:
    """The program whose exit status a pipeline reports (first word of the last segment)."""
    segments = _segments(_strip_heredocs(command)[0])
    words = _without_redirects(segments[-1]) if segments else []
    return words[0].rsplit("/", 1)[-1] if words else None


def _commit_subject(command: str) -> str | None:
    for tokens in _segments(_strip_heredocs(command)[0]):
        for i, tok in enumerate(tokens[:-1]):
            if tok in ("-m", "--message") and "commit" in tokens and "$(" not in tokens[i + 1]:
                return tokens[i + 1].strip().split("\n")[0] or None
    return None


EDIT_KEYS = (("old_str", "new_str"), ("old_string", "new_string"), ("search", "replace"), ("old", "new"))


def _edit_pair(args: dict) -> tuple[str, str] | None:
    """The (old, new) text of a search/replace edit: what the fix actually was."""
    for old_key, new_key in EDIT_KEYS:
        old, new = args.get(old_key), args.get(new_key)
        if isinstance(old, str) and isinstance(new, str) and old != new:
            return old, new
    return None


def _edit_text(edit: tuple[str, str]) -> str:
    old, new = (cut_middle(" ".join(x.split()), EDIT_SIDE_MAX_CHARS) for x in edit)
    return f"{code(old)} → {code(new)}"


def scan_actions(messages: list[Message], cwd: str | None = None) -> list[Action]:
    """Every tool call (with its result) as an Action, in the order outcomes were seen."""
    cwds = [cwd] if cwd else []
    pending: dict[str, Action] = {}
    actions: list[Action] = []
    for pos, msg in enumerate(messages):
        if msg.is_summary:
            continue
        meta_cwd = msg.meta.get("cwd")
        if isinstance(meta_cwd, str) and meta_cwd not in cwds:
            cwds.append(meta_cwd)
        for part in msg.tool_calls:
            args = part.argument_dict()
            lname = part.name.lower()
            command = _shell_command(args) if lname in SHELL_TOOLS else None
            action = Action(pos=pos, message_id=msg.id, call_message_id=msg.id, tool=part.name,
                            command=cut_middle(command.strip(), COMMAND_MAX_CHARS) if command else None)
            action.files = _call_files(part.name, args, cwds)
            action.edit = _edit_pair(args)
            action.source = run_key(command, cwds) if command else " ".join([part.name] + [p for p, _ in action.files[:1]])
            if command:
                action.files += shell_file_actions(command, cwds)
                action.branches += BRANCH_CMD_RE.findall(command)
            pending[part.id] = action
            actions.append(action)
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
            _analyze_result(action, output, res.is_error, cwds)
    actions.sort(key=lambda a: a.pos)  # stable: calls without results keep their place
    return actions


# ---------------------------------------------------------------------------- user messages
def is_chitchat(text: str) -> bool:
    """"Thanks. What is still open?", "好的，明天继续。": nothing left once acknowledgements,
    sign-offs and status questions are taken out, so neither a constraint nor a work item."""
    flat = " ".join(text.split())
    return len(flat) <= CHITCHAT_MAX_CHARS and not CHITCHAT_RE.sub("", flat).strip(CHITCHAT_PUNCT)


def is_user_instruction(msg: Message) -> bool:
    """The user's own words: not tool results, not summaries, not harness-injected text, not
    chit-chat."""
    text = msg.text.strip()
    return msg.starts_turn and not SLASH_COMMAND_RE.match(text) and not is_chitchat(text)


def user_requests(messages: list[Message]) -> list[tuple[int, Message]]:
    return [(i, m) for i, m in enumerate(messages) if is_user_instruction(m)]


def budget_user_instructions(items: list[UserInstruction], budget: int) -> tuple[list[UserInstruction], int]:
    """In the given order (rules first, newest first) within `budget` chars; long ones
    condensed; returns (kept, omitted)."""
    kept: list[UserInstruction] = []
    left = budget
    for n, item in enumerate(items):
        text = item.text
        if len(text) > USER_MESSAGE_MAX_CHARS:
            text = condense_user_message(text, USER_MESSAGE_MAX_CHARS)
        if len(text) > left:
            if left < USER_MIN_KEEP_CHARS:
                return kept, len(items) - n
            text = cut_middle(text, left)
        kept.append(UserInstruction(item.message_id, text, item.cut or text != item.text, item.seq))
        left -= len(text)
    return kept, 0


# ---------------------------------------------------------------------------- extraction
def _bare_words(key: str) -> list[str]:
    return [w for w in key.split() if not w.startswith("-")]


def reruns(source: str, failed: str) -> bool:
    """Does running `source` re-run what `failed` ran: the same run key, or a broader one
    (`pytest` covers a failed `pytest tests/test_a.py -x`)?"""
    mine = _bare_words(source)
    return source == failed or (bool(mine) and _bare_words(failed)[: len(mine)] == mine)


def resolves(action: Action, error: ErrorFact) -> bool:
    """Is `action` a passing re-run of what produced `error` (same run key, same test, broader run)?"""
    if not action.has_result or not action.passed:
        return False
    if action.source in error.sources:
        return True
    if not (action.command and action.verifies):
        return False
    if any(TEST_ID_LINE_RE.sub("", t.split("::")[0]) in action.command for t in error.test_ids):
        return True
    return any(reruns(action.source, src) for src in error.sources)


def _upsert(items: list[Any], key: str, make: Any) -> Any:
    for item in items:
        if item.key == key:
            return item
    item = make()
    items.append(item)
    return item


def extract_ledger(messages: list[Message], previous: Ledger | None = None, *, cwd: str | None = None,
                   user_budget_chars: int = USER_BUDGET_CHARS) -> Ledger:
    """Fold the facts of `messages` into a copy of `previous` (or a new ledger)."""
    ledger = Ledger.from_dict(json.loads(json.dumps(previous.to_dict()))) if previous else Ledger()
    # Messages up to the last one already folded in are skipped, so passing an overlapping
    # window (or the whole session again) never counts a fact twice.
    ids = [m.id for m in messages]
    if ledger.last_message_id in ids:
        messages = messages[ids.index(ledger.last_message_id) + 1:]
    if messages:
        ledger.last_message_id = messages[-1].id
    base = ledger.seq
    files = {f.path: f for f in ledger.files}
    for action in scan_actions(messages, cwd=cwd):
        seq = base + action.pos + 1
        mid = action.message_id
        for path, what in action.files:
            fact = files.setdefault(path, FileFact(path=path))
            if what not in fact.actions:
                fact.actions.append(what)
            if what != "read" or not fact.last_action:
                fact.last_action = what
            _add_id(fact.message_ids, action.call_message_id or mid)
            fact.last_seq = max(fact.last_seq, seq)
            if what == "modified" and action.edit and _edit_text(action.edit) not in fact.edits:
                fact.edits = (fact.edits + [_edit_text(action.edit)])[-EDITS_PER_FILE:]
        if action.command:
            fact = _upsert(ledger.commands, CommandFact(action.command, action.status, action.exit_code,
                                                        action.output).key,
                           lambda a=action: CommandFact(a.command, a.status, a.exit_code, a.output))
            if _add_id(fact.message_ids, mid):
                fact.count += 1
            fact.last_seq = max(fact.last_seq, seq)
        # Resolution first: a run that passes resolves earlier errors; its own errors are new.
        for err in ledger.errors:
            if not err.resolved and resolves(action, err):
                err.resolved, err.resolved_by, err.resolved_by_command = True, mid, action.command
        for text in action.errors:
            probe = ErrorFact(text=text, sources=[action.source], exit_only=action.exit_only)
            err = _upsert(ledger.errors, probe.key, lambda p=probe: p)
            if _add_id(err.message_ids, mid):
                err.attempts += 1
            err.command = action.command
            if action.source in err.sources:
                err.sources.remove(action.source)
            err.sources = (err.sources + [action.source])[-MAX_IDS_PER_FACT:]
            err.test_ids = list(dict.fromkeys(err.test_ids + action.test_ids))[-MAX_IDS_PER_FACT:]
            err.resolved, err.resolved_by, err.resolved_by_command = False, None, None
            err.last_seq = max(err.last_seq, seq)
        for text, failed in action.tallies:
            tally = next((t for t in ledger.tallies if t.text == text), None)
            if tally is None:
                tally = TallyFact(text=text, failed=failed)
                ledger.tallies.append(tally)
            tally.command = action.command
            _add_id(tally.message_ids, mid)
            tally.last_seq = max(tally.last_seq, seq)
        for sha, subject, branch in action.commits:
            commit = _upsert(ledger.commits, sha or subject, lambda s=sha, t=subject, b=branch: CommitFact(t, s, b))
            _add_id(commit.message_ids, mid)
            commit.last_seq = max(commit.last_seq, seq)
        for name in action.branches:
            branch = next((b for b in ledger.branches if b.name == name), None)
            if branch is None:
                branch = BranchFact(name=name)
                ledger.branches.append(branch)
            _add_id(branch.message_ids, mid)
            branch.last_seq = max(branch.last_seq, seq)

    # User instructions: new ones (newest first) before the carried ones, one per message id.
    known = {u.message_id for u in ledger.user_instructions}
    fresh = [UserInstruction(m.id, m.text.strip(), False, base + i + 1)
             for i, m in user_requests(messages) if m.id not in known]
    # Messages that state a rule ("do not change …", "不要 …") first, so a budget or a shrunk
    # section drops plain requests (they are also in Progress) before a user's constraint.
    pool = sorted(fresh + ledger.user_instructions, key=lambda u: (not RULE_LINE_RE.search(u.text), -u.seq))
    ledger.user_instructions, omitted = budget_user_instructions(pool, user_budget_chars)
    ledger.user_instructions_omitted = omitted + (ledger.user_instructions_omitted if previous else 0)

    ledger.seq = base + len(messages)
    ledger.files = sorted(files.values(), key=lambda f: (f.rank, -f.last_seq))[:MAX_FILES]
    # Unresolved first; a real error line above a bare exit status; newest first.
    ranked = sorted(ledger.errors, key=lambda e: (e.resolved, e.exit_only, -e.last_seq))
    ledger.errors = ([e for e in ranked if not e.resolved][:MAX_UNRESOLVED_ERRORS]
                     + [e for e in ranked if e.resolved][:MAX_RESOLVED_ERRORS])
    ledger.commands = sorted(ledger.commands, key=lambda c: c.last_seq)[-MAX_COMMANDS:]
    ledger.tallies = sorted(ledger.tallies, key=lambda t: t.last_seq)[-MAX_TALLIES:]
    ledger.commits = sorted(ledger.commits, key=lambda c: c.last_seq)[-MAX_COMMITS:]
    ledger.branches = sorted(ledger.branches, key=lambda b: b.last_seq)[-MAX_BRANCHES:]
    return ledger


# ---------------------------------------------------------------------------- rendering
LABELS = {
    "en": {
        "critical": "Critical Context", "files": "Relevant Files", "constraints": "Constraints & Preferences",
        "none": "(none)", "unresolved": "Unresolved errors", "resolved": "Resolved errors",
        "tallies": "Test results", "commands": "Commands", "commits": "Commits", "branches": "Branches",
        "from": "from", "resolved_by": "resolved by", "on": "on", "failed": "failed", "exit": "exit",
        "attempts": "attempts", "current": "current",
        "read": "read", "created": "created", "modified": "modified", "deleted": "deleted",
        "omitted": "{n} older user message(s) omitted", "more": "{n} more",
    },
    "zh": {
        "critical": "关键上下文", "files": "相关文件", "constraints": "约束与偏好",
        "none": "(无)", "unresolved": "未解决的错误", "resolved": "已解决的错误",
        "tallies": "测试结果", "commands": "命令", "commits": "提交", "branches": "分支",
        "from": "来自", "resolved_by": "已由此解决", "on": "分支", "failed": "失败", "exit": "退出码",
        "attempts": "次尝试", "current": "当前",
        "read": "已读取", "created": "已创建", "modified": "已修改", "deleted": "已删除",
        "omitted": "省略了 {n} 条较早的用户消息", "more": "另有 {n} 条",
    },
}


def labels(lang: str) -> dict[str, str]:
    return LABELS.get(lang, LABELS["en"])


def _ids(ids: list[str]) -> str:
    return ", ".join(ids)


def command_result(fact: CommandFact | Action, lang: str = "en") -> str:
    """`cmd` → output / exit status, as one line."""
    t = labels(lang)
    out = code(one_line(fact.command or ""))
    if fact.output is not None:
        # A bare token (`345`) reads as itself; anything with spaces is quoted as code.
        text = one_line(fact.output)
        out += " → " + (text if BARE_TOKEN_RE.fullmatch(text) else code(text))
    elif fact.exit_code is not None:
        out += f" → {t['exit']} {fact.exit_code}"
    elif fact.status == "failed":
        out += f" → {t['failed']}"
    return out


def render_markdown(ledger: Ledger, lang: str = "en") -> str:
    """The deterministic checkpoint sections: Critical Context, Relevant Files, Constraints."""
    t = labels(lang)
    out = [f"## {t['critical']}"]
    body: list[str] = []
    unresolved, resolved = ledger.unresolved_errors(), ledger.resolved_errors()
    if unresolved:
        body.append(f"- {t['unresolved']}:")
        for e in unresolved:
            src = f" — {t['from']} {code(one_line(e.command))}" if e.command else ""
            tries = f", {e.attempts} {t['attempts']}" if e.attempts > 1 else ""
            body.append(f"  - {code(e.text)}{src} ({_ids(e.message_ids)}{tries})")
    if resolved:
        body.append(f"- {t['resolved']}:")
        for e in resolved[:RENDER_MAX_RESOLVED]:
            by = f" {code(one_line(e.resolved_by_command))}" if e.resolved_by_command else ""
            body.append(f"  - {code(e.text)} — {t['resolved_by']}{by} ({e.resolved_by})")
        if len(resolved) > RENDER_MAX_RESOLVED:
            body.append(f"  - ({t['more'].format(n=len(resolved) - RENDER_MAX_RESOLVED)})")
    if ledger.tallies:
        body.append(f"- {t['tallies']}:")
        for tally in ledger.tallies:
            src = f" — {code(one_line(tally.command))}" if tally.command else ""
            body.append(f"  - {code(tally.text)}{src} ({_ids(tally.message_ids[-2:])})")
    if ledger.commits:
        body.append(f"- {t['commits']}:")
        for c in ledger.commits:
            head = f"{code(c.sha)} " if c.sha else ""
            on = f" ({t['on']} {code(c.branch)})" if c.branch else ""
            body.append(f"  - {head}{code(c.text)}{on} ({_ids(c.message_ids[-1:])})")
    if ledger.branches:
        names = [code(b.name) for b in ledger.branches]
        names[-1] += f" ({t['current']})"
        body.append(f"- {t['branches']}: {', '.join(names)}")
    if ledger.commands:
        body.append(f"- {t['commands']}:")
        shown = ledger.commands[-RENDER_MAX_COMMANDS:]
        if len(ledger.commands) > len(shown):
            body.append(f"  - ({t['more'].format(n=len(ledger.commands) - len(shown))})")
        for c in shown:
            body.append(f"  - {command_result(c, lang)} ({_ids(c.message_ids[-2:])})")
    out += body or [t["none"]]

    out += ["", f"## {t['files']}"]
    if ledger.files:
        for f in ledger.files:
            acts = ", ".join(t.get(a, a) for a in f.actions)
            out.append(f"- {code(f.path)} — {acts} ({_ids(f.message_ids[-2:])})")
            out += [f"  - {e}" for e in f.edits]
    else:
        out.append(t["none"])

    out += ["", f"## {t['constraints']}"]
    if ledger.user_instructions:
        for u in ledger.user_instructions:
            out.append(f"- {u.message_id}:")
            out += [f"  > {line}" if line.strip() else "  >" for line in u.text.splitlines()]
        if ledger.user_instructions_omitted:
            out.append(f"- ({t['omitted'].format(n=ledger.user_instructions_omitted)})")
    else:
        out.append(t["none"])
    return "\n".join(out) + "\n"
