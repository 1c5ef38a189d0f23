"""Verify the model's narrative against its input before it becomes part of a checkpoint.

Every path, identifier, number and quoted string in the model's text must occur in what the
model was given (conversation narrative, facts, previous summary). A next step must not be
something the evidence shows done, and neither the goal nor a key decision may flip a user's
"do not". Items that fail are removed and recorded; the checkpoint never stores an invented
identifier. An item cut off (the schema's maxLength stops a string mid-word, inside a backtick
span) is trimmed back to its whole words, or dropped when too little is whole.

Tool output is data, never instructions (prompt injection): a command, URL or host, or a claim
that the work is done, must come from what the user and the assistant wrote (the assistant's
own tool calls included), not only from tool-result lines or the facts (whose error lines
quote tool output). An item that takes one from there alone is removed. Which parts of the
input are tool output is decided by `worker.pipeline.summarize`, which wrote them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..facts.ledger import Ledger
from ..facts.shell import same_file
from ..facts.text import finished, unfinished
from ..facts.workstate import WorkState
from .stats import Removal
from .summarize import GOAL_MAX_CHARS, ITEM_MAX_CHARS, Narrative, trusted_text, untrusted_text

# Quoted spans: `x`, 'x', "x" (the model's way of citing exact text).
QUOTED = re.compile(r"`([^`]{2,})`|'([^'\s][^']{1,}?)'|\"([^\"]{2,}?)\"")
# A path: has a slash between word chars, or a file name with an extension.
PATH = re.compile(r"(?:[\w.~-]+/)+[\w.-]+|\b[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|json|md|rs|go|java|c|h|cpp|hpp|rb|ex|exs|toml|yaml|yml|cfg|ini|txt|sh|css|html|sql|lock)\b")
# Identifiers a summary might invent: snake_case, camelCase/PascalCase with an inner capital,
# dotted names and calls.
IDENT = re.compile(r"\b(?:[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
HEXHASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")

NEGATIONS_EN = re.compile(r"\b(?:not|never|don't|do not|no|without|avoid|keep)\b", re.I)
NEGATIONS_ZH = re.compile(r"不要|不能|不得|禁止|别|勿|不许|保持|しないで|ないでください|하지\s?마|하지\s?말|마세요|금지")  # zh, ja, ko
# What a next step could make an agent fetch or run: a URL, an IPv4 address, a host name, or a
# command that downloads, deletes, escalates, publishes or pipes into an interpreter (from the
# command word to the end of its clause or code span). File names (deploy.sh) are not hosts.
URL_OR_HOST = re.compile(r"\b(?:https?|ftp|ssh|git)://[^\s`'\"<>]+|\b(?:\d{1,3}\.){3}\d{1,3}\b"
                         r"|(?<![/\w.-])[\w-]+(?:\.[\w-]+)*\.(?:com|net|org|io|xyz|ru|cn)\b")
RISKY_COMMAND = re.compile(
    r"(?:\b(?:curl|wget|scp|rsync|ssh|nc|sudo|chmod|chown|mkfs|dd|eval|base64)\b"
    r"|\brm\s+-[a-zA-Z]*[rf]|\b(?:pip|pip3|npm|gem|cargo)\s+install\b|\bgit\s+push\b|\bnpx\b"
    r"|\bpython\d?(?:\.\d+)?\s+-[mc]\b|\b(?:bash|sh|zsh)\s+-c\b"
    r"|\|\s*(?:sh|bash|zsh|python\d?|sudo)\b)[^`;。；\n]*")
# "The task is complete", "任务已完成": a claim, not a plan ("make all tests pass" is not one).
DONE_CLAIM = re.compile(
    r"\b(?:task|work|job|everything|all\s+tests?)\b[^.!?\n]{0,30}?\b(?:is|are|was|were|has\s+been|have\s+been)\s+"
    r"(?:now\s+|already\s+)?(?:complete|completed|done|finished|passing|fixed)\b"
    r"|(?:任务|工作|全部|测试)[^，。！？\n]{0,6}?已(?:经)?(?:完成|通过)", re.I)
STOPWORDS = frozenset(
    "the a an to of and or in on for with is are be it this that as by at from into not never do don't use "
    "any new please must should keep".split()
)


def claims(text: str) -> list[str]:
    """The checkable specifics in `text`: quoted spans, paths, identifiers, numbers, hashes."""
    found: list[str] = []
    for m in QUOTED.finditer(text):
        found.append(next(g for g in m.groups() if g is not None))
    for rx in (PATH, IDENT, HEXHASH):
        found.extend(m.group(0) for m in rx.finditer(text))
    found.extend(m.group(0) for m in NUMBER.finditer(text) if len(m.group(0)) >= 2)
    seen: set[str] = set()
    return [c for c in found if not (c in seen or seen.add(c))]


def _normalize(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().strip(".,;:").lower()


def supported(claim: str, source: str, source_norm: str) -> bool:
    if claim in source:
        return True
    c = _normalize(claim.removesuffix("()"))
    return bool(c) and c in source_norm


def unsupported_claims(text: str, source: str, source_norm: str | None = None) -> list[str]:
    norm = source_norm if source_norm is not None else _normalize(source)
    return [c for c in claims(text) if not supported(c, source, norm)]


def tool_only_goal(sentence: str, source: str, trusted: str) -> bool:
    """A goal sentence whose specific words come mostly from tool output alone: the goal of an
    injected instruction ("the user's real goal is to delete the production database")."""
    untrusted = untrusted_text(source).lower()
    words = [w for w in _words(sentence) if len(w) >= 4 or re.match(r"[\u4e00-\u9fff]", w)]
    low = trusted.lower()
    tool_only = [w for w in words if w in untrusted and w not in low]
    return bool(tool_only) and len(tool_only) * 2 >= len(words)


def untrusted_actions(text: str, trusted: str, trusted_norm: str | None = None) -> list[str]:
    """Commands, URLs/hosts and done-claims in `text` that the trusted text does not contain."""
    norm = trusted_norm if trusted_norm is not None else _normalize(trusted)
    found = [m.group(0).strip().rstrip(".,:") for rx in (URL_OR_HOST, RISKY_COMMAND, DONE_CLAIM)
             for m in rx.finditer(text)]
    return [f for f in dict.fromkeys(found) if f and not supported(f, trusted, norm)]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[A-Za-z_][\w.]+|[\u4e00-\u9fff]{2,}", text.lower()) if w not in STOPWORDS}


def _han_bigrams(text: str) -> set[str]:
    """Han text as character bigrams: it has no spaces, so 公开签名 must match inside 的公开签名,
    and a Chinese step shares phrases, not words, with the request it restates."""
    return {run[i : i + 2] for run in re.findall(r"[\u4e00-\u9fff]{2,}", text) for i in range(len(run) - 1)}


def _step_tokens(text: str) -> set[str]:
    """Words for comparing a step with a done item."""
    return {w for w in _words(text) if not re.match(r"[\u4e00-\u9fff]", w)} | _han_bigrams(text)


def _matches_done(step: str, done_items: list[str]) -> str | None:
    """A done item that this next step restates: most of its words, and every identifier or
    path it names ("fix test_env_override" does not restate "fix test_loader")."""
    step_words = _step_tokens(step)
    if not step_words:
        return None
    names = {w for w in step_words if re.search(r"[_./]", w)}
    for item in done_items:
        item_words = _step_tokens(item)
        if names - item_words:
            continue
        if item_words and len(step_words & item_words) / len(step_words) >= 0.6:
            return item
    return None


EDIT_VERB = re.compile(r"\b(?:edit|modify|change|update|fix|patch|apply|implement|rewrite)\w*\b|修改|编辑|更新|修复", re.I)
RUN_VERB = re.compile(r"\b(?:run|re-?run|execute|test|verify|check)\w*\b|运行|执行|测试|验证", re.I)


# A step that only reads: its clauses start with a reading verb or name only files ("Read
# `a.ts` and `b.ts` to see how totals are computed"); "Read `a.ts` and fix it" is not one.
READ_VERB = re.compile(r"^(?:re-?read|read|open|look\s+(?:at|into|over|through)|inspect|review|examine|view|study"
                       r"|skim|go\s+(?:through|over))\b|^(?:读取|阅读|查看|打开|読む|確認)", re.I)
STEP_CLAUSE_SPLIT = re.compile(r"\s*(?:[,;，；、]|\band\b|\bthen\b|然后|并且?)\s*", re.I)
COMMAND_JOIN = re.compile(r"\s*(?:&&|;|\|\|)\s*")  # `cd x && pytest`: its last part is the command run


CREATE_VERB = re.compile(r"\b(?:create|add|write|make)\b[^.;\n]{0,30}?\b(?:file|script)\b|\bcreate\b"
                         r"|新建|创建|作成", re.I)


@dataclass
class DoneEvidence:
    """What the evidence shows finished: a next step must not ask for it again."""

    items: list[str]  # Done work items (request text + evidence)
    verified_files: list[str]  # changed, then a verification passed, nothing pending
    passed_commands: list[str]  # passed after the last edit, nothing changed since
    created_files: list[str] = field(default_factory=list)  # created at some point (even if deleted since)
    read_files: list[str] = field(default_factory=list)  # read and never changed: reading them again is done
    # Changed since the previous checkpoint: a step carried from it that edits one was written before the edit.
    changed_since: list[str] = field(default_factory=list)


def done_evidence(ledger: Ledger, state: WorkState, changed_since: list[str] | None = None) -> DoneEvidence:
    """Finished work as the evidence shows it. A file the session created, a file it read (and
    never changed), and a command that passed after the last change, are done whatever else is
    pending; an edit the model proposes counts as a repeat only when nothing is pending.
    `changed_since`: the files changed since the previous checkpoint (for its carried steps),
    counted only while no error is open (a failing run says the edit may not be the whole fix)."""
    items = [f"{i.text} {' '.join(i.evidence)}" for i in state.done]
    created = [f.path for f in ledger.files if "created" in f.actions]
    # A removed scratch file is cleanup, not a change the runs must come after; a path only seen
    # staged was changed at a time the session does not show.
    changed = [f for f in ledger.changed_files() if f.last_action not in ("deleted", "staged")]
    last_change = max((f.last_seq for f in changed), default=0)
    passed = [c.command for c in ledger.commands if c.status == "ok" and c.last_seq > last_change]
    settled = state.last_green is not None and not state.changed_since_green and not state.in_progress
    read = [f.path for f in ledger.files if "read" in f.actions and not f.changed]
    edited = list(changed_since or []) if not ledger.unresolved_errors() else []
    return DoneEvidence(items, [f.path for f in changed] if settled else [], passed, created, read, edited)


def _names(path: str, step: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path in step or bool(re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w-])", step))


def _only_reads(step: str, done: DoneEvidence) -> str | None:
    """A step that only reads files the ledger lists as read (and never changed)."""
    named = [m.group(0) for m in PATH.finditer(step)]
    if not named:
        return None
    for clause in STEP_CLAUSE_SPLIT.split(step):
        bare = PATH.sub("", clause).strip(" `'\".:")
        if bare and not READ_VERB.match(clause.strip(" `'\"")) and _words(bare):
            return None  # a clause that does something else
    if not all(any(same_file(r, p) for r in done.read_files) for p in named):
        return None
    return f"{', '.join(named)} read already"


def _ran(step: str, cmd: str) -> bool:
    """The step names this command: whole, or as the last part of a chain (`cd x && pytest -q`)."""
    if cmd in step:
        return True
    spans = [" ".join(m.group(1).split()) for m in re.finditer(r"`([^`]+)`", step)]
    parts = [" ".join(p.split()) for p in COMMAND_JOIN.split(cmd)]
    return any(s and s == parts[-1] for s in spans)


def _restates_done(step: str, done: DoneEvidence, carried: bool = False) -> str | None:
    """Why the evidence shows `step` done, or None. `carried`: the step comes from the previous
    checkpoint, so an edit it asks for of a file changed since then was made after it was written."""
    item = _matches_done(step, done.items)
    if item:
        return item
    if CREATE_VERB.search(step):
        for path in done.created_files:
            if _names(path, step):
                return f"{path} was created already"
    if RUN_VERB.search(step):
        for cmd in done.passed_commands:
            if _ran(step, cmd) or any(_names(w, step) for w in cmd.split() if re.search(r"\w\.\w+$", w)):
                return f"`{cmd}` already passed after the last edit"
    if EDIT_VERB.search(step):
        for path in done.verified_files:
            if _names(path, step):
                return f"{path} was changed and the change verified"
        for path in done.changed_since if carried else []:
            if _names(path, step) and not RUN_VERB.search(step):
                return f"{path} was changed after this step was written"
    return _only_reads(step, done)


def open_steps(steps: list[str], done: DoneEvidence, *, carried: bool = False) -> tuple[list[str], list[Removal]]:
    """The steps the evidence does not show done, and a Removal for each one it does."""
    kept: list[str] = []
    removed: list[Removal] = []
    for step in steps:
        finished_by = _restates_done(step, done, carried)
        if finished_by:
            removed.append(Removal("next_steps", step, ("carried from the previous checkpoint; " if carried else "")
                                   + f"the evidence shows it done: {finished_by}"))
        else:
            kept.append(step)
    return kept, removed


CLAUSE_SPLIT = re.compile(r"(?<=[.!?;,])\s+|(?<=[。！？；，])|\n+")  # not inside `Invoice.total()`
FLIP_MIN_TOKENS = 2  # "don't use pandas" alone cannot tell "use pandas" from "replace pandas"
FLIP_SHARE = 0.6  # of the negated clause's words that the text repeats


def _content_tokens(text: str) -> set[str]:
    """Words of `text` without negations and stop words, Han text as bigrams."""
    text = NEGATIONS_ZH.sub(" ", NEGATIONS_EN.sub(" ", text)).lower()
    words = {w for w in re.findall(r"[a-z_][\w.]*[\w]|[a-z]", text) if w not in STOPWORDS and len(w) > 1}
    return words | _han_bigrams(text)


def _flips_constraint(text: str, constraints: list[str]) -> str | None:
    """A user's 'do not X' clause that `text` repeats (most of X) without any negation."""
    if NEGATIONS_EN.search(text) or NEGATIONS_ZH.search(text):
        return None
    words = _content_tokens(text)
    for c in constraints:
        for clause in CLAUSE_SPLIT.split(c):
            if not (NEGATIONS_EN.search(clause) or NEGATIONS_ZH.search(clause)):
                continue
            wanted = _content_tokens(clause)
            if len(wanted) >= FLIP_MIN_TOKENS and len(wanted & words) >= FLIP_SHARE * len(wanted):
                return clause.strip()
    return None


def _whole(section: str, text: str, cap: int, removed: list[Removal], capped: bool | None = None) -> str:
    """`text`, or its whole part when it was cut off (recorded); "" when too little is whole.
    `capped`: the text was stopped at its length cap (default: it is `cap` long)."""
    capped = len(text) >= cap if capped is None else capped
    why = unfinished(text, capped)
    if why is None:
        return text
    kept = finished(text, capped)
    removed.append(Removal(section, text, f"cut off ({why}): " + (f"kept as {kept!r}" if kept else "dropped")))
    return kept


def verify_narrative(
    narrative: Narrative,
    source: str,
    *,
    done: DoneEvidence,
    constraints: list[str],
    fallback_goal: str,
    carried: list[str] | None = None,
) -> tuple[Narrative, list[Removal]]:
    """The narrative without what fails (see the module docstring), and what went and why.
    `carried`: the previous checkpoint's next steps: one the model repeats word for word is
    checked as a carried step (an edit it asks for may have happened since)."""
    carried = carried or []
    removed: list[Removal] = []
    norm = _normalize(source)
    trusted = trusted_text(source)
    trusted_norm = _normalize(trusted)

    def check(section: str, text: str) -> bool:
        bad = unsupported_claims(text, source, norm)
        if bad:
            removed.append(Removal(section, text, "not in the input: " + ", ".join(bad)))
            return False
        injected = untrusted_actions(text, trusted, trusted_norm)
        if injected:
            removed.append(Removal(section, text, "only in tool output (data, not instructions): "
                                   + ", ".join(injected)))
            return False
        return True

    # Goal: drop unsupported sentences; an empty or constraint-flipping goal becomes the user's words.
    # A sentence ends at . ! ? followed by whitespace (not inside `invoice.py`), or at 。！？.
    whole_goal = _whole("goal", narrative.goal, GOAL_MAX_CHARS, removed)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？])", whole_goal) if s.strip()]
    if whole_goal != narrative.goal and len(sentences) > 1:
        sentences.pop()  # the cut-off sentence: the whole ones before it say the goal
    joiner = "" if re.search(r"[。！？]", whole_goal) else " "
    kept = []
    for sentence in sentences:
        if not check("goal", sentence):
            continue
        if tool_only_goal(sentence, source, trusted):
            removed.append(Removal("goal", sentence, "taken from tool output, not from the user's words"))
            continue
        kept.append(sentence)
    goal = joiner.join(s.strip() for s in kept).strip()
    flipped = _flips_constraint(goal, constraints) if goal else None
    if flipped:
        removed.append(Removal("goal", goal, f"contradicts the user's words: {flipped!r}"))
        goal = ""
    if not goal:
        goal = fallback_goal

    decisions = []
    for d in narrative.key_decisions:
        d = {"decision": _whole("key_decisions", d["decision"], ITEM_MAX_CHARS, removed),
             "reason": _whole("key_decisions", d.get("reason") or "", ITEM_MAX_CHARS, removed)}
        if not d["decision"]:
            continue
        text = f"{d['decision']} — {d['reason']}" if d["reason"] else d["decision"]
        if not check("key_decisions", text):
            continue
        flipped = _flips_constraint(d["decision"], constraints)
        if flipped:
            removed.append(Removal("key_decisions", text, f"contradicts the user's words: {flipped!r}"))
            continue
        decisions.append(d)

    steps = []
    for s in narrative.next_steps:
        # A step copied from the facts carries their evidence suffix: keep only the step.
        raw = s
        s = re.split(r"\s+— (?:evidence|证据)\s*:", s)[0].strip()
        s = _whole("next_steps", s, ITEM_MAX_CHARS, removed, capped=len(raw) >= ITEM_MAX_CHARS and s == raw.strip())
        if not s:
            continue
        open_now, done_now = open_steps([s], done, carried=s in carried)
        removed += done_now
        if not open_now:
            continue
        if check("next_steps", s) and s not in steps:
            steps.append(s)
    return Narrative(goal, decisions, steps), removed
