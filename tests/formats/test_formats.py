"""Importers: the vendored real transcripts (counts from shared/corpus/agent-traces/MANIFEST.md),
round trips, robustness and previous-summary recognition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.facts.actions import scan_actions
from worker.formats import FORMATS, FormatError, anthropic, detect, inspect, load, openai
from worker.formats.export import to_anthropic, to_openai
from worker.session import Session

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CC = FIX / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
PI = FIX / "pi_large-session.jsonl"
SWE = FIX / "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
CODEX = FIX / "codex-simonw_sample_codex_session.jsonl"
# SYNTHETIC: built from opencode's documented schema (MessageV2, `opencode export`); no real
# export is public. See tests/fixtures/NOTICE.md.
OPENCODE = FIX / "opencode_export_synthetic.json"
COPILOT = FIX / "copilot-azuredev_45f1a36c-ba4d-4362-9be9-027260dbd18e.jsonl"  # held-out half


def pairs_intact(session: Session) -> bool:
    """Every tool result's call id is found in an earlier message's tool calls."""
    seen: set[str] = set()
    for m in session.messages:
        for r in m.tool_results:
            if r.call_id not in seen:
                return False
        seen.update(c.id for c in m.tool_calls)
    return True


@pytest.fixture(scope="module")
def cc() -> Session:
    return load(CC)


@pytest.fixture(scope="module")
def pi_session() -> Session:
    return load(PI)


# --- real transcripts -------------------------------------------------------------------------

def test_detect_each_fixture():
    assert detect(CC) == "claude_code"
    assert detect(PI) == "pi"
    assert detect(SWE) == "swe_agent"
    assert detect(CODEX) == "codex"
    assert detect(OPENCODE) == "opencode"
    assert detect(COPILOT) == "copilot"
    assert detect(str(CC)) == "claude_code"  # a str path works too


def test_claude_code_counts_match_manifest(cc):
    info = inspect(cc)
    # MANIFEST: 180 user + 278 assistant records; 177 tool_use / 177 tool_result; 13 is_error
    assert cc.meta["records"] == {"user": 180, "assistant": 278}
    assert info["tool_calls"] == 177
    assert info["tool_results"] == 177
    assert info["errors"] == 13
    assert info["unanswered_tool_calls"] == 0
    assert pairs_intact(cc)
    # The 278 assistant records are split per content block; merged by message.id they are
    # fewer messages, but every record is accounted for.
    assert sum(len(m.meta["records"]) for m in cc.messages if m.role == "assistant") == 278
    assert info["messages_by_role"]["tool"] == 177
    assert info["messages_by_role"]["user"] == 3  # first prompt, compaction summary, task notification
    # 1593 lines: the rest are skipped by type, not warned about
    assert cc.meta["skipped"] == {"progress": 1117, "file-history-snapshot": 13, "system": 4, "queue-operation": 1}
    assert cc.warnings == []
    assert cc.id == "8463c716-a2ea-4c14-9efa-87158ebd9f20"
    assert cc.messages[0].id == "d35f0cc4-428d-436c-b878-2ddb26209d06"  # source uuid kept
    assert cc.messages[0].text.startswith("Work on bead spotter-fum.")


def test_claude_code_previous_summary(cc):
    summaries = [i for i, m in enumerate(cc.messages) if m.is_summary]
    assert len(summaries) == 1
    s = summaries[0]
    assert cc.messages[s].id == "01ea0ad0-925d-4fd3-8171-cb8027dab4f5"
    assert cc.messages[s].text.startswith("This session is being continued from a previous conversation")
    assert all(m.compacted for m in cc.messages[:s])
    assert not any(m.compacted for m in cc.messages[s:])
    assert cc.last_summary_index() == s
    assert inspect(cc)["previous_summaries"] == 1
    assert inspect(cc)["compacted_messages"] == s
    # the key error line survives import verbatim
    outputs = "\n".join(r.output for m in cc.messages for r in m.tool_results)
    assert 'Could not resolve "js/app.js"' in outputs


def test_claude_code_never_separates_call_from_result(cc):
    idx = cc.tool_call_index()
    for i, m in enumerate(cc.messages):
        for r in m.tool_results:
            assert idx[r.call_id] < i
            assert r.name  # looked up from the tool_use


def test_claude_code_sidechains_are_counted_and_skipped():
    rec = {"type": "user", "uuid": "u1", "sessionId": "s", "isSidechain": False,
           "message": {"role": "user", "content": "main task"}}
    side = {"type": "assistant", "uuid": "a9", "sessionId": "s", "isSidechain": True,
            "message": {"id": "msg_x", "role": "assistant", "content": [{"type": "text", "text": "sub-agent"}]}}
    s = load("\n".join(json.dumps(r) for r in (rec, side, side)) + "\n", format="claude_code")
    assert [m.text for m in s.messages] == ["main task"]
    assert s.meta["skipped"]["sidechain"] == 2
    assert inspect(s)["skipped"]["sidechain"] == 2


def subagent_records() -> list[dict]:
    """The Task sub-agent of the cc-spotter fixture as Claude Code writes it to its own file
    (`<session>/subagents/agent-<id>.jsonl`): the main file embeds each of the sub-agent's
    records in an `agent_progress` record; here each is a top-level sidechain record again."""
    out: list[dict] = []
    for line in CC.read_text().splitlines():
        rec = json.loads(line)
        data = rec.get("data") or {}
        if rec.get("type") != "progress" or data.get("type") != "agent_progress":
            continue
        inner = data["message"]
        out.append({"parentUuid": out[-1]["uuid"] if out else None, "isSidechain": True,
                    "userType": rec["userType"], "cwd": rec["cwd"], "sessionId": rec["sessionId"],
                    "version": rec["version"], "gitBranch": rec["gitBranch"], "agentId": data["agentId"],
                    "type": inner["type"], "message": inner["message"], "uuid": inner["uuid"],
                    "timestamp": inner["timestamp"]})
    return out


def test_claude_code_subagent_file_imports_as_its_own_session(tmp_path):
    records = subagent_records()
    blocks = [b for r in records for b in r["message"]["content"] if isinstance(b, dict)]
    calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
    agent, parent = records[0]["agentId"], records[0]["sessionId"]
    path = tmp_path / f"agent-{agent}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    s = load(path)  # format detected
    info = inspect(s)
    assert (s.source_format, s.id, s.meta["parent_session_id"]) == ("claude_code", f"agent-{agent}", parent)
    assert info["skipped"] == {} and info["warnings"] == []
    assert (info["tool_calls"], info["tool_results"], info["unanswered_tool_calls"]) == (len(calls), len(results), 0)
    assert [c.id for m in s.messages for c in m.tool_calls] == calls
    assert pairs_intact(s)
    users = [m for m in s.messages if m.role == "user"]
    assert [m.text for m in users] == [records[0]["message"]["content"][0]["text"]]  # the Task prompt

    # the same records inside a main transcript stay the sub-agent's: skipped and counted
    mixed = tmp_path / "main.jsonl"
    mixed.write_text(CC.read_text() + path.read_text())
    main = load(mixed)
    assert main.id == parent and main.meta["skipped"]["sidechain"] == len(records)
    assert len(main.messages) == len(load(CC).messages)


def test_pi_counts_match_manifest(pi_session):
    info = inspect(pi_session)
    # MANIFEST: 88 user + 453 assistant + 373 toolResult; 19 isError
    assert pi_session.meta["records"] == {"user": 88, "assistant": 453, "toolResult": 373}
    assert info["messages_by_role"] == {"user": 88, "assistant": 453, "tool": 373}
    assert info["tool_results"] == 373
    assert info["errors"] == 19
    assert info["tool_calls"] == 391  # 18 calls of aborted responses have no result
    assert info["unanswered_tool_calls"] == 18
    assert info["turns"] == 88
    assert pairs_intact(pi_session)
    assert pi_session.meta["skipped"] == {"model_change": 1, "thinking_level_change": 103}
    assert pi_session.warnings == []
    outputs = "\n".join(r.output for m in pi_session.messages for r in m.tool_results)
    assert "error TS2739" in outputs


def test_swe_agent_counts_match_manifest():
    s = load(SWE)
    info = inspect(s)
    # MANIFEST: 13 steps; 28 history messages (system, user, 13 assistant with tool_calls, 13 tool)
    assert len(s.messages) == 28
    assert info["messages_by_role"] == {"system": 1, "user": 1, "assistant": 13, "tool": 13}
    assert info["tool_calls"] == 13 and info["tool_results"] == 13
    assert s.meta["steps"] == 13
    assert pairs_intact(s)
    assert info["turns"] == 1
    assert "TimeDelta serialization precision" in s.messages[1].text


def test_swe_agent_falls_back_to_trajectory_steps():
    doc = json.loads(SWE.read_text())
    del doc["history"]
    s = FORMATS["swe_agent"](doc)
    assert s.meta["from_trajectory_steps"]
    assert inspect(s)["tool_calls"] == 13 and inspect(s)["tool_results"] == 13
    assert s.messages[0].role == "system" and s.messages[1].role == "user"
    assert pairs_intact(s)


def test_codex_sample():
    s = load(CODEX)
    info = inspect(s)
    # MANIFEST: 1 real user prompt; no function_call items
    real = [m for m in s.messages if m.starts_turn]
    assert len(real) == 1
    assert real[0].text.startswith("can you analyse the MD files in this directory")
    assert info["turns"] == 1
    assert info["tool_calls"] == 0
    # the prompt is in the file both as response_item and event_msg: counted once
    assert sum("can you analyse the MD files" in m.text for m in s.messages) == 1
    assert s.meta["skipped"]["event_msg:user_message"] == 1
    assert s.meta["cli_version"] == "0.77.0" and s.meta["model"] == "gpt-5.2-codex"
    assert s.warnings == []


def test_codex_function_calls_and_event_only_rollouts():
    lines = [
        {"type": "session_meta", "payload": {"id": "x", "cwd": "/w"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                               "content": [{"type": "input_text", "text": "list files"}]}},
        {"type": "event_msg", "payload": {"type": "user_message", "message": "list files"}},
        {"type": "response_item", "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "use ls"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell",
                                               "arguments": "{\"command\":[\"ls\"]}", "call_id": "call_1"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "call_1",
                                               "output": {"content": "a.py", "success": False}}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text", "text": "one file"}]}},
    ]
    s = load("\n".join(json.dumps(x) for x in lines), format="codex")
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert s.messages[1].tool_calls[0].id == "call_1" and s.messages[1].parts[0].type == "reasoning"
    assert s.messages[2].tool_results[0].is_error and s.messages[2].tool_results[0].name == "shell"
    # event-only rollout: the event_msg stream is used instead
    events = [{"type": "event_msg", "payload": {"type": "user_message", "message": "hi"}},
              {"type": "event_msg", "payload": {"type": "agent_message", "message": "hello"}}]
    s2 = FORMATS["codex"]("\n".join(json.dumps(x) for x in events))
    assert [(m.role, m.text) for m in s2.messages] == [("user", "hi"), ("assistant", "hello")]


def test_opencode_synthetic_export():
    # SYNTHETIC fixture (see NOTICE.md): opencode publishes no real export we could vendor.
    s = load(OPENCODE)
    info = inspect(s)
    assert s.id == "ses_synthetic0001"
    assert info["tool_calls"] == 5 and info["tool_results"] == 5
    assert info["errors"] == 2  # one state=error, one interrupted (running) tool
    assert pairs_intact(s)
    by_id = {m.id: m for m in s.messages}
    # text after a tool result stays after it: the assistant message is split at the step
    assert [m.id for m in s.messages[1:6]] == ["msg_a1", "prt_a1c1", "prt_a1c2", "msg_a1#1", "prt_a1c3"]
    assert by_id["prt_a1c2"].tool_results[0].output.startswith("KeyError: 'tz'")
    assert by_id["prt_a1c3"].tool_results[0].compacted_at is not None  # pruned by opencode
    assert by_id["prt_a2c1"].tool_results[0].output == "[Tool execution was interrupted]"
    summary = by_id["msg_a3"]
    assert summary.is_summary and summary.text.startswith("## Goal")
    cut = s.messages.index(by_id["msg_u3"])
    assert all(m.compacted for m in s.messages[:cut])
    assert not any(m.compacted for m in s.messages[cut:])
    assert info["turns"] == 2  # the compaction request and the synthetic "Continue" are not turns


def test_pi_previous_summary_and_tree():
    # pi's current format (tree with ids); written from pi-mono's documented entry schema.
    e = [
        {"type": "session", "version": 3, "id": "sess", "timestamp": "t", "cwd": "/w"},
        {"type": "message", "id": "e1", "parentId": None, "message": {"role": "user", "content": "fix the bug"}},
        {"type": "message", "id": "e2", "parentId": "e1", "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "make"}}]}},
        {"type": "message", "id": "e3", "parentId": "e2", "message": {
            "role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": True,
            "content": [{"type": "text", "text": "error: x"}]}},
        {"type": "message", "id": "e4", "parentId": "e3", "message": {"role": "user", "content": "try again"}},
        {"type": "message", "id": "side", "parentId": "e4", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "abandoned branch"}]}},
        {"type": "compaction", "id": "e5", "parentId": "e4", "summary": "## Goal\nfix the bug",
         "firstKeptEntryId": "e4", "tokensBefore": 1234},
        {"type": "message", "id": "e6", "parentId": "e5", "message": {"role": "bashExecution", "command": "ls",
                                                                      "output": "a", "exitCode": 0}},
        {"type": "message", "id": "e7", "parentId": "e6", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "done"}]}},
    ]
    s = load("\n".join(json.dumps(x) for x in e), format="pi")
    assert [m.id for m in s.messages] == ["e1", "e2", "e3", "e5", "e4", "e6", "e7"]
    assert s.meta["skipped"]["off-branch"] == 1
    summary = s.messages[3]
    assert summary.is_summary and "## Goal\nfix the bug" in summary.text
    assert [m.compacted for m in s.messages] == [True, True, True, False, False, False, False]
    assert s.messages[2].tool_results[0].is_error
    assert inspect(s)["turns"] == 2  # "fix the bug", "try again"; the bash execution is not a turn
    assert detect("\n".join(json.dumps(x) for x in e)) == "pi"


# --- round trips ------------------------------------------------------------------------------

OPENAI_MSGS = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix test_a"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.py\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"pytest\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "def a(): pass"},
    {"role": "tool", "tool_call_id": "call_2", "content": "1 failed"},
    {"role": "assistant", "content": "Fixed."},
]

ANTHROPIC_REQ = {
    "system": "You are a coding agent.",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix test_a"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "read first", "signature": "sig"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "pytest"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def a(): pass"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "1 failed", "is_error": True},
            {"type": "text", "text": "also check b.py"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
    ],
}


def test_openai_round_trip():
    s = openai.load(OPENAI_MSGS)
    assert to_openai(s) == OPENAI_MSGS
    assert openai.load({"messages": OPENAI_MSGS}).model_dump() == s.model_dump()
    assert openai.load(json.dumps(OPENAI_MSGS)).model_dump(exclude={"id"}) == s.model_dump(exclude={"id"})
    assert detect(OPENAI_MSGS) == "openai"


def test_anthropic_round_trip():
    s = anthropic.load(ANTHROPIC_REQ)
    roles = [m.role for m in s.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert s.messages[3].tool_results[0].name == "read"
    assert s.messages[4].tool_results[0].is_error
    assert s.messages[5].text == "also check b.py" and s.messages[5].starts_turn
    out = to_anthropic(s)
    assert out["system"] == ANTHROPIC_REQ["system"]
    expected = json.loads(json.dumps(ANTHROPIC_REQ["messages"]))
    del expected[1]["content"][0]  # unsigned thinking cannot be sent back; it stays in the session
    assert out["messages"] == expected
    assert detect(ANTHROPIC_REQ) == "anthropic"


def test_cross_exports_keep_pairs():
    s = anthropic.load(ANTHROPIC_REQ)
    chat = to_openai(s)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert [m.get("tool_call_id") for m in chat if m["role"] == "tool"] == ["toolu_1", "toolu_2"]
    back = to_anthropic(openai.load(OPENAI_MSGS))
    assert [m["role"] for m in back["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [b["tool_use_id"] for b in back["messages"][2]["content"]] == ["call_1", "call_2"]


def test_export_checkpoint_dicts_and_compacted():
    ckpt = [{"role": "system", "content": "sys"}, {"role": "user", "content": "summary"},
            {"role": "user", "content": "go on"}]
    assert to_openai(ckpt) == ckpt
    assert to_anthropic(ckpt) == {"system": "sys", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "summary"}, {"type": "text", "text": "go on"}]}]}
    s = load(OPENCODE)
    exported = to_openai(s)
    assert len(exported) == sum(not m.compacted for m in s.messages)
    assert exported[1]["content"].startswith("## Goal")


def test_export_real_session_is_api_shaped(cc):
    out = to_anthropic(cc)
    roles = [m["role"] for m in out["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # alternation
    uses = {b["id"] for m in out["messages"] for b in m["content"] if b["type"] == "tool_use"}
    results = [b["tool_use_id"] for m in out["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert set(results) <= uses
    assert len(to_openai(cc)) == sum(len(m.tool_results) or 1 for m in cc.messages if not m.compacted)


def test_copilot_cli_real_session_events():
    """A Copilot CLI 1.0.72 events.jsonl (JeffreyCA/azure-dev, NOTICE.md): every event type in it is
    known, each tool call keeps its result, the CLI's own user messages (`source`) open no turn,
    and each shell run's status is its `<shellId: N completed with exit code K>` line."""
    s = load(COPILOT)
    report = inspect(s)
    # the CLI logs its system prompt again with the second prompt; the model holds it once
    assert report["messages_by_role"] == {"system": 1, "user": 4, "assistant": 29, "tool": 108}
    assert report["skipped"]["system.message(repeated)"] == 1
    assert report["unknown_records"] == {} and report["unanswered_tool_calls"] == 0 and pairs_intact(s)
    assert report["errors"] == 3 and report["turns"] == 2  # three views of missing paths; two typed prompts
    assert [m.meta.get("source") for m in s.messages if m.role == "user"] == [None, "system", "instruction-discovery", None]
    assert s.meta["cwd"] == "/Users/jeffrey/Documents/Dev/tmp/azure-dev"
    runs = [a for a in scan_actions(s.messages, cwd=s.meta["cwd"]) if a.tool == "bash"]
    assert len(runs) == 19 and {(a.exit_code, a.status) for a in runs} == {(0, "ok")}


# --- robustness -------------------------------------------------------------------------------

def _jsonl(records: list[dict]) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


CC_LINES = [
    {"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", "content": "hello"}},
    {"type": "assistant", "uuid": "a1", "sessionId": "s",
     "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "hi"}]}},
]
PI_LINES = [{"type": "message", "message": {"role": "user", "content": "hello"}},
            {"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}]
CODEX_LINES = [{"type": "session_meta", "payload": {"id": "x"}},
               {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "hello"}]}}]

# Copilot CLI events.jsonl (github/copilot-sdk session-events.ts): {type, data, id, timestamp, parentId}
COPILOT_LINES = [{"type": "user.message", "data": {"content": "hello"}, "id": "e1", "timestamp": "t", "parentId": None},
                 {"type": "assistant.message", "data": {"messageId": "m", "content": "hi"}, "id": "e2", "timestamp": "t",
                  "parentId": "e1"}]

JSONL_CASES = [("claude_code", CC_LINES), ("pi", PI_LINES), ("codex", CODEX_LINES), ("openai", OPENAI_MSGS),
               ("copilot", COPILOT_LINES)]


@pytest.mark.parametrize("fmt,lines", JSONL_CASES)
def test_truncated_last_line(fmt, lines):
    text = _jsonl(lines) + json.dumps(lines[-1])[:25]
    s = load(text, format=fmt)
    assert len(s.messages) == len(load(_jsonl(lines), format=fmt).messages)
    n = len(lines) + 1
    assert s.warnings == [f"line {n}: truncated last line skipped"]


@pytest.mark.parametrize("fmt,lines", JSONL_CASES[:3])
def test_unknown_record_type(fmt, lines):
    text = _jsonl([lines[0], {"type": "foo", "payload": {}}, lines[1]])
    s = load(text, format=fmt)
    assert any(w.startswith("line 2: unknown") and "'foo'" in w for w in s.warnings)
    assert len(s.warnings) == 1


@pytest.mark.parametrize("fmt,lines", JSONL_CASES)
def test_parsed_objects_and_paths_import_alike(fmt, lines, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(_jsonl(lines))
    from_path, from_str, from_obj = load(p, format=fmt), load(str(p), format=fmt), load(lines, format=fmt)
    assert [m.text for m in from_path.messages] == [m.text for m in from_obj.messages]
    assert [m.text for m in from_str.messages] == [m.text for m in from_obj.messages]
    assert detect(p) == fmt


def test_unknown_openai_role_is_skipped_with_warning():
    s = openai.load(OPENAI_MSGS + [{"role": "foo", "content": "x"}])
    assert s.warnings == ["message 6: unknown role 'foo' skipped"]
    assert len(s.messages) == len(OPENAI_MSGS)


@pytest.mark.parametrize("fmt,lines", JSONL_CASES)
def test_binary_blob_line(fmt, lines, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(_jsonl([lines[0]]).encode() + b"\xff\xfe\x00\x9c garbage \x80\n" + _jsonl(lines[1:]).encode())
    s = load(p, format=fmt)
    assert s.warnings == ["line 2: invalid UTF-8 (binary data?) skipped"]
    assert len(s.messages) == len(load(_jsonl(lines), format=fmt).messages)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("bad", ["", "\n\n", "{\"type\": \"progress\"}\n", "not json at all\n", "[]", "{}"])
def test_nothing_importable_raises_format_error(fmt, bad):
    with pytest.raises(FormatError):
        load(bad, format=fmt)


def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    (tmp_path / "deep.json").write_text(deep)
    for fmt in ("auto", "openai", "anthropic", "swe_agent", "opencode"):
        with pytest.raises(FormatError, match="nested too deeply to parse"):
            load(tmp_path / "deep.json", format=fmt)
    # in JSONL one such line is skipped like any unparseable line, and the rest imports
    lines = [json.dumps({"role": "user", "content": "hi"}), deep, json.dumps({"role": "assistant", "content": "ok"})]
    s = load("\n".join(lines) + "\n", format="openai")
    assert [m.text for m in s.messages] == ["hi", "ok"]
    assert s.warnings == ["line 2: nested too deeply to parse, skipped"]
    cc_lines = CC.read_text().splitlines()
    with_deep = cc_lines[:2] + [deep] + cc_lines[2:]
    s = load("\n".join(with_deep) + "\n")
    assert s.source_format == "claude_code" and "line 3: nested too deeply to parse, skipped" in s.warnings
    assert len(s.messages) == len(load(CC).messages)


def test_detect_unrecognized_and_missing_file(tmp_path):
    with pytest.raises(FormatError, match="unrecognized"):
        detect('{"hello": 1}')
    with pytest.raises(FormatError, match="no such file"):
        load(tmp_path / "missing.jsonl")
    with pytest.raises(FormatError, match="unknown format"):
        load(OPENAI_MSGS, format="nope")


def test_claude_code_truncated_real_file(tmp_path):
    data = CC.read_bytes()
    cut = data[: len(data) // 2]
    cut = cut[: cut.rfind(b"\n") + 40]  # end mid-record
    p = tmp_path / "cut.jsonl"
    p.write_bytes(cut)
    s = load(p)
    assert s.source_format == "claude_code"
    assert len(s.warnings) == 1 and s.warnings[0].endswith("truncated last line skipped")
    assert pairs_intact(s)
