"""/v1/chat/completions through the official `openai` Python SDK, against a real uvicorn on
127.0.0.1: plain and streamed completions (usage on its own `include_usage` chunk),
`response_format` json_schema, and OpenAI error objects with `param` for every parameter
compactd does not implement. Logic on the ScriptedBackend; one streamed call on the real
bundled model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fakes import ScriptedBackend, ServerThread, served_app

openai = pytest.importorskip("openai")

SCHEMA = {"type": "object", "properties": {"goal": {"type": "string"}}, "required": ["goal"]}
USER = [{"role": "user", "content": "summarize the session"}]
START_S = 20  # uvicorn starts in well under a second; generous for a busy 2-core machine


def serve(backend: Any) -> ServerThread:
    return served_app(backend)


@pytest.fixture
def scripted():
    backend = ScriptedBackend()
    with serve(backend) as server:
        yield backend, openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    backend.close()


def test_sdk_completion_with_json_schema(scripted):
    backend, client = scripted
    r = client.chat.completions.create(
        model="scripted", messages=USER, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "summary", "schema": SCHEMA}})
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == backend.reply
    assert backend.schemas == [SCHEMA]
    words = len(backend.reply.split())
    assert (r.usage.completion_tokens, r.usage.prompt_tokens) == (words, backend.count_messages(USER))
    assert r.usage.total_tokens == words + backend.count_messages(USER)


def test_sdk_stream_puts_usage_on_its_own_last_chunk(scripted):
    backend, client = scripted
    chunks = list(client.chat.completions.create(model="scripted", messages=USER, max_tokens=200, stream=True,
                                                 stream_options={"include_usage": True}))
    *content, finish, usage = chunks
    assert content[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in content) == backend.reply
    assert all(c.usage is None for c in content)
    assert finish.choices[0].finish_reason == "stop" and finish.usage is None
    assert usage.choices == [] and usage.id == finish.id
    assert usage.usage.completion_tokens == len(backend.reply.split())
    assert usage.usage.prompt_tokens == backend.count_messages(USER)

    plain = list(client.chat.completions.create(model="scripted", messages=USER, max_tokens=200, stream=True))
    assert len(plain) == len(chunks) - 1 and all(c.usage is None for c in plain)
    assert plain[-1].choices[0].finish_reason == "stop"

    # on the wire: the usage chunk comes after the finish chunk and right before [DONE]
    base = str(client.base_url).rstrip("/")
    body = {"messages": USER, "max_tokens": 200, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base + "/chat/completions", json=body, timeout=30) as s:
        events = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"] == [] and "usage" in json.loads(events[-2])
    assert json.loads(events[-3])["choices"][0]["finish_reason"] == "stop"


# (keyword arguments of create, the `param` the 400 must name)
UNSUPPORTED = [
    ({"tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"temperature": 0.7, "top_p": 0.5}, "top_p"),
    ({"temperature": 0.7, "seed": 7}, "seed"),
    ({"extra_body": {"top_k": 5}}, "top_k"),
    ({"stream": True, "stream_options": {"include_usage": True, "chunk_size": 3}}, "stream_options.chunk_size"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, "messages[0].content[1]"),
]


@pytest.mark.parametrize(("kwargs", "param"), UNSUPPORTED, ids=[p for _, p in UNSUPPORTED])
def test_sdk_unsupported_parameter_is_400_naming_it(scripted, kwargs, param):
    backend, client = scripted
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**{"model": "scripted", "messages": USER, **kwargs})
    err = info.value
    assert (err.status_code, err.code, err.param) == (400, "unsupported_parameter", param)
    assert err.body["message"] and err.body["type"] == "invalid_request_error"
    assert backend.generate_calls == 0


def test_sdk_default_valued_and_informational_parameters_are_accepted(scripted):
    backend, client = scripted
    r = client.chat.completions.create(
        model="scripted", messages=[{"role": "developer", "content": "be brief"}, *USER], max_tokens=200,
        n=1, logprobs=False, tool_choice="none", top_p=0.5, seed=7, user="u1", metadata={"k": "v"},
        store=False, frequency_penalty=0, presence_penalty=0, stream=False)
    assert r.choices[0].message.content == backend.reply
    # `developer` reaches the chat template as `system`, the role templates know
    assert [m["role"] for m in backend.prompts[-1]] == ["system", "user"]


def test_sdk_schema_the_engine_cannot_honour_is_400_not_502(scripted):
    backend, client = scripted
    backend.supports_json_schema = False  # as MLX without a grammar engine
    for response_format in ({"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
                            {"type": "json_object"}):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="scripted", messages=USER, response_format=response_format)
        assert (info.value.code, info.value.param) == ("unsupported_parameter", "response_format")
    assert backend.generate_calls == 0
    plain = client.chat.completions.create(model="scripted", messages=USER, response_format={"type": "text"})
    assert plain.choices[0].message.content == backend.reply


def test_sdk_errors_carry_param(scripted):
    _backend, client = scripted
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="scripted", messages=USER, temperature=3)
    assert (info.value.code, info.value.param) == ("invalid_request", "temperature")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="scripted", messages=USER, stream_options={"include_usage": True})
    assert (info.value.code, info.value.param) == ("invalid_request", "stream_options")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "x " * 100}],
                                       max_tokens=8190)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "max_tokens")
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("nope")
    assert info.value.param is None and info.value.code == "not_found"


REAL_MESSAGES = [{"role": "system", "content": "You are a terse assistant."},
                 {"role": "user", "content": "Name three prime numbers."}]
REAL_MAX_TOKENS = 12  # short: two generations on a 2-core CPU


@pytest.fixture(scope="module")
def real_calls(llama_backend):
    """One streamed (include_usage) and one plain SDK call of the same prompt on the 0.5B."""
    with serve(llama_backend) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        chunks = list(client.chat.completions.create(model="qwen", messages=REAL_MESSAGES, max_tokens=REAL_MAX_TOKENS,
                                                     stream=True, stream_options={"include_usage": True}))
        whole = client.chat.completions.create(model="qwen", messages=REAL_MESSAGES, max_tokens=REAL_MAX_TOKENS)
    return chunks, whole


@pytest.mark.model
def test_sdk_streamed_completion_on_the_real_model(llama_backend, real_calls):
    chunks, whole = real_calls
    *content, finish, usage = chunks
    text = "".join(c.choices[0].delta.content or "" for c in content)
    assert text and text == whole.choices[0].message.content  # greedy: streamed == not streamed
    assert finish.choices[0].finish_reason == whole.choices[0].finish_reason
    assert usage.choices == [] and finish.usage is None and all(c.usage is None for c in content)
    assert usage.usage.prompt_tokens == len(llama_backend.prompt_ids(REAL_MESSAGES)) == whole.usage.prompt_tokens
    # the usage chunk reports the generation the finish chunk timed (llama-server's timings)
    assert usage.usage.completion_tokens == finish.model_extra["timings"]["predicted_n"]
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + usage.usage.completion_tokens
