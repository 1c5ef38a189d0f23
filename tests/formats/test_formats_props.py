"""Property tests: any well-formed OpenAI / Anthropic message list imports without losing a
message or separating a tool call from its result, and exports back unchanged."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.formats import anthropic, detect, inspect, openai
from worker.formats.export import to_anthropic, to_openai
from worker.session import Session

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
NAMES = st.sampled_from(["read", "bash", "edit", "grep"])
ARGS = st.dictionaries(st.sampled_from(["path", "cmd", "n"]), st.one_of(st.integers(), TEXT), max_size=3)


def pairs_intact(session: Session) -> bool:
    seen: set[str] = set()
    for m in session.messages:
        if any(r.call_id not in seen for r in m.tool_results):
            return False
        seen.update(c.id for c in m.tool_calls)
    return True


@st.composite
def openai_conversations(draw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(TEXT)})
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        msgs.append({"role": "user", "content": draw(TEXT)})
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(1, 3))
            ids = [f"call_{n + j}" for j in range(k)]
            n += k
            msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), TEXT)), "tool_calls": [
                {"id": i, "type": "function", "function": {"name": draw(NAMES), "arguments": json.dumps(draw(ARGS))}}
                for i in ids]})
            for i in draw(st.permutations(ids)):  # results may come back in any order
                msgs.append({"role": "tool", "tool_call_id": i, "content": draw(st.text(max_size=60))})
        msgs.append({"role": "assistant", "content": draw(TEXT)})
    return msgs


@st.composite
def anthropic_conversations(draw: Any) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        msgs.append({"role": "user", "content": [{"type": "text", "text": draw(TEXT)}]})
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(1, 3))
            ids = [f"toolu_{n + j}" for j in range(k)]
            n += k
            blocks: list[dict[str, Any]] = [{"type": "text", "text": draw(TEXT)}] if draw(st.booleans()) else []
            blocks += [{"type": "tool_use", "id": i, "name": draw(NAMES), "input": draw(ARGS)} for i in ids]
            msgs.append({"role": "assistant", "content": blocks})
            results: list[dict[str, Any]] = []
            for i in draw(st.permutations(ids)):
                r = {"type": "tool_result", "tool_use_id": i, "content": draw(st.text(max_size=60))}
                if draw(st.booleans()):
                    r["is_error"] = True
                results.append(r)
            if draw(st.booleans()):  # user text riding along with the results
                results.append({"type": "text", "text": draw(TEXT)})
            msgs.append({"role": "user", "content": results})
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": draw(TEXT)}]})
    out: dict[str, Any] = {"messages": msgs}
    if draw(st.booleans()):
        out["system"] = draw(TEXT)
    return out


@settings(max_examples=150, deadline=None)
@given(openai_conversations())
def test_openai_import_keeps_every_message_and_pair(msgs):
    s = openai.load(msgs)
    assert len(s.messages) == len(msgs)
    assert [m.role for m in s.messages] == [m["role"] for m in msgs]
    assert pairs_intact(s)
    calls = [c["id"] for m in msgs for c in m.get("tool_calls", [])]
    assert [c.id for m in s.messages for c in m.tool_calls] == calls
    assert inspect(s)["tool_results"] == sum(m["role"] == "tool" for m in msgs)
    assert s.warnings == []
    assert to_openai(s) == msgs
    assert detect(msgs) == "openai"


@settings(max_examples=150, deadline=None)
@given(anthropic_conversations())
def test_anthropic_import_keeps_every_message_and_pair(req):
    s = anthropic.load(req)
    assert pairs_intact(s)
    uses = [b["id"] for m in req["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [(b["tool_use_id"], b.get("is_error", False), b["content"])
               for m in req["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [c.id for m in s.messages for c in m.tool_calls] == uses
    assert [(r.call_id, r.is_error, r.output) for m in s.messages for r in m.tool_results] == results
    # every source message is there: each becomes one message, or one per tool_result (+ text)
    assert sum(m.role == "assistant" for m in s.messages) == sum(m["role"] == "assistant" for m in req["messages"])
    texts = [b["text"] for m in req["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "text"]
    assert [m.text for m in s.messages if m.role == "user"] == texts
    assert s.warnings == []
    back = to_anthropic(s)
    assert back["messages"] == req["messages"]
    assert back.get("system") == req.get("system")
    assert detect(req) == "anthropic" or not uses  # text-only lists are also valid OpenAI


@settings(max_examples=100, deadline=None)
@given(anthropic_conversations())
def test_anthropic_to_openai_keeps_pairs(req):
    chat = to_openai(anthropic.load(req))
    s = openai.load(chat)
    assert pairs_intact(s)
    assert sum(m["role"] == "tool" for m in chat) == sum(
        b["type"] == "tool_result" for m in req["messages"] for b in m["content"])
