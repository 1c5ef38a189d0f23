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


def test_bad_environment_value_is_one_line_not_a_traceback(tmp_path):
    """COMPACTD_PORT=abc compactd models: every command reads the settings, so a bad value in
    the environment is refused up front, naming the variable."""
    import os

    env = {**os.environ, "COMPACTD_PORT": "abc"}
    proc = subprocess.run([sys.executable, "-m", "worker.cli", "models"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert_one_line_error(proc.returncode, proc.stderr, "COMPACTD_PORT", "--port", "'abc'")


@pytest.mark.parametrize(("name", "value", "needle"), [
    ("COMPACTD_ENGINE", "banana", "COMPACTD_ENGINE"),  # env values no longer bypass the choices
    ("COMPACTD_PRE_THRESHOLD", "1.5", "COMPACTD_PRE_THRESHOLD"),
    ("COMPACTD_ROLLING", "maybe", "COMPACTD_ROLLING"),
    ("COMPACTD_MAX_BODY_BYTES", "12", "--max-body-bytes"),
])
def test_bad_environment_values_are_refused(capsys, monkeypatch, name, value, needle):
    monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "models")
    assert_one_line_error(code, err, needle, "invalid")


def test_bad_serve_flag_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("COMPACTD_API_KEY", raising=False)
    code, _, err = run(capsys, "serve", "--pre-threshold", "1.5", "--port", "1")
    assert_one_line_error(code, err, "--pre-threshold")


def test_an_api_key_from_the_environment_is_never_echoed(capsys, monkeypatch):
    monkeypatch.setenv("COMPACTD_API_KEY", "s3cret-key")
    monkeypatch.setenv("COMPACTD_PORT", "99999")
    code, _, err = run(capsys, "models")
    assert_one_line_error(code, err, "COMPACTD_PORT")
    monkeypatch.delenv("COMPACTD_PORT")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = capsys.readouterr().out
    assert "s3cret" not in err + help_text


def test_serve_help_shows_each_default_and_variable(capsys, monkeypatch):
    monkeypatch.setenv("COMPACTD_QUEUE_SIZE", "7")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "env COMPACTD_PORT; default: 7433" in text
    assert "env COMPACTD_QUEUE_SIZE; default: 7" in text  # the default is the environment's
    assert "env COMPACTD_BODY_TIMEOUT; default: 60.0" in text


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


def test_compact_on_deeply_nested_json_is_one_line(capsys, tmp_path):
    """5,000 nested arrays pass json's parser a RecursionError, not a ValueError."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    for fmt in ("auto", "openai"):
        code, out, err = run(capsys, "compact", str(deep), "--format", fmt, "--no-model", "--quiet")
        assert_one_line_error(code, err, "nested too deeply to parse")
        assert out == ""


def test_bench_without_matplotlib_names_the_install(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    code, out, err = run(capsys, "bench", "tokenizer", "--quick", "--out", str(tmp_path))
    assert_one_line_error(code, err, "matplotlib", "pip install matplotlib", "compactd[dev]")
    assert out == "" and list(tmp_path.iterdir()) == []  # refused before any benchmark ran


def test_version_is_the_package_metadata(capsys):
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"compactd {project['version']}\n"
