"""Engines behind one small protocol (see base.py)."""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path
from typing import Any

from .base import Backend, BackendError, GenerationStats, ModelInfo, collect
from .models import DEFAULT_MODEL, FAST_MODEL, ResolvedModel, resolve
from .paths import cache_dir

# On Apple Silicon MLX runs on the GPU with unified memory: the default engine there. The GGUF
# is converted once (float16, no second quantization) into the cache.
MLX_AUTO_DTYPE = "float16"

__all__ = [
    "Backend", "BackendError", "GenerationStats", "ModelInfo", "collect", "load_backend",
    "DEFAULT_MODEL", "FAST_MODEL",
]


def load_backend(model: str | None = None, engine: str = "auto", progress=None, **options: Any) -> Backend:
    """A backend for a bundled model name, GGUF path or MLX directory.
    engine: "auto" (llama.cpp for GGUF, MLX for an MLX dir), "llama", "mlx"."""
    resolved = resolve(model, progress)
    if engine == "auto":
        engine = auto_engine(resolved)
        if engine == "mlx" and resolved.kind == "gguf":
            resolved = ResolvedModel(mlx_copy(resolved.path, progress), "mlx", resolved.bundled)
    if engine == "llama":
        if resolved.kind != "gguf":
            raise BackendError(f"the llama.cpp engine needs a GGUF file, got an MLX directory: {resolved.path}")
        from .llama_cpp import LlamaCppBackend

        options.setdefault("chat_format", resolved.chat_format)
        return LlamaCppBackend(resolved.path, model_name=model or resolved.path.name, **options)
    if engine == "mlx":
        if resolved.kind != "mlx":
            raise BackendError(
                f"the MLX engine needs an MLX model directory; convert first: compactd convert-mlx {resolved.path} OUTDIR"
            )
        from .mlx import MlxBackend

        return MlxBackend(resolved.path, **options)
    raise BackendError(f"unknown engine {engine!r}: use auto, llama or mlx")


def apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def auto_engine(resolved: ResolvedModel) -> str:
    """MLX for an MLX directory, and for a GGUF on Apple Silicon when mlx-lm is installed;
    llama.cpp otherwise (CPU, or the CUDA/Metal build `make` chose)."""
    if resolved.kind == "mlx":
        return "mlx"
    if apple_silicon() and importlib.util.find_spec("mlx_lm") is not None:
        return "mlx"
    return "llama"


def mlx_copy(gguf: Path, progress=None) -> Path:
    """The cached MLX conversion of `gguf` (made on first use, keyed by name and size)."""
    from .mlx_convert import convert_gguf_to_mlx

    out = cache_dir() / "mlx" / f"{gguf.stem}-{gguf.stat().st_size}-{MLX_AUTO_DTYPE}"
    if (out / "config.json").exists():
        return out
    return convert_gguf_to_mlx(gguf, out, dtype=MLX_AUTO_DTYPE, progress=progress, overwrite=True)
