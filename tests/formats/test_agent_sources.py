"""Record and item types each agent writes, built in the shapes the agent's own source defines
(the source is cited beside each record), and what the importers make of them: tool output is
never the user's words, code-mode commands and patched paths are kept, every record type an
importer does not know is counted for `compactd inspect`."""

from __future__ import annotations

import json

from worker.facts.actions import scan_actions
from worker.facts.ledger import extract_ledger, user_requests
from worker.formats import claude_code, codex, detect, inspect, load, opencode, pi, swe_agent


def rollout(*payloads: tuple[str, dict]) -> list[dict]:
    """Codex RolloutItem lines (codex-rs/protocol/src/protocol.rs: tag "type", content "payload")."""
    head = [{"timestamp": "2026-04-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s1", "cwd": "/repo"}}]
    return head + [{"timestamp": "2026-04-01T00:00:01Z", "type": t, "payload": p} for t, p in payloads]


def user(text: str) -> tuple[str, dict]:
    # models.rs ResponseItem::Message {role, content: [ContentItem::InputText]}
    return ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})


# codex-rs/code-mode/src/description.rs: `exec` takes raw JavaScript; nested tools are called as
# `await tools.exec_command({...})`; apply_patch is a freeform tool taking the patch as a string.
EXEC_JS = """// @exec: {"yield_time_ms": 10000}
const r = await tools.exec_command({cmd: "cargo test -p codex-core", workdir: "/repo"});
text(r.output);
await tools.apply_patch(`*** Begin Patch
*** Update File: codex-rs/core/src/lib.rs
@@
-old
+new
*** End Patch`);
const s = await tools.exec_command({ cmd: 'git status --short', yield_time_ms: 30000 });
text(s.output);
"""


def test_codex_code_mode_exec_keeps_its_commands_and_patched_paths():
    s = codex.load(rollout(
        user("make the core tests pass"),
        # models.rs ResponseItem::CustomToolCall {call_id, name, input}
        ("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": "call_1", "name": "exec",
                           "input": EXEC_JS}),
        # models.rs ResponseItem::CustomToolCallOutput {call_id, output}
        ("response_item", {"type": "custom_tool_call_output", "call_id": "call_1",
                           "output": "Script completed\nWall time 3.1 seconds\nOutput:\ntest result: ok. 12 passed\n M codex-rs/core/src/lib.rs"}),
    ))
    call = s.messages[1].tool_calls[0]
    assert call.name == "exec" and call.arguments == EXEC_JS  # what the model wrote stays whole
    actions = scan_actions(s.messages, cwd="/repo")
    assert [a.command for a in actions if a.command] == ["cargo test -p codex-core", "git status --short"]
    assert ("codex-rs/core/src/lib.rs", "modified") in [f for a in actions for f in a.files]
    assert actions[-1].has_result and not actions[0].has_result  # the cell's one output goes to its last tool
    ledger = extract_ledger(s.messages, actions=actions)
    assert "cargo test -p codex-core" in [c.command for c in ledger.commands]


def test_codex_code_mode_argument_built_at_run_time_is_not_guessed():
    s = codex.load(rollout(user("list it"), ("response_item", {
        "type": "custom_tool_call", "call_id": "c", "name": "exec",
        "input": "const cmd = 'ls';\nawait tools.exec_command({cmd});\nawait tools.exec_command({cmd: `ls ${dir}`});"})))
    assert [a.command for a in scan_actions(s.messages)] == [None, None]


def test_codex_item_types_from_models_rs():
    s = codex.load(rollout(
        ("turn_context", {"cwd": "/repo", "model": "gpt-5.3-codex"}),  # protocol.rs TurnContextItem
        user("run the tests"),
        # ResponseItem::Reasoning {summary: [SummaryText], encrypted_content}
        ("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Run pytest."}],
                           "encrypted_content": "x"}),
        # ResponseItem::LocalShellCall {call_id, status, action: LocalShellAction::Exec {command}}
        ("response_item", {"type": "local_shell_call", "call_id": "ls1", "status": "completed",
                           "action": {"type": "exec", "command": ["bash", "-lc", "pytest -q"], "working_directory": "/repo"}}),
        ("response_item", {"type": "function_call_output", "call_id": "ls1",
                           "output": {"content": "1 failed", "success": False}}),
        # ResponseItem::WebSearchCall {status, action: WebSearchAction::Search {query}}: no local output
        ("response_item", {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}}),
        ("response_item", {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}),  # ResponseItem::GhostSnapshot
        ("response_item", {"type": "compaction", "encrypted_content": "x"}),  # ResponseItem::Compaction
        ("response_item", {"type": "brand_new_item", "x": 1}),
        ("brand_new_record", {"x": 1}),
        # RolloutItem::WorldState (0.145+): a context baseline, no model history (codex-desktop-entiresem, tune half)
        ("world_state", {"full": True, "state": {"agents_md": {"directory": "/repo", "text": "# Agent Instructions"}}}),
    ))
    assert s.meta["model"] == "gpt-5.3-codex"
    actions = scan_actions(s.messages)
    assert [(a.command, a.status) for a in actions] == [("pytest -q", "failed")]
    info = inspect(s)
    assert info["unknown_records"] == {"record:brand_new_record": 1, "response_item:brand_new_item": 1}
    assert {"response_item:web_search_call", "response_item:ghost_snapshot", "response_item:compaction",
            "world_state"} <= set(info["skipped"])
    assert len(info["warnings"]) == 2


# SWE-agent classic history (sweagent/agent/agents.py add_step_to_history and
# _add_templated_messages_to_history without tool_call_ids; sweagent/types.py HistoryItem): the
# instance template and each observation are role "user", message_type "observation".
ISSUE = ("We're currently solving the following issue within our repository. Here's the issue text:\n"
         "ISSUE:\nTimeDelta serialization precision\n")
TRACEBACK = ("Traceback (most recent call last):\n  File \"reproduce.py\", line 4, in <module>\n"
             "    print(td_field.serialize(\"td_field\", obj))\n"
             "AttributeError: 'TimeDelta' object has no attribute 'precision'\n")


def classic_traj(with_types: bool = True) -> dict:
    def h(role: str, content: str, kind: str, **extra: str) -> dict:
        item = {"role": role, "content": content, "agent": "primary", **extra}
        if with_types:
            item["message_type"] = kind
        return item
    return {"environment": "swe_main", "info": {"exit_status": "submitted"}, "trajectory": [], "history": [
        h("system", "SETTING: You are an autonomous programmer ...", "system_prompt"),
        h("user", ISSUE, "observation"),
        h("assistant", "Let's reproduce it.\n```\npython reproduce.py\n```", "action",
          thought="Let's reproduce it.", action="python reproduce.py\n"),
        h("user", TRACEBACK + "(Open file: n/a)\n(Current directory: /marshmallow-code__marshmallow)\nbash-$", "observation"),
        h("assistant", "Open the field.\n```\nopen src/marshmallow/fields.py 1474\n```", "action",
          thought="Open the field.", action="open src/marshmallow/fields.py 1474"),
        h("user", "[File: /marshmallow-code__marshmallow/src/marshmallow/fields.py (1997 lines total)]\n1474:x", "observation"),
    ]}


def test_codex_contextual_fragments_and_ide_context_are_not_the_users_words():
    # codex-rs/core/src/contextual_user_message.rs CONTEXTUAL_USER_FRAGMENTS, the plugin catalogue
    # Desktop sends as a user message, and an IDE's context before protocol.rs USER_MESSAGE_BEGIN.
    s = codex.load(rollout(
        user("<recommended_plugins>\nHere is a list of plugins that are available but not installed.\n"
             "- Slack (slack@openai-curated-remote)\n</recommended_plugins>"),
        user("<skill>\n<name>imagegen</name>\n</skill>"),
        user("<subagent_notification>{\"agent_id\": \"a1\", \"status\": \"completed\"}</subagent_notification>"),
        user("<additional_context>\n<title>Context from my editor</title>\n</additional_context>"),
        user("# Files mentioned by the user:\n\n## shot.png: /tmp/shot.png\n\n## My request for Codex:\n"
             "Redesign the details panel from the attached image")))
    assert [m.user_text for _, m in user_requests(s.messages)] == ["Redesign the details panel from the attached image"]


def test_swe_agent_classic_observations_are_tool_output_not_the_user():
    for with_types in (True, False):  # 0.x files have no message_type
        s = swe_agent.load(classic_traj(with_types))
        assert [m.role for m in s.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
        assert [m.user_text for _, m in user_requests(s.messages)] == [ISSUE]
        actions = scan_actions(s.messages)
        assert [(a.tool, a.command) for a in actions] == [("bash", "python reproduce.py"), ("open", None)]
        errors = [e.text for e in extract_ledger(s.messages, actions=actions).unresolved_errors()]
        assert "AttributeError: 'TimeDelta' object has no attribute 'precision'" in errors
        assert inspect(s)["turns"] == 1


# Claude Code queue-operation: enqueue, then one of remove / dequeue / popAll (per message).
def cc(rtype: str, n: int, **fields: object) -> dict:
    return {"type": rtype, "uuid": f"u{n}", "sessionId": "s", "timestamp": f"2026-01-01T00:00:{n:02d}Z", **fields}


def cc_user(n: int, content: object, **fields: object) -> dict:
    return cc("user", n, message={"role": "user", "content": content}, **fields)


def cc_tool_use(n: int, tid: str) -> dict:
    return cc("assistant", n, message={"id": f"msg{n}", "role": "assistant",
                                       "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": "make"}}]})


def test_claude_code_pop_all_takes_queued_words_back():
    s = claude_code.load([
        cc_user(1, "build it"), cc_tool_use(2, "t1"),
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s", "content": "also lint"},
        {"type": "queue-operation", "operation": "popAll", "sessionId": "s", "content": "also lint"},
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s", "content": "and run the tests"},
        cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
        {"type": "queue-operation", "operation": "remove", "sessionId": "s", "content": "and run the tests"},
        cc("assistant", 4, message={"id": "msg4", "role": "assistant", "content": [{"type": "text", "text": "Running."}]}),
    ])
    assert [m.user_text for _, m in user_requests(s.messages)] == ["build it", "and run the tests"]


def test_claude_code_queued_command_attachment_without_queue_records():
    att = {"type": "queued_command", "prompt": "use the staging db", "commandMode": "prompt"}
    s = claude_code.load([cc_user(1, "migrate"), cc_tool_use(2, "t1"),
                          cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                          cc("attachment", 4, attachment=att),
                          cc("assistant", 5, message={"id": "m5", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
                          cc("attachment", 6, attachment={"type": "edited_text_file", "filename": "a.py"})])
    assert [m.user_text for _, m in user_requests(s.messages)] == ["migrate", "use the staging db"]
    assert s.meta["skipped"] == {"attachment:edited_text_file": 1}
    # with the queue ledger present, the same words come in once (from `remove`)
    s2 = claude_code.load([cc_user(1, "migrate"), cc_tool_use(2, "t1"),
                           {"type": "queue-operation", "operation": "enqueue", "content": "use the staging db"},
                           cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                           {"type": "queue-operation", "operation": "remove", "content": "use the staging db"},
                           cc("attachment", 4, attachment=att),
                           cc("assistant", 5, message={"id": "m5", "role": "assistant", "content": [{"type": "text", "text": "ok"}]})])
    assert [m.user_text for _, m in user_requests(s2.messages)] == ["migrate", "use the staging db"]
    # cc-starcar_64c15364 (tune half, CC 2.1.217) writes the attachment after the assistant's next
    # records, the tool result in flight between: still the same words, in once.
    s3 = claude_code.load([cc_user(1, "migrate"), cc_tool_use(2, "t1"),
                           {"type": "queue-operation", "operation": "enqueue", "content": "use the staging db"},
                           {"type": "queue-operation", "operation": "remove", "content": "use the staging db"},
                           cc_tool_use(3, "t2"),
                           cc_user(4, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                       {"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]),
                           cc("attachment", 5, attachment=att),
                           cc("assistant", 6, message={"id": "m6", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
                           cc_user(7, "again"), cc_tool_use(8, "t3"),
                           cc_user(9, [{"type": "tool_result", "tool_use_id": "t3", "content": "ok"}]),
                           cc("attachment", 10, attachment=att)])  # typed again in a later turn: new words
    assert [m.user_text for _, m in user_requests(s3.messages)] == ["migrate", "use the staging db", "again",
                                                                     "use the staging db"]


def test_claude_code_queue_without_its_text_and_block_prompts_and_task_notices():
    # cc-orpheus_37b35585 (tune half, CC 2.1.112): `enqueue`/`remove` carry no text; the words
    # are only in the attachment, whose prompt is a list of text blocks.
    att = {"type": "queued_command", "prompt": [{"type": "text", "text": "Can the cask install both?"}]}
    s = claude_code.load([cc_user(1, "package it"), cc_tool_use(2, "t1"),
                          {"type": "queue-operation", "operation": "enqueue", "sessionId": "s"},
                          cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                          cc("attachment", 4, attachment=att),
                          {"type": "queue-operation", "operation": "remove", "sessionId": "s"},
                          cc("assistant", 5, message={"id": "m5", "role": "assistant", "content": [{"type": "text", "text": "Yes."}]})])
    assert [m.user_text for _, m in user_requests(s.messages)] == ["package it", "Can the cask install both?"]
    # cc-langlearntts_0742cd3c (tune half, CC 2.1.50): a background task's notice queued as JSON is
    # the harness's, never the user's words; the typed message after it still comes in.
    notice = '{"task_id":"b968a3c","tool_use_id":"toolu_013","description":"Run all quality gates","task_type":"local_bash"}'
    s2 = claude_code.load([cc_user(1, "release it"), cc_tool_use(2, "t1"),
                           {"type": "queue-operation", "operation": "enqueue", "content": notice},
                           {"type": "queue-operation", "operation": "enqueue", "content": "use hello@punt-labs.com"},
                           cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
                           {"type": "queue-operation", "operation": "remove"},
                           {"type": "queue-operation", "operation": "remove"},
                           cc("assistant", 4, message={"id": "m4", "role": "assistant", "content": [{"type": "text", "text": "ok"}]})])
    assert [m.user_text for _, m in user_requests(s2.messages)] == ["release it", "use hello@punt-labs.com"]


def test_claude_code_tool_result_error_forms():
    s = claude_code.load([
        cc_user(1, "edit it"), cc_tool_use(2, "t1"),
        cc_user(3, [{"type": "tool_result", "tool_use_id": "t1",
                     "content": "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"}]),
        cc_tool_use(4, "t2"),
        cc_user(5, [{"type": "tool_result", "tool_use_id": "t2", "content": "Exit code 2\nmake: *** No rule"}],
                toolUseResult="Error: Exit code 2\nmake: *** No rule"),
        cc("mystery-record", 6),
    ])
    assert [r.is_error for m in s.messages for r in m.tool_results] == [True, True]
    assert inspect(s)["unknown_records"] == {"record:mystery-record": 1}


def test_claude_code_session_metadata_records_are_known():
    # claude-code 2.1.197's transcript loader reads these beside the messages; shapes as its
    # writer appends them ({type, <field>, sessionId}); context collapse (marble-origami-*) and
    # content-replacement leave the messages themselves in the file.
    meta = [{"type": t, "sessionId": "s"} for t in (
        "mode", "permission-mode", "agent-color", "agent-setting", "attribution-snapshot", "bridge-session",
        "content-replacement", "fork-context-ref", "isolation-latch", "relocated", "speculation-accept",
        "marble-origami-commit", "marble-origami-snapshot", "marble-origami-reset")]
    s = claude_code.load(meta + [cc_user(1, "build it")])
    assert inspect(s)["unknown_records"] == {} and not s.warnings
    assert [m.user_text for _, m in user_requests(s.messages)] == ["build it"]


def test_claude_code_2_1_217_records_are_known():
    # 2.1.217's loader table adds these (file-history-delta as its writer appends it: one per
    # tracked file, beside the file-history-snapshot of the same message; the cc-starcar fixture
    # holds 15).
    delta = {"type": "file-history-delta", "messageId": "m1", "snapshotMessageId": "m0", "trackingPath": "CLAUDE.md",
             "backup": {"backupFileName": "ae8d30e85126c328@v1", "version": 1}, "timestamp": "2026-07-21T23:02:25Z"}
    meta = [{"type": t, "sessionId": "s"} for t in ("frame-link", "ended-by-model", "observer-ref")]
    s = claude_code.load([delta, *meta, cc_user(1, "build it")])
    assert inspect(s)["unknown_records"] == {} and not s.warnings
    assert s.meta["skipped"]["file-history-delta"] == 1
    assert [m.user_text for _, m in user_requests(s.messages)] == ["build it"]


def test_pi_and_opencode_unknown_types_are_counted():
    # pi session-manager.ts: a `session` header, then entries; `future_entry` is no SessionEntry type
    p = pi.load([{"type": "session", "id": "p", "cwd": "/r", "version": 3},
                 {"type": "message", "id": "a", "parentId": None, "message": {"role": "user", "content": "hi"}},
                 {"type": "future_entry", "id": "b", "parentId": "a"}])
    assert inspect(p)["unknown_records"] == {"entry:future_entry": 1}
    # opencode message-v2.ts: {info, parts}; `hologram` is no Part type, `agent` is one
    o = opencode.load({"info": {"id": "ses"}, "messages": [{"info": {"id": "m1", "role": "user"}, "parts": [
        {"type": "text", "text": "hi"}, {"type": "agent", "name": "build"}, {"type": "hologram"}]}]})
    assert inspect(o)["unknown_records"] == {"part:hologram": 1}
    assert o.meta["skipped"] == {"part:agent": 1}


def test_opencode_exit_code_subtask_command_and_apply_patch():
    # opencode tool/bash.ts: a command that ran to its end is `completed`, its exit code in
    # metadata.exit; prompt.ts command(): a subtask command's part holds the expanded template;
    # tool/apply_patch.ts takes `patchText`.
    patch = "*** Begin Patch\n*** Add File: .github/workflows/scan.yml\n+name: Scan\n*** End Patch"
    o = opencode.load({"info": {"id": "ses"}, "messages": [
        {"info": {"id": "m1", "role": "user"}, "parts": [{"type": "text", "text": "Do not change the auth logic."}]},
        {"info": {"id": "m2", "role": "assistant"}, "parts": [
            {"type": "tool", "callID": "c1", "tool": "bash", "state": {
                "status": "completed", "input": {"command": "pnpm audit"}, "output": "7 vulnerabilities found",
                "metadata": {"exit": 1}}},
            {"type": "tool", "callID": "c2", "tool": "bash", "state": {
                "status": "completed", "input": {"command": "git status"}, "output": "", "metadata": {"exit": 0}}},
            {"type": "tool", "callID": "c3", "tool": "apply_patch", "state": {
                "status": "completed", "input": {"patchText": patch}, "output": "Success."}}]},
        {"info": {"id": "m3", "role": "user"}, "parts": [
            {"type": "subtask", "agent": "review", "description": "review changes", "command": "review",
             "prompt": "You are a code reviewer. Do not modify tests. Review the staged diff."}]}]})
    assert [r.is_error for m in o.messages for r in m.tool_results] == [True, False, False]
    assert [m.user_text for m in o.messages if m.starts_turn] == ["Do not change the auth logic.", "/review"]
    actions = scan_actions(o.messages)
    assert (".github/workflows/scan.yml", "created") in [(p, a) for x in actions for p, a in x.files]


def test_the_branch_the_harness_recorded_is_a_ledger_branch():
    # Claude Code writes `gitBranch` on every message record; Codex's session_meta carries
    # protocol.rs GitInfo {commit_hash, branch, repository_url}.
    c = claude_code.load([cc_user(1, "fix it", gitBranch="main"), cc_tool_use(2, "t1"),
                          cc_user(3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], gitBranch="fix/x")])
    assert [b.name for b in extract_ledger(c.messages).branches] == ["main", "fix/x"]
    x = codex.load([{"timestamp": "t", "type": "session_meta", "payload": {
        "id": "s1", "cwd": "/repo", "git": {"commit_hash": "abc", "branch": "refactor/store"}}},
        {"timestamp": "t", "type": user("go")[0], "payload": user("go")[1]}])
    assert [b.name for b in extract_ledger(x.messages).branches] == ["refactor/store"]


def test_opencode_repeated_ids_of_a_redacted_copy_still_pair_each_call_with_its_output():
    # Entire's checkpoint copies write `"callID": "REDACTED"` and `"id": "REDACTED"`; opencode
    # keeps a call and its output in one part, so each output stays with its own call.
    def bash(cmd: str, out: str, code: int) -> dict:
        return {"type": "tool", "id": "REDACTED", "callID": "REDACTED", "tool": "bash", "state": {
            "status": "completed", "input": {"command": cmd}, "output": out, "metadata": {"exit": code}}}
    o = opencode.load({"info": {"id": "ses"}, "messages": [
        {"info": {"id": "m1", "role": "user"}, "parts": [{"type": "text", "text": "test it"}]},
        {"info": {"id": "m2", "role": "assistant"}, "parts": [bash("pnpm test", "Error: boom", 1),
                                                               bash("pnpm lint", "ok", 0)]}]})
    assert len({m.id for m in o.messages}) == len(o.messages)
    runs = {a.command: a.status for a in scan_actions(o.messages)}
    assert runs == {"pnpm test": "failed", "pnpm lint": "ok"}


def test_inspect_json_round_trips_unknown_records():
    s = codex.load(rollout(user("x"), ("mystery", {})))
    assert json.loads(json.dumps(inspect(s)))["unknown_records"] == {"record:mystery": 1}


def copilot_events(*events: tuple[str, dict], **envelope: object) -> list[dict]:
    """Copilot CLI events.jsonl lines (github/copilot-sdk nodejs/src/generated/session-events.ts:
    `{type, data, id, timestamp, parentId}`, each parentId the event before it)."""
    out: list[dict] = []
    for n, (kind, data) in enumerate((("session.start", {"sessionId": "c1", "version": 1, "producer": "copilot-agent",
                                                         "copilotVersion": "1.0.72-1", "context": {"cwd": "/repo"}}),)
                                     + events):
        out.append({"type": kind, "data": data, "id": f"e{n}", "timestamp": "2026-07-19T23:12:34.849Z",
                    "parentId": out[-1]["id"] if out else None, **(envelope if n else {})})
    return out


def copilot_turn(prompt: str, call: str, tool: str, args: dict, result: dict) -> list[tuple[str, dict]]:
    # UserMessageData {content, transformedContent}; AssistantMessageData {content, toolRequests[]};
    # ToolExecutionStartData {toolCallId, toolName, arguments}; ToolExecutionCompleteData {toolCallId, success, result|error}
    return [("user.message", {"content": prompt, "transformedContent": f"<current_datetime>x</current_datetime>\n\n{prompt}"}),
            ("assistant.turn_start", {"turnId": "0"}),
            ("assistant.message", {"messageId": "m", "content": "", "toolRequests": [
                {"toolCallId": call, "name": tool, "arguments": args, "type": "function"}]}),
            ("tool.execution_start", {"toolCallId": call, "toolName": tool, "arguments": args}),
            ("tool.execution_complete", {"toolCallId": call, **result}),
            ("assistant.turn_end", {"turnId": "0"})]


def test_copilot_cli_event_types_from_its_session_events_schema():
    lines = copilot_events(
        ("system.message", {"role": "system", "content": "You are the GitHub Copilot CLI"}),
        *copilot_turn("fix the flaky test", "call_1", "bash", {"command": "go test ./pkg/osutil/...", "description": "d"},
                      {"success": True, "result": {"content": "--- FAIL: TestRename (0.01s)\nFAIL\n"
                                                   "<shellId: 0 completed with exit code 1>"}}),
        ("user.message", {"content": "", "transformedContent": "<system_reminder>AGENTS.md</system_reminder>",
                          "source": "instruction-discovery"}),
        ("assistant.message", {"messageId": "m2", "content": "", "toolRequests": [
            {"toolCallId": "call_2", "name": "view", "arguments": {"path": "/repo/missing.go"}}]}),
        ("tool.execution_start", {"toolCallId": "call_2", "toolName": "view", "arguments": {"path": "/repo/missing.go"}}),
        ("tool.execution_complete", {"toolCallId": "call_2", "success": False,
                                     "error": {"message": "Path does not exist", "code": "failure"}}),
        ("hook.start", {"hookInvocationId": "h", "hookType": "postToolUseFailure"}),
        # a freeform tool's arguments are the raw string (AssistantMessageToolRequest.type "custom")
        ("assistant.message", {"messageId": "m3", "content": "", "toolRequests": [
            {"toolCallId": "custom_call_3", "name": "apply_patch", "type": "custom", "arguments":
             "*** Begin Patch\n*** Update File: /repo/pkg/osutil/rename_windows.go\n@@\n-a\n+b\n*** End Patch"}]}),
        ("tool.execution_complete", {"toolCallId": "custom_call_3", "success": True, "result": {"content": "Done"}}),
        ("system.message", {"role": "system", "content": "You are the GitHub Copilot CLI"}),  # logged again
        ("session.context_changed", {"cwd": "/repo", "branch": "fix/flaky"}),
        ("session.hologram", {}),
    )
    s = load(lines)
    assert detect(lines) == "copilot" and s.meta["cwd"] == "/repo" and s.meta["copilotVersion"] == "1.0.72-1"
    assert [m.role for m in s.messages] == ["system", "user", "assistant", "tool", "user", "assistant", "tool",
                                            "assistant", "tool"]
    prompt, reminder = s.messages[1], s.messages[4]
    assert prompt.starts_turn and prompt.user_text == "fix the flaky test"  # the model was sent the dated form
    assert prompt.text.startswith("<current_datetime>")
    assert not reminder.starts_turn and reminder.user_text == ""  # the CLI's own message
    assert [(r.name, r.is_error, r.output) for r in s.messages[6].tool_results] == [
        ("view", True, "Path does not exist")]
    run = next(a for a in scan_actions(s.messages) if a.tool == "bash")
    assert (run.command, run.exit_code, run.status, run.errors) == (
        "go test ./pkg/osutil/...", 1, "failed", ["--- FAIL: TestRename (0.01s)"])
    patched = extract_ledger(s.messages, cwd="/repo").file("pkg/osutil/rename_windows.go")
    assert patched is not None and patched.changed
    report = inspect(s)
    assert report["unknown_records"] == {"event:session.hologram": 1}
    assert report["skipped"] == {"assistant.turn_end": 1, "assistant.turn_start": 1, "hook.start": 1,
                                 "system.message(repeated)": 1}


def test_copilot_cli_compaction_truncation_and_sub_agents():
    # CompactionCompleteData {success, summaryContent, preCompactionMessagesLength, messagesRemoved};
    # TruncationData {messagesRemovedDuringTruncation, …}; a sub-agent's events carry `agentId`.
    turn = copilot_turn("port the tests", "call_1", "view", {"path": "/repo/a.go"}, {"success": True, "result": {"content": "1. package a"}})
    lines = copilot_events(
        *turn,
        ("session.truncation", {"messagesRemovedDuringTruncation": 1, "tokenLimit": 1000, "performedBy": "BasicTruncator"}),
        ("user.message", {"content": "now the docs"}),
        ("session.compaction_complete", {"success": True, "summaryContent": "Ported the tests of a.go.",
                                         "preCompactionMessagesLength": 3, "messagesRemoved": 2}),
        ("session.compaction_complete", {"success": False, "error": "model timeout"}),
    ) + copilot_events(("assistant.message", {"messageId": "sub", "content": "sub-agent work"}), agentId="a1")[1:]
    s = load(lines)
    assert [(m.role, m.compacted, m.is_summary) for m in s.messages] == [
        ("user", True, False),  # the oldest message, truncated
        ("assistant", True, False), ("tool", True, False),  # the two the summary replaced
        ("user", False, True),  # the summary, before the message it kept
        ("user", False, False),
    ]
    assert s.messages[3].text == "Ported the tests of a.go."
    assert inspect(s)["skipped"] == {"assistant.turn_end": 1, "assistant.turn_start": 1, "subagent:assistant.message": 1}


def test_oh_my_pi_records_in_pi_format():
    """oh-my-pi (can1357/oh-my-pi, session/session-entries.ts at 01d016ca) writes pi's format with
    a fixed-width `title` slot before the header, audit and usage entries, a `developer` role for
    its reminders, and `reset_boundary` for `/clear`. None is unknown; the slot does not make the
    tree linear (the abandoned branch `b` stays out); the reminder is not the user's."""
    entry = {"timestamp": "2026-08-21T19:21:11.352Z"}
    s = pi.load([
        {"type": "title", "v": 1, "title": "Use pullfrog not bullfrog", "source": "auto", "updatedAt": "t", "pad": "   "},
        {"type": "session", "version": 3, "id": "01a025c5", "timestamp": "t", "cwd": "/Users/bnjoroge/preloop"},
        {**entry, "type": "message", "id": "a", "parentId": None, "message": {"role": "user", "content": "set up bullfrog"}},
        {**entry, "type": "message", "id": "b", "parentId": "a", "message": {"role": "user", "content": "abandoned"}},
        {**entry, "type": "title_change", "id": "c", "parentId": "a", "title": "Set up bullfrog", "source": "auto"},
        {**entry, "type": "reset_boundary", "id": "d", "parentId": "c"},
        {**entry, "type": "ttsr_injection", "id": "e", "parentId": "d", "injectedRules": ["preloop-submit-before-push"]},
        {**entry, "type": "message", "id": "f", "parentId": "e", "message": {"role": "developer", "content": [
            {"type": "text", "text": "<system-reminder>\nYou stopped with 3 incomplete todo item(s):\n</system-reminder>"}]}},
        {**entry, "type": "message", "id": "g", "parentId": "f", "message": {"role": "user", "content": "Use pullfrog"}},
    ])
    report = inspect(s)
    assert report["unknown_records"] == {} and report["warnings"] == []
    assert report["skipped"] == {"off-branch": 1, "title": 1, "title_change": 1, "ttsr_injection": 1}
    assert [(m.text[:16], m.compacted, m.starts_turn) for m in s.messages] == [
        ("set up bullfrog", True, True),  # before the /clear: no longer in the model's context
        ("<system-reminder", False, False),
        ("Use pullfrog", False, True),
    ]
    assert [m.user_text for _, m in user_requests(s.messages)] == ["set up bullfrog", "Use pullfrog"]


def cell(call_id: str, js: str, output: str) -> list[tuple[str, dict]]:
    """A code-mode `exec` cell and its output (models.rs CustomToolCall / CustomToolCallOutput)."""
    return [("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "exec",
                               "input": js}),
            ("response_item", {"type": "custom_tool_call_output", "call_id": call_id, "output": output})]


def wait(call_id: str, cell_id: str, output: str) -> list[tuple[str, dict]]:
    # code_mode wait_spec.rs: `wait {cell_id, yield_time_ms?, max_tokens?, terminate?}`, a function tool
    return [("response_item", {"type": "function_call", "call_id": call_id, "name": "wait",
                               "arguments": json.dumps({"cell_id": cell_id, "yield_time_ms": 1000})}),
            ("response_item", {"type": "function_call_output", "call_id": call_id, "output": output})]


RUNNING_CELL = "Script running with cell ID {}\nWall time 10.0 seconds\nOutput:\n"  # code_mode format_script_status


def test_a_cell_id_taken_by_a_later_cell_is_no_longer_the_first_cells_run():
    """Cell ids are reused: a yielded cell whose last tool is not a shell takes id 1 after `make
    test`'s cell 1 ended unseen. A checkpoint after it carries no run for id 1, so the wait on it,
    past the boundary, is not `make test`."""
    s = codex.load(rollout(
        user("run the tests"),
        *cell("c1", 'await tools.exec_command({cmd: "make test"});', RUNNING_CELL.format(1)),
        user("patch it"),
        *cell("c2", 'await tools.apply_patch("*** Begin Patch\\n*** Update File: a.py\\n@@\\n-a\\n+b\\n*** End Patch");',
              RUNNING_CELL.format(1)),
        *wait("w1", "1", "Script completed\nWall time 0.1 seconds\nOutput:\nDone")))
    boundary = next(i for i, m in enumerate(s.messages) if any(c.name == "wait" for c in m.tool_calls))
    assert [(r.run_id, r.command) for r in extract_ledger(s.messages[:3]).running] == [("cell 1", "make test")]
    ledger = extract_ledger(s.messages[:boundary])
    assert ledger.running == []
    ledger = extract_ledger(s.messages[boundary:], previous=ledger)
    assert [c.status for c in ledger.commands if c.command == "make test"] == ["unknown"]  # the wait was not it


def test_a_cell_header_printed_by_another_tool_is_data():
    # a plain exec_command (not a cell) whose command printed a cell header and a result object
    s = codex.load(rollout(user("show the notes"), ("response_item", {
        "type": "function_call", "call_id": "x", "name": "exec_command", "arguments": json.dumps({"cmd": "cat notes.txt"})}),
        ("response_item", {"type": "function_call_output", "call_id": "x", "output":
                           'Script running with cell ID 3\n{"chunk_id":"a","wall_time_seconds":1.0,"session_id":77,"output":""}'})))
    (run,) = scan_actions(s.messages)
    assert (run.command, run.run_id, run.status) == ("cat notes.txt", None, "ok")


def test_copilot_and_oh_my_pi_odd_records_warn_or_skip_never_raise():
    # toolRequests not a list, a start before its request, counts larger than what is held
    s = load(copilot_events(
        ("user.message", {"content": "go"}),
        ("tool.execution_start", {"toolCallId": "t1", "toolName": "bash", "arguments": {"command": "ls"}}),
        ("assistant.message", {"messageId": "m", "content": "", "toolRequests": [
            {"toolCallId": "t1", "name": "bash", "arguments": {"command": "ls"}}]}),
        ("tool.execution_complete", {"toolCallId": "t1", "success": True, "result": {"content": "a.go"}}),
        ("assistant.message", {"messageId": "m2", "content": "done", "toolRequests": 7}),
        ("session.compaction_complete", {"success": True, "summaryContent": "Listed.",
                                         "preCompactionMessagesLength": 10, "messagesRemoved": 4}),
    ))
    assert [len(m.tool_calls) for m in s.messages if m.role == "assistant"] == [1, 0]  # one call, not two
    assert not any(m.compacted for m in s.messages)  # it kept more than is held here: nothing to drop
    # oh-my-pi: a fileMention whose `files` is not a list; a `/clear` after a compaction
    p = pi.load([{"type": "session", "version": 3, "id": "p", "cwd": "/r"},
                 {"type": "message", "id": "a", "parentId": None, "message": {"role": "user", "content": "first"}},
                 {"type": "compaction", "id": "b", "parentId": "a", "summary": "S", "firstKeptEntryId": "a",
                  "tokensBefore": 9},
                 {"type": "reset_boundary", "id": "c", "parentId": "b"},
                 {"type": "message", "id": "d", "parentId": "c", "message": {"role": "fileMention", "files": 3}},
                 {"type": "message", "id": "e", "parentId": "d", "message": {"role": "user", "content": "second"}}])
    assert [m.compacted for m in p.messages] == [True, True, False, False]
    assert p.last_summary_index() is None  # the summary from before the /clear is no longer held
