"""Shell text as facts: which files a command reads or changes, and what "the same run" means.

Agents run most of their work through a shell tool, so the command line is the richest source
of file facts, and the least trustworthy: a token is a path only when it looks like one and
sits where a path goes (a redirect target, a `cat`/`sed -i`/`rm` argument, a patch header).
Quoted text is masked before anything is matched, so `>` inside a string is not a redirect.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

from .text import cut_middle

COMMAND_MAX_CHARS = 400  # heredoc scripts inside a command are not the command's identity

# Commands that verify work: test runners, type checkers, builds, running a script.
VERIFY_COMMAND_RE = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|jest|vitest|mocha|ava|tsc|tsgo|mypy|pyright|ruff|eslint|biome"
    r"|go (?:test|build|vet)|cargo (?:test|build|check|clippy|run)|mix (?:test|compile|credo)"
    r"|(?:npm|pnpm|yarn|bun) (?:test|build|run [\w:-]*(?:test|check|build|lint|tsc|type)[\w:-]*)|npx (?:tsc|jest|vitest|mocha)|node --test"
    r"|deno test|bun test|make|ctest|gradle|mvn|rspec|phpunit|dotnet (?:test|build)"
    r"|python3?(?: -m \w+| -\w)* \S+\.py|node \S+\.[cm]?[jt]s|tsx \S+\.[jt]s)\b")
SUBCOMMAND = r"\b{}\b(?:\s+-\S+(?:\s+\S+)?)*\s+(?:{})\b"  # `git [-C dir] [-c k=v] <subcommand>`
GIT_SUBCOMMAND = SUBCOMMAND.format("git", "{}")
GIT_COMMIT_CMD_RE = re.compile(GIT_SUBCOMMAND.format("commit"))
BUT_COMMIT_CMD_RE = re.compile(SUBCOMMAND.format("but", "commit"))  # GitButler's (BUT_COMMIT_SUBCOMMANDS)
GIT_LOG_CMD_RE = re.compile(GIT_SUBCOMMAND.format("log"))
# git commands that print a diffstat (output.DIFFSTAT_LINE_RE): with `--stat`, or after a merge.
GIT_DIFFSTAT_CMD_RE = re.compile(GIT_SUBCOMMAND.format("diff|show|log|whatchanged|merge|pull|stash|apply"))
# Other git commands that make a commit and print `git commit`'s summary line (sequencer.c print_commit_summary).
GIT_PICK_CMD_RE = re.compile(GIT_SUBCOMMAND.format("cherry-pick|revert"))
RELATIVE_REV_RE = re.compile(r"\S[~^]\d*(?:\s|$)")  # `HEAD~1`, `main^`: an ancestor (gitrevisions(7))
GH_PR_CMD_RE = re.compile(r"\bgh\s+pr\s+(create|merge)\b")
# The `gh pr` subcommands that act on one pull request, `[<number> | <url> | <branch>]`, the current
# branch's where none is given (cli/cli pkg/cmd/pr/shared/finder.go).
GH_PR_TARGET_VERBS = frozenset({"view", "checks", "checkout", "diff", "close", "reopen", "ready", "edit", "comment",
                                "review"})
GH_PR_TARGET_RE = re.compile(rf"\bgh\s+pr\s+(?:{'|'.join(sorted(GH_PR_TARGET_VERBS))})\b")
GH_PR_TITLE_RE = re.compile(r"""(?:--title|-t)[ =](?:"((?:[^"\\]|\\.)*)"|'([^']*)')""")  # gh pr create's title
DQUOTE_ESCAPE_RE = re.compile(r'\\([$`"\\])')  # what a backslash escapes inside double quotes (bash(1), QUOTING)
BRANCH_CMD_RE = re.compile(r"\bgit\s+(?:checkout\s+-[bB]|switch\s+-[cC]|switch)\s+([\w./+-]+)")

# Patch headers (Codex apply_patch and unified diffs) inside a patch tool's input.
PATCH_FILE_RE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.MULTILINE)
DIFF_OLD_RE = re.compile(r"^--- (?:a/)?(\S+)", re.MULTILINE)
DIFF_NEW_RE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
PATCH_COMMAND_RE = re.compile(r"\b(?:apply_patch|git apply|patch -p\d)\b")

# Programs that only filter a run's output: `npm run check 2>&1 | grep error` is `npm run check`.
FILTER_PROGRAMS = {"head", "tail", "grep", "egrep", "fgrep", "rg", "wc", "sort", "uniq", "less", "more", "cat",
                   "cut", "tee", "tr", "column"}
STDERR_MERGE_RE = re.compile(r"\s*\b2>&1\b")

# Shell parsing. Paths from shell text must look like paths: no spaces, globs, variables.
SHELL_PATH_RE = re.compile(r"^[\w.~@+/-][\w.~@+,=/-]*$")
FILE_EXT_RE = re.compile(r"\.[A-Za-z][\w-]{0,9}$")
BARE_FILE_NAMES = {"Makefile", "Dockerfile", "Gemfile", "Rakefile", "Procfile", "LICENSE", "README", "Justfile"}
HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")
REDIRECT_RE = re.compile(r"(?<![\d&>])(>>?)\s*([^\s;&|<>()]+)")
URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
SEGMENT_SEPARATORS = {"&&", "||", ";", "|", "&", ";;", "|&", "(", ")"}
READ_COMMANDS = {"cat", "head", "tail", "less", "more", "bat", "nl", "wc"}
# Programs (and git subcommands) that only look: a run of nothing else changed no state, so a
# checkpoint short of room drops it before `npm install x` or `bd update y` (reads and chatter).
# Process listings (procps `ps`, `pgrep`; `lsof`) and a wait (`sleep`) change nothing either. (`gh pr
# view` reads too, but it is how a session learns where its PR stands: not a detail.)
LOOK_PROGRAMS = FILTER_PROGRAMS | READ_COMMANDS | {"ls", "pwd", "echo", "printf", "find", "fd", "tree", "stat", "file",
                                                   "du", "df", "which", "type", "diff", "jq", "date", "whoami", "env",
                                                   "ps", "pgrep", "lsof", "sleep"}
LOOK_GIT_SUBCOMMANDS = {"status", "diff", "log", "show", "remote", "rev-parse", "ls-files", "blame", "describe",
                        "ls-remote", "shortlog", "grep", "rev-list", "cat-file", "show-ref", "merge-base"}
# GitButler's CLI `but`, which its agent skill has a session use instead of git for every write
# ("Replaces git - use 'but' instead of git commit, git status, git push…"): the subcommands that
# only read (gitbutlerapp/gitbutler crates/but/src/args/mod.rs; `but` alone runs `status`).
LOOK_BUT_SUBCOMMANDS = {"status", "diff", "show"}
# Any program asked for its usage or version only prints it and exits (GNU Coding Standards 4.8,
# `--help` and `--version`: "other options and arguments should be ignored once this is seen";
# cobra's and clap's generated `help` subcommand does the same).
LOOK_OPTIONS = {"--help", "--version"}
HELP_SUBCOMMAND = "help"
OPTION_WITH_VALUE = {"-n", "-c", "--lines", "--bytes"}  # head/tail options that take a value


def shell_command(args: dict[str, Any]) -> str | None:
    """The command line of a shell tool call (Codex passes an argv list)."""
    value = args.get("command", args.get("cmd"))
    if isinstance(value, list):  # Codex: ["bash", "-lc", "..."]
        items = [str(v) for v in value]
        if len(items) >= 3 and items[0] in ("bash", "sh", "zsh") and items[1] in ("-lc", "-c"):
            return items[2]
        return shlex.join(items)
    return value if isinstance(value, str) and value.strip() else None


def clean_tool_path(value: Any) -> str | None:
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


# A Windows file has three spellings in one session: `C:\\Users\\x\\a.md` (the file tools, the
# recorded cwd), `C:/Users/x/a.md`, and Git Bash's `/c/Users/x/a.md` (MSYS2's mount of each drive,
# msys2.org/docs/filesystem-paths). One name: the drive letter upper-case, forward slashes.
WINDOWS_DRIVE_RE = re.compile(r"^([A-Za-z]):[\\/]")
MSYS_DRIVE_RE = re.compile(r"^/([A-Za-z])/")


def _one_spelling(path: str, windows: bool) -> str:
    m = WINDOWS_DRIVE_RE.match(path) or (MSYS_DRIVE_RE.match(path) if windows else None)
    if not m:
        return path
    return f"{m.group(1).upper()}:/" + path[m.end():].replace("\\", "/")


def normalize_path(path: str, cwds: list[str]) -> str:
    """Strip `./` and a known working-directory prefix so one file has one name (a Windows
    path in one spelling first)."""
    windows = any(WINDOWS_DRIVE_RE.match(c) for c in cwds)
    path = _one_spelling(path, windows)
    for cwd in cwds:
        root = _one_spelling(cwd, windows).rstrip("/") + "/"
        if path.startswith(root) and len(path) > len(root):
            path = path[len(root):]
            break
    while path.startswith("./"):
        path = path[2:]
    return path


def same_file(path: str, other: str) -> bool:
    """Two names of one file: the same, or one ends the other (`orders.ts`, `src/orders.ts`; a name
    relative to the repository beside one relative to a subdirectory it was run in)."""
    return path == other or path.endswith("/" + other) or other.endswith("/" + path)


def strip_heredocs(command: str) -> tuple[str, list[str]]:
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


CHAIN_RE = re.compile(r"\s*(?:&&|\|\||;)\s*")  # the links of a command list (bash(1) "Lists")
MIN_LINK_CHARS = 40  # a link cut shorter than this no longer names its command


CD_LINK_RE = re.compile(r"""^(\s*cd\s+)("[^"\n]*"|'[^'\n]*'|[^\s;&|]+)(\s*&&\s*)""")  # a leading `cd DIR &&`, DIR quoted or not


def cut_command(command: str, limit: int) -> str:
    """A long command within `limit`: a leading `cd DIR &&` gives up its directory's middle first
    (it says where, the rest what ran); then a list (`a && b; c`) is cut in its longest link, so
    each link's command stays readable (`git add <paths…> && git commit -m "msg"` keeps its
    message); one long command is cut in its middle."""
    if len(command) <= limit:
        return command
    cd = CD_LINK_RE.match(command)
    if cd and len(cd.group(2)) > MIN_LINK_CHARS:
        room = max(MIN_LINK_CHARS, len(cd.group(2)) - (len(command) - limit))
        command = cd.group(1) + cut_middle(cd.group(2), room) + cd.group(3) + command[cd.end():]
        if len(command) <= limit:
            return command
    masked = mask_quotes(command)
    cuts = [(m.start(), m.end()) for m in CHAIN_RE.finditer(masked)]
    bounds = [0] + [x for c in cuts for x in c] + [len(command)]
    links = [(bounds[k], bounds[k + 1]) for k in range(0, len(bounds), 2)]
    start, end = max(links, key=lambda b: b[1] - b[0])
    room = (end - start) - (len(command) - limit)
    if len(links) < 2 or room < MIN_LINK_CHARS:
        return cut_middle(command, limit)
    return command[:start] + cut_middle(command[start:end], room) + command[end:]


def mask_quotes(text: str) -> str:
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
    text = text.replace("\\\n", " ")  # a line continuation (bash(1), QUOTING): one command goes on
    masked = mask_quotes(text)
    return "".join(";" if ch == "\n" and m == "\n" else ch for ch, m in zip(text, masked, strict=True))


def segments(command: str) -> list[list[str]]:
    lexer = shlex.shlex(_unquoted_newlines_to_semicolons(command), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: do not guess
        return []
    found: list[list[str]] = [[]]
    for tok in tokens:
        if tok in SEGMENT_SEPARATORS:
            found.append([])
        else:
            found[-1].append(tok)
    return [s for s in found if s]


REDIRECT_OPERATORS = (">", ">>", "<", ">&", "<<", "<<<", "&>", ">|")  # bash(1) REDIRECTION, as shlex splits them


def without_redirects(tokens: list[str]) -> list[str]:
    """The words without redirections: the operator, its target, and the file descriptor before it
    (`2>&1` splits as `2`, `>&`, `1`; shlex cannot tell `5 > f` from `5> f`, so the 5 goes too)."""
    out: list[str] = []
    skip = False
    for i, tok in enumerate(tokens):
        if skip:
            skip = False
            continue
        if tok in REDIRECT_OPERATORS:
            skip = True
            continue
        if tok.isdigit() and tokens[i + 1:i + 2] and tokens[i + 1] in REDIRECT_OPERATORS:
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
    stripped, bodies = strip_heredocs(command)
    if PATCH_COMMAND_RE.search(command):
        for body in bodies or [command]:
            found += patch_file_actions(body)
    masked = mask_quotes(stripped)
    for m in REDIRECT_RE.finditer(masked):
        target = stripped[m.start(2):m.end(2)].strip("'\"")
        if target.startswith("/dev/") or not looks_like_path(target):
            continue
        found.append((target, "modified" if m.group(1) == ">>" else "created"))
    for tokens in segments(stripped):
        has_heredoc = "<<" in tokens or "<<<" in tokens
        words = without_redirects(tokens)
        while words and re.match(r"^\w+=", words[0]):  # FOO=1 cmd ...
            words = words[1:]
        if words and words[0] in ("sudo", "command", "time", "nohup"):
            words = words[1:]
        if not words:
            continue
        prog, args = words[0].rsplit("/", 1)[-1], words[1:]
        args = subcommand_words(prog, args)
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
        elif prog == "git" and args[:1] == ["add"]:
            # git-add(1) stages "the current content found in the working tree": the paths it names
            # were changed, however (a script, a formatter, a generator) the session changed them.
            found += [(a, "staged") for a in args[1:] if looks_like_path(a)]
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
    return [(p, a) for p, a in found if clean_tool_path(p)]


def run_key(command: str, cwds: list[str] | tuple[str, ...] = ()) -> str:
    """A command without its output filters, `2>&1` and a `cd` into the session's own working
    directory: what "the same run" means."""
    text = strip_heredocs(command)[0]
    m = CD_LINK_RE.match(text)  # the directory quoted or not: `cd "…/Mobile Documents/app" && make`
    if m and m.group(2).strip("'\"").rstrip("/") in {c.rstrip("/") for c in cwds}:
        text = text[m.end():]
    masked = mask_quotes(text)
    cuts = [i for i, ch in enumerate(masked)
            if ch == "|" and masked[i - 1:i] != "|" and masked[i + 1:i + 2] not in ("|", "&")]
    pieces = [text[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(text)], strict=True)]
    while len(pieces) > 1 and (pieces[-1].split() or [""])[0] in FILTER_PROGRAMS:
        pieces.pop()
    return " ".join(STDERR_MERGE_RE.sub("", "|".join(pieces)).split())


def last_program(command: str) -> str | None:
    """The program whose exit status a pipeline reports (first word of the last segment)."""
    segs = segments(strip_heredocs(command)[0])
    words = without_redirects(segs[-1]) if segs else []
    return words[0].rsplit("/", 1)[-1] if words else None


def command_words(seg: list[str]) -> list[str]:
    """A segment's program and arguments: without redirects and `VAR=value` prefixes."""
    return [w for w in without_redirects(seg) if "=" not in w.split("/", 1)[0]]


# git's own options before its subcommand that take the next word as their value (git(1) SYNOPSIS:
# `git [-C <path>] [-c <name>=<value>] [--git-dir=<path>] [--work-tree=<path>] [--namespace=<name>]
# [--config-env=<name>=<envvar>] <command> [<args>]`): `git -C /repo push` pushes.
GIT_VALUE_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})
GIT_SETTING_OPTIONS = frozenset({"-c", "--config-env"})  # their value is `name=value` (command_words may have dropped it)


# `but`'s own options before its subcommand that take a value (crates/but/src/args/mod.rs: `-C,
# --current-dir <PATH>`, `--log-file <PATH>`; `--format <FORMAT>`, `-f` up to 0.19).
BUT_VALUE_OPTIONS = frozenset({"-C", "--current-dir", "--log-file", "--format", "-f"})
OWN_VALUE_OPTIONS = {"git": GIT_VALUE_OPTIONS, "but": BUT_VALUE_OPTIONS}


def subcommand_words(program: str, args: list[str]) -> list[str]:
    """`program`'s words from its subcommand on, past its own options and their values
    (OWN_VALUE_OPTIONS; git's GIT_SETTING_OPTIONS); a program with none of its own: `args`."""
    values = OWN_VALUE_OPTIONS.get(program)
    if values is None:
        return args
    i = 0
    while i < len(args) and args[i].startswith("-"):
        value = args[i + 1] if i + 1 < len(args) else ""
        i += 2 if args[i] in values or (program == "git" and args[i] in GIT_SETTING_OPTIONS and "=" in value) else 1
    return args[i:]


# What GitButler's `but` writes, by its subcommand (crates/but/src/args/mod.rs): a commit (`commit`),
# a pull request, which also pushes its branch (`pr`, `review`; `mr` from 0.21).
BUT_COMMIT_SUBCOMMANDS = frozenset({"commit"})
BUT_REVIEW_SUBCOMMANDS = frozenset({"pr", "review", "mr"})


BUT_WORD_RE = re.compile(r"\bbut\b")


def but_runs(command: str, subcommands: frozenset[str]) -> bool:
    """Does `command` run `but` with one of `subcommands`? (Most commands: not tokenized at all.)"""
    return bool(BUT_WORD_RE.search(command)) and any(program == "but" and args[:1] and args[0] in subcommands
                                                      for program, _, args in _runs(command))


def gh_pr_targets(command: str) -> list[tuple[str, str | None]]:
    """Each `gh pr <verb>` of GH_PR_TARGET_VERBS that `command` runs (quoted text and heredoc bodies
    are not runs), with the pull request it names: its first argument that is not an option, where
    that is a number or a URL (a branch name says nothing about which). The word after an option
    may be its value (`--interval 20`, `-R owner/repo`): never the pull request."""
    found: list[tuple[str, str | None]] = []
    if not GH_PR_TARGET_RE.search(command):  # most commands: not tokenized at all
        return found
    for seg in segments(strip_heredocs(command)[0]):
        words = command_words(seg)
        if len(words) < 3 or words[0].rsplit("/", 1)[-1] != "gh" or words[1] != "pr" or words[2] not in GH_PR_TARGET_VERBS:
            continue
        target, after_option = None, False
        for word in words[3:]:
            if word.startswith("-"):
                after_option = "=" not in word
            elif after_option:
                after_option = False
            else:
                target = word if word.isdigit() or URL_RE.match(word) else None
                break
        found.append((words[2], target))
    return found


def only_looks(command: str) -> bool:
    """Every program in `command` only reads or prints (`git status`, `ls src | head`, `cd x`)."""
    segs = segments(strip_heredocs(command)[0])
    if not segs:
        return False
    for seg in segs:
        if any(tok in (">", ">>", "&>", ">|") and nxt != "/dev/null" for tok, nxt in zip(seg, [*seg[1:], ""], strict=True)):
            return False  # it writes a file
        words = command_words(seg)
        if not words or words[0] == "cd":
            continue
        program = words[0].rsplit("/", 1)[-1]
        if LOOK_OPTIONS.intersection(words[1:]) or words[1:2] == [HELP_SUBCOMMAND]:
            continue
        if program == "git":
            sub = next(iter(subcommand_words(program, words[1:])), "")
            if sub not in LOOK_GIT_SUBCOMMANDS:
                return False
        elif program == "but":
            sub = next(iter(subcommand_words(program, words[1:])), "status")
            if sub not in LOOK_BUT_SUBCOMMANDS:
                return False
        elif program == "sed":
            if _sed_files(words[1:])[0]:
                return False
        elif program not in LOOK_PROGRAMS:
            return False
    return True


# Subcommands that set up the environment the work runs in, by each tool's documented CLI: the
# branch or worktree (git checkout/switch/worktree add/clone), installed dependencies and tools
# (npm/pnpm/yarn/bun install|add, pip/uv/poetry, cargo, go install|get, gem, composer, brew,
# apt), and a package's dev server (npm's `start` and the `dev`/`serve`/`preview` scripts that
# create-vite and its kin define). A continuing agent needs these whatever their age.
SETUP_SUBCOMMANDS = {
    "git": {"checkout", "switch", "worktree", "clone"},
    "npm": {"install", "i", "ci", "add", "start"}, "pnpm": {"install", "i", "add"}, "yarn": {"install", "add"},
    "bun": {"install", "i", "add"}, "pip": {"install"}, "pip3": {"install"}, "uv": {"add", "pip", "sync"},
    "poetry": {"add", "install"}, "cargo": {"add", "install"}, "go": {"install", "get"}, "gem": {"install"},
    "composer": {"require", "install"}, "brew": {"install"}, "apt": {"install"}, "apt-get": {"install"},
}
SERVER_SCRIPTS = {"dev", "start", "serve", "preview"}
PACKAGE_RUNNERS = {"npm", "pnpm", "yarn", "bun"}


def _runs(command: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """Each program `command` runs: its name, its words, and its arguments that are not options."""
    for seg in segments(strip_heredocs(command)[0]):
        words = command_words(seg)
        if words:
            program = words[0].rsplit("/", 1)[-1]
            yield program, words, [w for w in subcommand_words(program, words[1:]) if not w.startswith("-")]


def sets_up(command: str) -> bool:
    """Does `command` set up the environment (SETUP_SUBCOMMANDS, a package's dev server)?"""
    for program, words, args in _runs(command):
        if program in PACKAGE_RUNNERS:
            args = [a for a in args if a != "run"]
            if "--filter" in words or "-F" in words:  # pnpm --filter <pkg> dev: the value is not the script
                args = args[1:]
        if args and args[0] in SETUP_SUBCOMMANDS.get(program, ()):
            return True
        if program in PACKAGE_RUNNERS and args and args[0] in SERVER_SCRIPTS:
            return True
    return False


# Subcommands that change what others see, by each tool's documented CLI: the repository's history
# or a remote (git push, tag, merge, rebase, revert, cherry-pick, reset; GitButler's `but push`, its
# `pr`/`review`/`mr` that push and open one, `land`), a pull request, release or issue (gh), a package
# registry (npm/pnpm/yarn/cargo publish, docker push). The continuing agent must know these happened
# and not run them again, whatever their age.
PUBLISH_SUBCOMMANDS = {
    "git": {"push", "tag", "merge", "rebase", "revert", "cherry-pick", "reset"},
    "but": {"push", "land", *BUT_REVIEW_SUBCOMMANDS},
    "npm": {"publish"}, "pnpm": {"publish"}, "yarn": {"publish"}, "cargo": {"publish"}, "docker": {"push"},
}
GH_PUBLISH = {"pr": {"create", "merge", "close", "ready", "review", "edit", "comment"},
              "release": {"create", "edit", "delete"}, "issue": {"create", "close", "edit", "comment"}}
# `--dry-run` does everything but send (git-push(1) `-n, --dry-run`; but push `-d, --dry-run`; npm, pnpm,
# yarn, cargo publish `--dry-run`). The short forms are push's own: `git revert -n` is `--no-commit`.
DRY_RUN = "--dry-run"
DRY_RUN_SHORT = {("git", "push"): "-n", ("but", "push"): "-d"}
GH_API_WRITE_RE = re.compile(r"(?:^|\s)(?:-X|--method)[= ]?(?:POST|PUT|PATCH|DELETE)\b")


def publishes(command: str) -> bool:
    """Does `command` change what others see (PUBLISH_SUBCOMMANDS, GH_PUBLISH, `gh api -X PUT`)? Not when
    it only prints its usage (LOOK_OPTIONS) or rehearses (DRY_RUN), nor `but pr template`."""
    for program, words, args in _runs(command):
        if (LOOK_OPTIONS.intersection(words) or args[:1] == [HELP_SUBCOMMAND] or DRY_RUN in words
                or DRY_RUN_SHORT.get((program, args[0] if args else "")) in words):
            continue
        if program == "but" and args[1:2] == ["template"]:
            continue  # `but pr template` sets which template a review uses: local config
        if program == "git" and args[:1] == ["tag"] and (len(args) < 2 or {"-l", "--list"} & set(words)):
            continue  # `git tag` alone, or with `-l <pattern>`, lists the tags
        if args and args[0] in PUBLISH_SUBCOMMANDS.get(program, ()):
            return True
        if program == "gh" and len(args) >= 2 and args[1] in GH_PUBLISH.get(args[0], ()):
            return True
        if program == "gh" and args[:1] == ["api"] and GH_API_WRITE_RE.search(" ".join(words)):
            return True
    return False


# Claude Code's Bash tool tells the model to pass a commit message through a heredoc, `git commit -m
# "$(cat <<'EOF'` / message / `EOF` / `)"` (its Bash tool prompt, "Committing changes with git"), and
# other agents copy it: the subject is the body's first line.
COMMIT_HEREDOC_RE = re.compile(r"""(?:-m|--message)[= ]?"\$\(cat\s*""" + HEREDOC_RE.pattern + r"\s*\n")
# ... or reads it from standard input, a heredoc: `git commit -F - <<'EOF'` (git-commit(1) `-F <file>`:
# "Use - to read the message from the standard input").
COMMIT_STDIN_RE = re.compile(r"(?:-\w*F\s*|--file[= ])-(?=\s)[^\n]*?" + HEREDOC_RE.pattern + r"[^\n]*\n")


def commit_subject(command: str, program: str | None = None) -> str | None:
    """The subject of the commit `command` makes: its `-m` value or heredoc's first line; `program`
    (`but`): only its own commit's."""
    for tokens in segments(strip_heredocs(command)[0]):
        if program is not None and (words := command_words(tokens)) and words[0].rsplit("/", 1)[-1] != program:
            continue
        for i, tok in enumerate(tokens[:-1]):
            if tok in ("-m", "--message") and "commit" in tokens and "$(" not in tokens[i + 1]:
                return tokens[i + 1].strip().split("\n")[0] or None
    commit_line = BUT_COMMIT_CMD_RE if program == "but" else GIT_COMMIT_CMD_RE
    for m in [*COMMIT_HEREDOC_RE.finditer(command), *COMMIT_STDIN_RE.finditer(command)]:
        line_start = command.rfind("\n", 0, m.start()) + 1
        if commit_line.search(command[line_start:m.start()]):
            bodies = strip_heredocs(command[line_start:])[1]  # the commit line's heredoc comes first
            return next((line.strip() for line in bodies[0].split("\n") if line.strip()), None) if bodies else None
    return None


def is_verify_command(command: str) -> bool:
    """A test/build/script run: quoted text is blanked (`git commit -m "make it pass"` runs nothing)."""
    return bool(VERIFY_COMMAND_RE.search(mask_quotes(command)))
