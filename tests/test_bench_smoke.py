"""Smoke test of the throughput, real-sessions and fidelity benchmarks in quick mode (the bundled 0.5B): they
run, write their JSON and PNG, and hold sane numbers. Benchmarks measure; nothing here
asserts a timing. The real set's scorer and baseline input are checked without a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

PNG_MAGIC = b"\x89PNG"


def _outputs(out: Path, name: str) -> dict:
    assert (out / f"{name}.png").read_bytes()[:4] == PNG_MAGIC
    data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    machine = data["machine"]
    assert machine["cpu_count"] >= 1 and machine["cpu_model"] and machine["date"]
    assert "load_average_1_5_15" in machine and "load_at_start" in data["load"]
    assert data["quick"] is True and data["headline"]
    return data


@pytest.mark.model
def test_throughput_quick(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from benchmarks import throughput

    throughput.run(quick=True, out_dir=tmp_path)
    data = _outputs(tmp_path, "throughput")
    assert data["threads"] == 2

    cmp_ = data["summarize_vs_raw"]
    for who in ("compactd", "raw"):
        med = cmp_["median"][who]
        assert med["prompt_tps"] > 0 and med["decode_tps"] > 0 and med["ttft_ms"] > 0
    assert cmp_["same_output_text"]  # same ids, same settings, greedy: the same tokens
    assert all(r["evaluated_tokens"] == cmp_["prompt_tokens"] for rs in cmp_["runs"].values() for r in rs)  # cold

    bw = data["bandwidth"]
    assert bw["read_gb_per_s_best"] > 0 and bw["decode_bound_tps_at_context"] > 0
    tensors = data["models"]["qwen2.5-coder-0.5b"]["tensor_bytes"]
    assert 0 < tensors["read_per_token"] <= tensors["total"] < data["models"]["qwen2.5-coder-0.5b"]["file_bytes"]

    succ = data["successive"]
    assert succ["e2e_s"]["n"] == 2 and all(r["model_calls"] >= 1 for r in succ["runs"])
    assert all(r["tokens"]["after"] < r["tokens"]["before"] for r in succ["runs"])

    ps = data["prefix_and_swap"]
    assert ps["kv_prefix"]["warm"]["cached_prompt_tokens"] > ps["kv_prefix"]["cold"]["cached_prompt_tokens"]
    assert all(r["model_calls"] == 0 for r in ps["swap"]["runs"])  # a swap never calls the model

    count = data["counting"]
    assert count["engine_equals_tokenizers"] and count["tokens"] > 0
    assert count["session"]["tokens"] > 0
    assert data["memory"]["peak_rss_mb"] > 0


@pytest.mark.model
def test_real_sessions_quick(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from benchmarks import real_sessions
    from benchmarks.real_sessions import OVERFLOW_GOAL_P95_S, QUICK_REAL, load_real

    real_sessions.run(quick=True, out_dir=tmp_path)
    real = _outputs(tmp_path, "real_sessions")
    assert real["threads"] == 2 and real["model"] == QUICK_REAL.model and real["peak_rss_mb"] > 0
    (row,) = real["sessions"]
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import resolve
    from benchmarks._common import SWE_TRACE
    from worker.tokens import TokenCounter

    assert row["file"] == SWE_TRACE.name and row["cut_to_tokens"] == QUICK_REAL.cut_tokens
    counter_backend = LlamaCppBackend(resolve("qwen2.5-coder-0.5b").path, n_ctx=2048, model_name="count-only")
    try:
        counter = TokenCounter(counter_backend)
        expected = load_real(SWE_TRACE, counter, QUICK_REAL.cut_tokens)
        assert row["messages"] == len(expected.messages)
        assert row["history_tokens"] == counter.total(expected)
    finally:
        counter_backend.close()
    assert row["summarizer_prompt_tokens"] > 0 and row["prefill_s"] > 0 and row["decode_s"] > 0
    assert row["e2e_s"]["n"] == QUICK_REAL.reps
    answers = row["answer_at_overflow"]
    assert answers["deterministic"]["modes"] == ["instant"] and answers["rolling_summary"]["modes"] == ["swap"]
    for source in answers.values():  # no model call on the request path, either way
        assert source["model_calls"] == 0 and source["seconds"]["n"] == QUICK_REAL.answer_reps
    assert real["answer_goal_p95_s"] == OVERFLOW_GOAL_P95_S and set(real["answer_worst_p95_s"]) == set(answers)



@pytest.mark.model
def test_fidelity_quick(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from benchmarks import fidelity

    fidelity.run(quick=True, out_dir=tmp_path)
    data = _outputs(tmp_path, "fidelity")
    (case,) = data["cases"]
    assert case["name"] == "swe-marshmallow" and case["head_messages"] > 0
    assert sum(case["facts"].values()) > 0
    methods = case["methods"]
    assert set(methods) == {"compactd", "naive-150w", "template"}
    for out in methods.values():
        assert out["summary_tokens"] > 0 and out["text"]
        for kind in out["retention"].values():
            assert 0 <= kind["kept"] <= kind["total"]
    cp = methods["compactd"]
    assert len(cp["sections_present"]) == 7 and cp["within_budget"]
    assert cp["retention"]["command"]["kept"] == cp["retention"]["command"]["total"]  # the ledger keeps commands
    agg = data["aggregate"]
    assert set(agg) == {"compactd", "naive-150w", "template"}

    _check_real(data["real"])
    assert (tmp_path / "fidelity_real.png").read_bytes()[:4] == PNG_MAGIC


def _check_real(real: dict[str, Any]) -> None:
    """The quick real set: the smallest transcript, no-model at both sizes and one 0.5B run;
    every completed run's per-kind score is what the scorer gives on the checkpoint text written."""
    from benchmarks.fidelity_real import QUICK_CASE, QUICK_CONTEXTS, QUICK_MODEL_CONTEXT, step_order
    from benchmarks.real_facts import KINDS, load_cases, score_text

    (case,) = real["cases"]
    assert case["name"] == QUICK_CASE and real["quick"] is True
    facts = next(c for c in load_cases() if c.name == QUICK_CASE).facts
    assert case["facts"] == {k: sum(1 for f in facts if f.kind == k) for k in KINDS}
    plan = [(r["context_limit"], r["mode"]) for r in case["runs"]]
    steps = step_order([(ctx, False) for ctx in QUICK_CONTEXTS] + [(QUICK_MODEL_CONTEXT, True)])
    assert plan == [(ctx, "model" if use else "no-model") for ctx, use in steps]
    assert [use for _ctx, use in steps] == [False, False, True]  # no-model steps first: a time cap cuts model runs
    assert case["skipped"] == []
    assert not any(r.get("failed") for r in case["runs"])  # refused or scored, never an exception
    completed = [r for r in case["runs"] if not r["refused"]]
    assert any(r["mode"] == "no-model" for r in completed)
    for r in completed:
        assert set(r["score"]["per_kind"]) == set(KINDS)
        assert r["score"] == score_text(r["text"], facts)  # exact: deterministic given the text
        assert r["before_agent_summary"] is None and case["agent_summary"] is None  # SWE-agent writes none
    agg = real["aggregate"]
    for r in case["runs"]:
        key = f"compactd{'' if r['mode'] == 'model' else '-no-model'}@{r['context_limit']}"
        assert agg[key]["refused"] == (1 if r["refused"] else 0)
        produced = agg[key]["where_produced"]  # the issue's own measure: refusals apart
        if not r["refused"]:
            assert agg[key]["kept"] == r["score"]["kept"] and agg[key]["total"] == len(facts)
            assert produced["kept"] == r["score"]["kept"] and produced["total"] == len(facts)
        else:
            assert produced["total"] == 0 and agg[key]["total"] == len(facts)  # a refusal: every fact a miss


# --- the real set's scorer and inputs, no model --------------------------------------------


def _fact(match: str, text: str, kind: str = "decision") -> Any:
    from benchmarks.real_facts import RealFact

    return RealFact(kind, text, match, "line 1", False)


def test_fidelity_real_runs_one_half_at_the_windows_given(tmp_path: Path) -> None:
    """`--half` and `--contexts`: a model run that fits its time cap on a small machine."""
    from benchmarks import fidelity_real

    argv = ["--no-model", "--half", "heldout", "--contexts", "32000", "--model", "qwen2.5-coder-0.5b",
            "--out", str(tmp_path)]
    assert fidelity_real.main(argv) == 0
    assert (tmp_path / "fidelity_real.png").read_bytes()[:4] == PNG_MAGIC
    data = json.loads((tmp_path / "fidelity_real.json").read_text(encoding="utf-8"))
    assert data["cases"] and {c["split"] for c in data["cases"]} == {"heldout"}
    assert {(r["context_limit"], r["mode"]) for c in data["cases"] for r in c["runs"]} == {(32000, "no-model")}
    assert data["halves"]["tune"]["cases"] == [] and data["settings"]["contexts"] == [32000]


def test_real_scorer_exact_is_whitespace_normalized() -> None:
    from benchmarks.real_facts import kept

    fact = _fact("exact", "fatal: ambiguous argument  'main..HEAD'", "error")
    assert kept(fact, "ran git log:\n  fatal: ambiguous argument\n'main..HEAD': unknown")
    assert not kept(fact, "fatal: ambiguous argument 'main..head'")  # case is kept


def test_real_scorer_path_by_last_two_components() -> None:
    from benchmarks.real_facts import kept

    fact = _fact("path", "apps/web/src/hooks/useAuth.ts", "path")
    assert kept(fact, "edited /home/u/cipher-box/apps/web/src/hooks/useAuth.ts")
    assert kept(fact, "- hooks/useAuth.ts (modified)")
    assert not kept(fact, "useAuth.ts")
    assert not kept(fact, "xhooks/useAuth.ts")
    assert kept(_fact("path", "docs/external/", "path"), "untracked: docs/external")


def test_real_scorer_words_by_identifiers_else_content_words() -> None:
    from benchmarks.real_facts import identifiers, kept

    fact = _fact("words", "Commit 1b64a00 (SECURITY.md email fix) on feat/code-of-conduct is not pushed")
    assert identifiers(fact.text) == ["feat/code-of-conduct", "1b64a00", "SECURITY.md"]
    assert kept(fact, "unpushed: 1b64a00 fixes the mail in SECURITY.md, branch feat/code-of-conduct")
    assert not kept(fact, "unpushed: the SECURITY.md email fix on feat/code-of-conduct")
    prose = _fact("words", "IPNS resolve still fails and falls back to the DB cache")
    assert identifiers(prose.text) == []
    assert kept(prose, "IPNS resolve fails; it falls back to a cache")  # 5 of 6 content words
    assert not kept(prose, "IPNS resolve is broken")


def test_real_agent_summary_is_the_raw_record_and_scored_on_earlier_facts() -> None:
    from benchmarks.real_facts import agent_summary_text, load_cases, raw_record, score_text

    cases = {c.name: c for c in load_cases()}
    assert len(cases) == 63
    assert sum(c.split == "heldout" for c in cases.values()) == 12  # README.md: split by repository, 12 / 51
    assert sum(c.split == "tune" for c in cases.values()) == 51
    spotter = next(c for name, c in cases.items() if name.startswith("cc-spotter"))
    record = raw_record(spotter.fixture, spotter.summary_where)
    assert record.get("isCompactSummary") is True
    text = agent_summary_text(spotter)
    assert text == record["message"]["content"].strip("\n") or text == record["message"]["content"]
    earlier = [f for f in spotter.facts if f.before_agent_summary]
    assert 0 < len(earlier) < len(spotter.facts)
    assert score_text(text, earlier)["total"] == len(earlier)
    assert all(agent_summary_text(c) is None for c in cases.values() if c.summary_where is None)
    assert all(agent_summary_text(c) for c in cases.values() if c.summary_where)  # readable text for every agent
    pi = cases["pi_before-compaction"]  # pi keeps its compaction text under `summary`
    record = raw_record(pi.fixture, pi.summary_where)
    assert record["type"] == "compaction" and agent_summary_text(pi) == record["summary"].strip() or \
        agent_summary_text(pi) == record["summary"]


def test_real_baseline_input_cuts_tool_results_and_starts_at_agent_summary() -> None:
    from benchmarks.fidelity_real import TOOL_RESULT_CUT, baseline_input, render_for_summarizer
    from benchmarks.real_facts import load_cases
    from worker.formats import load

    spotter = next(c for c in load_cases() if c.name.startswith("cc-spotter"))
    session = load(spotter.fixture)
    tail_ids = [m.id for m in session.messages[-6:]]
    window, max_tokens = 8192, 300

    def count(text: str) -> int:  # a stand-in length measure: this checks the selection logic only
        return len(text) // 4

    previous, conversation, seen = baseline_input(session, tail_ids, count, window, max_tokens)
    summary_at = max(i for i, m in enumerate(session.messages) if m.is_summary)
    assert previous and session.messages[summary_at].text.startswith(previous)
    live = [m for m in session.messages[summary_at + 1 : len(session.messages) - 6] if m.role != "system"]
    rendered = [b for b in (render_for_summarizer(m) for m in live) if b]
    assert seen["messages_seen"] + seen["messages_left_out"] == len(rendered)
    assert conversation == "\n\n".join(rendered[len(rendered) - seen["messages_seen"]:])
    assert count(previous) + count(conversation) <= window - max_tokens
    long = [r.output for m in live[-seen["messages_seen"]:] for r in m.tool_results if len(r.output) > TOOL_RESULT_CUT]
    assert long  # the window holds tool results longer than the cut
    for out in long:
        assert out[:TOOL_RESULT_CUT] in conversation and out[: TOOL_RESULT_CUT + 1] not in conversation


# --- each agent's own compaction vs through compactd, no model ------------------------------

OPENCODE_HEADINGS = ["## Objective", "## Important Details", "## Work State", "## Next Move", "## Relevant Files"]
COMPACTD_HEADINGS = ["## Goal", "## Constraints & Preferences", "## Progress", "## Key Decisions", "## Next Steps",
                     "## Critical Context", "## Relevant Files"]


def test_agent_paths_no_model(tmp_path: Path) -> None:
    """One real transcript per agent through its integration's path, deterministic answers
    (no weights loaded): every path's text is compactd's, scored by the one scorer on the text
    it recorded; the Claude Code hook stays within its byte budget."""
    from benchmarks import agent_paths
    from benchmarks.real_facts import agent_summary_text, load_cases, score_text
    from worker.agents.claude_code import (
        CHECKPOINT_HEADER,
        CHECKPOINT_SECTIONS,
        MAX_OUTPUT_BYTES,
        PRECOMPACT_HEADER,
        PRECOMPACT_SECTIONS,
    )

    result = agent_paths.run(quick=True, out_dir=tmp_path, use_model=False)
    assert (tmp_path / "agent_paths.png").read_bytes()[:4] == PNG_MAGIC
    data = json.loads((tmp_path / "agent_paths.json").read_text(encoding="utf-8"))
    assert data["headline"] == result["headline"] and data["use_model"] is False and data["model"] is None
    cases = {c.name: c for c in load_cases()}
    assert [c["agent"] for c in data["cases"]] == list(agent_paths.AGENTS)  # one transcript per agent
    expected = {
        "precompact": [f"## {s}" for s in PRECOMPACT_SECTIONS],
        "session_start": [f"## {s}" for s in CHECKPOINT_SECTIONS],
        "chat_completions": OPENCODE_HEADINGS,
        "responses": COMPACTD_HEADINGS,
        "session_compact": COMPACTD_HEADINGS,
    }
    for out in data["cases"]:
        assert not out.get("failed"), out.get("failed")
        case = cases[out["name"]]
        facts = [f for f in case.facts if f.before_agent_summary] if case.summary_where else list(case.facts)
        assert sum(out["facts"].values()) == len(facts) > 0
        own = agent_summary_text(case)
        if out["agent"] == "pi":
            assert own is None and out["own"] is None  # pi never compacted this session
        else:
            assert out["own"]["score"] == score_text(own, facts)
        for name, path in out["paths"].items():
            assert path["score"] == score_text(path["text"], facts)  # scored on the text it recorded
            if name in expected:
                assert path["headings"] == expected[name], name  # compactd's text, in that path's template
            ledger = path["ledger"]  # the unbounded ledger has every fact the bounded text kept
            assert ledger["total"] == len(facts) and ledger["kept"] >= path["score"]["kept"]
            assert ledger["kept"] - len(ledger["lost_by_path"]) <= path["score"]["kept"]
        through = out["paths"][agent_paths.THROUGH[out["agent"]]]["score"]
        assert data["aggregate"][out["agent"]]["through_compactd"]["kept"] == through["kept"]
        assert out["agent"] in data["headline"]

    cc, opencode, codex, pi = data["cases"]
    pre, start = cc["paths"]["precompact"], cc["paths"]["session_start"]
    assert pre["rc"] == 0 and start["rc"] == 0
    assert pre["text"].startswith(PRECOMPACT_HEADER) and start["text"].startswith(CHECKPOINT_HEADER)
    assert 0 < pre["bytes"] <= MAX_OUTPUT_BYTES and 0 < start["bytes"] <= MAX_OUTPUT_BYTES
    combined = cc["paths"]["own+session_start"]
    assert combined["text"].startswith(cc["own"]["text"]) and combined["text"].endswith(start["text"])
    assert combined["score"]["kept"] >= cc["own"]["score"]["kept"]
    # The deterministic answer on every HTTP path: no generation, the model's absence said.
    reply = opencode["paths"]["chat_completions"]
    assert reply["generations"] == 0 and reply["compactd"]["agent_compaction"]["model_calls"] == 0
    assert reply["compactd"]["agent_compaction"]["fallback"].startswith("model disabled")
    summary = codex["paths"]["responses"]
    assert summary["generations"] == 0 and summary["events"][-1] == "response.completed" and not summary["errors"]
    compacted = pi["paths"]["session_compact"]
    assert compacted["generations"] == 0 and compacted["model_calls"] == 0 and compacted["mode"] == "instant"
    assert compacted["received"] == pi["cut"]["messages_posted"]


def test_fidelity_sets_do_not_import_each_other() -> None:
    """The written set (fidelity.py) and the real set's command line (fidelity_real.py) share
    only benchmarks/_common.py and benchmarks/real_set.py: neither imports the other."""
    import ast

    root = Path(__file__).resolve().parent.parent / "benchmarks"

    def imported(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert "benchmarks.fidelity_real" not in imported("fidelity")
    assert "benchmarks.fidelity" not in imported("fidelity_real")
    assert "benchmarks.real_set" in imported("fidelity")
    assert not {"benchmarks.fidelity", "benchmarks.fidelity_real"} & imported("real_set")


def test_chained_compactions_keep_the_first_ledger(tmp_path: Path) -> None:
    """Issue 22, item 5: a real session (entireio/cli's, held out) compacted five times in a row at
    8k, each at overflow after the previous checkpoint plus new turns, no model: the last ledger
    still holds >= 99% of the first one's still-true facts; JSON + PNG written."""
    from benchmarks import chained

    result = chained.run(quick=True, out_dir=tmp_path)
    (row,) = result["rows"]
    assert row["compactions"] == chained.CHAIN and row["still_true"] > 20
    assert row["kept"] / row["still_true"] >= chained.GOAL
    assert [t["before"] > t["after"] for t in row["tokens"]] == [True] * chained.CHAIN
    assert json.loads((tmp_path / "chained.json").read_text())["full_chains"]["runs"] == 1
    assert (tmp_path / "chained.png").read_bytes()[:4] == PNG_MAGIC
