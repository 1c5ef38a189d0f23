"""Work state and next steps from real evidence (issue 12, item 4), on real transcripts.

- `make demo`'s SWE-agent trace (tests/fixtures, NOTICE.md) creates reproduce.py, runs it,
  fixes fields.py, runs it again (345) and deletes it: a next step "Create a new file called
  reproduce.py" or "Run reproduce.py" is stale and must go.
- cc-meow-ja line 1003: the user asks a question the assistant answers in words; it is not
  In Progress.
"""

from __future__ import annotations

from tests.fakes import ScriptedBackend, SessionBuilder, swe_messages
from worker.facts.actions import scan_actions
from worker.facts.ledger import extract_ledger
from worker.facts.workstate import derive_work_state
from worker.pipeline import CompactionConfig, compact
from worker.pipeline.checkpoint import RANK_DETAIL, RANK_RULE, ledger_sections
from worker.pipeline.summarize import Narrative
from worker.pipeline.verify import done_evidence, verify_narrative

STALE = "Create a new file called reproduce.py and paste the example code into it"
RERUN = "Run reproduce.py to check that the output is now 345"
OPEN = "Submit the solution"
QUESTION = "Insights -> Community Standardsで実装できると聞いたのですが、直接作成が正しい手順でしょうか？"


def test_steps_the_swe_trace_shows_done_are_removed():
    messages = swe_messages()
    actions = scan_actions(messages)
    ledger = extract_ledger(messages, actions=actions)
    state = derive_work_state(messages, ledger, actions=actions)
    done = done_evidence(ledger, state)
    assert "reproduce.py" in done.created_files
    source = "\n".join(m.text for m in messages) + "\n" + "\n".join(STALE.split() + RERUN.split() + OPEN.split())
    narrative = Narrative(goal="Fix TimeDelta serialization precision.", next_steps=[STALE, RERUN, OPEN])
    out, removed = verify_narrative(narrative, source, done=done, constraints=[], fallback_goal="g")
    assert out.next_steps == [OPEN]
    reasons = {r.text: r.reason for r in removed}
    assert reasons[STALE] == "the evidence shows it done: reproduce.py was created already"
    assert reasons[RERUN].startswith("the evidence shows it done: `python reproduce.py` already passed")


def test_a_run_before_the_last_change_is_not_done():
    b = SessionBuilder()
    b.user("Fix the precision bug")
    b.call("create", {"path": "reproduce.py", "file_text": "print(1)"}, "File created successfully")
    b.bash("python reproduce.py", "344")
    b.edit("src/marshmallow/fields.py")
    ledger = extract_ledger(b.messages)
    done = done_evidence(ledger, derive_work_state(b.messages, ledger))
    assert done.passed_commands == []  # fields.py changed after the run: running it again is the next step
    assert done.created_files == ["reproduce.py"]


def test_an_answered_question_is_not_in_progress():
    b = SessionBuilder()
    b.user(QUESTION).assistant("はい、直接作成で問題ありません。Community Standards からも同じファイルが作成されます。")
    state = derive_work_state(b.messages, extract_ledger(b.messages))
    # Answered with no change to any file, it is no work item at all: the answer is in the history.
    assert state.in_progress == [] and state.unverified == [] and state.done == []
    # Answered with an edit in the turn, the question asked for work like any other request.
    b3 = SessionBuilder()
    b3.user(QUESTION)
    b3.edit("CODE_OF_CONDUCT.md")
    b3.assistant("作成しました。")
    state3 = derive_work_state(b3.messages, extract_ledger(b3.messages))
    assert [i.text for i in state3.in_progress] == [QUESTION]
    # Unanswered, the same question is the open item.
    b2 = SessionBuilder()
    b2.user(QUESTION)
    state2 = derive_work_state(b2.messages, extract_ledger(b2.messages))
    assert [i.text for i in state2.in_progress] == [QUESTION]


def test_an_answered_question_is_the_users_concern_kept_after_what_they_told():
    # cc-chkit (tune half) opens with "why is this PR failing?": the task, however it is worded.
    b = SessionBuilder()
    b.user("why is this PR failing?").assistant("The typecheck runs before the build.")
    b.user("yes please fix them")
    b.edit("tsconfig.json")
    b.user(QUESTION).assistant("はい、直接作成で問題ありません。")
    ledger = extract_ledger(b.messages)
    asked = {u.text: u.asked for u in ledger.user_instructions}
    assert asked == {"why is this PR failing?": True, "yes please fix them": False, QUESTION: True}
    # The budget drops questions first (newest first, as every list of the user's words).
    assert [u.text for u in ledger.user_instructions][1:] == [QUESTION, "why is this PR failing?"]
    quotes = {b.quote[0]: b.rank for b in ledger_sections(ledger)["Constraints & Preferences"].blocks[0].bullets}
    # The opening question is the task, ranked with the rules; a later one with the details.
    assert quotes == {"why is this PR failing?": RANK_RULE, "yes please fix them": RANK_RULE, QUESTION: RANK_DETAIL}
    for k in range(8):  # a history longer than the window: the opening turns are summarized
        b.bash(f"cat log{k}.txt", "line of build output\n" * 400)
    b.user("thanks").assistant("Done.")
    result = compact(b.build(), ScriptedBackend(), CompactionConfig(context_limit=8192, use_model=False, explicit=True))
    assert result.checkpoint.summary_text.split("## Goal\n", 1)[1].startswith("why is this PR failing?")
