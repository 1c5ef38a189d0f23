"""Claude Code 2.1.197 (the real CLI from npm) compacting with `compactd hook claude-code`.

Set up as README says: `compactd integrate claude-code` run in a project directory outside
the clone writes the project's .claude/settings.json, and Claude Code then runs there with the
venv not on PATH (`compactd` is no command), so the hook runs only by the absolute command
integrate wrote. Headless and offline: ANTHROPIC_BASE_URL points at the loopback StubModel,
HOME and CLAUDE_CONFIG_DIR at empty tmp dirs. One turn runs a real failing command through
Claude Code's Bash tool (the exact error line lands in its transcript), a second turn follows,
then `/compact`, then one more turn. The stub's own summary drops the error line, so:

- the compaction request must hold compactd's facts after "Additional Instructions:" (PreCompact);
- the request after the compaction must hold compactd's checkpoint as SessionStart additional
  context, with the exact error line and the user's constraint (SessionStart, matcher compact).

The hook loads no model (it runs on Claude Code's critical path), so this test has no `model` mark.
"""

from __future__ import annotations

import json
import subprocess

from tests.integrations.agents import CLAUDE_CODE, bare_path, checkout_env, install, integrate
from tests.integrations.loopback import (
    ERROR_LINE,
    FIRST_PROMPT,
    RUN_COMMAND,
    STUB_SUMMARY,
    USER_CONSTRAINT,
    StubModel,
    is_compaction_request,
    write_failing_program,
)
from worker.agents.claude_code import CHECKPOINT_HEADER, PRECOMPACT_HEADER
from worker.integrate import hook_command

TURN_TIMEOUT_S = 180  # one headless turn against the loopback stub takes ~5 s; a cold start more


def texts(value: object) -> list[str]:
    """Every string in a request body, depth first (the blocks Claude Code sends)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def test_claude_code_compaction_carries_compactd_facts(tmp_path):
    exe = install(CLAUDE_CODE)
    home, work = tmp_path / "home", tmp_path / "work"
    config = home / ".claude"
    config.mkdir(parents=True)
    work.mkdir()
    write_failing_program(work)
    integrate("claude-code", work)
    settings = json.loads((work / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == {"PreCompact", "SessionStart"}
    assert settings["hooks"]["SessionStart"][0]["matcher"] == "compact"
    assert {h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]} == \
        {hook_command()}

    with StubModel() as stub:
        env = {"PATH": bare_path(), **checkout_env(), "HOME": str(home), "CLAUDE_CONFIG_DIR": str(config),
               "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "loopback-only",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}

        def claude(*args: str) -> dict:
            done = subprocess.run([str(exe), "-p", *args, "--output-format", "json"], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=TURN_TIMEOUT_S, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, done.stderr[-2000:]
            return json.loads(done.stdout)

        first = claude(FIRST_PROMPT, "--allowedTools", "Bash")
        session = first["session_id"]
        claude("What else should I check?", "--resume", session)
        compacted = claude("/compact", "--resume", session)
        assert not compacted["is_error"]
        before_next = len(stub.bodies("/messages"))
        claude("Go on.", "--resume", session)
        bodies = stub.bodies("/messages")

    # The command really ran: its traceback is in the tool result Claude Code sent back.
    tool_turn = next(b for b in bodies if '"tool_result"' in json.dumps(b))
    assert ERROR_LINE in json.dumps(tool_turn["messages"], ensure_ascii=False)

    # PreCompact: compactd's facts are appended to Claude Code's summarizer prompt.
    compaction = [b for b in bodies if is_compaction_request(b)]
    assert len(compaction) == 1
    prompt = next(t for t in texts(compaction[0]["messages"][-1]) if "Additional Instructions:" in t)
    extra = prompt.split("Additional Instructions:", 1)[1]
    assert extra.lstrip().startswith(PRECOMPACT_HEADER)
    assert f"`{ERROR_LINE}` — from `{RUN_COMMAND}`" in extra
    assert f"`{RUN_COMMAND}` → exit 1" in extra
    assert USER_CONSTRAINT in extra
    assert "## Critical Context" in extra and "## Constraints & Preferences" in extra

    # SessionStart (compact): the next turn carries Claude's summary (the stub's, without the
    # error) and compactd's checkpoint as additional context, with the exact error line.
    after = bodies[before_next]
    assert any(STUB_SUMMARY in t for t in texts(after["messages"]))
    marker = "SessionStart hook additional context: "
    context = next(t for t in texts(after) if marker in t).split(marker, 1)[1]
    assert context.startswith(CHECKPOINT_HEADER)
    for section in ("## Goal", "## Constraints & Preferences", "## Progress", "## Critical Context",
                    "## Relevant Files"):
        assert section in context
    assert f"`{ERROR_LINE}`" in context
    assert USER_CONSTRAINT in context
