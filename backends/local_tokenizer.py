"""The tokens half of the backends that count locally (llama.cpp, MLX).

Both render chat messages with the model's own template (chat_template.py) and tokenize with
a `tokenizers` rebuild of the vocabulary, so the counting code is the same: this mixin holds
it once. The llama.cpp backend falls back to the engine's own tokenizer when no exact
`tokenizers` rebuild exists (`engine_tokenize`).
"""

from __future__ import annotations

import re
import resource
import threading
from collections import OrderedDict
from functools import cached_property
from typing import Any

from .base import BackendError, ChatMessage
from .chat_template import ChatTemplate

# Pieces (the text between added tokens) whose counts are kept: a long session's messages are
# each counted once, not once per chat they appear in (a share counts a message after its
# predecessor: every message is in three chats).
PIECE_MEMO = 16_384
PIECE_MEMO_MIN_CHARS = 64  # shorter pieces cost less to encode than to hash and look up


def added_token_splitter(tok: Any) -> re.Pattern[str] | None:
    """The tokenizer's added tokens as one pattern (longest first), when a text's count is the
    sum of its pieces' counts: `tokenizers` matches added tokens in the raw text before
    normalizing and pre-tokenizing, and encodes the text between them piece by piece, unless an
    added token strips its neighbours, matches whole words only or matches after normalization.
    None when one does (or the tokenizer cannot list them): count the whole text."""
    try:
        added = list(tok.get_added_tokens_decoder().values())
    except AttributeError:
        return None
    if not added or any(a.lstrip or a.rstrip or a.single_word or a.normalized for a in added):
        return None
    contents = sorted({a.content for a in added}, key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")


class PieceCounter:
    """Exact counts, each piece between added tokens encoded once per process (bounded memo)."""

    def __init__(self, tok: Any, splitter: re.Pattern[str]) -> None:
        self._tok, self._splitter = tok, splitter
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        pieces = self._splitter.split(text)  # text, token, text, token, ..., text
        return len(pieces) // 2 + sum(self._piece(p) for p in pieces[::2] if p)

    def _piece(self, piece: str) -> int:
        if len(piece) < PIECE_MEMO_MIN_CHARS:
            return len(self._tok.encode(piece, add_special_tokens=False).ids)
        with self._lock:
            n = self._memo.get(piece)
            if n is not None:
                self._memo.move_to_end(piece)
                return n
        n = len(self._tok.encode(piece, add_special_tokens=False).ids)
        with self._lock:
            self._memo[piece] = n
            if len(self._memo) > PIECE_MEMO:
                self._memo.popitem(last=False)
        return n


def peak_rss_mb() -> float:
    """The process's peak resident memory, in MB (ru_maxrss is in KB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class LocalTokenizerMixin:
    """tokenize / count / count_batch / render_messages / prompt_ids / count_messages.
    count and count_messages go piece by piece where the tokenizer allows it (PieceCounter).

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
        if self._pieces is not None:
            return self._pieces.count(text)
        return len(self.tokenize(text))

    @cached_property
    def _pieces(self) -> PieceCounter | None:
        splitter = added_token_splitter(self._tok) if self._tok is not None else None
        return PieceCounter(self._tok, splitter) if splitter is not None else None

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
        """len(prompt_ids(...)), counted piece by piece (count)."""
        return self.count(self.template.prompt_text(messages, add_generation_prompt, self.add_bos, tools))
