"""Multi-chunk folding with the real model: when the head of a session does not fit the
summarizer's window, it is summarized chunk by chunk, each chunk's narrative carried into the
next prompt as the previous summary. Here a small `summarizer_window` makes a coding session's
head (about 1.4k prompt tokens in one piece) take two chunks (bundled 0.5B, llama.cpp)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.test_server_fakes import work_session
from worker.pipeline import CompactionConfig, compact
from worker.summarize import MAX_NEW_TOKENS, narrative_lines, parse_narrative, previous_text

pytestmark = pytest.mark.model

CONTEXT_LIMIT = 6000  # usable 4500: the session (~30k tokens) overflows it
TURNS, OUTPUT_WORDS = 5, 500
# Instructions + facts (~775 tokens) + two outputs (2 x 700) + margin leave ~360 tokens of
# conversation per chunk: the head's narrative needs more than one.
WINDOW = 2600
CONVERSATION = re.compile(r"<conversation>\n(.*?)\n</conversation>", re.DOTALL)
PREVIOUS = re.compile(r"<previous-summary>\n(.*?)\n</previous-summary>", re.DOTALL)


class Recording:
    """The real backend, with every generation's prompt recorded."""

    def __init__(self, backend: Any):
        self._backend = backend
        self.prompts: list[list[dict[str, str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        self.prompts.append(messages)
        return self._backend.generate(messages, **kwargs)


def test_a_head_larger_than_the_window_is_folded_chunk_by_chunk(llama_backend, reference):
    session = work_session(turns=TURNS, words=OUTPUT_WORDS)
    backend = Recording(llama_backend)
    result = compact(session, backend, CompactionConfig(context_limit=CONTEXT_LIMIT, summarizer_window=WINDOW))
    s = result.summarize
    assert s is not None
    cp = result.checkpoint
    assert cp.verification["fallback"] == "" and s.problems == []  # every chunk gave the model's JSON
    assert s.chunks == len(backend.prompts) == len(s.raw_outputs) and s.chunks > 1
    users = [p[1]["content"] for p in backend.prompts]

    # Every chunk's prompt fits the window with room for its output (counted independently).
    for prompt in backend.prompts:
        assert reference.chat_tokens(prompt) + MAX_NEW_TOKENS <= WINDOW

    # The chunks cover the head's narrative exactly once, in order.
    by_id = {m.id: m for m in result.pruned_session.messages}
    head = [by_id[d["id"]] for d in cp.audit["dropped"]]
    expected = [ln for block in narrative_lines(head) for ln in block.splitlines() if ln.strip()]
    seen = [ln for u in users for ln in CONVERSATION.search(u).group(1).splitlines() if ln.strip()]
    assert seen == expected

    # Folding: chunk k starts from chunk k-1's narrative; the first has no previous summary.
    assert PREVIOUS.search(users[0]) is None
    for k in range(1, s.chunks):
        carried = previous_text(parse_narrative(s.raw_outputs[k - 1]), None)
        assert carried and PREVIOUS.search(users[k]).group(1) == carried
    assert s.narrative.to_dict() == parse_narrative(s.raw_outputs[-1]).to_dict()
    assert s.narrative.goal and s.narrative.goal in cp.summary_text
