"""opencode (the real, pinned CLI) hands its compaction to compactd through config alone.

Set up as README says: the project's own opencode.json (its main model, here the stub) gets
compactd merged in by `compactd integrate opencode --url ...` run in the project directory,
outside the clone; opencode runs there with the venv not on PATH.
opencode runs headless and offline in a temp home: its main model is a loopback stub that has
it run a failing test, then reports an overflowing usage once; its compaction model is compactd
(`agent.compaction.model`), served by the real app with the bundled 0.5B. The summary opencode
carries into its next turn (read from the stub's log of that request) must be compactd's: the
exact error line from the test run survives and compactd's sections are there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integrations.agent_stub import AgentStub
from tests.integrations.agents import OPENCODE, bare_path, install, integrate

pytestmark = pytest.mark.model

RUN_TIMEOUT_S = 900  # opencode start-up + one 0.5B compaction on a busy 2-core CPU
MAIN_CONTEXT = 20_000
MAIN_OUTPUT = 4_096
INFLATED = MAIN_CONTEXT - 100  # over context - output: opencode compacts once
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"
PROMPT = "Run python3 test_foo.py and fix the bug in foo.py. Keep the function signature unchanged."
SECTIONS = ("## Objective", "## Important Details", "## Work State", "### Completed", "### Active", "### Blocked",
            "## Next Move", "## Relevant Files")


def users_config(stub_url: str) -> dict:
    """The project's opencode.json before integrate: the user's main model (the stub) and choices."""
    return {
        "provider": {"mainstub": {
            "npm": "@ai-sdk/openai-compatible", "name": "stub",
            "options": {"baseURL": stub_url, "apiKey": "none"},
            "models": {"main-model": {"name": "stub", "limit": {"context": MAIN_CONTEXT, "output": MAIN_OUTPUT}}},
        }},
        "model": "mainstub/main-model",
        "small_model": "mainstub/main-model",
        "compaction": {"tail_turns": 0},  # the whole turn is summarized
        "permission": {"bash": "allow", "edit": "allow"},
    }


def isolated_env(home: Path, work: Path) -> dict[str, str]:
    """opencode's config, data and cache in `home`; PWD too (opencode finds its project config
    from PWD, not from the process's working directory)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE", "XDG_"))}
    env["PATH"] = bare_path()
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        (home / name.lower()).mkdir(parents=True, exist_ok=True)
        env[f"XDG_{name}_HOME"] = str(home / name.lower())
    env.update(HOME=str(home), PWD=str(work), OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
               OPENCODE_DISABLE_LSP_DOWNLOAD="1", OPENCODE_DISABLE_DEFAULT_PLUGINS="1")
    return env


def test_opencode_carries_compactds_summary(compactd_url, tmp_path):
    exe = install(OPENCODE)
    work = tmp_path / "work"
    work.mkdir()
    (work / "foo.py").write_text("def foo():\n    return 1\n")
    (work / "test_foo.py").write_text(
        "from foo import foo\n\nassert foo() == 2, f\"foo() returned {foo()}, expected 2\"\nprint('ok')\n")
    with AgentStub("python3 test_foo.py", inflate_once=INFLATED) as stub:
        (work / "opencode.json").write_text(json.dumps(users_config(stub.url), indent=1))
        integrate("opencode", work, "--url", compactd_url)
        config = json.loads((work / "opencode.json").read_text())
        assert config["model"] == "mainstub/main-model" and config["compaction"] == {"tail_turns": 0, "auto": True}
        assert config["agent"]["compaction"]["model"] == "compactd/qwen2.5-coder-1.5b"
        proc = subprocess.run([str(exe), "run", PROMPT], cwd=work, env=isolated_env(tmp_path / "home", work),
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        requests = list(stub.requests)
    log = f"rc={proc.returncode}\nstdout={proc.stdout[-2000:]}\nstderr={proc.stderr[-3000:]}"
    bodies = [r["body"] for r in requests]
    # The tool ran for real: its error reached the main model.
    assert any(ERROR_LINE in json.dumps(b) for b in bodies), log
    # The stub never saw a compaction request: compactd answered it.
    assert not any("You are a context summarization agent" in json.dumps(b) for b in bodies), log
    carried = [m.get("content") for b in bodies for m in b.get("messages", [])
               if isinstance(m.get("content"), str) and "## Work State" in m["content"]]
    if not carried:  # content parts
        carried = [p.get("text", "") for b in bodies for m in b.get("messages", [])
                   if isinstance(m.get("content"), list) for p in m["content"] if "## Work State" in p.get("text", "")]
    assert carried, log
    summary = carried[-1]
    for heading in SECTIONS:
        assert heading in summary, summary
    assert ERROR_LINE in summary, summary
    assert "`python3 test_foo.py`" in summary, summary  # the exact command, from compactd's ledger
