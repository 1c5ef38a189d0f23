"""Shared helpers of the reliability tests (issue 7); no tests in this module.

`make test` runs every reliability check at a small size. COMPACTD_RELIABILITY_FULL=1 runs the
full-size versions once (their figures go to benchmarks/RESULTS.md, ## Reliability), and
COMPACTD_RELIABILITY_OUT=DIR makes each write its figures there as JSON. Every server binds
127.0.0.1 only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.fakes import ServerThread, wait_until
from worker.cli import LISTENING

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
FULL = os.environ.get("COMPACTD_RELIABILITY_FULL", "") not in ("", "0")
OUT_DIR = os.environ.get("COMPACTD_RELIABILITY_OUT")
SERVE_START_S = 300  # model assembly + load on a busy 2-core machine, generous
TEST_MODEL = "qwen2.5-coder-0.5b"


def assert_error_shape(response: httpx.Response, status: int | None = None, code: str | None = None) -> dict:
    """The documented error: {"error": {"code", "message", "param", "type"}}, no traceback."""
    if status is not None:
        assert response.status_code == status, response.text
    assert 400 <= response.status_code < 600, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "param", "type"}, body
    assert body["error"]["message"] and body["error"]["type"]
    assert "Traceback" not in response.text
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def record(name: str, figures: dict[str, Any]) -> None:
    """Write a run's figures to $COMPACTD_RELIABILITY_OUT/NAME.json (when set) and print them."""
    print(f"[reliability] {name}: {json.dumps(figures, ensure_ascii=False)}")
    if OUT_DIR:
        Path(OUT_DIR).mkdir(parents=True, exist_ok=True)
        (Path(OUT_DIR) / f"{name}.json").write_text(json.dumps(figures, ensure_ascii=False, indent=2) + "\n")


# The app on a real uvicorn (the config `compactd serve` uses) on 127.0.0.1, in a thread.
LoopbackServer = ServerThread


class ServeProcess:
    """`compactd serve` as a subprocess on 127.0.0.1, port 0, with its own log. The port is the
    one serve reports on its first stdout line ("compactd: listening on URL"), so no other
    process can take it between choosing and binding."""

    def __init__(self, db: Path, *extra: str, model: str = TEST_MODEL, log_level: str = "warning",
                 env: dict[str, str] | None = None):
        self.db = db
        self.env = {**os.environ, **(env or {})}
        self.url = ""
        self.log_path = db.parent / f"serve-{uuid.uuid4().hex[:8]}.log"
        self.argv = [sys.executable, "-m", "worker.cli", "serve", "--model", model, "--host", LOOPBACK,
                     "--port", "0", "--db", str(db), "--log-level", log_level, *extra]
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServeProcess:
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _exited(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"compactd serve exited with {self.proc.returncode}: {self.log()}")

    def wait_listening(self, timeout: float = SERVE_START_S) -> str:
        """The URL serve announced once its socket was bound."""

        def announced() -> bool:
            self._exited()
            found = re.search(rf"^{re.escape(LISTENING)} (http://\S+)$", self.log(), re.MULTILINE)
            if found:
                self.url = found.group(1)
            return bool(found)

        if not wait_until(announced, timeout=timeout, interval=0.2):
            raise RuntimeError(f"compactd serve did not announce its address after {timeout}s: {self.log()}")
        return self.url

    def wait_healthy(self, timeout: float = SERVE_START_S) -> None:
        assert self.proc is not None
        if not self.url:
            self.wait_listening(timeout)

        def healthy() -> bool:
            self._exited()
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        if not wait_until(healthy, timeout=timeout, interval=0.5):
            raise RuntimeError(f"compactd serve not healthy after {timeout}s: {self.log()}")

    def wait_log(self, line: str, timeout: float) -> bool:
        """Wait until serve's log contains `line` (a signal the server itself gives)."""

        def seen() -> bool:
            self._exited()
            return line in self.log()

        return wait_until(seen, timeout=timeout, interval=0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, exactly like a crash or the OOM killer."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
