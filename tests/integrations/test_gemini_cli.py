"""Gemini CLI 0.61.0 (the real, pinned CLI) hands its compaction to compactd by model alias.

Gemini CLI speaks only the Gemini API, on one base URL (GOOGLE_GEMINI_BASE_URL) for its main
turns and its compaction. ~/.gemini/settings.json (a temp home) maps the alias
`chat-compression-2.5-flash` to the model `compactd-qwen2.5-coder-1.5b`; the loopback stub is
the main model and forwards every request for a `compactd-*` model, verbatim, to compactd (the
real app with the bundled 0.5B), as a user's router would. Gemini runs headless (`-p`, an API
key, offline) in a project outside the clone, with the venv not on PATH. The first run has it
run a failing test through its shell tool; the `--resume latest` run gets the command again with
an overflowing usage, so Gemini compacts (a draft, then a verify request) before sending that
tool's result. The next main-model request's first user content must carry compactd's
`<state_snapshot>` with Gemini's 7 sections and the exact error line.
"""

from __future__ import annotations

import json

import pytest

from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub, is_compaction
from tests.integrations.agents import GEMINI_CLI, install

pytestmark = pytest.mark.model

TAGS = ("overall_goal", "active_constraints", "key_knowledge", "artifact_trail", "file_system_state",
        "recent_actions", "task_state")
ACK = "Got it. Thanks for the additional context!"  # Gemini's model turn after the summary


def test_gemini_cli_carries_compactds_summary(compactd_url, tmp_path):
    exe = install(GEMINI_CLI)
    work = m.project(tmp_path)
    with AgentStub(m.COMMAND, inflate_once=m.GEMINI_INFLATED, again_prompt=m.AGAIN, forward_prefix="compactd-",
                   forward_url=compactd_url) as stub:
        runs = m.gemini_turns(exe, work, m.gemini_env(tmp_path / "home", work, stub.base))
        requests = list(stub.requests)
    log = "\n".join(f"rc={r.returncode}\nstdout={r.stdout[-1500:]}\nstderr={r.stderr[-2500:]}" for r in runs)
    forwarded = [r for r in requests if m.GEMINI_COMPACTION in r["path"]]
    log += "\ncompactd answered: " + json.dumps([r.get("forwarded") for r in forwarded])[:3000]
    assert all(r.returncode == 0 for r in runs), log
    main = [r["body"] for r in requests if m.GEMINI_MAIN in r["path"] and isinstance(r["body"], dict)]
    assert any(m.ERROR_LINE in json.dumps(b) for b in main), log  # the tool ran for real
    assert forwarded and all(is_compaction(r["body"]) for r in forwarded), log  # the compaction went to compactd
    assert all(r["forwarded"]["status"] == 200 for r in forwarded), log
    assert not any(is_compaction(b) for b in main), log
    carried = [json.dumps(c[0].get("parts"), ensure_ascii=False) for b in main for c in [b.get("contents") or []]
               if len(c) > 1 and c[1].get("role") == "model" and ACK in json.dumps(c[1])]
    assert carried, log
    summary = "".join(p.get("text", "") for p in json.loads(carried[-1]))
    assert "<state_snapshot>" in summary and "</state_snapshot>" in summary, summary
    for tag in TAGS:
        assert f"<{tag}>" in summary and f"</{tag}>" in summary, summary
    assert m.ERROR_LINE in summary, summary
