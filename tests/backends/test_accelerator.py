"""The accelerator `compactd info` names, and the engine `auto` picks per platform."""

from __future__ import annotations

import json

import pytest

import backends
from backends.models import resolve


def test_info_names_the_build_accelerator(capsys):
    llama_cpp = pytest.importorskip("llama_cpp")
    from worker.cli import main

    assert main(["info", "--model", "qwen2.5-coder-0.5b", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    system = llama_cpp.llama_print_system_info().decode()
    if llama_cpp.llama_supports_gpu_offload():
        assert info["accelerator"] != "CPU" and info["accelerator"] in system
    else:
        assert info["accelerator"] == "CPU"


def test_auto_engine_is_llama_off_apple_silicon(monkeypatch):
    monkeypatch.setattr(backends, "apple_silicon", lambda: False)
    assert backends.auto_engine(resolve("qwen2.5-coder-0.5b")) == "llama"


def test_auto_engine_is_mlx_on_apple_silicon_with_mlx_lm(monkeypatch):
    pytest.importorskip("mlx_lm")
    monkeypatch.setattr(backends, "apple_silicon", lambda: True)
    assert backends.auto_engine(resolve("qwen2.5-coder-0.5b")) == "mlx"


def test_mlx_auto_copy_is_cached_by_name_and_size(tmp_path, monkeypatch):
    """The conversion runs once; a second load finds its config.json and converts nothing."""
    monkeypatch.setenv("COMPACTD_CACHE_DIR", str(tmp_path))
    gguf = resolve("qwen2.5-coder-0.5b").path
    target = tmp_path / "mlx" / f"{gguf.stem}-{gguf.stat().st_size}-{backends.MLX_AUTO_DTYPE}"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert backends.mlx_copy(gguf) == target
