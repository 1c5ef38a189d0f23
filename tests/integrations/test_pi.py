"""pi (the real, pinned CLI) hands its compaction to compactd through integrations/pi/compactd.ts.

Set up as README says: `compactd integrate pi --url ...` run in a project directory outside the
clone copies the extension to the project's .pi/extensions/ with the URL as its default; pi runs
there with no -e, no COMPACTD_URL and the venv not on PATH, and finds it itself.
pi runs headless (`--mode rpc`) and offline in a temp agent dir: its main model is a loopback
stub that has it run a failing test; then an RPC `compact` fires `session_before_compact`, the
extension posts the untruncated messages to compactd's session API (the real app with the
bundled 0.5B) and returns compactd's summary. The summary pi carries into its next turn (read
from the stub's log of that request) must be compactd's: the exact error line survives and
compactd's sections are there. With compactd unreachable, pi falls back to its own compaction.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import free_port
from tests.integrations.agent_stub import REPLY, AgentStub
from tests.integrations.agents import PI, bare_path, install, integrate

pytestmark = pytest.mark.model

TURN_TIMEOUT_S = 120  # one stubbed turn (pi start-up included)
COMPACT_TIMEOUT_S = 900  # one 0.5B compaction on a busy 2-core CPU
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"
SECTIONS = ("## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress", "### Blocked",
            "## Key Decisions", "## Next Steps", "## Critical Context", "## Relevant Files")
SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:"


class Rpc:
    """pi --mode rpc: JSON commands on stdin, events on stdout, read on a thread so every wait
    is bounded."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log.open("w"), text=True)
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def wait(self, pred, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for event in self.events[seen:]:
                    if pred(event):
                        return event
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"pi: no such event within {timeout}s; last events: {self.events[-5:]}")
                self._cond.wait(left)

    def prompt(self, text: str) -> None:
        n = len(self.events)
        self.send({"type": "prompt", "message": text})
        self.wait(lambda e: e.get("type") == "agent_end" and self.events.index(e) >= n, TURN_TIMEOUT_S)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def pi_session(exe: Path, tmp: Path, stub: AgentStub, compactd_url: str) -> Rpc:
    home = tmp / "pihome"
    home.mkdir()
    models = {"providers": {"mainstub": {"baseUrl": stub.url, "api": "openai-completions", "apiKey": "none",
                                         "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                                         "models": [{"id": "main-model", "contextWindow": 128000, "maxTokens": 4096}]}}}
    (home / "models.json").write_text(json.dumps(models))
    (home / "settings.json").write_text(json.dumps(
        {"compaction": {"enabled": True, "reserveTokens": 16384, "keepRecentTokens": 1}}))
    work = tmp / "work"
    work.mkdir()
    (work / "foo.py").write_text("def foo():\n    return 1\n")
    (work / "test_foo.py").write_text(
        "from foo import foo\n\nassert foo() == 2, f\"foo() returned {foo()}, expected 2\"\nprint('ok')\n")
    integrate("pi", work, "--url", compactd_url)
    assert f'?? "{compactd_url}"' in (work / ".pi/extensions/compactd.ts").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PI_", "COMPACTD_"))}
    env.update(PATH=bare_path(), PI_CODING_AGENT_DIR=str(home), HOME=str(tmp), PWD=str(work))
    argv = [str(exe), "--offline", "--mode", "rpc", "--provider", "mainstub", "--model", "main-model",
            "--session-dir", str(tmp / "sessions")]
    return Rpc(argv, work, env, tmp / "pi.err")


def carried_summary(stub: AgentStub) -> str:
    texts = []
    for r in stub.requests:
        for m in r["body"].get("messages", []):
            content = m.get("content")
            parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or []]
            texts += [t for t in parts if SUMMARY_PREFIX in t]
    assert texts, [json.dumps(r["body"])[:300] for r in stub.requests]
    return texts[-1]


def run_and_compact(compactd_url: str, tmp_path: Path) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    exe = install(PI)
    with AgentStub("python3 test_foo.py") as stub:
        rpc = pi_session(exe, tmp_path, stub, compactd_url)
        try:
            rpc.prompt("Run python3 test_foo.py and fix the bug in foo.py. Keep the function signature unchanged.")
            assert any(ERROR_LINE in json.dumps(r["body"]) for r in stub.requests)  # the tool ran for real
            rpc.prompt("Go on.")
            rpc.send({"id": "c1", "type": "compact"})
            compacted = rpc.wait(lambda e: e.get("type") == "response" and e.get("id") == "c1", COMPACT_TIMEOUT_S)
            rpc.prompt("Continue.")
        finally:
            rpc.close()
        return compacted, carried_summary(stub), [r["body"] for r in stub.requests]


def test_pi_carries_compactds_summary(compactd_url, tmp_path):
    compacted, summary, bodies = run_and_compact(compactd_url, tmp_path)
    assert not any("You are a context summarization assistant" in json.dumps(b) for b in bodies)
    assert compacted.get("success") is True, compacted
    for heading in SECTIONS:
        assert heading in summary, summary
    assert ERROR_LINE in summary, summary
    assert "`python3 test_foo.py`" in summary, summary
    assert "[CONTEXT COMPACTION" not in summary  # pi wraps the summary itself


def test_pi_falls_back_to_its_own_compaction_without_compactd(tmp_path):
    # Nothing listens on this port: the extension steps aside and pi asks its own model.
    compacted, summary, bodies = run_and_compact(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert compacted.get("success") is True, compacted
    assert any("You are a context summarization assistant" in json.dumps(b) for b in bodies)  # pi's own request
    assert f"<summary>\n{REPLY}" in summary and "## Critical Context" not in summary
