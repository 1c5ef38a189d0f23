"""The one TokenCounter: shares cached by (previous, message), in memory or in the store."""

from __future__ import annotations

import pytest

from tests.fakes import ScriptedBackend, work_session
from worker.service.store import Store
from worker.tokens import MemoryTokenCache, TokenCounter, model_key


class CountingBackend(ScriptedBackend):
    """Counts its count_messages calls, to see the cache at work."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count_messages(self, messages, add_generation_prompt=True, tools=None):
        self.calls += 1
        return super().count_messages(messages, add_generation_prompt, tools)


@pytest.fixture
def backend():
    b = CountingBackend()
    yield b
    b.close()


def test_count_is_exact_and_reuses_its_shares(backend):
    chat = work_session(turns=3).to_chat()
    counter = TokenCounter(backend)
    total, counted = counter.count(chat)
    assert total == backend.count_messages(chat, add_generation_prompt=True)
    assert counted == len(chat)
    calls = backend.calls
    assert counter.count(chat) == (total, 0)
    assert backend.calls == calls  # everything came from the cache
    longer = chat + [{"role": "user", "content": "and the docs"}]
    assert counter.count(longer) == (backend.count_messages(longer, True), 1)


def test_per_message_shares_are_the_count_shares(backend):
    session = work_session(turns=2)
    counter = TokenCounter(backend)
    shares = counter.per_message(session)
    total, _ = counter.count(session.to_chat())
    assert sum(shares) < total  # the frame (the generation prompt) is the rest
    calls = backend.calls
    assert counter.count(session.to_chat())[1] == 0 and backend.calls == calls  # one cache for both
    for k, m in enumerate(session.messages):
        assert counter.message_tokens(m, session.messages[k - 1] if k else None) == shares[k]


def test_compacted_messages_count_zero_and_are_skipped_as_neighbours(backend):
    session = work_session(turns=2)
    session.messages[1].compacted = True
    shares = TokenCounter(backend).per_message(session)
    assert shares[1] == 0
    assert shares[2] == TokenCounter(backend).message_tokens(session.messages[2], session.messages[0])


def test_store_cache_survives_a_new_counter(backend):
    store = Store(":memory:")
    chat = work_session(turns=2).to_chat()
    first = TokenCounter(backend, store)
    assert first.key == model_key(backend)
    total, counted = first.count(chat)
    assert counted == len(chat)
    assert TokenCounter(backend, store).count(chat) == (total, 0)
    store.close()


def test_memory_cache_is_keyed_by_model():
    cache = MemoryTokenCache()
    cache.token_cache_put("k", "a", 3)
    assert cache.token_cache_get_many(["k", "x"], "a") == {"k": 3}
    assert cache.token_cache_get_many(["k"], "b") == {}


# Counts of the SWE-agent fixture by the service's former ContextCounter (and per-message
# shares by the former TokenCounter) with the bundled 0.5B: the one counter must give them.
@pytest.mark.model
def test_counts_match_the_former_counters_on_the_real_model(llama_backend):
    from tests.fakes import SWE_TRACE
    from worker.formats import load

    session = load(SWE_TRACE)
    counter = TokenCounter(llama_backend)
    chat = session.to_chat()
    total, counted = counter.count(chat)
    assert (total, counted) == (SWE_CONTEXT_TOKENS, len(chat))
    assert sum(counter.per_message(session)) == SWE_SHARES_SUM
    assert counter.total(session) == SWE_TOTAL


SWE_CONTEXT_TOKENS = 8899
SWE_SHARES_SUM = 8896
SWE_TOTAL = 8899
