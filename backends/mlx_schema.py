"""JSON-schema-constrained decoding for the MLX backend, through llguidance.

mlx-lm has no grammar engine of its own but takes logits processors; this module makes one
from a JSON schema. llguidance was chosen over xgrammar and outlines (figures in
benchmarks/RESULTS.md, "MLX schema-constrained decoding"): it installs alone (no torch, no
triton), compiles the summarizer's schema in milliseconds (an Earley parser, no automaton built
ahead), computes the next-token mask in well under a millisecond, and implements `maxLength` and
`maxItems` exactly.

llguidance's own `llguidance.mlx` (like outlines-core's) applies the mask with a Metal kernel,
which the Linux CPU wheel of MLX does not have; here the bitmask is unpacked with numpy and
applied with `mx.where`, which runs on every MLX device.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from typing import Any

from .base import BackendError

# Tokens the model is never allowed to emit under a schema get this logit (softmax weight 0).
NEG_INF = float("-inf")


def available() -> bool:
    """True when llguidance can be imported (the `mlx` extra installs it)."""
    return importlib.util.find_spec("llguidance") is not None


class SchemaCompiler:
    """One llguidance tokenizer per model (building it reads the whole vocabulary, ~1 s, so it is
    built once, on the first schema request) and a matcher per request."""

    def __init__(self, tokenizer_json: str, n_vocab: int, eos_ids: list[int]):
        self._tokenizer_json = tokenizer_json
        self.n_vocab = n_vocab
        self._eos_ids = eos_ids
        self._ll_tokenizer: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._ll_tokenizer is None:
                import llguidance

                self._ll_tokenizer = llguidance.LLTokenizer(
                    self._tokenizer_json, n_vocab=self.n_vocab, eos_token=self._eos_ids[0] if self._eos_ids else None
                )
            return self._ll_tokenizer

    def processor(self, schema: dict[str, Any]) -> SchemaProcessor:
        """A fresh logits processor for one generation; BackendError for a schema llguidance
        cannot honour (one line, raised before any decoding starts)."""
        try:
            import llguidance
        except ImportError as exc:
            raise BackendError(f"json_schema on MLX needs llguidance ({exc}); install 'compactd[mlx]'") from None
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        except (TypeError, ValueError) as exc:
            raise BackendError(f"json_schema is not valid: {exc}") from None
        try:
            matcher = llguidance.LLMatcher(self._tokenizer(), grammar, log_level=0)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise BackendError(f"json_schema cannot be enforced: {str(exc).splitlines()[0]}") from None
        if matcher.is_error():
            raise BackendError(f"json_schema cannot be enforced: {matcher.get_error().splitlines()[0]}")
        return SchemaProcessor(matcher, self.n_vocab)


class SchemaProcessor:
    """An mlx-lm logits processor: `(tokens, logits) -> logits` with every token the schema
    forbids next set to -inf.

    mlx-lm calls it first with the prompt (nothing to consume yet), then once per step with the
    sequence so far, whose last token is the one just sampled.
    """

    def __init__(self, matcher: Any, n_vocab: int):
        import numpy as np
        from llguidance.numpy import allocate_token_bitmask

        self.matcher = matcher
        self.bitmask = allocate_token_bitmask(1, n_vocab)
        self._np = np
        self._started = False

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx
        from llguidance.numpy import fill_next_token_bitmask

        if self._started:
            if self.matcher.is_stopped():
                # The schema's end (EOS) was sampled; mlx-lm computes one step ahead before it
                # stops, and that step's token is thrown away.
                return logits
            if not self.matcher.consume_token(int(tokens[-1].item())):
                raise BackendError(f"schema-constrained decoding failed: {self.matcher.get_error()}")
        self._started = True
        fill_next_token_bitmask(self.matcher, self.bitmask)
        vocab = logits.shape[-1]
        allowed = self._np.unpackbits(self.bitmask.view(self._np.uint8), bitorder="little")[:vocab]
        return mx.where(mx.array(allowed.astype(bool)), logits, NEG_INF)
