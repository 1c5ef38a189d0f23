"""The llama.cpp backend on the real bundled model: exact counts, template, generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.base import BackendError, GenerationStats, collect
from backends.chat_template import ChatTemplate
from backends.gguf_meta import load_tokenizer, read_meta

pytestmark = pytest.mark.model

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"

SAMPLES = {
    "zh": "触发压缩后，旧对话被替换成一个隐藏检查点。上下文窗口（context window）是有限的：32768 个词元。",
    "ja": "コンテキストの圧縮後、古い会話は要約に置き換えられます。エラー: ModuleNotFoundError",
    "en": "The CI job is red: E       AssertionError: assert Decimal('58.4730') == Decimal('58.47')",
    "specials": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<tool_call>{}</tool_call><|endoftext|>",
    "code": "def f(x):\n    return  x  *  2\t# 12345 🙂\r\n",
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_tokenizers_rebuild_matches_engine_ids(llama_backend, name):
    text = SAMPLES[name]
    assert llama_backend.tokenize(text) == llama_backend.engine_tokenize(text)


def test_tokenizers_matches_engine_on_corpus_files(llama_backend, gguf_path):
    tok = load_tokenizer(gguf_path)
    files = sorted(DATA.glob("*.md"))[:12] if DATA.exists() else []
    if not files:
        pytest.skip("benchmarks/data not vendored")
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert tok.encode(text, add_special_tokens=False).ids == llama_backend.engine_tokenize(text), f.name


def test_counts_piece_by_piece_equal_whole_text_counts(llama_backend):
    """count() sums the pieces between added tokens, each memoized: the same as the whole
    text's ids, on the samples, on transcripts with the template's tokens inside message
    text, and on a text counted twice (the memo's answer)."""
    assert llama_backend._pieces is not None  # Qwen's added tokens allow it
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    texts = list(SAMPLES.values()) + [p.read_text(encoding="utf-8")[:200_000]
                                      for p in sorted(fixtures.glob("*.jsonl"))[:6]]
    texts.append("".join(SAMPLES.values()) * 3)
    for text in texts + texts:
        assert llama_backend.count(text) == len(llama_backend.tokenize(text))


def test_template_matches_llama_cpp_python_formatter(llama_backend):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    meta = llama_backend.meta
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"command": "pytest -x"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
    ]
    theirs = Jinja2ChatFormatter(template=meta.chat_template, eos_token=meta.eos_token, bos_token=meta.bos_token)
    assert theirs(messages=messages).prompt == llama_backend.render_messages(messages)


def test_count_messages_includes_template_overhead(llama_backend, reference):
    msgs = [{"role": "user", "content": SAMPLES["zh"]}]
    overhead = llama_backend.count_messages(msgs) - llama_backend.count(SAMPLES["zh"])
    # Default system prompt + role markers + generation prompt, as transformers renders them
    # and llama.cpp tokenizes them.
    assert overhead == reference.chat_tokens(msgs) - reference.tokens(SAMPLES["zh"])
    assert llama_backend.count_messages(msgs, add_generation_prompt=False) == reference.chat_tokens(
        msgs, add_generation_prompt=False)


def test_generate_streams_text_then_stats(llama_backend):
    stream = llama_backend.generate([{"role": "user", "content": "Reply with the single word: ready"}], max_tokens=8)
    items = list(stream)
    assert isinstance(items[-1], GenerationStats)
    assert all(isinstance(x, str) for x in items[:-1])
    text = "".join(items[:-1])
    st = items[-1]
    assert text.strip()
    assert st.prompt_tokens == llama_backend.count_messages([{"role": "user", "content": "Reply with the single word: ready"}])
    assert 0 < st.decode_tokens <= 8
    assert st.prompt_ms > 0 and st.decode_ms > 0 and st.ttft_ms > 0 and st.total_ms >= st.ttft_ms
    assert st.prompt_tps > 0 and st.decode_tps > 0 and st.peak_memory_mb > 100


def test_generate_under_json_schema_parses(llama_backend):
    schema = {
        "type": "object",
        "properties": {"file": {"type": "string", "maxLength": 60}, "passed": {"type": "boolean"}},
        "required": ["file", "passed"],
    }
    prompt = [{"role": "user", "content": "tests/test_invoice.py ran and 7 tests passed. Answer as JSON with the file and whether it passed."}]
    text, stats = collect(llama_backend.generate(prompt, max_tokens=60, json_schema=schema))
    data = json.loads(text)
    assert set(data) == {"file", "passed"}
    assert isinstance(data["passed"], bool)
    assert stats.decode_tokens > 0


def test_isolated_request_restores_engine_state(llama_backend):
    agent = [{"role": "user", "content": "Say hello."}]
    collect(llama_backend.generate(agent, max_tokens=4, isolated=False))
    before = llama_backend.engine_state()
    assert before[0] > 0
    collect(llama_backend.generate([{"role": "user", "content": "Summarize: nothing happened."}], max_tokens=4))
    assert llama_backend.engine_state() == before
    # The agent's prefix is still cached: re-sending it evaluates (almost) nothing new.
    _, st = collect(llama_backend.generate(agent, max_tokens=1, isolated=False))
    assert st.cached_prompt_tokens >= st.prompt_tokens - 1


def test_prefix_cache_restores_kv_without_the_logits_matrix(llama_backend):
    first = [{"role": "user", "content": "List three colours."}]
    longer = first + [{"role": "assistant", "content": "red, green, blue"}, {"role": "user", "content": "One more."}]
    plain, _ = collect(llama_backend.generate(longer, max_tokens=8))
    collect(llama_backend.generate(first, max_tokens=4, cache_key="prefix-test"))
    state = llama_backend._prefix_states["prefix-test"]
    assert not hasattr(state, "scores")  # the KV state only: no copy of n_batch x n_vocab logits
    cached, st = collect(llama_backend.generate(longer, max_tokens=8, cache_key="prefix-test"))
    assert st.cached_prompt_tokens > 0
    assert cached == plain  # the restored state gives the same greedy answer


def test_info_describes_model(llama_backend):
    info = llama_backend.info()
    assert info.engine == "llama.cpp"
    assert info.architecture == "qwen2"
    assert info.quantization == "Q4_K_M"
    assert info.trained_context == 32768
    assert info.vocab_size == 151936


def test_gguf_without_template_is_refused_not_defaulted(gemma_path):
    meta = read_meta(gemma_path)
    assert meta.chat_template is None
    with pytest.raises(BackendError, match="no chat template"):
        ChatTemplate(meta.chat_template, meta.bos_token, meta.eos_token, None, meta.name)
    mapped = ChatTemplate(meta.chat_template, meta.bos_token, meta.eos_token, "gemma", meta.name)
    out = mapped.render([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert out == "<bos><start_of_turn>user\nS\n\nhi<end_of_turn>\n<start_of_turn>model\n"


def test_gemma_engine_counts_with_llama_cpp(gemma_path):
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(gemma_path, chat_format="gemma", n_ctx=1024)
    try:
        assert b.info().extra["tokenizer"] == "llama.cpp"  # SentencePiece: no engine-free rebuild
        assert b.count(SAMPLES["zh"]) == len(b.engine_tokenize(SAMPLES["zh"])) > 0
    finally:
        b.close()
