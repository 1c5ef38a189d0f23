"""A small deterministic backend for the service's logic tests (no tests in this module).

It runs generations on a real EngineThread, so priorities, queueing and stream closing behave
as with llama.cpp; only the model is replaced: one token per word or punctuation mark, a
ChatML-like template, and a fixed JSON narrative streamed word by word.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

from backends.base import GenerationStats, ModelInfo
from backends.engine_thread import EngineThread
from tests.helpers import SessionBuilder

WORD = re.compile(r"\w+|[^\w\s]")
VOCAB = 50_000
REPLY = {
    "goal": "Fix the failing serializer test in src/app/serializers.py",
    "key_decisions": [{"decision": "Keep the public API unchanged", "reason": "the user asked for it"}],
    "next_steps": ["Run the serializer tests again"],
}


class ScriptedBackend:
    def __init__(self, reply: str | None = None, *, token_delay: float = 0.0, n_ctx: int = 8192):
        self.reply = reply if reply is not None else json.dumps(REPLY)
        self.token_delay = token_delay
        self.n_ctx = n_ctx
        self.hold = threading.Event()  # clear() to stall every generation at its next token
        self.hold.set()
        self.engine = EngineThread("scripted-engine", lambda: object())
        self._lock = threading.Lock()
        self.generate_calls = 0
        self.started: list[tuple[int, str]] = []  # (priority, tag) in the order the engine ran them
        self.finished: list[tuple[str, int, bool]] = []  # (tag, tokens produced, ran to the end)
        self.schemas: list[dict | None] = []

    def tokenize(self, text: str) -> list[int]:
        return [zlib.crc32(w.encode()) % VOCAB for w in WORD.findall(text)]

    def count(self, text: str) -> int:
        return len(WORD.findall(text))

    def render_messages(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        out = []
        for m in messages:
            content = m.get("content") or ""
            for c in m.get("tool_calls") or []:
                content += "\n<tool_call>" + json.dumps(c["function"]) + "</tool_call>"
            out.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
        return "".join(out)

    def count_messages(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> int:
        return self.count(self.render_messages(messages, add_generation_prompt))

    def generate(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float = 0.0,
                 json_schema: dict | None = None, priority: int = 0, isolated: bool = True,
                 **_: Any) -> Iterator[str | GenerationStats]:
        with self._lock:
            self.generate_calls += 1
            self.schemas.append(json_schema)
        tag = str(messages[-1].get("content") or "")[:60]
        prompt_tokens = self.count_messages(messages)
        pieces = re.findall(r"\S+\s*", self.reply)[:max_tokens]

        def producer(_engine: Any) -> Iterator[str | GenerationStats]:
            with self._lock:
                self.started.append((priority, tag))
            t0 = time.perf_counter()
            n, complete = 0, False
            try:
                for piece in pieces:
                    self.hold.wait()
                    if self.token_delay:
                        time.sleep(self.token_delay)
                    n += 1
                    yield piece
                complete = True
                ms = (time.perf_counter() - t0) * 1000
                yield GenerationStats(prompt_tokens=prompt_tokens, prompt_ms=1.0, decode_tokens=n, decode_ms=ms,
                                      ttft_ms=1.0, total_ms=ms + 1.0, finish_reason="stop")
            finally:
                with self._lock:
                    self.finished.append((tag, n, complete))

        return self.engine.stream(producer, priority)

    def info(self) -> ModelInfo:
        return ModelInfo(engine="scripted", engine_version="0", model_name="scripted", model_path="",
                         architecture="none", quantization="none", trained_context=self.n_ctx, vocab_size=VOCAB,
                         context_size=self.n_ctx)

    def close(self) -> None:
        self.hold.set()
        self.engine.close()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port() -> int:
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
    """A real uvicorn server for an app, on 127.0.0.1 and a free port, in a thread, with the
    config `compactd serve` uses (its header and body deadlines included)."""

    def __init__(self, app: Any, settings: Any = None):
        import uvicorn

        from worker.config import Settings
        from worker.http.app import uvicorn_config

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(app, settings or Settings(), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        if not wait_until(lambda: self.server.started, timeout=20):
            raise RuntimeError("uvicorn did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
