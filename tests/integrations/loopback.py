"""Loopback servers for the real-agent tests: a scripted main model and compactd itself.

`StubModel` stands in for the agent's provider on 127.0.0.1 (port 0): Anthropic `/v1/messages`
for Claude Code, the Responses API `/v1/responses` for Codex (behind compactd's forwarding). It
logs every request body, asks once for a shell command that fails with an exact error line
(`ERROR_LINE`), answers compaction requests with a summary that drops it (the agent's own model
forgetting), and answers everything else with a short reply. Its loops are bounded: it asks for
the command only while no tool result is in the conversation.

`tests.fakes.served_app` is the real app (real model, real pipeline) on a real uvicorn, port 0.
Adapted from the research stub (shared/research/agents-evidence/stub.py, issue 13).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The failing program the stub has the agent run, and the exact line its traceback ends with.
FAILING_PROGRAM = 'def parse(v):\n    return int(v)\n\n\nparse("4O2")\n'
ERROR_LINE = "ValueError: invalid literal for int() with base 10: '4O2'"
RUN_COMMAND = "python3 parse_port.py"
FAILING_FILE = "parse_port.py"
USER_CONSTRAINT = "Never edit the tests in tests/legacy/; keep the port parser in parse_port.py."
FIRST_PROMPT = f"Run `{RUN_COMMAND}` and tell me why it fails. {USER_CONSTRAINT}"
STUB_SUMMARY = "STUB-SUMMARY: the user asked about a script; nothing else to report."
STUB_REPLY = "STUB-REPLY: done."
LOW_USAGE = 1_000  # tokens the stub reports for an ordinary turn: no compaction
START_S = 20  # servers start in well under a second; generous for a busy 2-core machine

COMPACTION_MARKS = (
    "Your task is to create a detailed summary of the conversation so far",  # Claude Code
    "CONTEXT CHECKPOINT COMPACTION",  # Codex's default compact prompt
)


def has_tool_result(body: dict[str, Any]) -> bool:
    text = json.dumps(body.get("messages") or body.get("input") or [])
    return '"tool_result"' in text or '"function_call_output"' in text


def is_compaction_request(body: dict[str, Any]) -> bool:
    text = json.dumps(body.get("messages") or body.get("input") or [])
    return any(mark in text for mark in COMPACTION_MARKS)


class StubModel:
    """Scripted provider on 127.0.0.1; `log` holds (path, body) of every POST, in order."""

    def __init__(self, high_usage_after_tool: int = LOW_USAGE):
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.high_usage_after_tool = high_usage_after_tool
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [], "models": []})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"null")
                except ValueError:
                    body = {}
                body = body if isinstance(body, dict) else {}
                path = self.path.split("?")[0]
                with stub.lock:
                    stub.log.append((path, body))
                if path.endswith("/count_tokens"):
                    return self._send(200, {"input_tokens": LOW_USAGE})
                if path.endswith("/messages"):
                    return self._sse(stub.anthropic_events(body))
                if path.endswith("/responses"):
                    return self._sse(stub.responses_events(body))
                self._send(404, {"error": {"message": "not found"}})

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[str]) -> None:
                data = "".join(events).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="stub-model", daemon=True)

    def __enter__(self) -> StubModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path_suffix: str) -> list[dict[str, Any]]:
        with self.lock:
            return [b for p, b in self.log if p.endswith(path_suffix)]

    # -- Anthropic /v1/messages ----------------------------------------------------------

    def anthropic_events(self, body: dict[str, Any]) -> list[str]:
        def ev(kind: str, **data: Any) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        wants_tool = ("Bash" in tools and not has_tool_result(body) and not is_compaction_request(body)
                      and RUN_COMMAND in json.dumps(body.get("messages") or []))
        # A fresh id per response: Claude Code groups a conversation into API rounds by it, and
        # refuses to compact "fewer than 2 groups".
        message = {"id": f"msg_stub{len(self.log)}", "type": "message", "role": "assistant", "model": body.get("model", "stub"),
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": LOW_USAGE, "output_tokens": 1}}
        out = [ev("message_start", message=message)]
        if wants_tool:
            args = json.dumps({"command": RUN_COMMAND, "description": "Run the script"})
            out += [ev("content_block_start", index=0,
                       content_block={"type": "tool_use", "id": "toolu_stub1", "name": "Bash", "input": {}}),
                    ev("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": args}),
                    ev("content_block_stop", index=0)]
            stop = "tool_use"
        else:
            text = STUB_SUMMARY if is_compaction_request(body) else STUB_REPLY
            out += [ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                    ev("content_block_delta", index=0, delta={"type": "text_delta", "text": text}),
                    ev("content_block_stop", index=0)]
            stop = "end_turn"
        out += [ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": 20}),
                ev("message_stop")]
        return out

    # -- Responses /v1/responses ---------------------------------------------------------

    def responses_events(self, body: dict[str, Any]) -> list[str]:
        def ev(kind: str, **data: Any) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        names = {t.get("name") for t in tools}
        tool = next((n for n in ("exec_command", "shell", "shell_command") if n in names), None)
        after_tool = has_tool_result(body)
        if tool and not after_tool and not is_compaction_request(body) and RUN_COMMAND in json.dumps(body["input"]):
            args = {"exec_command": {"cmd": RUN_COMMAND}, "shell": {"command": ["bash", "-lc", RUN_COMMAND]},
                    "shell_command": {"command": RUN_COMMAND}}[tool]
            item: dict[str, Any] = {"type": "function_call", "id": "fc_stub1", "call_id": "call_stub1", "name": tool,
                                    "arguments": json.dumps(args), "status": "completed"}
        else:
            text = STUB_SUMMARY if is_compaction_request(body) else STUB_REPLY
            item = {"type": "message", "role": "assistant", "id": "msg_stub1", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        used = self.high_usage_after_tool if after_tool else LOW_USAGE
        usage = {"input_tokens": used, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": used + 20}
        rid = f"resp_stub{len(self.log)}"
        return [ev("response.created", response={"id": rid}),
                ev("response.output_item.added", output_index=0, item=item),
                ev("response.output_item.done", output_index=0, item=item),
                ev("response.completed", response={"id": rid, "usage": usage, "output": [item]})]


def write_failing_program(workdir: Path) -> None:
    (workdir / FAILING_FILE).write_text(FAILING_PROGRAM)
