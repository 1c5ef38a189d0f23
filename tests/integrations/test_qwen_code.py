"""Qwen Code 0.24.4 (the real, pinned CLI) hands its compaction to compactd through config alone.

~/.qwen/settings.json (a temp home) names two `modelProviders` entries: the main model (a
loopback stub) and compactd (the real app with the bundled 0.5B, a large `contextWindowSize` so
Qwen does not fall back to the main model), and `compactionModel` the latter. Qwen runs headless
(`--yolo`) and offline in a project outside the clone, with the venv not on PATH. The first run
has Qwen run a failing test through its shell tool; the stub then reports a usage over the
auto-compaction threshold once, so the `--continue` run compacts before its send. Qwen replaces
the whole history with the summary: the next main-model request's first user message must be
compactd's `<state_snapshot>` with Qwen's 9 sections and the exact error line.
"""

from __future__ import annotations

import json

import pytest

from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub, is_compaction
from tests.integrations.agents import QWEN_CODE, install, integrate

pytestmark = pytest.mark.model

TAGS = ("primary_request_and_intent", "key_technical_concepts", "files_and_code_sections", "errors_and_fixes",
        "problem_solving", "all_user_messages", "pending_tasks", "current_work", "next_step")
RESUME = "Resume the prior task using the summary above."  # Qwen's words after the summary


def test_qwen_code_carries_compactds_summary(compactd_url, tmp_path):
    exe = install(QWEN_CODE)
    work = m.project(tmp_path)
    with AgentStub(m.COMMAND, inflate_once=m.QWEN_INFLATED) as stub:
        env = m.qwen_env(tmp_path / "home", work, m.qwen_settings(stub.url))
        # README: merged into the settings file that holds the user's providers.
        integrate("qwen-code", work, "--global", "--url", compactd_url, env={"HOME": str(tmp_path / "home")})
        runs = m.qwen_turns(exe, work, env)
        bodies = stub.bodies()
    log = "\n".join(f"rc={r.returncode}\nstdout={r.stdout[-1500:]}\nstderr={r.stderr[-2500:]}" for r in runs)
    assert all(r.returncode == 0 for r in runs), log
    assert any(m.ERROR_LINE in json.dumps(b) for b in bodies), log  # the tool ran for real
    assert not any(is_compaction(b) for b in bodies), log  # compactd answered the compaction, not the stub
    carried = [m.text_of(msg.get("content")) for b in bodies for msg in b.get("messages") or []
               if msg.get("role") == "user" and RESUME in m.text_of(msg.get("content"))]
    assert carried, log  # Qwen accepted a summary (not "not beneficial", not a failure)
    summary = carried[-1]
    assert "<state_snapshot>" in summary and "</state_snapshot>" in summary, summary
    for tag in TAGS:
        assert f"<{tag}>" in summary and f"</{tag}>" in summary, summary
    assert m.ERROR_LINE in summary, summary
