"""The CLI's happy paths on the bundled fixtures (counting needs no weights; compaction here
runs deterministic-only so the JSON shape is checked quickly — the model path is in
test_pipeline_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.cli import main
from worker.formats import load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SWE = FIXTURES / "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
MODEL = "qwen2.5-coder-0.5b"


def run_json(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_count_transcript_counts_the_chat_exactly(capsys, reference):
    data = run_json(capsys, "count", "--model", MODEL, "--json", str(SWE))
    row = data["files"][0]
    assert row["format"] == "swe_agent"
    # Independent: transformers renders the chat, llama.cpp's own vocabulary counts it.
    assert row["tokens"] == reference.chat_tokens(load(SWE).to_chat(), add_generation_prompt=True)
    text_row = run_json(capsys, "count", "--model", MODEL, "--json", "--format", "text", str(SWE))["files"][0]
    assert text_row["format"] == "text" and text_row["tokens"] != row["tokens"]


def test_inspect_reports_the_import(capsys, reference):
    data = run_json(capsys, "inspect", "--model", MODEL, "--json", str(SWE))
    assert data["tokens"] == reference.chat_tokens(load(SWE).to_chat(), add_generation_prompt=True)
    assert data["tool_calls"] == 13


def test_compact_json_has_every_documented_key(capsys, tmp_path):
    out = tmp_path / "cp.json"
    assert main(["compact", "--model", MODEL, "--no-model", "--quiet", "--context-limit", "12000",
                 "--json", "--out", str(out), str(SWE)]) == 0
    data = json.loads(out.read_text())
    for key in ("summary", "ledger", "checkpoint_messages", "tokens", "timings", "verification"):
        assert key in data
    assert set(data["tokens"]) >= {"before", "after", "summary", "tail"}
    assert isinstance(data["verification"]["removed"], list)
    assert data["tokens"]["after"] < data["tokens"]["before"]
    assert data["checkpoint_messages"][1]["content"].startswith("[CONTEXT COMPACTION")


def test_compact_text_output_ends_with_a_timings_line(capsys):
    assert main(["compact", "--model", MODEL, "--no-model", "--quiet", "--context-limit", "12000", str(SWE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "===== system ====="
    assert out[-1].startswith("tokens ") and "total" in out[-1]


def test_models_lists_bundled_weights_with_sources(capsys):
    rows = run_json(capsys, "models", "--json")
    names = {r["name"]: r for r in rows}
    assert names["qwen2.5-coder-1.5b"]["default"] is True
    assert "Qwen" in names["qwen2.5-coder-0.5b"]["source"] and names["qwen2.5-coder-0.5b"]["license"] == "Apache-2.0"


@pytest.mark.model
def test_info_describes_the_engine(capsys):
    data = run_json(capsys, "info", "--model", MODEL, "--json")
    assert data["engine"] == "llama.cpp" and data["architecture"] == "qwen2" and data["vocab_size"] == 151936



def test_compact_announces_each_long_model_call_with_an_eta(capsys, monkeypatch):
    """Before each summarizer call the CLI prints the exact prompt size and an ETA from the
    measured prefill rate; --json and --quiet print no such line. The CLI wiring, on the
    ScriptedBackend (worker/eta.py's logic is in tests/test_eta.py; a real 0.5B compaction of
    this trajectory takes minutes on the shared 2 cores)."""
    import re

    from tests.fakes import ScriptedBackend

    backends: list[ScriptedBackend] = []
    monkeypatch.setattr("worker.cli._load_backend", lambda args, **kw: backends.append(ScriptedBackend()) or backends[-1])
    try:
        assert main(["compact", "--model", MODEL, "--context-limit", "12000", str(SWE)]) == 0
        captured = capsys.readouterr()
        lines = re.findall(r"summarizing ([\d,]+) prompt tokens \(~[^)]+ at ([\d,]+) tok/s\)\.\.\.", captured.err)
        assert lines and all(int(rate.replace(",", "")) > 0 for _n, rate in lines)
        prompt = re.search(r"model: (\d+) prompt tok", captured.out.strip().splitlines()[-1])
        assert prompt is not None
        # One line per summarizer call: together they announce exactly the prompt tokens it read.
        assert sum(int(n.replace(",", "")) for n, _rate in lines) == int(prompt.group(1))
        for flag in ("--json", "--quiet"):
            assert main(["compact", "--model", MODEL, flag, "--context-limit", "12000", str(SWE)]) == 0
            assert "prompt tokens (~" not in capsys.readouterr().err
    finally:
        for b in backends:
            b.close()
