"""The tokens half of the backends that count locally (llama.cpp, MLX).

Both render chat messages with the model's own template (chat_template.py) and tokenize with
a `tokenizers` rebuild of the vocabulary, so the counting code is the same: this mixin holds
it once. The llama.cpp backend falls back to the engine's own tokenizer when no exact
`tokenizers` rebuild exists (`engine_tokenize`).
"""

from __future__ import annotations

import resource
from typing import Any

from .base import BackendError, ChatMessage
from .chat_template import ChatTemplate


def peak_rss_mb() -> float:
    """The process's peak resident memory, in MB (ru_maxrss is in KB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class LocalTokenizerMixin:
    """tokenize / count / count_batch / render_messages / prompt_ids / count_messages.

    The class sets `template` (the model's ChatTemplate), `add_bos` (whether the engine puts a
    BOS token before a prompt) and `_tok` (a `tokenizers.Tokenizer`, or None to tokenize
    with `engine_tokenize`)."""

    template: ChatTemplate
    add_bos: bool
    _tok: Any

    def engine_tokenize(self, text: str) -> list[int]:
        raise BackendError(f"{type(self).__name__} has no tokenizer")

    def tokenize(self, text: str) -> list[int]:
        if self._tok is not None:
            return self._tok.encode(text, add_special_tokens=False).ids
        return self.engine_tokenize(text)

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def count_batch(self, texts: list[str]) -> list[int]:
        if self._tok is not None:
            return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        return [self.count(t) for t in texts]

    def render_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                        tools: list[dict[str, Any]] | None = None) -> str:
        return self.template.render(messages, add_generation_prompt, tools)

    def prompt_ids(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                   tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The token ids the engine is fed for `messages` (BOS included when the model adds one)."""
        return self.tokenize(self.template.prompt_text(messages, add_generation_prompt, self.add_bos, tools))

    def count_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                       tools: list[dict[str, Any]] | None = None) -> int:
        return len(self.prompt_ids(messages, add_generation_prompt, tools))
