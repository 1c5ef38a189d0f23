"""A small deterministic backend for the service's logic tests (no tests in this module).

It runs generations on a real EngineThread, so priorities, queueing and stream closing behave
as with llama.cpp; only the model is replaced: one token per word or punctuation mark, a
ChatML-like template, and a fixed JSON narrative streamed word by word.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from tests.fakes import REPLY, VOCAB, WORD, ScriptedBackend, SessionBuilder  # noqa: F401 - re-exported


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port() -> int:
    """A port nobody listens on (for "unreachable engine" checks only: servers bind port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def work_session(turns: int = 6, words: int = 60, sid: str = "s"):
    """A coding session whose size grows with `turns` (about 150 + words*2 tokens per turn)."""
    b = SessionBuilder(sid).system("You are a coding agent.")
    for t in range(turns):
        b.user(f"Turn {t}: fix the failing test in src/app/module_{t}.py and keep the public API unchanged.")
        out = " ".join(f"line{t}_{i}" for i in range(words))
        b.tool("bash", {"command": f"pytest tests/test_module_{t}.py"},
               f"FAILED tests/test_module_{t}.py::test_case_{t} - AssertionError: expected {t}\n{out}", is_error=True)
        b.tool("read_file", {"path": f"src/app/module_{t}.py"}, f"def handler_{t}():\n    return {t}\n{out}")
        b.assistant(f"Module {t}: the handler returns the wrong value; fixing it next.")
    return b.build()


def openai_messages(session) -> list[dict[str, Any]]:
    from worker.formats.export import to_openai

    return to_openai(session)


class ServerThread:
    """A real uvicorn server for an app, on 127.0.0.1, in a thread, with the config `compactd
    serve` uses (its header and body deadlines included). It binds port 0 and reads the port
    the kernel gave it back from its socket: no free-then-bind race with other processes."""

    def __init__(self, app: Any, settings: Any = None):
        import uvicorn

        from worker.config import Settings
        from worker.http.app import uvicorn_config

        config = uvicorn_config(app, settings or Settings(), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)
        self.url = ""
        self.port = 0

    def __enter__(self) -> ServerThread:
        from worker.http.app import bound_url

        self.thread.start()
        if not wait_until(lambda: self.server.started, timeout=20):
            raise RuntimeError("uvicorn did not start")
        self.url = bound_url(self.server)
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
