"""The remote-engine backend against compactd's own llama-server-compatible endpoints (served
here with the deterministic ScriptedBackend), and its failure modes."""

from __future__ import annotations

import json

import httpx
import pytest

from backends.base import BackendError, GenerationStats, collect
from backends.openai_http import OpenAIHttpBackend
from tests.fakes import ScriptedBackend, ServerThread, free_port, wait_until
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store


@pytest.fixture(scope="module")
def served():
    backend = ScriptedBackend()
    app = create_app(Settings(rolling=False), backend_loader=lambda: backend, store=Store(":memory:"))
    with ServerThread(app) as server:
        assert wait_until(lambda: httpx.get(server.url + "/health").status_code == 200)
        yield server, backend
    backend.close()


def test_counts_and_template_match_the_served_backend(served):
    server, local = served
    remote = OpenAIHttpBackend(server.url + "/v1")
    try:
        text = "修复 src/app/module_1.py 的错误: AssertionError"
        assert remote.tokenize(text) == local.tokenize(text)
        assert remote.count(text) == local.count(text)
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]
        assert remote.render_messages(msgs) == local.render_messages(msgs)
        assert remote.render_messages(msgs, add_generation_prompt=False) == local.render_messages(msgs, False)
        assert remote.count_messages(msgs) == local.count_messages(msgs)
        info = remote.info()
        assert info.model_name == "scripted" and info.context_size == local.n_ctx
    finally:
        remote.close()


def test_generation_streams_with_engine_timings_and_forwards_the_schema(served):
    server, local = served
    remote = OpenAIHttpBackend(server.url)
    try:
        schema = {"type": "object", "properties": {"goal": {"type": "string"}}}
        items = list(remote.generate([{"role": "user", "content": "go"}], max_tokens=100, json_schema=schema))
        pieces = [i for i in items if isinstance(i, str)]
        stats = items[-1]
        assert isinstance(stats, GenerationStats) and len(pieces) > 1
        assert "".join(pieces) == local.reply
        assert stats.decode_tokens == len(local.reply.split()) and stats.finish_reason == "stop"
        assert stats.prompt_tokens == local.count_messages([{"role": "user", "content": "go"}])
        assert local.schemas[-1] == schema
    finally:
        remote.close()


def test_unreachable_engine_is_a_clear_backend_error():
    remote = OpenAIHttpBackend(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BackendError, match="cannot reach the engine"):
        remote.tokenize("x")
    remote.close()


def test_an_engine_without_tokenize_is_refused():
    """mlx_lm.server's shape: chat completions and models, no tokenizer endpoint at all."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    remote = OpenAIHttpBackend("http://engine.invalid", transport=httpx.MockTransport(handler))
    with pytest.raises(BackendError) as err:
        remote.count("x")
    assert "offers no tokenizer compactd knows" in str(err.value)
    assert "tried /tokenize (404), /extras/tokenize (404)" in str(err.value)


def test_wall_clock_stats_when_the_engine_reports_only_usage():
    """vLLM and mlx_lm.server send `usage`, no llama.cpp `timings`."""
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":  # the probe: a llama-server-shaped tokenizer
            return httpx.Response(200, json={"tokens": [ord(c) for c in body["content"]]})
        assert body["stream"] is True and body["response_format"]["type"] == "json_schema"
        events = [{"choices": [{"delta": {"content": w}, "finish_reason": None}]} for w in ("{", '"a"', "}")]
        events.append({"choices": [{"delta": {}, "finish_reason": "length"}]})
        events.append({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    remote = OpenAIHttpBackend("http://engine.invalid", model="m", transport=httpx.MockTransport(handler))
    text, stats = collect(remote.generate([{"role": "user", "content": "x"}], max_tokens=3, json_schema={}))
    assert text == '{"a"}'
    assert (stats.prompt_tokens, stats.decode_tokens, stats.finish_reason) == (12, 3, "length")
    assert stats.total_ms >= stats.ttft_ms > 0
