"""Gemini CLI 0.61.0 (the real, pinned CLI) hands its compaction to compactd, set up as README's
"Use with Gemini CLI" says.

Gemini CLI speaks only the Gemini API, on one base URL for its main turns and its compaction:
`GOOGLE_GEMINI_BASE_URL` is compactd's (the real app with the bundled 0.5B), started with
`gemini_upstream` the loopback stub (the main model). compactd answers the compaction itself,
recognized by its structure under the `chat-compression-2.5-flash` alias's model (no alias in
the settings), and forwards every other request to the stub. Gemini runs headless (`-p`, an API
key, offline; the settings only what that needs) in a project outside the clone, with the venv
not on PATH. The first run has it run a failing test through its shell tool; the `--resume
latest` run gets the command again with an overflowing usage, so Gemini compacts (a draft, then
a verify request, both to compactd) before sending that tool's result. The stub must never see
a compaction request, and the next main-model request's first user content must carry
compactd's `<state_snapshot>`, its 7 tags and the exact error line, followed by Gemini's own
acknowledgement: Gemini accepted the summary and went on.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.fakes import served_app
from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub, is_compaction
from tests.integrations.agents import GEMINI_CLI, install

pytestmark = pytest.mark.model

TAGS = ("overall_goal", "active_constraints", "key_knowledge", "artifact_trail", "file_system_state",
        "recent_actions", "task_state")
ACK = "Got it. Thanks for the additional context!"  # Gemini's model turn after the summary
GENERATED = ('compactd_http_request_duration_seconds_count{method="POST",'
             'route="/v1beta/models/{model}:generateContent",status="200"}')
AGENT_JOBS = 'compactd_jobs_total{kind="agent_compaction",status="done"}'


def metric(metrics: str, series: str) -> float:
    """The value of one series in compactd's /metrics text (0 when absent)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(series + " "))


def test_gemini_cli_carries_compactds_summary(llama_backend, tmp_path):
    exe = install(GEMINI_CLI)
    work = m.project(tmp_path)
    with AgentStub(m.COMMAND, inflate_once=m.GEMINI_INFLATED, again_prompt=m.AGAIN) as stub, \
            served_app(llama_backend, gemini_upstream=stub.base) as compactd:
        runs = m.gemini_turns(exe, work, m.gemini_env(tmp_path / "home", work, compactd.url))
        requests = list(stub.requests)
        metrics = httpx.get(compactd.url + "/metrics", timeout=30).text
    log = "\n".join(f"rc={r.returncode}\nstdout={r.stdout[-1500:]}\nstderr={r.stderr[-2500:]}" for r in runs)
    assert all(r.returncode == 0 for r in runs), log
    main = [r["body"] for r in requests if m.GEMINI_MAIN in r["path"] and isinstance(r["body"], dict)]
    assert any(m.ERROR_LINE in json.dumps(b) for b in main), log  # the tool ran for real, forwarded to the stub
    assert not any(is_compaction(r["body"]) for r in requests), log  # compactd kept the compaction
    # compactd answered both of Gemini's compaction requests (the draft and the verify pass) itself.
    assert metric(metrics, AGENT_JOBS) >= 1, metrics  # the draft: compactd's pipeline
    assert metric(metrics, GENERATED) >= 2, metrics  # the draft and the verify pass, answered 200
    carried = [c for b in main for c in [b.get("contents") or []]
               if len(c) > 1 and c[1].get("role") == "model" and ACK in json.dumps(c[1])]
    assert carried, log  # Gemini replaced its history with the summary and went on
    parts = [p.get("text", "") for p in carried[-1][0].get("parts") or []]
    summary = next((p for p in parts if p.lstrip().startswith("<state_snapshot>")), "")
    assert summary.strip().endswith("</state_snapshot>"), parts  # only the snapshot, stored verbatim
    for tag in TAGS:
        assert f"<{tag}>" in summary and f"</{tag}>" in summary, summary
    knowledge = re.search(r"<key_knowledge>(.*?)</key_knowledge>", summary, re.S)
    assert knowledge and f"`{m.ERROR_LINE}`" in knowledge.group(1), summary  # compactd's fact, exact
    assert m.COMMAND in summary, summary
    # Gemini went on after the summary: the main model got the resumed turn's tool result.
    after = [b for b in main if ACK in json.dumps(b.get("contents") or [])]
    assert any("functionResponse" in json.dumps(b["contents"][2:]) for b in after), log
