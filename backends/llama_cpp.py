"""llama.cpp through llama-cpp-python.

Counting never loads weights: a vocab-only Llama (or the cached `tokenizers` rebuild of the
GGUF vocabulary, which gives identical ids) answers tokenize/count. The full model is
loaded on first generate, on the one inference thread that owns it. Prompts are rendered
with the GGUF's own chat template (see chat_template.py) and passed as token ids, so the
prompt the engine evaluates is exactly the one counted.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import BackendError, ChatMessage, GenerationStats, ModelInfo
from .chat_template import ChatTemplate
from .engine_thread import FOREGROUND, EngineThread
from .gguf_meta import check_gguf_file, load_tokenizer, read_meta
from .local_tokenizer import LocalTokenizerMixin, peak_rss_mb

# vocab_only with n_ctx=0 fails (n_ctx_train reads 0 without weights): give it a small one.
VOCAB_ONLY_N_CTX = 512
DEFAULT_N_CTX = 8192
DEFAULT_N_BATCH = 512
# n_gpu_layers: a CUDA or Metal build offloads the whole model (a 0.5-1.5B model fits any GPU);
# a CPU build ignores it.
OFFLOAD_ALL_LAYERS = -1
# Saved KV states of summarizer prompts, per cache key (a session): successive updates of one
# session share instructions + previous summary + the conversation so far, so only the new
# messages are evaluated. A few entries: each holds the KV of one bounded summarizer prompt
# (about 28 KB a token with the 1.5B, so ~130 MB at 4.8k tokens).
PREFIX_CACHE_ENTRIES = 3


def _import_llama() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise BackendError("llama-cpp-python is not installed: pip install 'compactd[llama]'") from None
    return llama_cpp


def accelerator() -> str:
    """The GPU backend this llama.cpp build runs on ("CUDA", "Metal", "Vulkan"...), or "CPU".

    llama.cpp's system info lists one `NAME : features |` group per compiled backend, CPU
    first; a build with a GPU backend offloads every layer to it (OFFLOAD_ALL_LAYERS)."""
    llama_cpp = _import_llama()
    if not llama_cpp.llama_supports_gpu_offload():
        return "CPU"
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    names = [g.split(" : ", 1)[0].strip() for g in info.split("|") if " : " in g]
    gpus = [n for n in names if n and n != "CPU"]
    return gpus[0] if gpus else "GPU"


# On a CPU build llama.cpp repacks most quantized weights (Q4_K as q4_K_8x8) into a buffer of
# its own; with the GGUF memory-mapped, the mapped pages it read them from stay resident too,
# so those weights are held twice (1.5B: RSS 1,973 MB mapped vs 1,382 MB read, measured). A GPU
# build keeps the map: Metal wraps the mapped file without a copy, CUDA only reads it once.
def use_mmap() -> bool:
    return accelerator() != "CPU"


def _engine_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return "not installed"


def default_threads() -> int:
    """Inference threads when none are asked for: every core. On busy cores fewer decode faster
    (benchmarks/threads.py); the default changes once that is measured on an idle machine too."""
    return max(1, os.cpu_count() or 1)


@dataclass
class KvState:
    """The context's KV state and evaluated ids, without llama-cpp-python's logits matrix:
    `Llama.save_state` copies `scores` (n_batch x n_vocab floats: 311 MB with Qwen's 152k
    vocabulary) into every saved state, and `load_state` writes it back, although sampling reads
    the logits inside llama.cpp (with logits_all off, `scores` is never read)."""

    input_ids: Any
    n_tokens: int
    data: Any  # ctypes buffer from llama_state_get_data
    size: int
    seed: int


def _save_kv(llm: Any) -> KvState:
    import llama_cpp

    capacity = llama_cpp.llama_state_get_size(llm.ctx)
    buf = (ctypes.c_uint8 * int(capacity))()
    size = int(llama_cpp.llama_state_get_data(llm.ctx, buf, capacity))
    if size > capacity:
        raise BackendError("llama.cpp returned more state than it announced")
    return KvState(llm.input_ids.copy(), llm.n_tokens, buf, size, llm._seed)


def _load_kv(llm: Any, state: KvState) -> None:
    import llama_cpp

    llm.input_ids = state.input_ids.copy()
    llm.n_tokens = state.n_tokens
    llm._requires_eval = True
    llm._seed = state.seed
    if llama_cpp.llama_state_set_data(llm.ctx, state.data, state.size) != state.size:
        raise BackendError("llama.cpp could not restore a saved KV state")


class LlamaCppBackend(LocalTokenizerMixin):
    engine_name = "llama.cpp"
    supports_json_schema = True  # GBNF grammar from the schema: the output always parses

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        n_batch: int = DEFAULT_N_BATCH,
        chat_format: str | None = None,
        tokenizer: str = "auto",  # "auto" (tokenizers when exact, else engine), "engine", "tokenizers"
        seed: int = 0,
        model_name: str | None = None,
    ):
        self.path = check_gguf_file(model_path)
        self.meta = read_meta(self.path)
        self.add_bos = self.meta.add_bos
        self.model_name = model_name or self.meta.name
        self.template = ChatTemplate(
            self.meta.chat_template, self.meta.bos_token, self.meta.eos_token, chat_format, self.model_name
        )
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.n_batch = n_batch
        self.seed = seed
        self._tok = None
        if tokenizer in ("auto", "tokenizers"):
            try:
                self._tok = load_tokenizer(self.path)
            except BackendError:
                if tokenizer == "tokenizers":
                    raise
        self._vocab: EngineThread | None = None
        self._model: EngineThread | None = None
        self._prefix_states: OrderedDict[str, Any] = OrderedDict()  # touched on the engine thread only

    # -- loading -------------------------------------------------------------------------

    @property
    def _llama_cpp(self) -> Any:
        # Imported on first engine use: counting through `tokenizers` needs no engine at all.
        return _import_llama()

    def _load(self, vocab_only: bool) -> Any:
        kwargs: dict[str, Any] = dict(model_path=str(self.path), verbose=False, seed=self.seed)
        if vocab_only:
            kwargs.update(vocab_only=True, n_ctx=VOCAB_ONLY_N_CTX)
        else:
            kwargs.update(n_ctx=self.n_ctx, n_threads=self.n_threads, n_batch=self.n_batch,
                          n_gpu_layers=OFFLOAD_ALL_LAYERS, use_mmap=use_mmap())
        try:
            return self._llama_cpp.Llama(**kwargs)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"llama.cpp could not load {self.path} (truncated or corrupt?): {exc}") from None

    def _vocab_thread(self) -> EngineThread:
        if self._model is not None:
            return self._model
        if self._vocab is None:
            self._vocab = EngineThread("compactd-llama-vocab", lambda: self._load(vocab_only=True))
        return self._vocab

    def load(self) -> None:
        """Load the weights now (otherwise on first generate)."""
        if self._model is None:
            self._model = EngineThread("compactd-llama", lambda: self._load(vocab_only=False))

    @property
    def loaded(self) -> bool:
        return self._model is not None

    # -- tokens --------------------------------------------------------------------------

    def engine_tokenize(self, text: str) -> list[int]:
        """Token ids from llama.cpp itself (special tokens parsed, no BOS added)."""
        data = text.encode("utf-8")
        return self._vocab_thread().call(lambda llm: llm.tokenize(data, add_bos=False, special=True))

    # -- generation ----------------------------------------------------------------------

    def generate(
        self,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
        priority: int = FOREGROUND,
        isolated: bool = True,
        cache_key: str | None = None,
        stop: list[str] | None = None,
        repeat_penalty: float = 1.0,
    ) -> Iterator[str | GenerationStats]:
        """Stream text chunks, then one GenerationStats.

        isolated: restore the engine's previous KV state afterwards, so a summarizer request
        never evicts the agent's own cached prefix. cache_key: start from, and keep, the KV
        state of the previous request with the same key (prefix reuse across updates)."""
        ids = self.prompt_ids(messages)
        if len(ids) + max_tokens > self.n_ctx:
            raise BackendError(
                f"prompt of {len(ids)} tokens + {max_tokens} to generate exceeds the context of {self.n_ctx}"
            )
        self.load()
        assert self._model is not None
        return self._model.stream(
            lambda llm: self._generate_on_thread(
                llm, ids, max_tokens, temperature, json_schema, isolated, cache_key, stop, repeat_penalty
            ),
            priority,
        )

    def _generate_on_thread(
        self,
        llm: Any,
        ids: list[int],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        isolated: bool,
        cache_key: str | None,
        stop: list[str] | None,
        repeat_penalty: float,
    ) -> Iterator[str | GenerationStats]:
        lc = self._llama_cpp
        saved = _save_kv(llm) if isolated and llm.n_tokens > 0 else None
        if cache_key is not None and cache_key in self._prefix_states:
            _load_kv(llm, self._prefix_states[cache_key])
            self._prefix_states.move_to_end(cache_key)
        grammar = None
        if json_schema is not None:
            grammar = lc.LlamaGrammar.from_json_schema(json.dumps(json_schema), verbose=False)
        lc.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        ttft = 0.0
        finish = ""
        try:
            for chunk in llm.create_completion(
                prompt=ids,
                max_tokens=max_tokens,
                temperature=temperature,
                top_k=1 if temperature == 0 else 40,
                repeat_penalty=repeat_penalty,
                grammar=grammar,
                stop=stop or [],
                stream=True,
                seed=self.seed,
            ):
                choice = chunk["choices"][0]
                text = choice.get("text") or ""
                if text:
                    if not ttft:
                        ttft = (time.perf_counter() - t0) * 1000
                    yield text
                finish = choice.get("finish_reason") or finish
            perf = lc.llama_perf_context(llm.ctx)
            total = (time.perf_counter() - t0) * 1000
            evaluated = int(perf.n_p_eval)
            yield GenerationStats(
                prompt_tokens=len(ids),
                cached_prompt_tokens=max(0, len(ids) - evaluated),
                prompt_ms=float(perf.t_p_eval_ms),
                decode_tokens=int(perf.n_eval),
                decode_ms=float(perf.t_eval_ms),
                ttft_ms=ttft or total,
                total_ms=total,
                peak_memory_mb=peak_rss_mb(),
                finish_reason=finish or "stop",
            )
            if cache_key is not None:
                self._prefix_states[cache_key] = _save_kv(llm)
                self._prefix_states.move_to_end(cache_key)
                while len(self._prefix_states) > PREFIX_CACHE_ENTRIES:
                    self._prefix_states.popitem(last=False)
        finally:
            if saved is not None:
                _load_kv(llm, saved)

    def engine_state(self) -> tuple[int, list[int]]:
        """(n_tokens, evaluated token ids) of the loaded context: what a prefix cache reuses."""
        if self._model is None:
            return 0, []
        return self._model.call(lambda llm: (llm.n_tokens, list(llm.input_ids[: llm.n_tokens])))

    # -- description ---------------------------------------------------------------------

    def info(self) -> ModelInfo:
        return ModelInfo(
            engine=self.engine_name,
            engine_version=_engine_version(),
            model_name=self.model_name,
            model_path=str(self.path),
            architecture=self.meta.architecture,
            quantization=self.meta.quantization,
            trained_context=self.meta.context_length,
            vocab_size=self.meta.vocab_size,
            context_size=self.n_ctx,
            accelerator=accelerator(),
            extra={
                "tokenizer": "tokenizers (rebuilt from GGUF vocab)" if self._tok is not None else "llama.cpp",
                "threads": self.n_threads,
                "batch": self.n_batch,
                "weights_loaded": self.loaded,
                "file_size": Path(self.path).stat().st_size,
            },
        )

    def close(self) -> None:
        for t in (self._model, self._vocab):
            if t is not None:
                t.close()
        self._model = self._vocab = None
