"""Aider 0.86.2 (the real, pinned CLI, in its own venv) summarizes its chat history with compactd.

Aider summarizes with its weak model: `--weak-model openai/qwen2.5-coder-1.5b`, whose
`api_base` (.aider.model.settings.yml in the project) is compactd (the real app with the
bundled 0.5B); the main model is a loopback stub (OPENAI_API_BASE). Aider runs headless
(`--message`, offline) in a project outside the clone, with the venv not on PATH. The user's
first message carries what the failing test printed; the second run restores that history over
a 100-token budget, so Aider summarizes it at start-up. Its turn must carry compactd's summary,
as Aider wants it: first-person prose ("I asked you ...", no headings) holding the exact error
line. The stub never sees Aider's summarize prompt (Aider falls back to the main model when the
weak one fails).
"""

from __future__ import annotations

import json

import pytest

from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub, is_compaction
from tests.integrations.agents import install_aider, integrate

pytestmark = pytest.mark.model

PREFIX = "I spoke to you previously about a number of things.\n"  # Aider's words before the summary


def test_aider_carries_compactds_summary(compactd_url, tmp_path):
    exe = install_aider()
    work = m.project(tmp_path)
    with AgentStub(m.COMMAND) as stub:
        m.aider_files(work)
        integrate("aider", work, "--url", compactd_url)  # README: the weak model's server
        runs = m.aider_turns(exe, work, m.aider_env(tmp_path / "home", work, stub.url))
        bodies = stub.bodies()
    log = "\n".join(f"rc={r.returncode}\nstdout={r.stdout[-2500:]}\nstderr={r.stderr[-2500:]}" for r in runs)
    assert all(r.returncode == 0 for r in runs), log
    assert m.ERROR_LINE in json.dumps(bodies[0]), log  # what the test printed reached the model
    assert not any(is_compaction(b) for b in bodies), log  # compactd summarized, not the main model
    carried = [m.text_of(msg.get("content")) for b in bodies for msg in b.get("messages") or []
               if msg.get("role") == "user" and m.text_of(msg.get("content")).startswith(PREFIX)]
    assert carried, log
    summary = carried[-1][len(PREFIX):]
    assert summary.startswith("I "), summary  # first person, as Aider's prompt asks
    assert not any(line.startswith("#") for line in summary.splitlines()), summary
    assert m.ERROR_LINE in summary, summary
