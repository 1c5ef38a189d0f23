"""MLX through mlx-lm, for model directories made by `mlx_convert.convert_gguf_to_mlx`.

Counting never touches MLX: tokenize/count use `tokenizers.Tokenizer.from_file(tokenizer.json)`
directly (for a converted GGUF that file is the exact rebuild of the GGUF vocabulary, so ids
equal llama.cpp's; mlx-lm's own transformers tokenizer would add an NFC normalizer). Chat
messages are rendered with the model's template from tokenizer_config.json exactly as the
llama.cpp backend renders the GGUF's, and generation is fed those very token ids.

The weights are loaded on first generate, on the one inference thread that owns them (MLX
streams are thread-local; mlx-lm's generation stream is created per thread). On the Linux
CPU wheel float16 matmuls, quantized ones above all, are tens of times slower than float32,
so the model is cast to float32 after loading (packed quantized weights stay packed).

json_schema: mlx-lm has no grammar engine; with llguidance installed (the `mlx` extra) a
json_schema becomes a logits processor (backends/mlx_schema.py) that masks every token the
schema forbids, so the output always parses, as on llama.cpp. Without llguidance a json_schema
raises BackendError and supports_json_schema is False. Prompt reuse: one mlx-lm KV cache
per model, trimmed to the longest common prefix with each new prompt, so only the new
suffix is evaluated (reported as cached_prompt_tokens).

Stats come from mlx-lm's GenerationResponse (prompt/generation tps, token counts);
peak_memory_mb is MLX's own peak of allocated memory (process-wide, reset per request), not
the process RSS, which info().extra reports as peak_rss_mb.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from .base import BackendError, ChatMessage, GenerationStats, ModelInfo
from .chat_template import ChatTemplate
from .engine_thread import FOREGROUND, EngineThread
from .local_tokenizer import LocalTokenizerMixin, peak_rss_mb
from .mlx_schema import SchemaCompiler, SchemaProcessor
from .mlx_schema import available as _schema_available

RUNTIME_DTYPES = ("float32", "float16", "bfloat16", "stored")
# llama.cpp backend parity: sampling at temperature > 0 draws from the 40 likeliest tokens.
TOP_K = 40


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot read {path}: {exc}") from None


def _token_str(value: Any) -> str:
    # HF configs store special tokens either as strings or as serialized AddedToken dicts.
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return str(value or "")


def _device() -> str:
    """MLX's default device: the Apple GPU (Metal) on Apple Silicon, the CPU elsewhere."""
    import mlx.core as mx

    return "Metal" if mx.default_device().type == mx.gpu else "CPU"


def _versions() -> tuple[str, str]:
    def v(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    return v("mlx"), v("mlx-lm")


def check_model_dir(path: str | os.PathLike) -> Path:
    """Fail with one clear line unless `path` is an MLX model directory we can count with."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise BackendError(f"MLX model directory not found: {p}")
    if not (p / "config.json").exists():
        raise BackendError(f"not an MLX model directory (no config.json): {p}")
    if not (p / "tokenizer.json").exists():
        raise BackendError(f"MLX model directory has no tokenizer.json (convert it with compactd): {p}")
    if not any(p.glob("model*.safetensors")):
        raise BackendError(f"MLX model directory has no model*.safetensors weights: {p}")
    return p


class _ExactDetokenizer:
    """mlx-lm StreamingDetokenizer interface over our own `tokenizers` tokenizer.

    Decodes the ids not yet emitted and holds them back while they end inside a UTF-8
    character (a byte-level BPE token can be a partial character); never trims spaces,
    so the text is exactly `tokenizer.decode(all ids)`.
    """

    def __init__(self, tokenizer: Any, _hf_tokenizer: Any = None):
        self._tok = tokenizer
        self.reset()

    def reset(self) -> None:
        self.offset = 0
        self.text = ""
        self.tokens: list[int] = []
        self._pending: list[int] = []

    def add_token(self, token: int) -> None:
        self.tokens.append(token)
        self._pending.append(token)
        piece = self._tok.decode(self._pending, skip_special_tokens=False)
        # Up to 4 tokens may make one character; past that a U+FFFD is real, not partial.
        if piece.endswith("\ufffd") and len(self._pending) < 4:
            return
        self.text += piece
        self._pending = []

    def finalize(self) -> None:
        if self._pending:
            self.text += self._tok.decode(self._pending, skip_special_tokens=False)
            self._pending = []

    @property
    def last_segment(self) -> str:
        segment = self.text[self.offset :]
        self.offset = len(self.text)
        return segment


@dataclass
class _Engine:
    """What lives on the inference thread: the model, mlx-lm's tokenizer wrapper (used only
    to detokenize and to know the stop ids) and the reusable KV cache."""

    model: Any
    wrapper: Any
    load_ms: float
    cache: list[Any] | None = None
    cache_tokens: list[int] = field(default_factory=list)


class _StopMatcher:
    """Cuts the stream at the first stop string, holding back text that may begin one."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.buf = ""
        self.hit = False

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        self.buf += text
        cut = min((i for i in (self.buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.buf, self.hit = self.buf[:cut], "", True
            return out
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.buf)), 0, -1):
                if self.buf.endswith(s[:k]):
                    keep = max(keep, k)
                    break
        out, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep :]
        return out

    def flush(self) -> str:
        out, self.buf = self.buf, ""
        return out


class MlxBackend(LocalTokenizerMixin):
    engine_name = "mlx"
    # A llguidance logits processor from the schema; without llguidance callers ask for JSON in the prompt.
    supports_json_schema = _schema_available()
    # No GGUF metadata: /tokenize's add_special adds no BOS here (as before the protocol had meta).
    meta = None

    def __init__(
        self,
        model_dir: str | os.PathLike,
        *,
        dtype: str = "float32",
        seed: int = 0,
        n_ctx: int | None = None,
        chat_format: str | None = None,
        model_name: str | None = None,
        prompt_cache: bool = True,
    ):
        """dtype: the runtime dtype of floating parameters ("stored" keeps the file's);
        float32 is the fast one on the Linux CPU wheel. n_ctx: refuse prompt + max_tokens
        beyond this (default: the trained context)."""
        if dtype not in RUNTIME_DTYPES:
            raise BackendError(f"unknown MLX dtype {dtype!r}: use one of {', '.join(RUNTIME_DTYPES)}")
        self.path = check_model_dir(model_dir)
        self.config = _read_json(self.path / "config.json")
        self.tokenizer_config = _read_json(self.path / "tokenizer_config.json")
        self.generation_config = _read_json(self.path / "generation_config.json")
        self.dtype = dtype
        self.seed = seed
        self.prompt_cache = prompt_cache
        source = self.config.get("compactd", {})
        self.model_name = model_name or source.get("source_name") or self.path.name
        self.trained_context = int(self.config.get("max_position_embeddings") or 0)
        self.n_ctx = n_ctx or self.trained_context or 32768

        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - a broken file is one line for the user
            raise BackendError(f"cannot load {self.path / 'tokenizer.json'}: {exc}") from None
        tc = self.tokenizer_config
        self.bos_token = _token_str(tc.get("bos_token"))
        self.eos_token = _token_str(tc.get("eos_token"))
        self.add_bos = bool(tc.get("add_bos_token", False))
        self.template = ChatTemplate(tc.get("chat_template"), self.bos_token, self.eos_token, chat_format,
                                     self.model_name)
        self.eos_ids = self._stop_ids()
        self._model: EngineThread | None = None
        self._schemas = SchemaCompiler(
            (self.path / "tokenizer.json").read_text(encoding="utf-8"),
            int(self.config.get("vocab_size") or self._tok.get_vocab_size(with_added_tokens=True)),
            self.eos_ids,
        )

    def _stop_ids(self) -> list[int]:
        ids: list[int] = []
        for src in (self.generation_config.get("eos_token_id"), self.config.get("eos_token_id")):
            if isinstance(src, int):
                ids.append(src)
            elif isinstance(src, list):
                ids.extend(int(i) for i in src)
        eos = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        if eos is not None:
            ids.append(eos)
        return list(dict.fromkeys(ids))

    # -- loading -------------------------------------------------------------------------

    def _load_engine(self) -> _Engine:
        # Nothing here may reach the Hugging Face hub: everything is local.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # "PyTorch was not found" noise
        try:
            import mlx.core as mx
            from mlx_lm.tokenizer_utils import TokenizerWrapper
            from mlx_lm.utils import load_model
            from tokenizers import Tokenizer
            from transformers import PreTrainedTokenizerFast
        except ImportError as exc:
            raise BackendError(
                f"MLX is not usable here ({exc}); install 'compactd[mlx]' (on Linux: mlx-lm[cpu])"
            ) from None
        t0 = time.perf_counter()
        try:
            model, _config = load_model(self.path, lazy=True)
        except (ValueError, FileNotFoundError, KeyError) as exc:
            raise BackendError(f"mlx-lm could not load {self.path}: {exc}") from None
        if self.dtype != "stored":
            model.set_dtype(getattr(mx, self.dtype))
        mx.eval(model.parameters())
        load_ms = (time.perf_counter() - t0) * 1000
        # mlx-lm's stream_generate wants a TokenizerWrapper; it only detokenizes with it (our
        # exact detokenizer) and reads the stop ids. A separate Tokenizer instance, so the
        # wrapper can never alter the one we count with.
        hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(self.path / "tokenizer.json")),
                                     eos_token=self.eos_token or None)
        wrapper = TokenizerWrapper(hf, partial(_ExactDetokenizer, self._tok), eos_token_ids=self.eos_ids)
        return _Engine(model=model, wrapper=wrapper, load_ms=load_ms)

    def load(self) -> None:
        """Load the weights now (otherwise on first generate)."""
        if self._model is None:
            self._model = EngineThread("compactd-mlx", self._load_engine)

    @property
    def loaded(self) -> bool:
        return self._model is not None

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
        """Stream text chunks, then one GenerationStats. `isolated` and `cache_key` are accepted
        for parity with llama.cpp: the one KV cache is always cut back to the prefix this prompt
        shares with the previous one, which is both the isolation and the prefix reuse."""
        if json_schema is not None and not self.supports_json_schema:
            raise BackendError("json_schema is not supported by the MLX backend without llguidance")
        if max_tokens < 1:
            raise BackendError(f"max_tokens must be at least 1, got {max_tokens}")
        ids = self.prompt_ids(messages)
        if len(ids) + max_tokens > self.n_ctx:
            raise BackendError(
                f"prompt of {len(ids)} tokens + {max_tokens} to generate exceeds the context of {self.n_ctx}"
            )
        constraint = self._schemas.processor(json_schema) if json_schema is not None else None
        self.load()
        assert self._model is not None
        return self._model.stream(
            lambda engine: self._generate_on_thread(
                engine, ids, max_tokens, temperature, stop, repeat_penalty, constraint
            ),
            priority,
        )

    def _reuse_cache(self, engine: _Engine, ids: list[int]) -> int:
        """Trim the KV cache to the prefix shared with `ids` (leaving at least one token to
        evaluate, which yields the first logits); returns the reused length."""
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

        cache = engine.cache
        if self.prompt_cache and cache is not None and can_trim_prompt_cache(cache):
            common = 0
            for a, b in zip(engine.cache_tokens, ids, strict=False):
                if a != b:
                    break
                common += 1
            reuse = min(common, len(ids) - 1)
            trim_prompt_cache(cache, cache[0].offset - reuse)
        else:
            cache = make_prompt_cache(engine.model)
            reuse = 0
        engine.cache = cache
        engine.cache_tokens = ids[:reuse]
        return reuse

    def _generate_on_thread(
        self,
        engine: _Engine,
        ids: list[int],
        max_tokens: int,
        temperature: float,
        stop: list[str] | None,
        repeat_penalty: float,
        constraint: SchemaProcessor | None = None,
    ) -> Iterator[str | GenerationStats]:
        import mlx.core as mx
        from mlx_lm.generate import stream_generate
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        mx.reset_peak_memory()
        reuse = self._reuse_cache(engine, ids)
        if temperature > 0:
            mx.random.seed(self.seed)
            sampler = make_sampler(temp=temperature, top_k=TOP_K)
        else:
            sampler = make_sampler(temp=0.0)  # argmax
        processors = make_logits_processors(repetition_penalty=repeat_penalty) if repeat_penalty != 1.0 else []
        if constraint is not None:
            processors.append(constraint)  # last: nothing may lift a forbidden token back
        matcher = _StopMatcher(stop or [])
        out_tokens: list[int] = []
        last = None
        t0 = time.perf_counter()
        ttft = 0.0
        try:
            for resp in stream_generate(
                engine.model,
                engine.wrapper,
                mx.array(ids[reuse:]),
                max_tokens=max_tokens,
                sampler=sampler,
                logits_processors=processors or None,
                prompt_cache=engine.cache,
            ):
                if not ttft:
                    ttft = (time.perf_counter() - t0) * 1000
                out_tokens.append(resp.token)
                last = resp
                text = matcher.feed(resp.text)
                if text:
                    yield text
                if matcher.hit:
                    break
            tail = matcher.flush()
            if tail:
                yield tail
            total = (time.perf_counter() - t0) * 1000
            evaluated = len(ids) - reuse
            prompt_ms = evaluated / last.prompt_tps * 1000 if last and last.prompt_tps else 0.0
            gen_tokens = last.generation_tokens if last else 0
            decode_ms = gen_tokens / last.generation_tps * 1000 if last and last.generation_tps else 0.0
            yield GenerationStats(
                prompt_tokens=len(ids),
                cached_prompt_tokens=reuse,
                prompt_ms=prompt_ms,
                decode_tokens=gen_tokens,
                decode_ms=decode_ms,
                ttft_ms=ttft or total,
                total_ms=total,
                peak_memory_mb=mx.get_peak_memory() / 2**20,
                finish_reason="stop" if matcher.hit else (last.finish_reason if last else "") or "stop",
            )
        finally:
            self._note_cache(engine, ids + out_tokens)

    @staticmethod
    def _note_cache(engine: _Engine, fed: list[int]) -> None:
        # The cache now holds a prefix of prompt + sampled tokens (mlx-lm feeds each sampled
        # token before yielding it); its offset says how long. Anything else: start afresh.
        if engine.cache is None:
            return
        offset = engine.cache[0].offset
        if offset <= len(fed):
            engine.cache_tokens = fed[:offset]
        else:
            engine.cache, engine.cache_tokens = None, []

    def engine_state(self) -> tuple[int, list[int]]:
        """(cached tokens, their ids) of the KV cache: what the next prompt can reuse."""
        if self._model is None:
            return 0, []
        return self._model.call(lambda e: (len(e.cache_tokens), list(e.cache_tokens)))

    # -- description ---------------------------------------------------------------------

    def quantization(self) -> str:
        q = self.config.get("quantization") or {}
        if isinstance(q, dict) and q.get("bits"):
            return f"q{q['bits']}"
        return self.dtype if self.dtype != "stored" else str(self.config.get("torch_dtype", "?"))

    def info(self) -> ModelInfo:
        mlx_version, mlx_lm_version = _versions()
        source = self.config.get("compactd", {})
        extra: dict[str, Any] = {
            "tokenizer": "tokenizers (tokenizer.json)",
            "runtime_dtype": self.dtype,
            "stored_dtype": self.config.get("torch_dtype"),
            "source_quantization": source.get("source_quantization"),
            "converted_from": source.get("converted_from"),
            "weights_loaded": self.loaded,
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "prompt_cache": self.prompt_cache,
        }
        if self._model is not None:
            extra["load_ms"] = round(self._model.engine.load_ms, 1)
        return ModelInfo(
            engine=self.engine_name,
            engine_version=f"mlx {mlx_version}, mlx-lm {mlx_lm_version}",
            model_name=self.model_name,
            model_path=str(self.path),
            architecture=str(self.config.get("model_type", "?")),
            quantization=self.quantization(),
            trained_context=self.trained_context,
            vocab_size=int(self.config.get("vocab_size") or self._tok.get_vocab_size(with_added_tokens=True)),
            context_size=self.n_ctx,
            accelerator=_device(),
            extra=extra,
        )

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
        self._model = None
