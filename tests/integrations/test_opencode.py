"""opencode (the real, pinned CLI) hands its compaction to compactd through config alone.

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

from tests.integrations.agents import OPENCODE, install
from tests.integrations.chat_stub import ChatStub

pytestmark = pytest.mark.model

RUN_TIMEOUT_S = 900  # opencode start-up + one 0.5B compaction on a busy 2-core CPU
MAIN_CONTEXT = 20_000
MAIN_OUTPUT = 4_096
INFLATED = MAIN_CONTEXT - 100  # over context - output: opencode compacts once
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"
PROMPT = "Run python3 test_foo.py and fix the bug in foo.py. Keep the function signature unchanged."
SECTIONS = ("## Objective", "## Important Details", "## Work State", "### Completed", "### Active", "### Blocked",
            "## Next Move", "## Relevant Files")


def opencode_config(stub_url: str, compactd_url: str) -> dict:
    """integrations/opencode/opencode.json, with a stub main model beside it."""
    shipped = json.loads((Path(__file__).resolve().parents[2] / "integrations/opencode/opencode.json").read_text())
    shipped["provider"]["compactd"]["options"]["baseURL"] = compactd_url + "/v1"
    shipped["provider"]["mainstub"] = {
        "npm": "@ai-sdk/openai-compatible", "name": "stub",
        "options": {"baseURL": stub_url, "apiKey": "none"},
        "models": {"main-model": {"name": "stub", "limit": {"context": MAIN_CONTEXT, "output": MAIN_OUTPUT}}},
    }
    shipped["model"] = "mainstub/main-model"
    shipped["small_model"] = "mainstub/main-model"
    shipped["compaction"] = {**shipped.get("compaction", {}), "tail_turns": 0}  # the whole turn is summarized
    shipped["permission"] = {"bash": "allow", "edit": "allow"}
    return shipped


def isolated_env(home: Path, work: Path) -> dict[str, str]:
    """opencode's config, data and cache in `home`; PWD too (opencode finds its project config
    from PWD, not from the process's working directory)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE", "XDG_"))}
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
    with ChatStub("python3 test_foo.py", inflate_once=INFLATED) as stub:
        (work / "opencode.json").write_text(json.dumps(opencode_config(stub.url, compactd_url), indent=1))
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
