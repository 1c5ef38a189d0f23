"""The MLX backend and the GGUF → MLX converter, on the bundled Qwen2.5-Coder 0.5B.

The converted model is cached under cache_dir()/mlx, keyed by the GGUF, so only the first
run pays the conversion (~25 s). Linux CPU MLX is slow (~1 tok/s prefill and decode in
float32), so prompts stay under ~20 tokens and generations under 8 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.base import BackendError, GenerationStats, collect

pytestmark = pytest.mark.mlx

FAST = "qwen2.5-coder-0.5b"
SHORT_CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
TEXTS = {
    "zh": "上下文压缩（context compaction）是把长对话总结成更短的检查点。",
    "ja": "コンテキスト圧縮とは、長い会話を短い要約に置き換えることです。",
    "en": "Write a Python function that returns the n-th Fibonacci number.\n\n  def fib(n):",
    "specials": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>x</tool_call><|endoftext|>",
    "nfd": "cafe\u0301 nai\u0308ve",  # NFD: an NFC normalizer (mlx-lm's Qwen2Tokenizer) would differ here
    "emoji": "👨‍👩‍👧 ok 🙂🙂 1234567",
}


def _gguf() -> Path:
    from backends.models import resolve

    try:
        return resolve(FAST).path
    except BackendError as exc:
        pytest.skip(f"bundled model not available: {exc}")


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return _gguf()


def _converted(gguf_path: Path, quantize: bool) -> Path:
    pytest.importorskip("mlx_lm")
    from backends.gguf_meta import file_key
    from backends.mlx_convert import convert_gguf_to_mlx
    from backends.paths import cache_dir

    out = cache_dir() / "mlx" / f"{file_key(gguf_path)}-{'q4' if quantize else 'float32'}"
    if not (out / "config.json").exists():  # the convert is atomic: config.json means complete
        convert_gguf_to_mlx(gguf_path, out, quantize=quantize, overwrite=True)
    return out


@pytest.fixture(scope="session")
def mlx_dir(gguf_path: Path) -> Path:
    return _converted(gguf_path, quantize=False)


@pytest.fixture(scope="module")
def backend(mlx_dir: Path):
    from backends.mlx import MlxBackend

    b = MlxBackend(mlx_dir)
    yield b
    b.close()


# -- converter output ------------------------------------------------------------------


@pytest.mark.model
def test_converted_dir_layout(mlx_dir: Path, gguf_path: Path) -> None:
    from backends.gguf_meta import read_meta

    meta = read_meta(gguf_path)
    config = json.loads((mlx_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert meta.has_output_weight
    assert config["tie_word_embeddings"] is False  # mlx-lm would otherwise drop lm_head
    assert config["num_hidden_layers"] == meta.hparams["block_count"]
    assert config["rms_norm_eps"] == 1e-06
    tok_config = json.loads((mlx_dir / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"] == meta.chat_template
    assert tok_config["eos_token"] == "<|im_end|>"
    tok = json.loads((mlx_dir / "tokenizer.json").read_text())
    assert tok["normalizer"] is None  # llama.cpp does not normalize
    gen = json.loads((mlx_dir / "generation_config.json").read_text())
    assert 151645 in gen["eos_token_id"]
    assert not list(mlx_dir.parent.glob(f".{mlx_dir.name}.partial-*"))


# -- tokens ----------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(TEXTS))
def test_tokenize_matches_gguf_tokenizer(backend, gguf_path: Path, name: str) -> None:
    from backends.gguf_meta import load_tokenizer

    text = TEXTS[name]
    expected = load_tokenizer(gguf_path).encode(text, add_special_tokens=False).ids
    assert backend.tokenize(text) == expected
    assert backend.count(text) == len(expected)
    assert backend.count_batch([text, text]) == [len(expected)] * 2


@pytest.mark.model
def test_tokenize_matches_llama_cpp_engine(backend, gguf_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    llama = LlamaCppBackend(gguf_path, tokenizer="engine")
    try:
        for text in TEXTS.values():
            assert backend.tokenize(text) == llama.engine_tokenize(text), text
    finally:
        llama.close()


@pytest.mark.model
def test_count_messages_matches_llama_cpp(backend, gguf_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    llama = LlamaCppBackend(gguf_path)
    chats = [
        SHORT_CHAT,
        [{"role": "user", "content": TEXTS["zh"] + TEXTS["ja"]}],
        [{"role": "system", "content": "Summarize."}, {"role": "user", "content": TEXTS["en"]},
         {"role": "assistant", "content": TEXTS["emoji"]}],
    ]
    try:
        for msgs in chats:
            assert backend.render_messages(msgs) == llama.render_messages(msgs)
            assert backend.count_messages(msgs) == llama.count_messages(msgs)
            assert backend.count_messages(msgs) == len(llama.engine_tokenize(llama.render_messages(msgs)))
            assert backend.count_messages(msgs, add_generation_prompt=False) == llama.count_messages(
                msgs, add_generation_prompt=False
            )
    finally:
        llama.close()


# -- generation ------------------------------------------------------------------------


@pytest.mark.model
def test_generate_greedy_on_cpu(backend) -> None:
    n_prompt = backend.count_messages(SHORT_CHAT)
    assert n_prompt < 40
    text, stats = collect(backend.generate(SHORT_CHAT, max_tokens=8))
    assert text.strip(), "empty generation"
    assert isinstance(stats, GenerationStats)
    assert stats.prompt_tokens == n_prompt
    assert stats.finish_reason in ("stop", "length")
    assert 1 <= stats.decode_tokens <= 8
    assert stats.prompt_ms > 0 and stats.prompt_tps > 0
    assert stats.decode_ms > 0 and stats.decode_tps > 0
    assert 0 < stats.ttft_ms <= stats.total_ms
    assert stats.peak_memory_mb > 100  # float32 weights alone are ~2.4 GB

    # Same prompt again: all but the last prompt token come from the KV cache, and greedy
    # decoding continues identically.
    again, stats2 = collect(backend.generate(SHORT_CHAT, max_tokens=2))
    assert stats2.cached_prompt_tokens == n_prompt - 1
    assert stats2.prompt_tokens == n_prompt
    assert text.startswith(again), (text, again)

    info = backend.info()
    assert info.extra["weights_loaded"] is True
    assert info.extra["load_ms"] > 0


@pytest.mark.model
def test_float32_greedy_matches_llama_cpp(backend, gguf_path: Path) -> None:
    """Same weights (dequantized), same prompt ids, greedy: the two engines agree."""
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    llama = LlamaCppBackend(gguf_path, n_ctx=512)
    try:
        assert llama.prompt_ids(SHORT_CHAT) == backend.prompt_ids(SHORT_CHAT)
        theirs, _ = collect(llama.generate(SHORT_CHAT, max_tokens=6))
    finally:
        llama.close()
    ours, _ = collect(backend.generate(SHORT_CHAT, max_tokens=6))
    assert ours == theirs


@pytest.mark.model
def test_generate_quantized_q4(gguf_path: Path) -> None:
    from backends.mlx import MlxBackend

    b = MlxBackend(_converted(gguf_path, quantize=True))
    try:
        assert b.info().quantization == "q4"
        text, stats = collect(b.generate(SHORT_CHAT, max_tokens=6))
        assert text.strip()
        assert stats.decode_tokens >= 1 and stats.prompt_tokens == b.count_messages(SHORT_CHAT)
        # MLX's peak is process-wide (the float32 model of the other tests may still be loaded).
        assert stats.peak_memory_mb > 0
    finally:
        b.close()


@pytest.mark.model
def test_stream_yields_text_then_stats(backend) -> None:
    items = list(backend.generate(SHORT_CHAT, max_tokens=1))
    assert isinstance(items[-1], GenerationStats)
    assert all(isinstance(i, str) for i in items[:-1])
    assert items[-1].decode_tokens == 1


@pytest.mark.model
def test_closing_a_stream_early_keeps_the_engine_usable(backend) -> None:
    stream = backend.generate(SHORT_CHAT, max_tokens=6)
    first = next(stream)
    assert isinstance(first, str)
    stream.close()  # the engine thread stops at its next token
    n_cached, ids = backend.engine_state()
    assert len(ids) == n_cached >= backend.count_messages(SHORT_CHAT) - 1
    text, stats = collect(backend.generate(SHORT_CHAT, max_tokens=1))
    assert text and stats.cached_prompt_tokens == stats.prompt_tokens - 1


def _schema_errors(value, schema: dict) -> list[str]:
    """Every way `value` breaks `schema`, by jsonschema_rs (schemathesis, a dev dependency, brings
    it); without it only the explicit checks in each test run."""
    try:
        import jsonschema_rs
    except ImportError:
        return []
    return [e.message for e in jsonschema_rs.validator_for(schema).iter_errors(value)]


# What the summarizer's schema asks for, spelled out for the model to copy: short, so the
# constrained run ends well inside its token budget on a 2-core CPU.
NARRATIVE_CHAT = [
    {"role": "system", "content": "Answer with JSON only."},
    {"role": "user", "content": 'Repeat exactly: {"goal": "Fix the flaky test", "key_decisions": [], "next_steps": ["Update README"]}'},
]


@pytest.mark.model
def test_json_schema_narrative_validates(backend) -> None:
    pytest.importorskip("llguidance")
    from worker.pipeline.summarize import NARRATIVE_SCHEMA

    assert backend.supports_json_schema is True
    text, stats = collect(backend.generate(NARRATIVE_CHAT, max_tokens=48, json_schema=NARRATIVE_SCHEMA))
    assert stats.finish_reason == "stop", text  # the schema's end, not the token limit
    value = json.loads(text)
    assert _schema_errors(value, NARRATIVE_SCHEMA) == []
    assert set(value) == {"goal", "key_decisions", "next_steps"}
    assert isinstance(value["goal"], str) and isinstance(value["next_steps"], list)


@pytest.mark.model
def test_json_schema_constrains_what_greedy_would_not_write(backend) -> None:
    """Asked to say hi, greedy decoding greets in prose; under the schema it must write an
    object with one integer field and nothing else."""
    pytest.importorskip("llguidance")
    schema = {
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["count"],
        "additionalProperties": False,
    }
    free, _ = collect(backend.generate(SHORT_CHAT, max_tokens=4))
    with pytest.raises(ValueError):
        json.loads(free)
    text, stats = collect(backend.generate(SHORT_CHAT, max_tokens=16, json_schema=schema))
    assert stats.finish_reason == "stop", text
    value = json.loads(text)
    assert _schema_errors(value, schema) == []
    assert list(value) == ["count"] and type(value["count"]) is int and 0 <= value["count"] <= 9


@pytest.mark.model
def test_json_schema_refusals(backend, monkeypatch) -> None:
    pytest.importorskip("llguidance")
    # A schema llguidance cannot enforce is one line, before anything is decoded.
    with pytest.raises(BackendError, match="json_schema"):
        backend.generate(SHORT_CHAT, max_tokens=4, json_schema={"type": "object", "$ref": "#/$defs/missing"})
    # Without llguidance the backend says so instead of decoding unconstrained.
    monkeypatch.setattr(backend, "supports_json_schema", False)
    with pytest.raises(BackendError, match="without llguidance"):
        backend.generate(SHORT_CHAT, max_tokens=4, json_schema={"type": "object"})


@pytest.mark.model
def test_context_overflow_refused(backend) -> None:
    with pytest.raises(BackendError, match="exceeds the context"):
        backend.generate(SHORT_CHAT, max_tokens=backend.n_ctx)


@pytest.mark.model
def test_info(backend) -> None:
    info = backend.info()
    assert info.engine == "mlx"
    assert "mlx " in info.engine_version and "mlx-lm " in info.engine_version
    assert info.architecture == "qwen2"
    assert info.quantization == "float32"
    assert info.trained_context == 32768
    assert info.vocab_size == 151936
    assert "Qwen2.5 Coder 0.5B" in info.model_name
    assert info.extra["source_quantization"] == "Q4_K_M"


def test_stop_matcher() -> None:
    from backends.mlx import _StopMatcher

    m = _StopMatcher(["END", "\n\n"])
    out = m.feed("abc E") + m.feed("N") + m.feed("D tail")
    assert out == "abc " and m.hit
    m = _StopMatcher(["END"])
    assert m.feed("abc EN") == "abc " and m.feed("x") == "ENx" and not m.hit
    assert _StopMatcher([]).feed("abc") == "abc"


# -- converter refusals ----------------------------------------------------------------


def test_convert_refuses_non_gguf(tmp_path: Path) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx

    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf at all")
    with pytest.raises(BackendError, match="not a GGUF"):
        convert_gguf_to_mlx(bogus, tmp_path / "out")
    with pytest.raises(BackendError, match="not found"):
        convert_gguf_to_mlx(tmp_path / "missing.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_convert_refuses_bad_dtype(tmp_path: Path) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx

    with pytest.raises(BackendError, match="unknown dtype"):
        convert_gguf_to_mlx(tmp_path / "x.gguf", tmp_path / "out", dtype="int8")


@pytest.mark.model
def test_convert_refuses_non_empty_out_dir(tmp_path: Path, gguf_path: Path) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(BackendError, match="not empty"):
        convert_gguf_to_mlx(gguf_path, out)
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.model
def test_convert_refuses_other_architectures(tmp_path: Path) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx
    from backends.models import resolve

    try:
        gemma = resolve("gemma3-270m").path
    except BackendError as exc:
        pytest.skip(f"gemma3-270m not available: {exc}")
    with pytest.raises(BackendError, match="architecture 'gemma3'"):
        convert_gguf_to_mlx(gemma, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.model
def test_convert_refuses_truncated_gguf(tmp_path: Path, gguf_path: Path, monkeypatch) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx

    monkeypatch.setenv("COMPACTD_CACHE_DIR", str(tmp_path / "cache"))  # keep the user cache clean

    cut = tmp_path / "cut.gguf"
    with gguf_path.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(64 * 1024 * 1024))  # metadata intact, tensor data cut short
    with pytest.raises(BackendError, match="truncated"):
        convert_gguf_to_mlx(cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.model
def test_interrupted_convert_leaves_nothing(tmp_path: Path, gguf_path: Path) -> None:
    from backends.mlx_convert import convert_gguf_to_mlx

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf_to_mlx(gguf_path, out, progress=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_backend_refuses_non_model_dir(tmp_path: Path) -> None:
    from backends.mlx import MlxBackend

    with pytest.raises(BackendError, match="not found"):
        MlxBackend(tmp_path / "nope")
    with pytest.raises(BackendError, match="no config.json"):
        MlxBackend(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BackendError, match="tokenizer.json"):
        MlxBackend(tmp_path)


# -- compaction ------------------------------------------------------------------------

# A small session that overflows a 6000-token window through its tool outputs; the head the
# model summarizes is a few hundred tokens (outputs are gisted), so CPU MLX can do it.
MLX_CONTEXT_LIMIT = 6000
MLX_OUTPUT_LINES = 260  # ~2.3k tokens per tool output: three of them overflow usable 4500


def _small_overflowing_session():
    from tests.fakes import SessionBuilder

    b = SessionBuilder("mlx").system("You are a coding agent.")
    for t, name in enumerate(("parser", "loader", "cache")):
        b.user(f"Fix the failing test of src/{name}.py; keep the public API unchanged.")
        out = "\n".join(f"tests/test_{name}.py::test_case_{i} PASSED" for i in range(MLX_OUTPUT_LINES))
        b.tool("bash", {"command": f"pytest tests/test_{name}.py"},
               f"FAILED tests/test_{name}.py::test_edge - AssertionError: expected {t}\n{out}", is_error=True)
        b.assistant(f"src/{name}.py returns the wrong value for an empty input; fixing it.")
    return b.build()


@pytest.mark.model
def test_compaction_on_mlx_uses_the_model(backend) -> None:
    from worker.pipeline import CompactionConfig, compact
    from worker.tokens import TokenCounter

    session = _small_overflowing_session()
    config = CompactionConfig(context_limit=MLX_CONTEXT_LIMIT)  # the summarizer's own output bound
    before = TokenCounter(backend).total(session)
    assert before > config.budget().usable  # it overflows, so the compaction is due
    result = compact(session, backend, config)
    cp = result.checkpoint
    s = result.summarize
    assert s is not None and len(s.stats) == 1  # one model call: the bounded input needs no folding
    assert 1 <= s.stats[0].decode_tokens <= config.max_new_tokens
    assert cp.verification.fallback == "", s.raw_outputs  # MLX's own narrative, not the fallback
    assert s.narrative.goal and s.narrative.goal in cp.summary_text
    assert cp.tokens.before == before
    assert cp.tokens.after == TokenCounter(backend).messages(cp.messages) <= config.budget().usable
