"""The engine-neutral backend protocol.

Every engine (llama.cpp, MLX, a remote OpenAI-compatible server) offers the same small
surface: exact tokenization of text and of chat messages (template included), streamed
generation ending in a stats record, and a description of the loaded model. The pipeline
talks to nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

# A chat message as engines take it: {"role": ..., "content": ...}.
ChatMessage = dict[str, Any]


class BackendError(RuntimeError):
    """A model or engine problem worth one clear line to the user (bad file, no template...)."""


@dataclass
class GenerationStats:
    """Per-request figures, the last item of every `generate` stream."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    prompt_ms: float = 0.0
    decode_tokens: int = 0
    decode_ms: float = 0.0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    peak_memory_mb: float = 0.0
    finish_reason: str = ""

    @property
    def prompt_tps(self) -> float:
        evaluated = self.prompt_tokens - self.cached_prompt_tokens
        return evaluated / (self.prompt_ms / 1000) if self.prompt_ms > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompt_tps"] = round(self.prompt_tps, 2)
        d["decode_tps"] = round(self.decode_tps, 2)
        return d


@dataclass
class ModelInfo:
    engine: str
    engine_version: str
    model_name: str
    model_path: str
    architecture: str
    quantization: str
    trained_context: int
    vocab_size: int
    context_size: int = 0
    accelerator: str = "CPU"  # where the weights run: "CPU", "CUDA", "Metal", an MLX device, "remote"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SpecialTokens(Protocol):
    """What the HTTP /tokenize route reads of a model's metadata (GGUF's GgufMeta has it)."""

    add_bos: bool
    bos_token: str


@runtime_checkable
class Backend(Protocol):
    """What the pipeline needs from an engine. Implementations must be safe to call from any
    thread: engine objects themselves live on one dedicated inference thread."""

    # True: generate(json_schema=...) constrains the output to the schema (it always parses);
    # False: a json_schema is refused, so callers ask for JSON in the prompt instead.
    supports_json_schema: bool
    # The model's special-token metadata, or None where the engine handles BOS itself.
    meta: SpecialTokens | None

    def load(self) -> None:
        """Load the weights now (otherwise on first generate); a no-op for a remote engine."""
        ...

    def tokenize(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...

    def render_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                        tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text of `messages` with the model's template; `tools` are the tool
        definitions the agent sends (OpenAI `tools` entries), rendered where the template puts them."""
        ...

    def count_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                       tools: list[dict[str, Any]] | None = None) -> int: ...

    def generate(
        self,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
        priority: int = 0,
        isolated: bool = True,
        cache_key: str | None = None,
        stop: list[str] | None = None,
    ) -> Iterator[str | GenerationStats]:
        """Stream text chunks, then one GenerationStats. isolated: leave the engine's cached
        prefix as it was; cache_key: reuse the KV state of the previous request with this key;
        stop: end the text before the first of these strings (where the engine supports it)."""
        ...

    def info(self) -> ModelInfo: ...

    def close(self) -> None: ...


def collect(stream: Iterator[str | GenerationStats]) -> tuple[str, GenerationStats]:
    """Drain a generate() stream into (text, stats)."""
    parts: list[str] = []
    stats = GenerationStats()
    for item in stream:
        if isinstance(item, GenerationStats):
            stats = item
        else:
            parts.append(item)
    return "".join(parts), stats
