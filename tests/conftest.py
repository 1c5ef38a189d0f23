"""Shared fixtures: the real bundled models, loaded once per test session."""

from __future__ import annotations

import pytest

from backends.models import BUNDLED, FAST_MODEL, resolve

# The suite runs the 0.5B: same Qwen2 vocabulary and template as the default 1.5B, 2-3x faster.
TEST_MODEL = FAST_MODEL
TEST_CTX = 8192


@pytest.fixture(scope="session")
def gguf_path():
    return resolve(TEST_MODEL).path


@pytest.fixture(scope="session")
def llama_backend(gguf_path):
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(gguf_path, n_ctx=TEST_CTX, model_name=TEST_MODEL)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def reference(gguf_path):
    """The independent count reference: transformers' template rendering, the engine's tokens."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("transformers")
    from tests.reference import EngineReference

    ref = EngineReference(gguf_path)
    yield ref
    ref.close()


@pytest.fixture(scope="session")
def gemma_path():
    return resolve("gemma3-270m").path


def bundled(name: str):
    return BUNDLED[name]
