"""Codex 0.171.0 (the real CLI from npm) with compactd as its provider: compaction answered by
compactd, every other turn forwarded to the loopback StubModel (`compactd serve --upstream`).

Set up as README says: CODEX_HOME is a tmp dir whose config.toml holds the user's own settings,
and `compactd integrate codex --url ... --upstream-model ... --context-window ...
--auto-compact-limit ...`, run in a project directory outside the clone, merges compactd's
provider block and the model keys (a low `model_auto_compact_token_limit`) into it. Codex runs
in that project with the venv not on PATH, headless and offline. The first `codex exec` runs a real
failing command through Codex's shell tool; the stub then reports a usage above the limit, so
the next `codex exec resume --last` compacts before its turn. compactd answers the compaction
with the real bundled 0.5B and the real pipeline; the stub's log of the turn after it must hold
compactd's summary: its sections and the exact error line from the first turn.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import tomllib

from tests.fakes import served_app
from tests.integrations.agents import CODEX, bare_path, install, integrate
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

# The user's config before integrate: their own choices, and retries off in compactd's provider
# table (a failed request fails the test at once); integrate keeps all of them.
USERS_CONFIG = """approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.compactd]
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
        (home / "config.toml").write_text(USERS_CONFIG)
        integrate("codex", work, "--url", cd.url, "--upstream-model", "stub-model", "--context-window", "32000",
                  "--auto-compact-limit", str(AUTO_COMPACT_LIMIT), "--env-key", "COMPACTD_TEST_KEY",
                  env={"CODEX_HOME": str(home)})
        config = tomllib.loads((home / "config.toml").read_text())
        assert config["model_provider"] == "compactd" and config["approval_policy"] == "never"
        assert config["model_providers"]["compactd"]["base_url"] == cd.url + "/v1"
        assert config["model_providers"]["compactd"]["request_max_retries"] == 0
        env = {"PATH": bare_path(), "HOME": str(tmp_path), "CODEX_HOME": str(home),
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
