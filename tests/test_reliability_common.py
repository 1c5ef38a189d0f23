"""Shared helpers of the reliability tests (issue 7); no tests in this module.

`make test` runs every reliability check at a small size. COMPACTD_RELIABILITY_FULL=1 runs the
full-size versions once (their figures go to benchmarks/RESULTS.md, ## Reliability), and
COMPACTD_RELIABILITY_OUT=DIR makes each write its figures there as JSON. Every server binds
127.0.0.1 only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.test_server_fakes import ServerThread, free_port, wait_until

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
    """`compactd serve` as a subprocess on 127.0.0.1 and a free port, with its own log."""

    def __init__(self, db: Path, *extra: str, model: str = TEST_MODEL, port: int | None = None):
        self.db = db
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log_path = db.parent / f"serve-{self.port}.log"
        self.argv = [sys.executable, "-m", "worker.cli", "serve", "--model", model, "--host", LOOPBACK,
                     "--port", str(self.port), "--db", str(db), "--log-level", "warning", *extra]
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServeProcess:
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_healthy(self, timeout: float = SERVE_START_S) -> None:
        assert self.proc is not None

        def healthy() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"compactd serve exited with {self.proc.returncode}: {self.log()}")
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        if not wait_until(healthy, timeout=timeout, interval=0.5):
            raise RuntimeError(f"compactd serve not healthy after {timeout}s: {self.log()}")

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
