"""Smoke test of the throughput and fidelity benchmarks in quick mode (the bundled 0.5B): they
run, write their JSON and PNG, and hold sane numbers. Benchmarks measure; nothing here
asserts a timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

PNG_MAGIC = b"\x89PNG"


def _outputs(out: Path, name: str) -> dict:
    assert (out / f"{name}.png").read_bytes()[:4] == PNG_MAGIC
    data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    machine = data["machine"]
    assert machine["cpu_count"] >= 1 and machine["cpu_model"] and machine["date"]
    assert "load_average_1_5_15" in machine and "load_at_start" in data["load"]
    assert data["quick"] is True and data["headline"]
    return data


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

    real = data["real_sessions"]
    (row,) = real["sessions"]
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import resolve
    from benchmarks._common import SWE_TRACE
    from benchmarks.real_sessions import OVERFLOW_GOAL_P95_S, QUICK_REAL, load_real
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

    count = data["counting"]
    assert count["engine_equals_tokenizers"] and count["tokens"] > 0
    assert count["session"]["tokens"] > 0
    assert data["memory"]["peak_rss_mb"] > 0


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
