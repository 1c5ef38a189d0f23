"""The test doubles every test module shares: one scripted backend, one session builder, and
the small helpers around them (a real server thread for an app, a lent backend, waits).

ScriptedBackend runs generations on a real EngineThread, so priorities, queueing and stream
closing behave as with llama.cpp; only the model is replaced: one token per word or
punctuation mark, a ChatML-like template, and scripted answers streamed word by word.
SessionBuilder appends hand-made messages (a tool call always with its result).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from backends.base import GenerationStats, ModelInfo
from backends.engine_thread import EngineThread
from worker.formats.openai import load_messages
from worker.session import Message, Session, TextPart, ToolCallPart, ToolResultPart

WORD = re.compile(r"\w+|[^\w\s]")  # one token per word or punctuation mark
VOCAB = 50_000
# The default answer: a summarizer narrative, so a compaction on this backend succeeds.
REPLY = {
    "goal": "Fix the failing serializer test in src/app/serializers.py",
    "key_decisions": [{"decision": "Keep the public API unchanged", "reason": "the user asked for it"}],
    "next_steps": ["Run the serializer tests again"],
}


class ScriptedBackend:
    """The Backend protocol with a scripted model.

    reply: one answer for every generate (default: json.dumps(REPLY)), or a list of answers
    consumed in order, one per generate. token_delay: seconds per streamed word. Clear `hold`
    to stall every generation at its next token. Records what it was asked: `prompts` (the
    messages of each generate), `schemas`, `generate_calls`, `started` ((priority, tag) in the
    order the engine ran them), `finished` ((tag, tokens produced, ran to the end))."""

    supports_json_schema = True
    meta = None

    def __init__(self, reply: str | list[str] | None = None, *, token_delay: float = 0.0, n_ctx: int = 8192):
        self.replies: list[str] | None = list(reply) if isinstance(reply, list) else None
        self.reply = reply if isinstance(reply, str) else json.dumps(REPLY)
        self.token_delay = token_delay
        self.n_ctx = n_ctx
        self.hold = threading.Event()
        self.hold.set()
        self.engine = EngineThread("scripted-engine", lambda: object())
        self._lock = threading.Lock()
        self.generate_calls = 0
        self.loads = 0
        self.prompts: list[list[dict[str, Any]]] = []
        self.started: list[tuple[int, str]] = []
        self.finished: list[tuple[str, int, bool]] = []
        self.schemas: list[dict | None] = []

    def load(self) -> None:
        self.loads += 1

    def tokenize(self, text: str) -> list[int]:
        return [zlib.crc32(w.encode()) % VOCAB for w in WORD.findall(text)]

    def count(self, text: str) -> int:
        return len(WORD.findall(text))

    def render_messages(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                        tools: list[dict[str, Any]] | None = None) -> str:
        out = [f"<|im_start|>system\n<tools>{json.dumps(tools)}</tools><|im_end|>\n"] if tools else []
        for m in messages:
            content = m.get("content") or ""
            for c in m.get("tool_calls") or []:
                content += "\n<tool_call>" + json.dumps(c["function"]) + "</tool_call>"
            out.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
        return "".join(out)

    def count_messages(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                       tools: list[dict[str, Any]] | None = None) -> int:
        return self.count(self.render_messages(messages, add_generation_prompt, tools))

    def generate(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float = 0.0,
                 json_schema: dict | None = None, priority: int = 0, isolated: bool = True,
                 cache_key: str | None = None, stop: list[str] | None = None,
                 **_: Any) -> Iterator[str | GenerationStats]:
        with self._lock:
            self.generate_calls += 1
            self.schemas.append(json_schema)
            self.prompts.append(messages)
            reply = self.replies.pop(0) if self.replies is not None else self.reply
        tag = str(messages[-1].get("content") or "")[:60]
        prompt_tokens = self.count_messages(messages)
        pieces = re.findall(r"\S+\s*", reply)[:max_tokens]

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


class SessionBuilder:
    """Appends messages to a session; a tool call always comes with its result.

    numbering="session": ids m0001, m0002, ... and call ids call_1, call_2, ...;
    numbering="importer": ids m00000, m00001, ... as the OpenAI importer numbers by position,
    call ids call_<position of the call>. system/user/assistant/tool chain (they return the
    builder); call/bash/edit return the id of the result message; `last_id` is the newest id."""

    def __init__(self, sid: str = "s", *, numbering: str = "session"):
        if numbering not in ("session", "importer"):
            raise ValueError(f"unknown numbering {numbering!r}")
        self.session = Session(id=sid)
        self.numbering = numbering
        self._n = 0  # messages this builder appended (session numbering)
        self._calls = 0

    @property
    def messages(self) -> list[Message]:
        return self.session.messages

    @property
    def last_id(self) -> str:
        return self.messages[-1].id

    def _id(self) -> str:
        self._n += 1
        return f"m{len(self.messages):05d}" if self.numbering == "importer" else f"m{self._n:04d}"

    def _add(self, role: str, parts: list[Any]) -> SessionBuilder:
        self.messages.append(Message(id=self._id(), role=role, parts=parts))  # type: ignore[arg-type]
        return self

    def system(self, text: str) -> SessionBuilder:
        return self._add("system", [TextPart(text=text)])

    def user(self, text: str) -> SessionBuilder:
        return self._add("user", [TextPart(text=text)])

    def assistant(self, text: str) -> SessionBuilder:
        return self._add("assistant", [TextPart(text=text)])

    def tool(self, name: str, args: dict, output: str, *, is_error: bool = False, text: str = "") -> SessionBuilder:
        """An assistant message calling `name` (after `text`, if any), then the result."""
        self._calls += 1
        cid = f"call_{len(self.messages)}" if self.numbering == "importer" else f"call_{self._calls}"
        self._add("assistant", ([TextPart(text=text)] if text else []) + [ToolCallPart(id=cid, name=name, arguments=args)])
        return self._add("tool", [ToolResultPart(call_id=cid, name=name, output=output, is_error=is_error)])

    def call(self, name: str, args: dict, output: str = "", is_error: bool = False) -> str:
        """Append the call and its result; returns the result's message id."""
        return self.tool(name, args, output, is_error=is_error).last_id

    def bash(self, command: str, output: str = "", is_error: bool = False) -> str:
        return self.call("bash", {"command": command}, output, is_error)

    def edit(self, path: str) -> str:
        return self.call("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, "ok")

    def build(self) -> Session:
        return self.session


HEALTH_WAIT_S = 60  # a lent backend is loaded already: the app only wraps it


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll `predicate` until it holds (a server not listening yet counts as not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except (OSError, httpx.TransportError):
            pass
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

    def __init__(self, app: Any, settings: Any = None, *, wait_health: bool = False):
        import uvicorn

        from worker.config import Settings
        from worker.http.app import uvicorn_config

        config = uvicorn_config(app, settings or Settings(), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)
        self.url = ""
        self.port = 0
        self.wait_health = wait_health  # also wait for GET /health 200 (the backend loaded)

    def __enter__(self) -> ServerThread:
        from worker.http.app import bound_url

        self.thread.start()
        if not wait_until(lambda: self.server.started, timeout=20):
            raise RuntimeError("uvicorn did not start")
        self.url = bound_url(self.server)
        self.port = int(self.url.rsplit(":", 1)[1])
        if self.wait_health and not wait_until(lambda: httpx.get(self.url + "/health").status_code == 200,
                                               timeout=HEALTH_WAIT_S):
            raise RuntimeError("the app's backend did not load")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class Borrowed:
    """A session-scoped backend lent to one app: the app's shutdown must not close it. It counts
    the generations the app started through it."""

    def __init__(self, backend: Any):
        self._backend = backend
        self.generations = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.generations += 1
        return self._backend.generate(*args, **kwargs)

    def close(self) -> None:
        pass


def served_app(backend: Any, **settings: Any) -> ServerThread:
    """The real compactd app (no rolling summaries unless asked) over `backend`, on a real
    uvicorn at 127.0.0.1, port 0; entered, it has loaded its backend."""
    from worker.config import Settings
    from worker.http.app import create_app
    from worker.service.store import Store

    app = create_app(Settings(**{"rolling": False, **settings}), backend_loader=lambda: Borrowed(backend),
                     store=Store(":memory:"))
    return ServerThread(app, wait_health=True)


SWE_TRACE = Path(__file__).resolve().parent / "fixtures" / (
    "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj")


def swe_messages() -> list[Message]:
    """The SWE-agent trace's `history` (an OpenAI message list) as session messages."""
    return load_messages(json.loads(SWE_TRACE.read_text())["history"]).messages


class Builder(SessionBuilder):
    """SessionBuilder(numbering="importer") whose user() returns the new message's id."""

    def __init__(self) -> None:
        super().__init__(numbering="importer")

    def user(self, text: str) -> str:  # type: ignore[override]
        return super().user(text).last_id
