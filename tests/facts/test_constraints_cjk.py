"""A user's constraint in Chinese, Japanese or Korean, with no English cue word, is a rule.

The messages are the users' own words from the real transcripts (cc-meow-ja, cc-agentstuff-ko;
NOTICE.md), plus the prohibition forms no fixture happens to hold.
"""

from __future__ import annotations

import pytest

from tests.fakes import SessionBuilder
from worker.facts.ledger import RULE_LINE_RE, condense_user_message, extract_ledger

# cc-meow-ja lines 91, 634 and 346: two rules and a plain statement of fact.
JA_RULE_1 = ".github/PULL_REQUEST_TEMPLATE.md は、~/projects/135yshr/documents/articles/499cd6335b5fa6.md のルールを追加してください"
JA_RULE_2 = "１つ１つ修正してください"
JA_FACT = "https://github.com/135yshr/meow/pull/45 でリントエラーが発生しています"
# cc-agentstuff-ko lines 167 and 489: the deletion request, and the commit request.
KO_RULE = "@docs/guides/interaction-modes.md 는 삭제해줘. 연관된 문서가 있으면 삭제해줘."
KO_COMMIT = "지금까지 수정한 내용에 대해서 정리해서 커밋해줘."


@pytest.mark.parametrize("text", [
    JA_RULE_1, JA_RULE_2, KO_RULE, KO_COMMIT,
    # Not from a fixture: the prohibition forms (ja しないで/しないこと, ko 하지 마, zh 不要/禁止).
    "この関数は変更しないでください", "テストファイルは削除しないこと", "main 브랜치에 직접 푸시하지 마",
    "不要修改 tests/ 目录", "禁止使用 pandas",
])
def test_cjk_rules_are_recognised(text):
    assert RULE_LINE_RE.search(text)


@pytest.mark.parametrize("text", [JA_FACT, "isago@oreha.dev が正しいメールアドレスです", "테스트가 통과했습니다"])
def test_statements_are_not_rules(text):
    assert not RULE_LINE_RE.search(text)


def test_rules_rank_before_plain_words_and_survive_a_small_budget():
    b = SessionBuilder()
    for text in (JA_RULE_2, KO_RULE, JA_FACT):  # the plain statement is the newest
        b.user(text).assistant("了解しました")
    ledger = extract_ledger(b.messages, user_budget_chars=len(JA_RULE_2) + len(KO_RULE) + 10)
    assert [u.text for u in ledger.user_instructions] == [KO_RULE, JA_RULE_2]
    assert ledger.user_instructions_omitted == 1


def test_pasted_documents_are_kept_as_their_typed_instruction():
    """cc-agentstuff-ko: the user pasted fifteen guide documents (1-18k chars each, full of
    "must"/"Don't", each ending in 수정해줘.) after the approved plan. Quoted, they filled the
    budget and pushed out the typed 삭제해줘 and the plan's steps; a pasted document is now its
    first line, a cut marker and the instruction typed after it, and the plan keeps its steps."""
    from pathlib import Path

    from worker.formats import claude_code

    session = claude_code.load(Path(__file__).parents[1] / "fixtures/cc-agentstuff-ko_2b3756eb-8c69-4980-ac0a-8d2c534931d8.jsonl")
    ledger = extract_ledger(session.messages)
    kept = {u.message_id: u.text for u in ledger.user_instructions}
    assert KO_RULE in kept.values() and KO_COMMIT in kept.values()
    assert ledger.user_instructions_omitted == 0
    pasted = [t for t in kept.values() if t.startswith("# Project Integration")]
    assert len(pasted) == 1 and pasted[0].endswith("\n수정해줘") and "chars cut" in pasted[0] and len(pasted[0]) < 80
    plan = kept[session.messages[0].id]
    for step in ("Add Korean `description` (within 200 char limit)",
                 "Set CalVer `version: 2026.02.0` (February 2026 migration, patch 0)",
                 "from XML metadata format to YAML front matter format following `spec-design/common-template.md`"):
        assert step in plan


def test_a_long_message_keeps_its_japanese_rule_line_when_cut():
    filler = "\n".join(f"ログ {i}: 処理中の出力がここに続きます。" for i in range(80))
    text = "リリース前の確認です。\n" + filler[:1200] + "\n" + JA_RULE_2 + "\n" + filler[1200:] + "\n以上です。"
    cut = condense_user_message(text, 600)
    assert JA_RULE_2 in cut and "リリース前の確認です。" in cut and len(cut) < len(text)


def test_a_request_phrased_as_a_question_is_still_a_request():
    """codex-simonw's only prompt: "can you analyse the MD files …?" asks for work, and its answer
    is that work; "did you push?" only asks."""
    from worker.facts.ledger import is_question

    assert not is_question("can you analyse the MD files in this directory and determine if the info we have is "
                           "clear enough to start planning the migration?")
    assert not is_question("Could you add a test for parse()?")
    assert is_question("did you push?")
