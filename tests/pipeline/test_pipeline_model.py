"""The compaction pipeline end to end with the real bundled 0.5B model (no stand-in)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakes import SessionBuilder
from worker.formats import load
from worker.pipeline import SUMMARY_SHARE, CompactionConfig, CompactionRefused, compact
from worker.pipeline.checkpoint import SECTIONS, label

pytestmark = pytest.mark.model

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SWE_TRACE = FIXTURES / "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
MODEL_SECTIONS = ("Goal", "Key Decisions", "Next Steps")


def raw_input_text(session) -> str:
    return json.dumps(session.model_dump(), ensure_ascii=False)


@pytest.fixture(scope="module")
def swe_result(llama_backend):
    session = load(SWE_TRACE)
    before = session.model_dump()
    result = compact(session, llama_backend, CompactionConfig(context_limit=12_000))
    assert session.model_dump() == before  # the caller's session is never mutated
    return session, result.checkpoint


def test_swe_checkpoint_keeps_values_path_and_fix(swe_result):
    session, cp = swe_result
    text = cp.summary_text
    assert "344" in text and "345" in text
    assert "src/marshmallow/fields.py" in text
    assert "int(round(value.total_seconds() / base_unit.total_seconds()))" in text
    for name in SECTIONS:
        assert f"## {label(name, cp.lang)}" in text


# Identifiers as a reader would spot them, independent of worker/pipeline/verify.py's rules:
# inline code, file names with an extension, snake_case names.
IDENTIFIER_RE = re.compile(r"`([^`\n]+)`|\b([\w/.-]+\.(?:py|txt|cfg|toml|json|md))\b|\b([a-z]+_[a-z0-9_]+)\b")


def test_swe_checkpoint_is_the_models_narrative(swe_result):
    _, cp = swe_result
    assert cp.verification.fallback == "" and cp.narrative["goal"].strip()


def test_swe_checkpoint_has_no_invented_identifier(swe_result):
    session, cp = swe_result
    source = raw_input_text(session)
    found = [next(g for g in m.groups() if g) for name in MODEL_SECTIONS
             for m in IDENTIFIER_RE.finditer(cp.sections[name])]
    assert found  # the narrative names what it is about
    assert [i for i in found if i not in source and json.dumps(i)[1:-1] not in source] == []
    # Whatever verification removed, it says what and why.
    for r in cp.verification.removed:
        assert r.section in ("goal", "key_decisions", "next_steps") and r.reason


def test_swe_checkpoint_fits_budget_and_frees_tokens(swe_result):
    _, cp = swe_result
    assert cp.tokens.summary <= cp.budget.summary_limit
    assert cp.tokens.after < cp.budget.usable
    assert cp.tokens.after < cp.tokens.before
    assert cp.messages[0]["role"] == "system"
    assert cp.messages[1]["content"].startswith("[CONTEXT COMPACTION — REFERENCE ONLY]")
    stats = cp.timings.model
    assert stats and stats[0].prompt_tokens > 0 and stats[0].decode_tokens > 0
    assert cp.audit.dropped and all(d.tokens >= 0 for d in cp.audit.dropped)


def filler_log(lines: int) -> str:
    """A long, fact-free build log: what makes a real session overflow."""
    return "\n".join(f"[{i:04d}] compiling module_{i % 37} ... ok" for i in range(lines))


def growing_session(steps: int):
    b = SessionBuilder().system("You are a coding agent.")
    b.user("Fix the rounding bug in src/billing/invoice.py. Do not change the public signature of Invoice.total().")
    for k in range(steps):
        b.tool("bash", {"command": f"pytest tests/test_invoice.py -k case_{k}"},
               f"E       AssertionError: assert Decimal('58.4{k}30') == Decimal('58.4{k}')\n" + "log line\n" * 150,
               is_error=True)
        b.tool("read_file", {"path": f"src/billing/part_{k}.py"}, "def f():\n    return 1\n" * 120)
        b.assistant(f"Case {k} still fails; looking at part_{k}.")
        b.user(f"Keep going with case {k + 1}.")
    return b.build()


def test_three_successive_compactions_stay_bounded(llama_backend):
    config = CompactionConfig(context_limit=6_000)
    previous = None
    sizes = []
    for steps in (4, 7, 10):
        session = growing_session(steps)
        cp = compact(session, llama_backend, config, previous=previous).checkpoint
        assert cp.tokens.summary <= cp.budget.summary_limit
        assert cp.tokens.after < config.budget().usable
        sizes.append(cp.tokens.summary)
        previous = cp
    assert previous.version == 3
    assert max(sizes) <= config.budget().usable * SUMMARY_SHARE


def test_chinese_conversation_gets_chinese_summary_with_exact_error(llama_backend):
    b = SessionBuilder().system("你是一个编程助手。")
    b.user("请帮我修复 scripts/load_config.py 的启动错误，不要引入新的依赖。")
    b.tool("bash", {"command": "make build"}, filler_log(400))
    b.tool("bash", {"command": "python scripts/load_config.py"},
           "Traceback (most recent call last):\n  File \"scripts/load_config.py\", line 3, in <module>\n"
           "    import yaml\nModuleNotFoundError: No module named 'yaml'", is_error=True)
    b.assistant("这个脚本依赖 yaml，但项目不允许新依赖。我改用标准库的 json 来读取配置。")
    b.tool("edit_file", {"path": "scripts/load_config.py", "old_str": "import yaml", "new_str": "import json"}, "ok")
    b.user("好的，继续。配置文件也要改成 JSON 格式。")
    b.assistant("明白，我接下来把 config.yaml 转换为 config.json。")
    b.user("还有，记得更新 README。")
    b.assistant("好的。")
    cp = compact(b.build(), llama_backend, CompactionConfig(context_limit=5_000, reserved=500)).checkpoint
    assert cp.lang == "zh"
    assert "## 目标" in cp.summary_text and "## 进展" in cp.summary_text
    assert "ModuleNotFoundError: No module named 'yaml'" in cp.summary_text
    assert re.search(r"[\u4e00-\u9fff]", cp.sections["Goal"])


def test_last_request_without_evidence_is_never_done(llama_backend):
    b = SessionBuilder().system("You are a coding agent.")
    b.user("Make tests/test_dates.py pass.")
    b.tool("bash", {"command": "make build"}, filler_log(400))
    b.tool("bash", {"command": "pytest tests/test_dates.py"}, "E   AssertionError: assert 1 == 2\n1 failed in 0.1s", is_error=True)
    b.tool("edit_file", {"path": "src/dates.py", "old_str": "return 1", "new_str": "return 2"}, "ok")
    b.tool("bash", {"command": "pytest tests/test_dates.py"}, "3 passed in 0.1s")
    b.assistant("All tests in tests/test_dates.py pass now.")
    b.user("Now add a CHANGELOG entry for the date fix and bump the version in pyproject.toml.")
    b.assistant("Done! I added the CHANGELOG entry and bumped the version.")  # a claim, no evidence
    cp = compact(b.build(), llama_backend, CompactionConfig(context_limit=5_000, reserved=500)).checkpoint
    done, marker, rest = cp.sections["Progress"].partition("### In Progress")
    assert marker, cp.sections["Progress"]
    assert "CHANGELOG" not in done
    assert "CHANGELOG" in rest


def test_compaction_that_would_not_help_is_refused(llama_backend):
    b = SessionBuilder().user("hi")
    b.assistant("hello")
    with pytest.raises(CompactionRefused):
        compact(b.build(), llama_backend, CompactionConfig(context_limit=32_000))
