"""A loopback stub main model for the real agents: OpenAI chat completions, scripted and logged.

The agent's main model is this stub, so a test controls the conversation without any network:
the first request that offers tools gets one scripted tool call (a shell command that fails
with an exact error line), every later one a short text reply. One reply reports an inflated
prompt usage (`inflate_once`), which makes an agent that compacts on reported usage (opencode)
compact exactly once: reporting overflow every time makes opencode re-request forever. Every
request body is logged in order, so a test reads what the agent sent after its compaction.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NORMAL_PROMPT_TOKENS = 1000
REPLY = "I looked at the failure; the fix goes into foo.py next."


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # an agent closing its keep-alive connection at exit is not an error


class ChatStub:
    def __init__(self, command: str, *, inflate_once: int | None = None):
        self.command = command
        self.inflate_once = inflate_once
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, name="chat-stub", daemon=True)

    def __enter__(self) -> ChatStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- what it answers ---------------------------------------------------------------------

    def _tool_call(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The scripted shell call, on the first request that offers a shell tool."""
        tools = {t.get("function", {}).get("name"): t.get("function", {}) for t in body.get("tools") or []}
        name = next((n for n in ("bash", "Bash", "shell") if n in tools), None)
        if name is None or any(m.get("role") == "tool" for m in body.get("messages", [])):
            return None
        params = tools[name].get("parameters") or {}
        args: dict[str, Any] = {"command": self.command}
        for key in params.get("required") or []:
            args.setdefault(key, "run the tests")
        return {"index": 0, "id": "call_stub_1", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}

    def _usage(self) -> dict[str, int]:
        with self._lock:
            prompt, self.inflate_once = (self.inflate_once or NORMAL_PROMPT_TOKENS), None
        return {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks of one streamed answer (without the envelope)."""
        call = self._tool_call(body)
        if call is not None:
            return [{"delta": {"role": "assistant", "content": None, "tool_calls": [call]}},
                    {"delta": {}, "finish_reason": "tool_calls"},
                    {"usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520}}]
        usage = self._usage() if any(m.get("role") == "tool" for m in body.get("messages", [])) else \
            {"prompt_tokens": NORMAL_PROMPT_TOKENS, "completion_tokens": 20, "total_tokens": NORMAL_PROMPT_TOKENS + 20}
        return [{"delta": {"role": "assistant", "content": ""}}, {"delta": {"content": REPLY}},
                {"delta": {}, "finish_reason": "stop"}, {"usage": usage}]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models
                data = json.dumps({"object": "list", "data": [{"id": "main-model", "object": "model"}]}).encode()
                self._send(200, data, "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                with stub._lock:
                    stub.requests.append({"path": self.path, "body": body})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, b'{"error": {"message": "not found"}}', "application/json")
                head = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": body.get("model", "main-model")}
                events = []
                for part in stub.answer(body):
                    if "usage" in part:
                        events.append({**head, "choices": [], "usage": part["usage"]})
                    else:
                        events.append({**head, "choices": [{"index": 0, "finish_reason": None, **part}]})
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, data.encode(), "text/event-stream")

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


__all__ = ["ChatStub", "REPLY"]
