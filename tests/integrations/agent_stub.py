"""A loopback main model for Qwen Code, Kilo, Aider and Gemini CLI: scripted, and logged verbatim.

It speaks OpenAI chat completions (streamed or not) and the Gemini API (`:generateContent`,
`:streamGenerateContent`, `:countTokens`). It asks once for a shell command (the agent's shell
tool, whichever of the known names it offers) while no tool result is in the conversation, then
replies with short text. `inflate_once` reports an overflowing prompt usage once, on the first
reply after the tool result, so an agent that compacts on reported usage compacts exactly once
(a usage that overflows every time has agents re-compact in a loop). `again_prompt`: the
Gemini request whose last user text is that prompt gets the command once more, with
`inflate_once` as its usage, so Gemini CLI compacts before sending that tool's result (its count
is not restored across runs). Requests for a Gemini model named `forward_prefix...` are
forwarded verbatim to `forward_url` (Gemini CLI shares one base URL between its main turns and
its compaction model, so this router stands where a user's would). `compaction_reply` answers
requests that carry a known compaction prompt (for captures, where this stub is also the
compaction model); without it such a request is answered like any other (the tests assert the
main model never saw one). Every request is logged as method, path, headers and body.

Adapted from the research stub (shared/research/agents-evidence/more/stub-more.py, issue 25).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NORMAL_PROMPT_TOKENS = 1000
REPLY = "I looked at the failure; the fix goes into foo.py next."
SHELL_TOOLS = ("bash", "Bash", "shell", "run_shell_command")
FORWARD_TIMEOUT_S = 900  # one compaction by compactd's model on a busy CPU

# The compaction prompts' own first words (see tests/fixtures/agents/README.md).
COMPACTION_MARKS = (
    "You are the component that summarizes a conversation when its context window is about to overflow",  # Qwen
    "You are a context summarization agent.",  # Kilo (opencode's, appended to Kilo's system prompt)
    "*Briefly* summarize this partial conversation about programming.",  # Aider
    "responsible for distilling chat history into a structured XML <state_snapshot>",  # Gemini CLI
)


def is_compaction(body: Any) -> bool:
    text = json.dumps(body, ensure_ascii=False)
    return any(mark in text for mark in COMPACTION_MARKS)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # an agent closing its keep-alive connection at exit is not an error


class AgentStub:
    def __init__(self, command: str, *, inflate_once: int | None = None, again_prompt: str | None = None,
                 forward_prefix: str | None = None, forward_url: str | None = None,
                 compaction_reply: str | None = None, reply: str = REPLY):
        self.command = command
        self.reply = reply
        self.inflate_once = inflate_once
        self.again_prompt = again_prompt
        self.forward_prefix = forward_prefix
        self.forward_url = forward_url
        self.compaction_reply = compaction_reply
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._asked_again = False
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = self.base + "/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-stub", daemon=True)

    def __enter__(self) -> AgentStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r["body"] for r in self.requests if isinstance(r["body"], dict)]

    def _take_inflation(self) -> int:
        with self._lock:
            used, self.inflate_once = (self.inflate_once or NORMAL_PROMPT_TOKENS), None
        return used

    # -- OpenAI chat completions -------------------------------------------------------------

    def _chat_tool_call(self, body: dict[str, Any]) -> dict[str, Any] | None:
        tools = {t.get("function", {}).get("name"): t.get("function", {}) for t in body.get("tools") or []}
        name = next((n for n in SHELL_TOOLS if n in tools), None)
        if name is None or any(m.get("role") == "tool" for m in body.get("messages", [])):
            return None
        params = tools[name].get("parameters") or {}
        args: dict[str, Any] = {"command": self.command}
        props = params.get("properties") or {}
        for key in params.get("required") or []:
            args.setdefault(key, False if (props.get(key) or {}).get("type") == "boolean" else "run the tests")
        return {"id": f"call_stub_{len(self.requests)}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    def chat(self, body: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, int]]:
        """(message, finish_reason, usage) of one answer."""
        if self.compaction_reply is not None and is_compaction(body):
            n = len(json.dumps(body)) // 4  # about the real size: Qwen rejects a summary bigger than its input
            return ({"role": "assistant", "content": self.compaction_reply}, "stop",
                    {"prompt_tokens": n, "completion_tokens": 50, "total_tokens": n + 50})
        call = self._chat_tool_call(body)
        if call is not None:
            return ({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls",
                    {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520})
        after_tool = any(m.get("role") == "tool" for m in body.get("messages", []))
        used = self._take_inflation() if after_tool else NORMAL_PROMPT_TOKENS
        return ({"role": "assistant", "content": self.reply}, "stop",
                {"prompt_tokens": used, "completion_tokens": 20, "total_tokens": used + 20})

    # -- Gemini API --------------------------------------------------------------------------

    def gemini(self, body: dict[str, Any]) -> dict[str, Any]:
        contents = body.get("contents") or []
        decls = {d.get("name") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []}
        responses = any("functionResponse" in p for c in contents for p in c.get("parts") or [])
        last = contents[-1] if contents else {}
        last_text = "".join(p.get("text", "") for p in last.get("parts") or []) if last.get("role") == "user" else ""
        used = NORMAL_PROMPT_TOKENS
        parts: list[dict[str, Any]] = [{"text": self.reply}]
        if self.compaction_reply is not None and is_compaction(body):
            parts = [{"text": self.compaction_reply}]
            used = len(json.dumps(body)) // 4
        elif "run_shell_command" in decls and (not responses or (self.again_prompt and last_text.strip() ==
                                                                  self.again_prompt and not self._asked_again)):
            if responses:
                self._asked_again = True
                used = self._take_inflation()
            parts = [{"functionCall": {"name": "run_shell_command",
                                       "args": {"command": self.command, "description": "Run the script"}}}]
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": used, "candidatesTokenCount": 20, "totalTokenCount": used + 20},
                "modelVersion": "stub"}

    # -- the server ----------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models
                self._send(200, json.dumps({"object": "list", "data": [{"id": "main-model", "object": "model"}],
                                            "models": []}).encode(), "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw or b"null")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                path = self.path.split("?")[0]
                with stub._lock:
                    stub.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers),
                                          "body": body})
                body = body if isinstance(body, dict) else {}
                model = path.rsplit("/", 1)[-1].split(":")[0]
                if stub.forward_prefix and stub.forward_url and model.startswith(stub.forward_prefix):
                    return self._forward(raw)
                if path.endswith(":countTokens"):
                    return self._send(200, json.dumps({"totalTokens": NORMAL_PROMPT_TOKENS}).encode(),
                                      "application/json")
                if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
                    answer = stub.gemini(body)
                    if path.endswith(":streamGenerateContent"):
                        return self._send(200, f"data: {json.dumps(answer)}\r\n\r\n".encode(), "text/event-stream")
                    return self._send(200, json.dumps(answer).encode(), "application/json")
                if path.endswith("/chat/completions"):
                    return self._chat(body)
                self._send(404, b'{"error": {"message": "not found"}}', "application/json")

            def _chat(self, body: dict[str, Any]) -> None:
                message, finish, usage = stub.chat(body)
                head = {"id": "chatcmpl-stub", "created": int(time.time()), "model": body.get("model", "main-model")}
                if not body.get("stream"):
                    obj = {**head, "object": "chat.completion", "usage": usage,
                           "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
                    return self._send(200, json.dumps(obj).encode(), "application/json")
                delta = dict(message)
                if "tool_calls" in delta:
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
                chunks = [{"delta": delta, "finish_reason": None}, {"delta": {}, "finish_reason": finish}]
                events = [{**head, "object": "chat.completion.chunk", "choices": [{"index": 0, **c}]} for c in chunks]
                events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, data.encode(), "text/event-stream")

            def _forward(self, raw: bytes) -> None:
                assert stub.forward_url is not None
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection", "accept-encoding")}
                req = urllib.request.Request(stub.forward_url + self.path, data=raw, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S) as resp:  # noqa: S310 (loopback)
                        code, ctype, data = resp.status, resp.headers.get("Content-Type", ""), resp.read()
                except urllib.error.HTTPError as err:
                    code, ctype, data = err.code, err.headers.get("Content-Type", ""), err.read()
                with stub._lock:
                    stub.requests[-1]["forwarded"] = {"status": code, "body": data.decode("utf-8", "replace")[:4000]}
                self._send(code, data, ctype or "application/json")

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


__all__ = ["AgentStub", "REPLY", "is_compaction"]
