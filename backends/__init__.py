"""Engines behind one small protocol (see base.py)."""

from __future__ import annotations

from typing import Any

from .base import Backend, BackendError, GenerationStats, ModelInfo, collect
from .models import DEFAULT_MODEL, FAST_MODEL, resolve

__all__ = [
    "Backend", "BackendError", "GenerationStats", "ModelInfo", "collect", "load_backend",
    "DEFAULT_MODEL", "FAST_MODEL",
]


def load_backend(model: str | None = None, engine: str = "auto", progress=None, **options: Any) -> Backend:
    """A backend for a bundled model name, GGUF path or MLX directory.
    engine: "auto" (llama.cpp for GGUF, MLX for an MLX dir), "llama", "mlx"."""
    resolved = resolve(model, progress)
    if engine == "auto":
        engine = "mlx" if resolved.kind == "mlx" else "llama"
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
