"""The fact ledger: exact facts folded from a window's actions, carried across compactions.

A small summarizer loses exact error lines and paths, so the pipeline owns them: the files
read and changed, exact error lines, commands with their exit status, test tallies, commits,
branches, pull requests and the user's own words, each pointing at the message id(s) it came from, carried
verbatim across compactions (`extract_ledger(..., previous=...)`). The facts come from
`worker.facts.actions`; here they are deduplicated, resolved (a passing re-run resolves an
error), ranked and bounded so a carried ledger cannot grow without limit. Rendering them is
the checkpoint's job (`worker.pipeline.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..session import GIT_BRANCH, Message
from .actions import MARKUP_TAG_RE, NOT_EDITS, PR_SEEN, Action, reruns, scan_actions, track_run
from .output import GHA_ANNOTATION_RE, TASK_PREFIX_RE, error_findings
from .shell import only_looks, same_file
from .text import CUT_MARKER, SENTENCE_END_RE, code, cut_middle

# ---------------------------------------------------------------------------- bounds
# Every list is bounded so a carried ledger cannot grow without limit across compactions.
MAX_FILES = 200  # carried, not shown: the checkpoint ranks what fits; five chained compactions must not evict a file (issue 22)
MAX_UNRESOLVED_ERRORS = 64  # open errors are the work itself: a long session has 50 and more; the checkpoint ranks what fits
MAX_RESOLVED_ERRORS = 100  # fixed errors are history; the checkpoint's ranked budget shows the newest that fit
# The run history the checkpoint ranks; past it the oldest look-only runs go first. Carried, not
# shown: the longest real session (codex-cli-agentv, 506 messages) ran 225 distinct commands, and
# five chained compactions of it at 200 evicted 22 the first checkpoint knew (issue 22).
MAX_COMMANDS = 400
MAX_TALLIES = 10  # only the latest test results matter for the state of the work
MAX_COMMITS = 50  # the commits of a long session; the checkpoint shows the newest that fit
MAX_PULL_REQUESTS = 20  # a session that opens more is a release train; the newest say where it stands
MAX_BRANCHES = 10  # carried, not all shown (BRANCHES_SHOWN): a session of many PR branches must not evict `main`
# Runs still going that a checkpoint carries: Codex keeps at most 64 unified exec processes open
# (codex-rs core/src/unified_exec, MAX_UNIFIED_EXEC_PROCESSES); the newest are the ones a poll names.
MAX_RUNNING = 64
MAX_IDS_PER_FACT = 6  # first occurrence + the newest ones: enough to find it again
EDITS_PER_FILE = 3  # the newest changes say what was fixed; older ones are in the history
EDIT_SIDE_MAX_CHARS = 120  # one code line each side names the change; the whole edit stays in the history
# The user's messages as the ledger keeps them, whole where they are not a pasted log: a
# checkpoint with the room shows them as typed (a SWE-agent task statement is ~5k chars). Codex
# re-inserts up to 20k tokens of them (COMPACT_USER_MESSAGE_MAX_TOKENS); this is ~6k.
USER_LEDGER_CHARS = 24_000
USER_LEDGER_MESSAGE_MAX_CHARS = 8000
# ... and as a tight checkpoint (the dense rendering) shows them: ~1.5k tokens, one pasted log
# not eating all of it.
USER_BUDGET_CHARS = 6000
USER_MESSAGE_MAX_CHARS = 2000
USER_MIN_KEEP_CHARS = 200  # a remainder smaller than this is not worth a cut-down quote
FIRST_SHARE = 4  # the session's first request may hold a quarter of the user budget for itself

# A line of a user's message that states a rule: kept when a long message is cut, and ranked
# before plain requests. CJK text has no word boundaries and users often write no English cue
# word, so each language has its own cues: prohibitions, obligations and polite imperatives
# (「〜してください」, 「삭제해줘」 are how a request or a rule is phrased at all).
RULE_CUES_EN = (r"\b(?:do not|don't|never|instead|must|cannot|can't|always|should(?:n't| not)?|only|make sure|avoid|keep"
                r"|without|important)\b")
RULE_CUES_ZH = r"不要|不能|不得|禁止|必须|务必|只能|保持|不许|勿|一定要|别|不准|避免|确保|只用|只改"
RULE_CUES_JA = r"しないで|ないでください|しないこと|てはいけない|てください|禁止|必ず|絶対|だけ|のみ|べき"
RULE_CUES_KO = r"하지\s?마|하지\s?말|말아\s?(?:줘|주세요)|마세요|금지|반드시|꼭|않도록|해\s?(?:줘|주세요)|하세요"
# A correction opens a sentence or a clause: "no, use the dark theme", "…, no rgb indices!" (not "no errors").
RULE_CUES_EN_NO = r"(?:^|(?<=[.!?,;] ))no\b"
RULE_LINE_RE = re.compile("|".join((RULE_CUES_EN, RULE_CUES_EN_NO, RULE_CUES_ZH, RULE_CUES_JA, RULE_CUES_KO)),
                          re.IGNORECASE | re.MULTILINE)
# A line of a long brief that opens with an imperative verb ("- Add Korean `description` …",
# "Set CalVer …"): a plan's step, as binding as a rule; kept after the rule lines when a brief is cut.
DIRECTIVE_LINE_RE = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\*\*)?(?:add|set|use|create|remove|delete|keep|update|convert|transform|move|rename"
    r"|replace|write|generate|follow|make|ensure|change|preserve|migrate|implement)\b", re.IGNORECASE)
PASTE_MIN_CHARS = 1000  # a shorter message is kept as written
PASTE_ERRORS_SHOWN = 3  # a pasted log's first error lines name what the user reports; the log stays in the history
TYPED_MAX_CHARS = 300  # the instruction typed after a paste is one short paragraph ("수정해줘.")
# The first line of a pasted document rather than typed prose: a Markdown heading, a code fence,
# a markup tag, a numbered diff line, a shell prompt.
PASTE_START_RE = re.compile(r"^\s*(?:#{1,6}\s|```|<[A-Za-z!?/]|[+-]\s*\d|diff --git|➜|\$\s)")
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
QUESTION_MAX_CHARS = 160  # one question; a longer message carries more than the question
QUESTION_ENDINGS = ("?", "？", "か", "か。", "吗", "吗。", "까", "까요", "?!")
INTERJECTION_MAX_WORDS = 2  # "Hmm...", "No.", "I see." before a question say nothing to do
# "can you analyse …?", "could you add a test?": a request in a question's clothes, not a question.
REQUEST_OPENER_RE = re.compile(r"^(?:(?:can|could|would|will) you|please|pls|请|麻烦)\b", re.IGNORECASE)
CHITCHAT_PUNCT = " \t.,!?;:~…-，。！？；：、"
# `test/x_test.exs:728` is run as `mix test test/x_test.exs`
TEST_ID_LINE_RE = re.compile(r":\d+$")


# The system's temporary directories: FHS 3.0 `/tmp` and `/var/tmp`, macOS's `/private/tmp` and
# per-user `$TMPDIR` (`/var/folders/xx/…/T/`), Windows' `%TEMP%` (`…\AppData\Local\Temp\`). A file
# written there is scratch (a saved CI log, a probe), not the work: it ranks with the files only read
# (tune, no model: 8k 759 -> 762, paths +3; 6k, 16k equal).
TEMP_DIR_RE = re.compile(r"^(?:/private)?(?:/var)?/tmp/|^(?:/private)?/var/folders/[^/]+/[^/]+/T/|[\\/]AppData[\\/]Local[\\/]Temp[\\/]",
                         re.IGNORECASE)


# ---------------------------------------------------------------------------- dataclasses
@dataclass
class FileFact:
    path: str
    actions: list[str] = field(default_factory=list)  # read / created / modified / deleted / staged / listed, first seen first
    message_ids: list[str] = field(default_factory=list)
    last_action: str = ""  # the newest change ("deleted": gone now; "staged"/"listed": only ever seen so), else "read"
    last_seq: int = 0
    edits: list[str] = field(default_factory=list)  # "`old` → `new`", newest last

    @property
    def changed(self) -> bool:
        return any(a in ("created", "modified", "deleted", "staged") for a in self.actions)

    @property
    def scratch(self) -> bool:
        return TEMP_DIR_RE.search(self.path) is not None

    @property
    def only_listed(self) -> bool:
        """Known only from a git diffstat: a commit's or the tree's file the session never met."""
        return self.actions == ["listed"]

    @property
    def rank(self) -> int:
        """0: changed and still there, 1: changed then deleted, 2: only read, scratch, or only ever seen
        staged (changed where the session does not show: before it, or by another), 3: only ever named
        in a git diffstat (a commit's or the tree's file, which the session never opened)."""
        if self.only_listed:
            return 3
        if not self.changed or self.scratch or self.last_action == "staged":
            return 2
        return 1 if self.last_action == "deleted" else 0


# What differs between repeats of one log line: a `[stderr]` prefix, timestamps, a logger's pid.
LOG_STREAM_RE = re.compile(r"^\[(?:stderr|stdout)\]\s*")
LOG_STAMP_RE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{1,2}/\d{1,2}/\d{2,4},?\s+\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AP]M)?"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"
    r"|(?<=\[Nest\] )\d+")


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
    at: str | None = None  # its location or first project frame, verbatim (`--> src/main.rs:4:20`)
    further: bool = False  # only ever past a result's first error lines: shown where room is left

    @property
    def key(self) -> str:
        # "Exit code 1" from two different commands are two different failures; a log line that
        # repeats with a new timestamp or pid, in a CI job (`##[error]`) or another task (`[lint] `),
        # is one failure seen again (the first text is kept).
        if self.exit_only:
            return f"{self.text}\x00{self.sources[-1] if self.sources else ''}"
        line = TASK_PREFIX_RE.sub("", LOG_STREAM_RE.sub("", self.text))  # `[stderr]   x` first: its spaces too
        return LOG_STAMP_RE.sub("#", GHA_ANNOTATION_RE.sub("", line))


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
class RunningRun:
    """A run still going at the ledger's last message, a unified exec session or a code-mode cell
    (actions.run_polled): a poll after a checkpoint's boundary is this run, its command and outcome."""

    run_id: str
    tool: str
    command: str
    source: str


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
class PullRequestFact:
    number: int
    state: str  # opened / merged: what the session last did to it
    title: str | None = None
    url: str | None = None
    message_ids: list[str] = field(default_factory=list)
    last_seq: int = 0

    @property
    def key(self) -> str:
        return self.key_of(self.number)

    @staticmethod
    def key_of(number: int) -> str:
        return f"#{number}"  # how GitHub names a pull request in its repository


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
    # It only asked and was answered (answered_question): the user's concern all the same, kept
    # after what they told, and no work item.
    asked: bool = False


@dataclass
class Ledger:
    files: list[FileFact] = field(default_factory=list)  # changed first, then read; newest first
    errors: list[ErrorFact] = field(default_factory=list)  # unresolved first; newest first
    commands: list[CommandFact] = field(default_factory=list)  # chronological
    tallies: list[TallyFact] = field(default_factory=list)  # chronological
    commits: list[CommitFact] = field(default_factory=list)  # chronological
    branches: list[BranchFact] = field(default_factory=list)  # chronological; last is current
    pull_requests: list[PullRequestFact] = field(default_factory=list)  # chronological
    user_instructions: list[UserInstruction] = field(default_factory=list)  # newest first
    user_instructions_omitted: int = 0  # older user messages left out by the budget
    running: list[RunningRun] = field(default_factory=list)  # carried, not shown
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
            pull_requests=build(PullRequestFact, data.get("pull_requests")),
            user_instructions=build(UserInstruction, data.get("user_instructions")),
            user_instructions_omitted=int(data.get("user_instructions_omitted") or 0),
            running=build(RunningRun, data.get("running")),
            seq=int(data.get("seq") or 0),
            last_message_id=data.get("last_message_id"),
        )

    def running_runs(self) -> dict[str, Action]:
        """The runs still going, as `scan_actions(running=...)` takes them."""
        return {r.run_id: Action(pos=-1, message_id="", call_message_id=None, tool=r.tool, script=r.command,
                                     source=r.source) for r in self.running}

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


# ---------------------------------------------------------------------------- small helpers
def _in_code_fence(lines: list[str]) -> list[bool]:
    """Which lines are inside a ``` block: quoted source or a sample, not the user's rules."""
    out, inside = [], False
    for line in lines:
        fence = line.lstrip().startswith("```")
        out.append(inside or fence)
        inside = inside != fence
    return out


def _pasted_errors(lines: list[str], fenced: list[bool]) -> list[str]:
    """The error lines (by the output conventions) of a log the user pasted. A line in a ```
    block (`fenced`) or in markup (`<output>…</output>`) is a pasted document's quoted sample, not output."""
    plain = "\n".join("" if f or MARKUP_TAG_RE.search(line) else line.rstrip("\n")
                      for line, f in zip(lines, fenced, strict=True))
    return [line for line, _ in error_findings(plain)]


def condense_user_message(text: str, limit: int) -> str:
    """Cut a long user message to `limit` chars keeping what matters most: its opening (the
    request), its end, and in between the error lines of output the user pasted (by the same
    conventions as a tool's output), then the lines that state a rule ("Always …",
    "do not …", "不要 …"); each cut leaves a marker. A plain middle cut drops the error a pasted
    log reports and the rules of a long brief."""
    if len(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    head_left = limit * 2 // 5  # the opening states the request
    tail_left = limit // 10  # a typed last line is short; a long end is a pasted log's or a footer
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
    fenced = _in_code_fence(lines)
    pasted = _pasted_errors(lines, fenced)
    for i, line in enumerate(lines):  # the pasted errors, in order, while they fit
        if not keep[i] and not fenced[i] and any(e in line for e in pasted) and len(line) + len(CUT_MARKER) + 8 <= left:
            keep[i], left = True, left - len(line) - len(CUT_MARKER) - 8
    for pattern in (RULE_LINE_RE, DIRECTIVE_LINE_RE):  # the rules, then the steps, in order, while they fit
        for i, line in enumerate(lines):
            if not keep[i] and not fenced[i] and pattern.search(line) and len(line) + len(CUT_MARKER) + 8 <= left:
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


def cut_paste(text: str) -> str:
    """A long message that opens with a pasted document (a guide in Markdown, a diff, a log) and
    ends with a short typed instruction ("수정해줘.", "remove that"): the document's first line, the
    error lines it holds (by the output conventions: a pasted log's error is what the user reports),
    a cut marker and the instruction. The document's rules are not the user's (it is the material),
    and quoting them would push out what the user typed; the whole text stays in the history."""
    if len(text) < PASTE_MIN_CHARS or not PASTE_START_RE.match(text):
        return text
    body, sep, typed = text.rstrip().rpartition("\n\n")
    typed = typed.strip()
    if not sep or not typed or len(typed) > TYPED_MAX_CHARS or PASTE_START_RE.match(typed):
        return text
    first, _, rest = body.partition("\n")
    lines = rest.splitlines()
    errors = _pasted_errors(lines, _in_code_fence(lines))[:PASTE_ERRORS_SHOWN]
    if errors:
        return "\n".join([first, CUT_MARKER.format(n=len(rest)), *errors, typed])
    return f"{first}\n{CUT_MARKER.format(n=len(rest))}\n{typed}"


def _add_id(ids: list[str], mid: str) -> bool:
    """Add an id keeping the first one and the newest ones; False when already present."""
    if mid in ids:
        return False
    ids.append(mid)
    if len(ids) > MAX_IDS_PER_FACT:
        del ids[1]
    return True


def _edit_text(edit: tuple[str, str]) -> str:
    old, new = (cut_middle(" ".join(x.split()), EDIT_SIDE_MAX_CHARS) for x in edit)
    return f"{code(old)} → {code(new)}"


# ---------------------------------------------------------------------------- user messages
def is_chitchat(text: str) -> bool:
    """"Thanks. What is still open?", "好的，明天继续。": nothing left once acknowledgements,
    sign-offs and status questions are taken out, so neither a constraint nor a work item."""
    flat = " ".join(text.split())
    return len(flat) <= CHITCHAT_MAX_CHARS and not CHITCHAT_RE.sub("", flat).strip(CHITCHAT_PUNCT)


def is_user_instruction(msg: Message) -> bool:
    """The user's own words: not tool results, not summaries, not harness-injected text, not
    chit-chat."""
    text = msg.user_text.strip()
    return msg.starts_turn and not SLASH_COMMAND_RE.match(text) and not is_chitchat(text)


def is_question(text: str) -> bool:
    """A short message that only asks ("did you push?", "テストは通った？"): no rule in it, and no
    statement before the question ("create pr on x. is there more to commit?" asks for work)."""
    flat = " ".join(text.split())
    pieces = [s for s in SENTENCE_END_RE.split(flat) if s]
    said = [s for s in pieces[:-1] if not s.endswith(QUESTION_ENDINGS) and not is_chitchat(s)
            and len(s.split()) > INTERJECTION_MAX_WORDS]
    return (len(flat) <= QUESTION_MAX_CHARS and flat.endswith(QUESTION_ENDINGS) and not RULE_LINE_RE.search(flat)
            and not REQUEST_OPENER_RE.match(flat) and not said)


def answered_question(messages: list[Message], pos: int) -> bool:
    """messages[pos] only asks ("did you push?") and the assistant replied in words before the
    user's next turn: the answer is in the history, so it is no constraint, and no open work
    unless the turn changed files (workstate)."""
    if not is_question(messages[pos].user_text):
        return False
    for m in messages[pos + 1:]:
        if m.starts_turn:
            return False
        if m.role == "assistant" and m.text.strip():
            return True
    return False


def is_pasted(text: str) -> bool:
    """A message that is mostly something the user pasted: longer than a tight checkpoint shows
    whole, or lines that open as a document does (PASTE_START_RE: a Markdown heading, a fence,
    markup; a one-line "+1, do not …" is typed), so its rule cue words are the document's."""
    return len(text) > USER_MESSAGE_MAX_CHARS or ("\n" in text.strip() and bool(PASTE_START_RE.match(text)))


def user_requests(messages: list[Message]) -> list[tuple[int, Message]]:
    """The user's instructions, in order, with their positions."""
    return [(i, m) for i, m in enumerate(messages) if is_user_instruction(m)]


def budget_user_instructions(items: list[UserInstruction], budget: int = USER_BUDGET_CHARS,
                             per_message: int = USER_MESSAGE_MAX_CHARS) -> tuple[list[UserInstruction], int]:
    """In the given order (rules first, newest first) within `budget` chars; ones longer than
    `per_message` condensed, or than an even share of the budget where that is more (a lone
    task statement crowds out nothing), the oldest with room held for it; returns (kept, omitted)."""
    kept: list[UserInstruction] = []
    per_message = max(per_message, budget // max(1, len(items)))

    def shown(item: UserInstruction, room: int) -> str:
        limit = min(per_message, room)  # condensed to the room, not cut in the middle: a pasted log keeps its errors
        text = condense_user_message(item.text, limit) if len(item.text) > limit else item.text
        return cut_middle(text, room) if len(text) > room else text

    # The task as first stated (the oldest message) is never crowded out by the later ones: up to
    # a FIRST_SHARE of the budget is held for it until its turn in the order.
    first = min(items, key=lambda u: u.seq) if len(items) > 1 else None
    reserve = min(len(shown(first, budget)), budget // FIRST_SHARE) if first is not None else 0
    left, omitted = budget, 0
    for item in items:
        if item is first:
            room, reserve = left, 0
        else:
            room = left - reserve
            if omitted or room < USER_MIN_KEEP_CHARS and len(shown(item, per_message)) > room:
                omitted += 1  # this one and the rest, newer and less urgent, do not fit
                continue
        text = shown(item, room)
        kept.append(dataclasses.replace(item, text=text, cut=item.cut or text != item.text))
        left -= len(text)
    return kept, omitted


# ---------------------------------------------------------------------------- extraction
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


def _name_commit(ledger: Ledger, sha: str, subject: str) -> None:
    """The newest commit known only by this subject (a quiet `git commit -q`) gets the sha git named
    for it, unless a commit with that sha is known already."""
    if any(c.sha == sha for c in ledger.commits):
        return
    pending = next((c for c in reversed(ledger.commits) if c.sha is None and c.text == subject), None)
    if pending is not None:
        pending.sha = sha


def _see_branch(ledger: Ledger, name: str, mid: str, seq: int) -> None:
    """A branch seen at message `mid` (a git command's output, or the harness's record)."""
    branch = next((b for b in ledger.branches if b.name == name), None)
    if branch is None:
        branch = BranchFact(name=name)
        ledger.branches.append(branch)
    _add_id(branch.message_ids, mid)
    branch.last_seq = max(branch.last_seq, seq)


def extract_ledger(messages: list[Message], previous: Ledger | None = None, *, cwd: str | None = None,
                   user_budget_chars: int = USER_LEDGER_CHARS, actions: list[Action] | None = None) -> Ledger:
    """Fold the facts of `messages` into a copy of `previous` (or a new ledger).

    `actions`: `scan_actions(messages, cwd=cwd, running=previous.running_runs())` when the caller has
    it already (the pipeline scans once and hands the same list to the work state)."""
    ledger = Ledger.from_dict(json.loads(json.dumps(previous.to_dict()))) if previous else Ledger()
    # Messages up to the last one already folded in are skipped, so passing an overlapping
    # window (or the whole session again) never counts a fact twice.
    ids = [m.id for m in messages]
    skip = ids.index(ledger.last_message_id) + 1 if ledger.last_message_id in ids else 0
    messages = messages[skip:]
    if messages:
        ledger.last_message_id = messages[-1].id
    base = ledger.seq
    files = {f.path: f for f in ledger.files}
    listed = {f.path for f in ledger.files if f.only_listed}
    if actions is None:
        actions, skip = scan_actions(messages, cwd=cwd, running=ledger.running_runs()), 0
    running = ledger.running_runs()
    for action in actions:
        if action.pos < skip:
            continue  # its outcome was folded in already
        seq = base + action.pos - skip + 1
        mid = action.message_id
        for path, what in action.files:
            if what == "listed":
                if path in files or any(same_file(p, path) for p in files):
                    continue  # a diffstat's name adds nothing to a file the session has met
                listed.add(path)
            elif listed:  # met now: what the session does to it says more than a diffstat named it
                for p in [p for p in listed if same_file(p, path)]:
                    del files[p]
                    listed.discard(p)
            fact = files.setdefault(path, FileFact(path=path))
            if what not in fact.actions:
                fact.actions.append(what)
            if what not in NOT_EDITS or not fact.last_action:  # staging or a diffstat says it changed, not when
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
        for text, further in [(t, False) for t in action.errors] + [(t, True) for t in action.further_errors]:
            probe = ErrorFact(text=text, sources=[action.source], exit_only=action.exit_only, further=further)
            err = _upsert(ledger.errors, probe.key, lambda p=probe: p)
            err.further = err.further and further
            if _add_id(err.message_ids, mid):
                err.attempts += 1
            err.command = action.command
            err.at = action.error_at.get(text) or err.at
            if action.source in err.sources:
                err.sources.remove(action.source)
            err.sources = (err.sources + [action.source])[-MAX_IDS_PER_FACT:]
            err.test_ids = list(dict.fromkeys(err.test_ids + action.test_ids))[-MAX_IDS_PER_FACT:]
            err.resolved, err.resolved_by, err.resolved_by_command = False, None, None
            err.last_seq = max(err.last_seq, seq)
        track_run(running, action)
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
        for sha, subject in action.logged:  # a quiet commit's sha, as a later `git log --oneline` or reset names it
            _name_commit(ledger, sha, subject)
        for number, state, title, url in action.pull_requests:
            pr = _upsert(ledger.pull_requests, PullRequestFact.key_of(number), lambda n=number, st=state: PullRequestFact(n, st))
            pr.title, pr.url = title or pr.title, url or pr.url
            if state == PR_SEEN and pr.message_ids:
                continue  # looking at a pull request changes nothing the session did to it, nor where it did it
            pr.state = state
            _add_id(pr.message_ids, mid)
            pr.last_seq = max(pr.last_seq, seq)
        for name in action.branches:
            _see_branch(ledger, name, mid, seq)

    # The branch the harness recorded the session on (message meta, see formats GIT_BRANCH): the
    # same fact as a `git switch` printing it, from the message where it starts.
    for i, m in enumerate(messages):
        name = m.meta.get(GIT_BRANCH)
        if isinstance(name, str) and name:
            _see_branch(ledger, name, m.id, base + i + 1)

    # User instructions: new ones (newest first) before the carried ones, one per message id.
    known = {u.message_id for u in ledger.user_instructions}
    known_texts = {u.text for u in ledger.user_instructions}
    fresh = [UserInstruction(m.id, text, seq=base + i + 1, asked=answered_question(messages, i))
             for i, m in user_requests(messages)
             if m.id not in known and (text := cut_paste(m.user_text.strip())) not in known_texts]
    # What the user typed before what they pasted (a message longer than a tight checkpoint shows
    # whole: a review, a log, a document, which nearly always holds some rule cue word); within
    # each, messages that state a rule ("do not change …", "不要 …") first, so a budget or a shrunk
    # section drops plain requests (they are also in Progress) before a user's constraint, and
    # answered questions last. Tune half, no model: 8k 201 -> 207 of 447 (16k, 32k equal). A short
    # paste that opens as a document goes with the long ones (tune, 40 files: +4 / +4 / +3, none lost).
    pool = sorted(fresh + ledger.user_instructions,
                  key=lambda u: (is_pasted(u.text), u.asked, not RULE_LINE_RE.search(u.text), -u.seq))
    ledger.user_instructions, omitted = budget_user_instructions(pool, user_budget_chars, USER_LEDGER_MESSAGE_MAX_CHARS)
    ledger.user_instructions_omitted = omitted + (ledger.user_instructions_omitted if previous else 0)

    ledger.seq = base + len(messages)
    ledger.files = sorted(files.values(), key=lambda f: (f.rank, -f.last_seq))[:MAX_FILES]
    # Unresolved first; a real error line above a bare exit status, a run's first lines above its
    # further ones; newest first.
    ranked = sorted(ledger.errors, key=lambda e: (e.resolved, e.exit_only, e.further, -e.last_seq))
    ledger.errors = ([e for e in ranked if not e.resolved][:MAX_UNRESOLVED_ERRORS]
                     + [e for e in ranked if e.resolved][:MAX_RESOLVED_ERRORS])
    if len(ledger.commands) > MAX_COMMANDS:
        # `npm install x` from the start of a session still says how it was set up; a `git status` does not.
        doomed = sorted(ledger.commands, key=lambda c: (not only_looks(c.command), c.last_seq))
        drop = {id(c) for c in doomed[:len(ledger.commands) - MAX_COMMANDS]}
        ledger.commands = [c for c in ledger.commands if id(c) not in drop]
    ledger.commands.sort(key=lambda c: c.last_seq)
    ledger.tallies = sorted(ledger.tallies, key=lambda t: t.last_seq)[-MAX_TALLIES:]
    ledger.commits = sorted(ledger.commits, key=lambda c: c.last_seq)[-MAX_COMMITS:]
    ledger.branches = sorted(ledger.branches, key=lambda b: b.last_seq)[-MAX_BRANCHES:]
    # The ones the session opened, merged or closed outlast those it only worked on.
    kept = sorted(ledger.pull_requests, key=lambda p: (p.state != PR_SEEN, p.last_seq))[-MAX_PULL_REQUESTS:]
    ledger.pull_requests = sorted(kept, key=lambda p: p.last_seq)
    # A run with no command (a cell whose last tool is `apply_patch`) is none a later poll can be known by.
    ledger.running = [RunningRun(run_id, a.tool, a.command, a.source)
                      for run_id, a in running.items() if a.command][-MAX_RUNNING:]
    return ledger
