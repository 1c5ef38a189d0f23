"""Exact token counts of sessions, with the chat template's overhead included.

Per-message counts are what prune and tail budget with: each is the number of tokens the
message adds to the rendered prompt (template markup included), measured through the
backend's own template and tokenizer and cached by content, so appending one message to a
long session costs one small count. The overflow decision uses the exact count of the
whole rendered session.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.base import Backend

from .session import Message, Session

# A fixed context so a message's count includes its template markup but no per-call noise.
_ANCHOR = {"role": "system", "content": "."}

DEFAULT_RESERVED = 20_000


@dataclass(frozen=True)
class Budget:
    context_limit: int
    reserved: int

    @property
    def usable(self) -> int:
        return self.context_limit - self.reserved


def make_budget(context_limit: int, max_output_tokens: int | None = None, reserved: int | None = None) -> Budget:
    """usable = context_limit - reserved, reserved = min(20_000, max_output_tokens) by default."""
    if reserved is None:
        reserved = min(DEFAULT_RESERVED, max_output_tokens) if max_output_tokens else DEFAULT_RESERVED
        # A small window cannot reserve 20k: never reserve more than a quarter of it by default.
        reserved = min(reserved, context_limit // 4)
    if context_limit <= 0 or reserved < 0 or reserved >= context_limit:
        raise ValueError(f"invalid budget: context limit {context_limit}, reserved {reserved}")
    return Budget(context_limit, reserved)


class TokenCounter:
    def __init__(self, backend: Backend):
        self.backend = backend
        self._cache: dict[tuple[str, str], int] = {}
        self._anchor = backend.count_messages([_ANCHOR], add_generation_prompt=False)

    def message_tokens(self, message: Message, previous: Message | None = None) -> int:
        """Tokens `message` adds after `previous` (templates may depend on the neighbour, e.g.
        consecutive tool results share one turn)."""
        prev_key = previous.content_key() if previous is not None else ""
        key = (prev_key, message.content_key())
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        context = [_ANCHOR] + ([previous.to_chat()] if previous is not None else [])
        before = self._anchor if previous is None else self.backend.count_messages(context, False)
        n = self.backend.count_messages(context + [message.to_chat()], False) - before
        self._cache[key] = n
        return n

    def per_message(self, session: Session) -> list[int]:
        counts = []
        prev = None
        for m in session.messages:
            counts.append(0 if m.compacted else self.message_tokens(m, prev))
            if not m.compacted:
                prev = m
        return counts

    def total(self, session: Session) -> int:
        """Exact count of the whole session as the engine would be sent it."""
        chat = session.to_chat()
        return self.backend.count_messages(chat, add_generation_prompt=True) if chat else 0

    def text(self, text: str) -> int:
        return self.backend.count(text)

    def messages(self, chat: list[dict]) -> int:
        return self.backend.count_messages(chat, add_generation_prompt=True) if chat else 0
