"""Codex 0.171.0 (the real CLI from npm) with compactd as its provider: compaction answered by
compactd, every other turn forwarded to the loopback StubModel (`compactd serve --upstream`).

Headless and offline: CODEX_HOME is a tmp dir whose config.toml names compactd (wire_api
responses) with a low `model_auto_compact_token_limit`. The first `codex exec` runs a real
failing command through Codex's shell tool; the stub then reports a usage above the limit, so
the next `codex exec resume --last` compacts before its turn. compactd answers the compaction
with the real bundled 0.5B and the real pipeline; the stub's log of the turn after it must hold
compactd's summary: its sections and the exact error line from the first turn.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.fakes import served_app
from tests.integrations.agents import CODEX, install
from tests.integrations.loopback import (
    ERROR_LINE,
    FIRST_PROMPT,
    RUN_COMMAND,
    StubModel,
    write_failing_program,
)

AUTO_COMPACT_LIMIT = 20_000  # Codex compacts before a turn once the last usage reported passes this
HIGH_USAGE = 30_000  # what the stub reports after the tool ran: over the limit, once
TURN_TIMEOUT_S = 900  # the compaction turn runs the 0.5B on a CPU: ~30 s idle, 4 min on a loaded 2-core VM

CONFIG = """model = "stub-model"
model_provider = "compactd"
model_context_window = 32000
model_auto_compact_token_limit = {limit}
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.compactd]
name = "compactd"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "COMPACTD_TEST_KEY"
stream_idle_timeout_ms = 900000
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.mark.model
def test_codex_compaction_is_compactds(tmp_path, llama_backend):
    exe = install(CODEX)
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    write_failing_program(work)
    with StubModel(high_usage_after_tool=HIGH_USAGE) as stub, served_app(llama_backend, upstream=stub.url) as cd:
        (home / "config.toml").write_text(CONFIG.format(limit=AUTO_COMPACT_LIMIT, url=cd.url))
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home),
               "COMPACTD_TEST_KEY": "loopback-only", "NO_COLOR": "1"}

        def codex(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run([str(exe), "exec", *args], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=TURN_TIMEOUT_S, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
            return done

        codex("--skip-git-repo-check", FIRST_PROMPT)
        first_turn = len(stub.bodies("/responses"))
        codex("resume", "--last", "--skip-git-repo-check", "Go on.")
        bodies = stub.bodies("/responses")

    # The command really ran: its traceback came back to the model as the call's output.
    assert any(ERROR_LINE in json.dumps(b.get("input"), ensure_ascii=False) for b in bodies[:first_turn])
    assert any(RUN_COMMAND in json.dumps(b.get("input")) for b in bodies[:first_turn])
    # compactd answered the compaction: the stub never saw it.
    assert not any("CONTEXT CHECKPOINT COMPACTION" in json.dumps(b.get("input")) for b in bodies)
    # The turn after it carries compactd's summary, with the exact early error line.
    after = bodies[first_turn:]
    assert after, "Codex sent no turn after the compaction"
    carried = json.dumps(after[0]["input"], ensure_ascii=False)
    texts = [c.get("text", "") for item in after[0]["input"] if isinstance(item, dict)
             for c in (item.get("content") or []) if isinstance(c, dict)]
    summary = next(t for t in texts if "## Critical Context" in t)
    for section in ("## Goal", "## Constraints & Preferences", "## Progress", "## Key Decisions", "## Next Steps",
                    "## Critical Context", "## Relevant Files"):
        assert section in summary
    assert f"`{ERROR_LINE}`" in summary
    assert "function_call_output" not in carried  # the history was replaced by the summary
