"""Work state from evidence: Done / In Progress / Blocked, decided by rules, never by the model.

Small models call pending work done. Here a user request is Done only when the messages show
evidence after the last edit of the files its turn touched: a passing verification run (test,
type check, build, script) or a commit. The last request without such evidence is In
Progress; an unresolved error that failed repeatedly with no edit after its last failure is
Blocked. Every item carries the evidence (message ids, commands, outputs) it stands on.
Beside them, in the agent's own words: its reports at its turns' ends, and the plans the user
approved. The Progress section that shows it is rendered by `worker.pipeline.checkpoint`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..session import Message
from .actions import Action, reruns, scan_actions
from .ledger import Ledger, answered_question, cut_paste, user_requests
from .shell import WINDOWS_DRIVE_RE, cut_command, publishes
from .text import CITED_COMMAND_MAX_CHARS, SENTENCE_END_RE, code, command_line, command_result, cut_end

MAX_DONE = 8  # the newest finished requests; older ones are history
MAX_IN_PROGRESS = 5  # the last request plus a few unverified edits before it
MAX_BLOCKED = 5
REQUEST_TEXT_MAX_CHARS = 160  # the item names the request; the full text is in the ledger
# What the agent told the user at the end of a turn ("Done: … merged as 7acea04, kept X because
# Y"): its own account of outcomes and decisions, which a checkpoint without a model has no
# other words for. The checkpoint shows its opening, and the rest where the facts leave room.
MAX_REPORTS = 20  # newest first; they fill only the room the facts leave (tune, no model: 12 -> 20: 16k, 32k +1; 30 no more)
REPORT_MAX_CHARS = 4_000  # longer is a document the agent wrote, which the history has (tune, no model: 32k 2,000 -> 4,000 +2)
# A plan the agent puts to the user, who approves or rejects it before any edit: the design both
# agreed on, in the agent's words. Claude Code's ExitPlanMode records the plan's markdown as `plan`
# (its input schema; from 2.1 the tool reads it from the plan file, and the transcript still records
# it there: cc-ccbackend 2.1.84, cc-wakil 2.1.211); the user's rejection comes back as an error
# result ("The user doesn't want to proceed with this tool use…"), an approval as "User has approved
# your plan…" (@anthropic-ai/claude-code's result strings).
PLAN_TOOLS = {"ExitPlanMode": "plan"}  # tool name: the argument holding the plan
BLOCKED_MIN_ATTEMPTS = 2  # one failure is a step; the same failure twice with no fix is stuck
# A sentence of a request that puts part of it off ("We'll handle active session … later."): when
# the turn is Done, that part is not; it stays open work, in the user's words. "later" ends its
# clause ("the later call" defers nothing).
DEFERRED_RE = re.compile(r"\blater(?: on)?(?=\s*(?:[.!?,;)]|$))|\b(?:next time|in a follow[- ]up|in a separate "
                         r"(?:pr|change|commit|task))\b|以后|稍后|之后再|下次|後で|あとで|後ほど|今度|나중에|다음에",
                         re.IGNORECASE)
# A typed request; in a long brief or a pasted document "later" or "push" is its content, not what it asks.
TYPED_REQUEST_MAX_CHARS = 500
# A request that asks for its work to be pushed or published ("commit and push", "open a PR", "…commit,
# push,publishしてください"): a commit or a green run is not that. It is Done only once a run after its
# last edit published (shell.publishes: `git push`, `gh pr create`, `npm publish`, …, or a pull request
# a GitHub tool opened); else it stays In Progress (tune: cc-tij-ja's v0.4.6, committed, "not yet
# pushed or published"). A request for a pull request needs one opened: a push is not it. Where its
# turn edits nothing ("push it and create a PR"), the run that published is its evidence: there is
# nothing else for a test or a commit to show. "Don't push" asks for nothing, and "push" asks only as
# a verb: before its object, a particle or the end ("push the changes", "push to the branch",
# "commit,push,publishして"), not before a noun ("the push handler"); after a kana it is a word too
# (`コミットしてpushして`), so the start is "no Latin letter before", not \b.
PUBLISH_VERB = (r"(?<![A-Za-z])(?:push|publish)(?=\s*(?:$|[,.;:!?)]|[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]|(?:it|them|this|that|to|up"
                r"|origin|and|the|your|my|our|all|everything|again|now)\b))")
PR_REQUEST = r"\b(?:open|create|make|raise|submit)\b\W+(?:\w+\W+){0,3}?(?:PR|pull request)s?\b"
PR_REQUEST_RE = re.compile(PR_REQUEST, re.IGNORECASE)
PUBLISH_REQUEST_RE = re.compile(PUBLISH_VERB + "|" + PR_REQUEST + r"|プッシュ|推送|푸시|发布|發布", re.IGNORECASE)
NO_PUBLISH_RE = re.compile(r"\b(?:don'?t|do not|never|without|no need to)\W+(?:\w+\W+){0,2}?(?:push|publish)\b"
                           r"|(?:push|publish|プッシュ)\s*[はを]?\s*(?:しない|せず|不要)"  # ja: pushしないで
                           r"|(?:不要|别|不用|先不|暂不)\s*(?:推送|发布|push|publish)"  # zh: 先不要推送
                           r"|(?:push|푸시)\s*(?:는|를)?\s*하지\s*(?:마|말)", re.IGNORECASE)  # ko: 푸시하지 마세요
# Documentation no test or build checks: an applied edit is all the evidence there will be
# (without this an earlier README request stays In Progress forever) -- unless the session commits
# its work: there a documentation edit no commit took is still to commit (tune: two such requests
# the facts list as open, "written ... not committed", were called done).
DOC_FILE_RE = re.compile(r"(?:^|/)(?:README|CHANGELOG|CHANGES|NEWS|HISTORY|AUTHORS|CONTRIBUTING|LICENSE|NOTICE)"
                         r"(?:\.\w+)?$|\.(?:md|markdown|rst|txt|adoc)$|(?:^|/)docs?/", re.IGNORECASE)


@dataclass
class WorkItem:
    text: str
    evidence: list[str] = field(default_factory=list)  # "`cmd` → 345 (m00023)", message ids, facts
    message_id: str | None = None  # the request (or the error's last occurrence)


@dataclass
class WorkState:
    done: list[WorkItem] = field(default_factory=list)  # newest first
    in_progress: list[WorkItem] = field(default_factory=list)  # newest first
    blocked: list[WorkItem] = field(default_factory=list)
    # Earlier requests with no edits and no evidence either way (questions, reads): not rendered.
    unverified: list[WorkItem] = field(default_factory=list)
    changed_since_green: list[str] = field(default_factory=list)  # paths edited after the last green run
    last_green: str | None = None  # evidence line of the last passing verification run
    reports: list[WorkItem] = field(default_factory=list)  # the agent's turn-end messages, newest first
    # Paths changed after the session's last commit, where it commits (a commit after an edit may
    # not take it, but one before it cannot have): work still to commit.
    uncommitted: list[str] = field(default_factory=list)
    plans: list[WorkItem] = field(default_factory=list)  # the plans the user approved (PLAN_TOOLS), newest first

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkState:
        def items(key: str) -> list[WorkItem]:
            return [WorkItem(**i) for i in data.get(key) or []]

        return cls(items("done"), items("in_progress"), items("blocked"), items("unverified"),
                   list(data.get("changed_since_green") or []), data.get("last_green"), items("reports"),
                   list(data.get("uncommitted") or []), items("plans"))


def request_text(text: str) -> str:
    flat = " ".join(text.split())
    return cut_end(flat, REQUEST_TEXT_MAX_CHARS)


def split_deferred(text: str) -> tuple[str, str]:
    """(the sentences of a request to do now, the ones it puts off). Nothing put off, or all of
    it (then the request itself is for later): (the request, "")."""
    if len(text) > TYPED_REQUEST_MAX_CHARS:
        return text, ""
    sentences = [s.strip() for s in SENTENCE_END_RE.split(text) if s.strip()]
    later = [s for s in sentences if DEFERRED_RE.search(s)]
    if not later or len(later) == len(sentences):
        return text, ""
    return " ".join(s for s in sentences if s not in later), " ".join(later)


def _is_edit(action: Action, scratch: set[str]) -> bool:
    # Removing a scratch file the session itself created (a reproduce script) is cleanup, not work.
    return any(not (what == "deleted" and path in scratch) for path, what in action.changes)


def _evidence_line(action: Action, cite: dict[str, str]) -> str:
    mid = cite.get(action.message_id, action.message_id)
    if action.commits:
        sha, subject, _ = action.commits[0]
        return f"commit {code(sha) + ' ' if sha else ''}{code(subject)} ({mid})"
    command = cut_command(command_line(action.command or ""), CITED_COMMAND_MAX_CHARS)  # tune, no model: 8k 412 -> 414
    tally = next((t for t, _ in action.tallies), None)
    if tally and action.output is None:
        return f"{code(command)} → {code(tally)} ({mid})"
    return f"{command_result(action, command=command)} ({mid})"


def _is_evidence(action: Action) -> bool:
    return action.has_result and action.passed and (action.verifies or bool(action.commits))


def _find_evidence(actions: list[Action], turn_start: int, start: int, files: set[str],
                   scratch: set[str]) -> Action | None:
    """The first passing verification or commit after `start` with no edit of `files` before it
    that also re-runs every verification that failed since the request (`turn_start`): a green
    unrelated test is no evidence for a test still failing."""
    failures: list[Action] = []  # failed since the request, not yet passed again
    for action in actions:
        if action.pos <= turn_start:
            continue
        if action.verifies and action.has_result:
            if not action.passed:
                failures.append(action)
                continue
            failures = [f for f in failures if not reruns(action.source, f.source)]
        if action.pos <= start:
            continue
        if _is_edit(action, scratch) and any(p in files for p, _ in action.changes):
            start = action.pos  # edited again: evidence must come after this edit
            continue
        if _is_evidence(action) and action.pos > start and not failures:
            return action
    return None


def _changed_after(actions: list[Action], pos: int, scratch: set[str]) -> list[str]:
    """The paths the edits after message `pos` changed, each once, in the order first changed."""
    changed: list[str] = []
    for a in actions:
        if a.pos > pos and _is_edit(a, scratch):
            changed += [p for p, _ in a.changes if p not in changed]
    return changed


def _asks_to_publish(words: str) -> bool:
    return (len(words) <= TYPED_REQUEST_MAX_CHARS and bool(PUBLISH_REQUEST_RE.search(words))
            and not NO_PUBLISH_RE.search(words))


def _opened_pr(action: Action) -> bool:
    return action.has_result and action.status != "failed" and any(
        st in ("opened", "merged") for _, st, _, _ in action.pull_requests)


def _published(action: Action) -> bool:
    """A run that published: pushed, opened or merged a pull request, released (one still running has not)."""
    return _opened_pr(action) or (action.has_result and action.status == "ok"
                                  and action.command is not None and publishes(action.command))


def _publishing_proof(words: str) -> Callable[[Action], bool]:
    """What shows a publish request done: a pull request opened where it asks for one, else any publish."""
    return _opened_pr if PR_REQUEST_RE.search(words) else _published


def _in_repository(path: str) -> bool:
    """A path git can hold: the ledger makes the paths under the session's cwd relative, so an
    absolute or home path (a plan under ~/.claude, a cache) is outside the repository."""
    return not path.startswith(("/", "~")) and not WINDOWS_DRIVE_RE.match(path)


def _docs_applied(edits: list[Action]) -> bool:
    """Every change is to documentation and every edit was applied (its result is not an error)."""
    return all(a.has_result and a.status != "failed" and all(DOC_FILE_RE.search(p) for p, _ in a.changes)
               for a in edits)


def derive_work_state(messages: list[Message], ledger: Ledger, *, cwd: str | None = None,
                      actions: list[Action] | None = None, cite: dict[str, str] | None = None) -> WorkState:
    """`actions`: `scan_actions(messages, cwd=cwd)` when the caller has it already; `cite`: how
    evidence names a message id (session.cited_ids; whole by default)."""
    cite = cite or {}
    if actions is None:
        actions = scan_actions(messages, cwd=cwd)
    scratch = {p for a in actions for p, w in a.files if w == "created"} & {
        p for a in actions for p, w in a.files if w == "deleted"}
    state = WorkState()
    requests = user_requests(messages)
    last_turn = max((i for i, m in enumerate(messages) if m.starts_turn), default=-1)  # chit-chat too
    commits_work = any(a.commits for a in actions)
    for k, (pos, msg) in enumerate(requests):
        end = requests[k + 1][0] if k + 1 < len(requests) else len(messages)
        turn = [a for a in actions if pos < a.pos < end]
        edits = [a for a in turn if _is_edit(a, scratch)]
        if not edits and answered_question(messages, pos):
            continue  # a question the assistant answered: not work in progress
        words = cut_paste(msg.user_text.strip())  # a pasted document is named by its title and instruction
        proves_publish = _publishing_proof(words) if _asks_to_publish(words) else None
        item = WorkItem(text=request_text(words), message_id=msg.id)
        if edits:
            files = {p for a in edits for p, _ in a.changes}
            proof = _find_evidence(actions, pos, edits[-1].pos, files, scratch)
            # The last request may still be being written; once the user speaks again it is done.
            if proof is None and pos < last_turn and not commits_work and _docs_applied(edits):
                paths = ", ".join(code(p) for p in sorted(files)[:3])
                item.evidence.append(f"edited {paths} ({cite.get(edits[-1].message_id, edits[-1].message_id)}); "
                                     "documentation, no run checks it")
                state.done.append(item)
                continue
        else:
            proof = next((a for a in turn if _is_evidence(a)), None)
            if proof is None and proves_publish:  # "push it", "open a PR": the push, the PR is the proof
                proof = next((a for a in turn if proves_publish(a)), None)
        is_last = k == len(requests) - 1
        if proof is not None:
            # A later failing run in the same turn outweighs an earlier green one (the last request's;
            # an earlier one's user spoke again); so does a commit that failed and none that took it.
            later = [a for a in turn if is_last and a.pos > proof.pos and a.verifies and a.has_result and not a.passed]
            refused = [a for a in turn if a.pos > proof.pos and a.commit_refused]
            if refused and not any(a.commits for a in turn if a.pos > refused[-1].pos):
                later.append(refused[-1])
            if later:
                failed = max(later, key=lambda a: a.pos)
                item.evidence.append(f"green {_evidence_line(proof, cite)}, then failed {_evidence_line(failed, cite)}")
                state.in_progress.append(item)
                continue
        after = edits[-1].pos if edits else pos
        if proof is not None and proves_publish and not any(a.pos > after and proves_publish(a) for a in actions):
            missing = "no pull request opened" if proves_publish is _opened_pr else "nothing pushed or published"
            item.evidence.append(f"{_evidence_line(proof, cite)}; {missing} after it")
            state.in_progress.append(item)
            continue
        if proof is not None:
            item.evidence.append(_evidence_line(proof, cite))
            state.done.append(item)
            done_now, later = split_deferred(words)
            if later:
                item.text = request_text(done_now)
                state.in_progress.append(WorkItem(text=request_text(later), message_id=msg.id,
                                                  evidence=["deferred by the user; not started"]))
            continue
        if edits:
            last = edits[-1]
            paths = ", ".join(code(p) for p, _ in last.changes[:3])
            edit_id = last.call_message_id or last.message_id
            item.evidence.append(f"last edit {paths} ({cite.get(edit_id, edit_id)}); "
                                 "no passing run or commit after it")
        failing = [a for a in turn if a.has_result and a.status == "failed" and a.command]
        if failing:
            item.evidence.append(_evidence_line(failing[-1], cite))
        if not item.evidence:
            item.evidence.append("no verification or commit after the request")
        if is_last or edits:
            state.in_progress.append(item)
        else:
            state.unverified.append(item)

    state.blocked = _blocked(actions, ledger, cite)
    greens = [a for a in actions if a.verifies and a.has_result and a.passed]
    last_green_pos = greens[-1].pos if greens else -1
    if greens:
        state.last_green = _evidence_line(greens[-1], cite)
    state.changed_since_green = _changed_after(actions, last_green_pos, scratch)
    # The repository's open work: what no commit has taken yet. A commit (this window's or one a
    # carried ledger holds, made before every edit in it) or a known branch says the files are in
    # git; then every change after the last commit, or since the session began, is uncommitted.
    if ledger.commits or ledger.branches:
        last_commit = max((a.pos for a in actions if a.commits), default=-1)
        state.uncommitted = [p for p in _changed_after(actions, last_commit, scratch)
                             if p not in scratch and _in_repository(p)]

    state.reports = turn_reports(messages)
    state.plans = approved_plans(messages)
    state.done = state.done[::-1][:MAX_DONE]
    state.in_progress = state.in_progress[::-1][:MAX_IN_PROGRESS]
    state.unverified = state.unverified[::-1]
    return state


def turn_reports(messages: list[Message]) -> list[WorkItem]:
    """The assistant's last words of each turn (its text before the user spoke again, or the
    session ended), newest first, each cut to REPORT_MAX_CHARS."""
    out: list[WorkItem] = []
    last: Message | None = None
    for m in [*messages, None]:
        if m is None or m.starts_turn:
            if last is not None:
                out.append(WorkItem(text=cut_end(last.text.strip(), REPORT_MAX_CHARS), message_id=last.id))
            last = None
        elif m.role == "assistant" and m.text.strip() and not m.is_summary:
            last = m
    return out[::-1][:MAX_REPORTS]


def approved_plans(messages: list[Message]) -> list[WorkItem]:
    """The plans the agent put to the user and the user approved (PLAN_TOOLS: a result that is
    not an error), newest first, each cut to REPORT_MAX_CHARS."""
    approved = {r.call_id for m in messages for r in m.tool_results if not r.is_error}
    out = [WorkItem(text=cut_end(plan.strip(), REPORT_MAX_CHARS), message_id=m.id)
           for m in messages if m.role == "assistant" for c in m.tool_calls
           if c.name in PLAN_TOOLS and c.id in approved
           for plan in [c.argument_dict().get(PLAN_TOOLS[c.name])] if isinstance(plan, str) and plan.strip()]
    return out[::-1][:MAX_REPORTS]


def _blocked(actions: list[Action], ledger: Ledger, cite: dict[str, str]) -> list[WorkItem]:
    """Unresolved errors seen at least twice with no edit after their last occurrence."""
    pos_of = {a.message_id: a.pos for a in actions}
    edit_positions = [a.pos for a in actions if a.changes]
    out: list[WorkItem] = []
    for err in ledger.unresolved_errors():
        if err.attempts < BLOCKED_MIN_ATTEMPTS or err.exit_only or err.further:
            continue
        last = max((pos_of[m] for m in err.message_ids if m in pos_of), default=-1)
        if any(p > last for p in edit_positions):
            continue  # someone is still working on it
        src = f"{code(command_line(err.command))} " if err.command else ""
        ids = ", ".join(cite.get(m, m) for m in err.message_ids[-3:])
        evidence = [f"{src}failed {err.attempts}× ({ids})", "no edit since"]
        out.append(WorkItem(text=code(err.text), evidence=evidence, message_id=err.message_ids[-1]))
    return out[:MAX_BLOCKED]


__all__ = ["WorkItem", "WorkState", "approved_plans", "derive_work_state", "request_text", "split_deferred"]
