"""Kilo CLI 7.7.7 (the real, pinned CLI) hands its compaction to compactd through config alone.

Set up as for opencode (Kilo is its fork): the project's kilo.json names the main model (a
loopback stub) and `agent.compaction.model` compactd's (served by the real app with the bundled
0.5B). Kilo runs headless and offline in a temp home, in a project outside the clone, with the
venv not on PATH. The first `kilo run` runs a failing test through Kilo's bash tool; the stub
then reports an overflowing usage once, so Kilo compacts before the next turn (`kilo run
--continue`). The summary Kilo carries into that turn (the assistant answer to "What did we do
so far?" in the stub's log) must be compactd's: opencode's sections and the exact error line.
"""

from __future__ import annotations

import json

import pytest

from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub, is_compaction
from tests.integrations.agents import KILO, install, integrate

pytestmark = pytest.mark.model

SECTIONS = ("## Objective", "## Important Details", "## Work State", "### Completed", "### Active", "### Blocked",
            "## Next Move", "## Relevant Files")
ASKED = "What did we do so far?"  # the user turn Kilo puts before the summary


def test_kilo_carries_compactds_summary(compactd_url, tmp_path):
    exe = install(KILO)
    work = m.project(tmp_path)
    with AgentStub(m.COMMAND, inflate_once=m.KILO_INFLATED) as stub:
        (work / "kilo.json").write_text(json.dumps(m.kilo_config(stub.url), indent=1))
        integrate("kilo", work, "--url", compactd_url)  # README: compactd's provider merged in
        runs = m.kilo_turns(exe, work, m.kilo_env(tmp_path / "home", work))
        bodies = stub.bodies()
    log = "\n".join(f"rc={r.returncode}\nstdout={r.stdout[-1500:]}\nstderr={r.stderr[-2500:]}" for r in runs)
    assert all(r.returncode == 0 for r in runs), log
    assert any(m.ERROR_LINE in json.dumps(b) for b in bodies), log  # the tool ran for real
    assert not any(is_compaction(b) for b in bodies), log  # compactd answered the compaction, not the stub
    carried = [msgs[i + 1].get("content") for b in bodies for msgs in [b.get("messages") or []]
               for i in range(len(msgs) - 1)
               if msgs[i].get("role") == "user" and ASKED in m.text_of(msgs[i].get("content"))
               and msgs[i + 1].get("role") == "assistant"]
    assert carried, log
    summary = m.text_of(carried[-1])
    for heading in SECTIONS:
        assert heading in summary, summary
    assert m.ERROR_LINE in summary, summary
