"""Verification of the model's narrative: invented specifics, done work, flipped constraints."""

from __future__ import annotations

from worker.facts.text import code_spans
from worker.pipeline.summarize import GOAL_MAX_CHARS, ITEM_MAX_CHARS, Narrative, detect_language
from worker.pipeline.verify import DoneEvidence, claims, unsupported_claims, verify_narrative

SOURCE = (
    "[user] Fix the rounding bug in src/billing/invoice.py. Do not change the public signature of Invoice.total().\n"
    "[tool call bash] {\"command\": \"pytest tests/test_invoice.py\"}\n"
    "[tool result bash] E       AssertionError: assert Decimal('58.4730') == Decimal('58.47')\n"
    "[assistant] I will call quantize_cents() instead of round()."
)
NOTHING_DONE = DoneEvidence([], [], [])


def test_claims_cover_paths_identifiers_numbers_and_quotes():
    found = claims("Edit `src/billing/money.py` so quantize_cents() returns Decimal('58.47') after 3 tries in 2024")
    assert "src/billing/money.py" in found
    assert "quantize_cents()" in found
    assert "58.47" in found and "2024" in found


def test_invented_identifier_is_removed_and_recorded():
    n = Narrative(
        goal="Fix the rounding bug in src/billing/invoice.py.",
        key_decisions=[{"decision": "Use quantize_cents()", "reason": "round() uses banker's rounding"},
                       {"decision": "Patch src/billing/tax_rules.py", "reason": "tax is wrong"}],
        next_steps=["Run `pytest tests/test_invoice.py`", "Update CHANGELOG_v2.md"],
    )
    out, removed = verify_narrative(n, SOURCE, done=NOTHING_DONE, constraints=[], fallback_goal="g")
    assert out.goal == "Fix the rounding bug in src/billing/invoice.py."  # a path is not a sentence end
    assert [d["decision"] for d in out.key_decisions] == ["Use quantize_cents()"]
    assert out.next_steps == ["Run `pytest tests/test_invoice.py`"]
    reasons = {r.text: r.reason for r in removed}
    assert "src/billing/tax_rules.py" in reasons["Patch src/billing/tax_rules.py — tax is wrong"]
    assert "CHANGELOG_v2.md" in reasons["Update CHANGELOG_v2.md"]
    kept = [out.goal, *out.next_steps] + [f"{d['decision']} — {d['reason']}" for d in out.key_decisions]
    for text in kept:
        assert unsupported_claims(text, SOURCE) == [], text


def test_next_step_the_evidence_shows_done_is_removed():
    done = DoneEvidence(["Fix the rounding bug evidence: `pytest tests/test_invoice.py` → 7 passed"],
                        ["src/billing/invoice.py"], ["pytest tests/test_invoice.py"])
    n = Narrative(goal="Fix the rounding bug.", next_steps=[
        "Edit invoice.py to use quantize_cents()",
        "Run pytest tests/test_invoice.py again",
        "Ask the user whether Invoice.total() may change — evidence: no verification",
    ])
    out, removed = verify_narrative(n, SOURCE + " Ask the user whether", done=done, constraints=[], fallback_goal="g")
    assert out.next_steps == ["Ask the user whether Invoice.total() may change"]
    assert len(removed) == 2 and all("done" in r.reason for r in removed)


def test_chinese_step_restating_a_done_request_is_removed_but_another_test_is_not():
    done = DoneEvidence(["先放一放。请在 README.md 里补充一段说明：空的配置文件会使用默认值。 edited `README.md` (m00025)",
                         "修复 tests/test_loader.py 的测试 `pytest tests/test_loader.py` → `9 passed` (m00010)"], [], [])
    src = "[user] 请在 README.md 里补充说明。修复 tests/test_loader.py 和 tests/test_env.py 的测试。"
    n = Narrative(goal="修复测试。", next_steps=["在 README.md 中补充说明空配置文件会使用默认值",
                                               "修复 tests/test_env.py 的测试"])
    out, removed = verify_narrative(n, src, done=done, constraints=[], fallback_goal="g")
    assert out.next_steps == ["修复 tests/test_env.py 的测试"]  # names a file no done item names
    assert [r.text for r in removed] == ["在 README.md 中补充说明空配置文件会使用默认值"]


def test_goal_that_flips_a_users_do_not_falls_back_to_the_users_words():
    n = Narrative(goal="Change the public signature of Invoice.total() to fix rounding.")
    user = "Fix the rounding bug. Do not change the public signature of Invoice.total()."
    out, removed = verify_narrative(n, SOURCE, done=NOTHING_DONE, constraints=[user], fallback_goal=user)
    assert out.goal == user
    assert removed[0].section == "goal" and "contradicts" in removed[0].reason


def test_key_decision_that_flips_a_users_do_not_is_removed():
    user = ("The totals are off by a cent. Do not change the public signature of Invoice.total(), "
            "three services call it positionally.")
    n = Narrative(goal="Fix the rounding bug.", key_decisions=[
        {"decision": "Change the public signature of Invoice.total()", "reason": "to pass the rounding mode"},
        {"decision": "Call quantize_cents() instead of round()", "reason": "keep Invoice.total() unchanged"},
    ])
    out, removed = verify_narrative(n, SOURCE, done=NOTHING_DONE, constraints=[user], fallback_goal="g")
    assert [d["decision"] for d in out.key_decisions] == ["Call quantize_cents() instead of round()"]
    assert removed[0].section == "key_decisions"
    assert "Do not change the public signature of Invoice.total()" in removed[0].reason


def test_chinese_key_decision_that_flips_a_users_do_not_is_removed():
    user = "config/loader.py 读取空文件时崩溃，请修复。不要修改 parse_config() 的公开签名，也不要引入新的依赖。"
    src = f"[user] {user}\n[assistant] 我决定在 parse_config() 内部改用 yaml.safe_load(f) or {{}}。"
    n = Narrative(goal="修复 config/loader.py 读取空文件时的崩溃。", key_decisions=[
        {"decision": "修改 parse_config() 的公开签名", "reason": "在 parse_config() 内部改用 yaml.safe_load(f) or {}"},
        {"decision": "在 parse_config() 内部改用 yaml.safe_load(f) or {}", "reason": ""},
    ])
    out, removed = verify_narrative(n, src, done=NOTHING_DONE, constraints=[user], fallback_goal="g")
    assert [d["decision"] for d in out.key_decisions] == ["在 parse_config() 内部改用 yaml.safe_load(f) or {}"]
    assert [r.section for r in removed] == ["key_decisions"] and "contradicts" in removed[0].reason


def test_chinese_goal_keeps_its_sentences():
    src = "[user] 请修复 scripts/load_config.py 的启动错误。不要引入新的依赖。"
    n = Narrative(goal="修复 scripts/load_config.py 的启动错误。不要引入新的依赖。")
    out, removed = verify_narrative(n, src, done=NOTHING_DONE, constraints=[], fallback_goal="g")
    assert out.goal == n.goal and removed == []


def test_language_detection():
    from tests.fakes import SessionBuilder

    assert detect_language(SessionBuilder().user("请帮我修复这个错误：ModuleNotFoundError").build().messages) == "zh"
    assert detect_language(SessionBuilder().user("このエラーを直してください：ModuleNotFoundError").build().messages) == "ja"
    assert detect_language(SessionBuilder().user("Please fix ModuleNotFoundError").build().messages) == "en"


def test_items_the_schema_cut_off_are_trimmed_to_whole_words_or_dropped():
    """The schema's maxLength stops a string mid-word, inside a backtick span (issue 23): no stump
    reaches the checkpoint, and each trim is recorded."""
    src = SOURCE + "\n[assistant] round() rounds half to even, so 58.475 becomes 58.47 instead of 58.48 in every invoice"
    reason = ("round() rounds half to even, so 58.475 becomes 58.47 instead of 58.48 in every invoice, "
              "which is why quantize_cents() is called from `src/billing/invoi")
    step = "Run `pytest tests/test_invoice.py` and then check that quantize_cents() is used by every caller of `Invoice.to"
    goal = ("Fix the rounding bug in src/billing/invoice.py. " * 7)[:GOAL_MAX_CHARS]
    n = Narrative(goal=goal,
                  key_decisions=[{"decision": "Use quantize_cents()", "reason": reason[:ITEM_MAX_CHARS]},
                                 {"decision": "Patch `src/billing/invo", "reason": "tax"}],
                  next_steps=[step[:ITEM_MAX_CHARS], "Run the tes", "Ask (whether the"])
    src += " Ask whether and then check that is used by every caller of"
    out, removed = verify_narrative(n, src, done=NOTHING_DONE, constraints=[], fallback_goal="g")
    items = [out.goal, *out.next_steps, *(x for d in out.key_decisions for x in d.values())]
    for text in items:
        assert not code_spans(text)[1] and text.count("(") == text.count(")"), text
    assert out.goal.endswith("src/billing/invoice.py.") and "Fix the rounding bug in src/billing/invoice.py." in out.goal
    assert out.key_decisions == [{"decision": "Use quantize_cents()", "reason": (
        "round() rounds half to even, so 58.475 becomes 58.47 instead of 58.48 in every invoice, "
        "which is why quantize_cents() is called…")}]
    assert out.next_steps == ["Run `pytest tests/test_invoice.py` and then check that quantize_cents() is used by "
                              "every caller…", "Run the tes"]  # short: under the cap, its last word is a word
    cut = [r for r in removed if r.reason.startswith("cut off")]
    assert {r.text for r in cut} >= {reason[:ITEM_MAX_CHARS], "Patch `src/billing/invo", step[:ITEM_MAX_CHARS],
                                      "Ask (whether the"}


def test_a_step_that_only_reads_a_file_the_ledger_lists_as_read_is_removed():
    """Issue 23: "read `src/api/orders.ts`" as the next step of a summary that lists it as read."""
    done = DoneEvidence([], [], [], read_files=["/w/src/api/orders.ts"])
    src = SOURCE + " src/api/orders.ts src/api/cart.ts orders.ts fix the totals in to see how totals are computed"
    n = Narrative(goal="Fix the rounding bug.", next_steps=[
        "Read `src/api/orders.ts`",
        "Open orders.ts to see how totals are computed",
        "Read `src/api/orders.ts` and fix the totals in src/billing/invoice.py",  # does more than read
        "Read `src/api/cart.ts`",  # not read yet
    ])
    out, removed = verify_narrative(n, src, done=done, constraints=[], fallback_goal="g")
    assert out.next_steps == ["Read `src/api/orders.ts` and fix the totals in src/billing/invoice.py",
                              "Read `src/api/cart.ts`"]
    assert [r.reason for r in removed] == ["the evidence shows it done: src/api/orders.ts read already",
                                           "the evidence shows it done: orders.ts read already"]


def test_a_run_step_naming_the_last_part_of_a_passed_chain_is_removed():
    done = DoneEvidence([], [], ["cd /w && pytest tests/test_invoice.py"])
    n = Narrative(goal="Fix the rounding bug.", next_steps=["Run `pytest tests/test_invoice.py`", "Run `pytest`"])
    out, removed = verify_narrative(n, SOURCE + " `pytest`", done=done, constraints=[], fallback_goal="g")
    assert out.next_steps == ["Run `pytest`"]  # a wider run than the one that passed
    assert "already passed" in removed[0].reason


def test_an_edit_step_is_done_by_a_later_change_only_when_it_was_carried():
    done = DoneEvidence([], [], [], changed_since=["src/billing/invoice.py"])
    n = Narrative(goal="Fix the rounding bug.", next_steps=["Fix the rounding in src/billing/invoice.py"])
    fresh, _ = verify_narrative(n, SOURCE, done=done, constraints=[], fallback_goal="g")
    assert fresh.next_steps == n.next_steps  # the model wrote it knowing the edit: more may be needed
    copied, removed = verify_narrative(n, SOURCE, done=done, constraints=[], fallback_goal="g",
                                       carried=n.next_steps)
    assert copied.next_steps == [] and "changed after this step was written" in removed[0].reason
