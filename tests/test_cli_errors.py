"""Every user-caused failure is one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from worker.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code, err, *needles):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("compactd: error:")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0]


def test_missing_model_file(capsys, tmp_path):
    code, _, err = run(capsys, "count", "--model", str(tmp_path / "nope.gguf"), __file__)
    assert_one_line_error(code, err, "model file not found")


def test_non_gguf_model_file(capsys, tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 this is a zip, not a model" * 10)
    code, _, err = run(capsys, "count", "--model", str(bad), __file__)
    assert_one_line_error(code, err, "not a GGUF")


def test_truncated_gguf(capsys, tmp_path, gguf_path):
    cut = tmp_path / "cut.gguf"
    with open(gguf_path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(12 * 1024 * 1024))
    code, _, err = run(capsys, "count", "--model", str(cut), __file__)
    assert_one_line_error(code, err, "truncated")


def test_unknown_model_name(capsys):
    code, _, err = run(capsys, "count", "--model", "gpt-17-ultra", __file__)
    assert_one_line_error(code, err, "unknown model", "qwen2.5-coder-1.5b")


def test_unreadable_input(capsys, tmp_path):
    code, _, err = run(capsys, "count", "--model", "qwen2.5-coder-0.5b", str(tmp_path / "missing.txt"))
    assert_one_line_error(code, err, "input not found")


def test_non_utf8_input(capsys, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("café".encode("latin-1"))
    code, _, err = run(capsys, "count", "--model", "qwen2.5-coder-0.5b", str(f))
    assert_one_line_error(code, err, "not UTF-8")


def test_directory_as_input(capsys, tmp_path):
    code, _, err = run(capsys, "compact", "--model", "qwen2.5-coder-0.5b", str(tmp_path))
    assert_one_line_error(code, err, "directory")


def test_console_script_reports_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "worker.cli", "count", "--model", str(tmp_path / "x.gguf"), __file__],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "model file not found" in proc.stderr


@pytest.mark.model
def test_count_json_chinese_equals_engine_both_paths(capsys, gguf_path, tmp_path):
    import json

    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    text = "触发压缩后，旧对话被替换成一个隐藏检查点。上下文窗口是有限的。\n" * 20
    f = tmp_path / "zh.txt"
    f.write_text(text, encoding="utf-8")
    engine = LlamaCppBackend(gguf_path, tokenizer="engine")
    try:
        expected = len(engine.engine_tokenize(text))
    finally:
        engine.close()
    for path_choice in ("tokenizers", "engine"):
        code = main(["count", "--model", "qwen2.5-coder-0.5b", "--tokenizer", path_choice, "--json", str(f)])
        out = json.loads(capsys.readouterr().out)
        assert code == 0
        row = out["files"][0]
        assert row["tokens"] == expected, path_choice
        assert row["chars_per_4_error_pct"] < -30  # chars/4 badly undercounts Chinese
