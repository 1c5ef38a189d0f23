"""The session model's shared pieces: boundary_index and the one OpenAI renderer."""

from __future__ import annotations

from tests.fakes import SessionBuilder
from worker.session import Message, TextPart, ToolResultPart, boundary_index


def test_boundary_index_is_the_first_message_after_the_boundary():
    s = SessionBuilder().system("sys").user("fix it").assistant("done").build()
    ids = [m.id for m in s.messages]
    assert boundary_index(s, ids[0]) == 1
    assert boundary_index(s, ids[1]) == 2
    assert boundary_index(s, ids[-1]) == len(s.messages)


def test_boundary_index_is_zero_without_a_known_boundary():
    s = SessionBuilder().user("fix it").assistant("done").build()
    assert boundary_index(s, None) == 0
    assert boundary_index(s, "") == 0
    assert boundary_index(s, "not-in-this-session") == 0


def test_to_chat_is_one_entry_and_to_openai_one_per_result():
    results = [ToolResultPart(call_id="a", name="bash", output="one"), ToolResultPart(call_id="b", output="two")]
    m = Message(id="t", role="tool", parts=[*results, TextPart(text="note")])
    assert m.to_chat() == {"role": "tool", "content": "one\ntwo\nnote", "tool_call_id": "a"}
    assert m.to_openai() == [{"role": "tool", "tool_call_id": "a", "content": "one"},
                             {"role": "tool", "tool_call_id": "b", "content": "two\nnote"}]


def test_to_openai_of_a_call_without_text_has_null_content():
    s = SessionBuilder().user("go").tool("bash", {"command": "ls"}, "a.py").build()
    call = s.messages[1]
    assert call.to_chat()["content"] == ""
    assert call.to_openai()[0]["content"] is None
    assert [e["role"] for e in s.to_openai()] == ["user", "assistant", "tool"]
