"""The remote backend's dialects against loopback stand-ins that follow each server's request
and response shapes (vLLM cannot run here). The stand-ins tokenize one id per character and
render a ChatML template, so every expected value below is computed independently in the test.

vLLM's shapes are those of vllm/entrypoints/serve/tokenize/protocol.py: `/tokenize` takes
`{model?, prompt, add_special_tokens=True}` or `{model?, messages, add_generation_prompt=True,
add_special_tokens=False}` and answers `{count, max_model_len, tokens}`; `/detokenize` takes
`{model?, tokens}` and answers `{prompt}`; a request of neither shape is a 400, a model it does
not serve a 404.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from backends.base import BackendError, collect
from backends.openai_http import OpenAIHttpBackend

SERVED = "Qwen/Qwen2.5-0.5B-Instruct"
MAX_MODEL_LEN = 32768
BOS = 1


def chatml(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def sse(events: list[dict[str, Any]]) -> httpx.Response:
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


class FakeVllm:
    """vLLM's OpenAI server as far as compactd uses it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            if request.url.path == "/v1/models":
                return httpx.Response(200, json={"object": "list", "data": [
                    {"id": SERVED, "object": "model", "max_model_len": MAX_MODEL_LEN}]})
            return httpx.Response(404, json={"detail": "Not Found"})
        body = json.loads(request.content)
        self.requests.append((request.url.path, body))
        if body.get("model") not in (None, SERVED):
            return httpx.Response(404, json={"error": {"message": "model not found", "code": 404}})
        if request.url.path == "/tokenize":
            if "prompt" in body:
                tokens = ([BOS] if body.get("add_special_tokens", True) else []) + ids(body["prompt"])
            elif "messages" in body:
                tokens = ([BOS] if body.get("add_special_tokens", False) else []) + ids(
                    chatml(body["messages"], body.get("add_generation_prompt", True)))
            else:
                return httpx.Response(400, json={"error": {"message": "Field required: prompt", "code": 400}})
            return httpx.Response(200, json={"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens})
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": "".join(chr(t) for t in body["tokens"])})
        if request.url.path == "/v1/chat/completions":
            words = ["{", '"goal"', ": ", '"x"', "}"]
            events = [{"choices": [{"delta": {"content": w}, "finish_reason": None}]} for w in words]
            events.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
            prompt = len(ids(chatml(body["messages"], True)))
            events.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": len(words)}})
            return sse(events)
        return httpx.Response(404, json={"detail": "Not Found"})


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "修复 tests/test_x.py"}]


def test_vllm_tokenize_and_chat_counts_use_its_own_shapes():
    engine = FakeVllm()
    remote = OpenAIHttpBackend("http://vllm.invalid/v1", transport=httpx.MockTransport(engine))
    text = "def f(x): return x  # 注释"
    assert remote.tokenize(text) == ids(text)
    d = remote.dialect()
    assert (d.name, d.context, d.model) == ("vllm", MAX_MODEL_LEN, SERVED)
    assert remote.count_messages(MESSAGES) == len(chatml(MESSAGES, True))
    assert remote.count_messages(MESSAGES, add_generation_prompt=False) == len(chatml(MESSAGES, False))
    assert remote.render_messages(MESSAGES) == chatml(MESSAGES, True)
    assert remote.info().context_size == MAX_MODEL_LEN
    # the probe tried llama-server's shape first, was refused 400, then spoke vLLM's
    paths = [(p, sorted(b)) for p, b in engine.requests[:3]]
    assert paths == [("/tokenize", ["add_special", "content", "parse_special"]),
                     ("/tokenize", ["add_special_tokens", "model", "prompt"]),
                     ("/tokenize", ["add_special_tokens", "model", "prompt"])]
    assert engine.requests[1][1] == {"model": SERVED, "prompt": "compactd probe", "add_special_tokens": False}
    chat = [b for p, b in engine.requests if "messages" in b]
    assert chat[0] == {"model": SERVED, "messages": MESSAGES, "add_generation_prompt": True}
    remote.close()


def test_vllm_generation_sends_openai_json_schema_and_reads_usage():
    engine = FakeVllm()
    remote = OpenAIHttpBackend("http://vllm.invalid", transport=httpx.MockTransport(engine))
    schema = {"type": "object", "properties": {"goal": {"type": "string"}}}
    text, stats = collect(remote.generate(MESSAGES, max_tokens=20, json_schema=schema))
    assert json.loads(text) == {"goal": "x"}
    assert (stats.prompt_tokens, stats.decode_tokens, stats.finish_reason) == (len(chatml(MESSAGES, True)), 5, "stop")
    body = engine.requests[-1][1]
    assert body["model"] == SERVED
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": schema, "strict": True}}
    remote.close()


class FakeLlamaCppPython:
    """llama-cpp-python's server: /extras/tokenize adds the BOS of a model that wants one, no
    template endpoint, `response_format` only as json_object, no usage in the stream."""

    def __init__(self) -> None:
        self.chat_bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            if request.url.path == "/v1/models":
                return httpx.Response(200, json={"object": "list", "data": [{"id": "/models/m.gguf"}]})
            return httpx.Response(404, json={"detail": "Not Found"})
        body = json.loads(request.content)
        if request.url.path == "/extras/tokenize":
            return httpx.Response(200, json={"tokens": [BOS] + ids(body["input"])})
        if request.url.path == "/v1/chat/completions":
            self.chat_bodies.append(body)
            return sse([{"choices": [{"delta": {"content": "ok"}, "finish_reason": None}]},
                        {"choices": [{"delta": {}, "finish_reason": "stop"}]}])
        return httpx.Response(404, json={"detail": "Not Found"})


def test_llama_cpp_python_strips_the_added_bos_and_sends_json_object():
    engine = FakeLlamaCppPython()
    remote = OpenAIHttpBackend("http://lcp.invalid", transport=httpx.MockTransport(engine))
    assert remote.tokenize("abc") == ids("abc")
    assert remote.dialect().added == (BOS,)
    schema = {"type": "object"}
    text, stats = collect(remote.generate([{"role": "user", "content": "x"}], max_tokens=5, json_schema=schema))
    assert text == "ok" and stats.decode_tokens == 1
    assert engine.chat_bodies[0]["response_format"] == {"type": "json_object", "schema": schema}
    assert stats.prompt_tokens == 0  # no usage, and no template to count the prompt with


def test_llama_cpp_python_without_a_local_template_names_what_is_missing():
    remote = OpenAIHttpBackend("http://lcp.invalid", transport=httpx.MockTransport(FakeLlamaCppPython()))
    with pytest.raises(BackendError) as err:
        remote.count_messages(MESSAGES)
    message = str(err.value)
    assert "(llama-cpp-python) renders no chat template" in message
    assert "no /apply-template" in message and "pass --model with the GGUF the engine serves" in message
