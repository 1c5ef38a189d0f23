"""Exact token counts of sessions, with the chat template's overhead included: the one counter.

Per-message counts are what prune and tail budget with: each is the number of tokens the
message adds to the rendered prompt (template markup included), measured through the
backend's own template and tokenizer and cached by content, so appending one message to a
long session costs one small count. The same shares, plus the template's frame, give the
HTTP API's context counts (`TokenCounter.count`), cached in the store so they survive a
restart. The overflow decision of `compact` uses the exact count of the whole rendered session.

Tool definitions (`tools`, what an agent sends beside its messages) are counted in the frame:
templates render them in the header (Qwen, Hermes, Mistral), so a message's share does not
depend on them and the large tools block is tokenized once per (first message, tools), not
once per message.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from backends.base import Backend

from .session import Message, Session

# A fixed context so a message's count includes its template markup but no per-call noise.
_ANCHOR = {"role": "system", "content": "."}
# In-process memo of [anchor, previous] counts: bounded, since a service counts many sessions.
_BEFORE_MEMO = 4096

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


class TokenCache(Protocol):
    """Where shares are kept: the Store's token cache (persistent), or MemoryTokenCache."""

    def token_cache_get_many(self, keys: list[str], model_key: str) -> dict[str, int]: ...

    def token_cache_put(self, key: str, model_key: str, tokens: int) -> None: ...


class MemoryTokenCache:
    """The in-process TokenCache: what a counter without a store keeps (unbounded, like a
    session's life)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def token_cache_get_many(self, keys: list[str], model_key: str) -> dict[str, int]:
        counts = self._counts
        return {k: counts[(k, model_key)] for k in keys if (k, model_key) in counts}

    def token_cache_put(self, key: str, model_key: str, tokens: int) -> None:
        self._counts[(key, model_key)] = int(tokens)


def chat_key(*parts: Any) -> str:
    """Cache key of chat entries (a share is keyed by (previous, message))."""
    return hashlib.sha1(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def model_key(backend: Backend) -> str:
    """Cache key of a tokenizer + chat template: a count is only reused for the same pair."""
    info = backend.info()
    probe = backend.render_messages([_ANCHOR, {"role": "user", "content": "x"}], add_generation_prompt=True)
    template = hashlib.sha1(probe.encode()).hexdigest()[:12]
    return f"{info.engine}|{info.model_name}|{info.vocab_size}|{template}"


class TokenCounter:
    """The one exact counter: per-message shares for prune and tail, whole chats for the
    overflow decision and the HTTP API.

    A message's share is what it adds after its predecessor (templates render tool results
    differently after a tool result), so a share is keyed by (previous, message). A chat's
    count is `frame + sum(shares)`, the frame being what the template adds around the list (a
    default system prompt, the generation prompt): appending one message costs two small
    counts, whatever the length of the session. Shares live in `cache` (the Store, so they
    survive restarts) or in memory; `key` names the tokenizer + template they are valid for
    (model_key(backend) by default, computed only for a persistent cache)."""

    def __init__(self, backend: Backend, cache: TokenCache | None = None, key: str | None = None):
        self.backend = backend
        self.cache: TokenCache = cache if cache is not None else MemoryTokenCache()
        self.key = key if key is not None else (model_key(backend) if cache is not None else "")
        self._anchor = backend.count_messages([_ANCHOR], add_generation_prompt=False)
        self._before: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    # -- shares --------------------------------------------------------------------------

    def _count_before(self, prev: dict[str, Any]) -> int:
        k = chat_key(prev)
        with self._lock:
            if k in self._before:
                self._before.move_to_end(k)
                return self._before[k]
        n = self.backend.count_messages([_ANCHOR, prev], add_generation_prompt=False)
        with self._lock:
            self._before[k] = n
            if len(self._before) > _BEFORE_MEMO:
                self._before.popitem(last=False)
        return n

    def share(self, prev: dict[str, Any] | None, message: dict[str, Any]) -> int:
        """Tokens the chat entry `message` adds after `prev` (uncached)."""
        before = self._anchor if prev is None else self._count_before(prev)
        context = [_ANCHOR] + ([prev] if prev is not None else [])
        return self.backend.count_messages(context + [message], add_generation_prompt=False) - before

    def _shares(self, pairs: list[tuple[dict[str, Any] | None, dict[str, Any]]],
                extra: tuple[str, ...] = ()) -> tuple[list[int], dict[str, int], int]:
        """(share of each (prev, message) pair, cached values of the `extra` keys, shares
        counted now)."""
        keys = [chat_key(prev, m) for prev, m in pairs]
        known = self.cache.token_cache_get_many(keys + list(extra), self.key)
        counted = 0
        for k, (prev, m) in zip(keys, pairs, strict=True):
            if k not in known:
                known[k] = self.share(prev, m)
                self.cache.token_cache_put(k, self.key, known[k])
                counted += 1
        return [known[k] for k in keys], known, counted

    def count(self, chat: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[int, int]:
        """(exact tokens of `chat` as sent with the generation prompt and the tool definitions
        `tools`, shares counted now)."""
        if not chat:
            return 0, 0
        frame_key = chat_key("frame", chat[0]) if tools is None else chat_key("frame", chat[0], tools)
        shares, known, counted = self._shares([(chat[i - 1] if i else None, m) for i, m in enumerate(chat)],
                                              (frame_key,))
        if frame_key not in known:
            first = self._count_with_tools([chat[0]], True, tools)
            known[frame_key] = first - self.share(None, chat[0])
            self.cache.token_cache_put(frame_key, self.key, known[frame_key])
        return sum(shares) + known[frame_key], counted

    def message_tokens(self, message: Message, previous: Message | None = None) -> int:
        """Tokens `message` adds after `previous` (templates may depend on the neighbour, e.g.
        consecutive tool results share one turn)."""
        prev = previous.to_chat() if previous is not None else None
        return self._shares([(prev, message.to_chat())])[0][0]

    def per_message(self, session: Session) -> list[int]:
        """Each message's share (0 for a compacted one, which the engine is not sent)."""
        live = [m for m in session.messages if not m.compacted]
        chat = [m.to_chat() for m in live]
        shares = iter(self._shares([(chat[i - 1] if i else None, c) for i, c in enumerate(chat)])[0])
        return [0 if m.compacted else next(shares) for m in session.messages]

    def total(self, session: Session, tools: list[dict[str, Any]] | None = None,
              add_generation_prompt: bool = True) -> int:
        """Exact count of the whole session as the engine would be sent it (with the tool
        definitions `tools`)."""
        chat = session.to_chat()
        return self._count_with_tools(chat, add_generation_prompt, tools) if chat else 0

    def text(self, text: str) -> int:
        return self.backend.count(text)

    def messages(self, chat: list[dict], tools: list[dict[str, Any]] | None = None) -> int:
        return self._count_with_tools(chat, True, tools) if chat else 0

    def _count_with_tools(self, chat: list[dict], add_generation_prompt: bool,
                          tools: list[dict[str, Any]] | None) -> int:
        """count_messages, passing `tools` only when there are some (test doubles written
        before the tools argument keep working)."""
        if tools is None:
            return self.backend.count_messages(chat, add_generation_prompt=add_generation_prompt)
        return self.backend.count_messages(chat, add_generation_prompt=add_generation_prompt, tools=tools)
