"""`--engine openai` against a real engine: llama-cpp-python's own server
(`llama-cpp-python[server]`), started here on loopback with the bundled 0.5B.

That server offers `/extras/tokenize` and no template endpoint, so compactd renders the GGUF's
chat template locally (`--model`) and tokenizes remotely. The references are independent of
that code: the server's own `usage.prompt_tokens` (its own template and tokenizer) and
llama.cpp's tokenizer in this process.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from backends.base import GenerationStats
from backends.openai_http import OpenAIHttpBackend
from tests.conftest import TEST_CTX
from worker.cli import main

pytestmark = pytest.mark.model

STARTUP_TIMEOUT_S = 120.0  # loading the 0.5B on a busy 2-core CPU takes seconds, not minutes
STOP_TIMEOUT_S = 10.0
LISTENING = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
# 800 tokens: the smallest bundled transcript, so one model call on a shared CPU stays short
CODEX = Path(__file__).resolve().parents[1] / "fixtures" / "codex-simonw_sample_codex_session.jsonl"
# Usable 1,024 (1,100 less 76 reserved): the least that holds a checkpoint (system prompt, none
# here, + 1,024); an explicit compaction of the 800-token transcript is then capped at those 800.
CONTEXT_LIMIT, RESERVED = 1100, 76
MESSAGES = [{"role": "system", "content": "You summarize coding sessions."},
            {"role": "user", "content": "修复 src/app/module_1.py 的错误: AssertionError <|im_end|> `rm -rf 'x y'`"}]


@pytest.fixture(scope="module")
def server(gguf_path):
    """The server on port 0 (no free-then-bind race): its log names the bound port."""
    pytest.importorskip("sse_starlette", reason="needs llama-cpp-python[server]")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path), "--host", "127.0.0.1",
         "--port", "0", "--n_ctx", str(TEST_CTX)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )
    log: collections.deque[str] = collections.deque(maxlen=50)
    found: list[str] = []

    def drain() -> None:  # read the log to its end, so the server never blocks on a full pipe
        for line in proc.stdout:  # type: ignore[union-attr]
            log.append(line)
            if not found and (m := LISTENING.search(line)):
                found.append(m.group(1))

    threading.Thread(target=drain, daemon=True).start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not found and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not found:
            pytest.fail(f"llama_cpp.server did not start (exit {proc.poll()}):\n{''.join(log)}")
        url = found[0]
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 200
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def remote(server, gguf_path):
    backend = OpenAIHttpBackend(server, template_model=str(gguf_path), n_ctx=TEST_CTX)
    yield backend
    backend.close()


def server_prompt_tokens(url: str, messages: list[dict]) -> int:
    """What the server itself evaluates for these messages (its own template and tokenizer)."""
    reply = httpx.post(url + "/v1/chat/completions", timeout=300,
                       json={"messages": messages, "max_tokens": 1, "temperature": 0})
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]["prompt_tokens"]


def test_tokens_come_from_extras_tokenize_and_match_llama_cpp(remote, llama_backend):
    text = MESSAGES[1]["content"]
    assert remote.dialect().name == "llama-cpp-python"
    assert remote.dialect().tokenize_path == "/extras/tokenize"
    assert remote.tokenize(text) == llama_backend.engine_tokenize(text)
    assert remote.count(text) == len(llama_backend.engine_tokenize(text))


def test_chat_counts_equal_what_the_server_evaluates(server, remote, llama_backend):
    assert remote.count_messages(MESSAGES) == server_prompt_tokens(server, MESSAGES)
    no_system = MESSAGES[1:]  # Qwen's template adds its default system prompt here
    assert remote.count_messages(no_system) == server_prompt_tokens(server, no_system)
    assert remote.count_messages(MESSAGES, add_generation_prompt=False) == llama_backend.count_messages(
        MESSAGES, add_generation_prompt=False)


def test_generation_streams_schema_constrained_json_with_stats(server, remote):
    schema = {"type": "object", "properties": {"file": {"type": "string"}}, "required": ["file"]}
    ask = [{"role": "user", "content": "Which file has the error? src/app/module_1.py. Answer in JSON."}]
    items = list(remote.generate(ask, max_tokens=40, json_schema=schema))
    pieces = [i for i in items if isinstance(i, str)]
    stats = items[-1]
    assert isinstance(stats, GenerationStats) and stats.finish_reason in ("stop", "length")
    assert len(pieces) > 1  # streamed, not one block
    answer = json.loads("".join(pieces))
    assert isinstance(answer["file"], str)
    # no usage in this server's stream: compactd counted the prompt, exactly as the server does
    assert stats.prompt_tokens == server_prompt_tokens(server, ask)
    assert stats.decode_tokens == len(pieces)  # one chunk per token
    assert stats.total_ms >= stats.ttft_ms > 0


def test_cli_compacts_through_the_server_with_the_model(server, gguf_path, tmp_path, capsys):
    out = tmp_path / "cp.json"
    code = main(["compact", "--engine", "openai", "--engine-url", server, "--model", str(gguf_path),
                 "--ctx", str(TEST_CTX), "--context-limit", str(CONTEXT_LIMIT), "--reserved", str(RESERVED), "--quiet", "--json", "--out",
                 str(out), str(CODEX)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["model"]["engine"] == "openai-http" and data["model"]["context_size"] == TEST_CTX
    assert data["verification"]["fallback"] == ""  # the model's narrative, not the deterministic one
    assert data["timings"]["model"], "no model call was made"
    assert data["tokens"]["after"] < data["tokens"]["before"]
    summary, request = data["checkpoint_messages"]  # no system prompt here: the summary, then the tail
    assert summary["content"].startswith("[CONTEXT COMPACTION")
    assert request["content"].startswith("can you analyse the MD files in this directory")
    assert "can you analyse the MD files in this directory" in data["summary_text"]
