"""What /v1/chat/completions honours of OpenAI's request, and the chunks it streams back.

An OpenAI client that sends a parameter compactd does not implement (tools, n > 1, logprobs,
penalties, audio...) must hear so: a silently ignored parameter gives an answer the client did
not ask for. So every parameter of OpenAI's Create chat completion request is either honoured,
accepted because it cannot change the completion (metadata, user, a sampling knob under greedy
decoding), or refused with 400 `unsupported_parameter` and `param` naming it. A name outside
the spec is refused the same way. A JSON schema the engine cannot enforce is a 400 too (the
request is what cannot be served; a 5xx would make clients retry).

Streaming follows OpenAI: with `stream_options.include_usage` the usage rides on its own last
chunk with `choices: []`, after the finish chunk and before `[DONE]`; without it, no usage.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from .errors import ApiError, api_error_for, error_body

UNSUPPORTED = "unsupported_parameter"

# Parameters whose value cannot change what compactd generates: accepted whatever their value.
# (`store` asks OpenAI to keep the completion for its dashboard; there is none to keep it in.)
INFORMATIONAL = frozenset({
    "user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key",
    "parallel_tool_calls",  # only means something with tools, which are refused
})

# Parameters compactd does not implement, with the values that ask for nothing beyond what it
# does (OpenAI's defaults); any other value is refused.
DEFAULT_ONLY: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "logit_bias": (None, {}),
    "frequency_penalty": (None, 0),
    "presence_penalty": (None, 0),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
    "reasoning_effort": (None,),
    "verbosity": (None,),
}

# Sampling knobs that greedy decoding (temperature 0, compactd's default) makes irrelevant; at
# a temperature above 0 the engine samples with its own settings, so they are refused there.
GREEDY_ONLY = frozenset({"top_p", "seed"})
# llama-server's `chat_template_kwargs`: extra variables for the chat template. Qwen Code sends
# {"enable_thinking": false} with every request; the bundled templates have no thinking mode, so
# that key asks for nothing they would do otherwise. Any other key is refused.
TEMPLATE_KWARGS_IGNORED = frozenset({"enable_thinking"})

STREAM_OPTIONS = frozenset({"include_usage", "include_obfuscation"})  # obfuscation: a no-op here
TEXT_PART_TYPES = frozenset({"text"})  # content parts the model reads; images and audio are not
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def unsupported(param: str, message: str) -> ApiError:
    return ApiError(400, UNSUPPORTED, message, param=param)


def check_parameters(extra: dict[str, Any], temperature: float, stream: bool,
                     stream_options: dict[str, Any] | None) -> None:
    """Refuse (400 unsupported_parameter, `param` set) what the request asks and compactd
    would not do. `extra` holds the body's fields outside ChatCompletionRequest's own."""
    for name, value in extra.items():
        if name in INFORMATIONAL:
            continue
        if name == "chat_template_kwargs":
            unknown = set(value or {}) - TEMPLATE_KWARGS_IGNORED if isinstance(value, dict | None) else {"?"}
            if unknown:
                raise unsupported(name, f"chat_template_kwargs {sorted(unknown)} are not supported by compactd "
                                        f"(only {sorted(TEMPLATE_KWARGS_IGNORED)}, which the bundled templates ignore)")
            continue
        if name in GREEDY_ONLY:
            if value is not None and temperature > 0:
                raise unsupported(name, f"{name} is not supported with temperature > 0 "
                                        "(compactd samples with the engine's own settings)")
            continue
        if name in DEFAULT_ONLY:
            if value not in DEFAULT_ONLY[name]:
                raise unsupported(name, f"{name}={json.dumps(value)[:80]} is not supported by compactd")
            continue
        raise unsupported(name, f"unrecognized request argument supplied: {name}")
    if stream_options is not None:
        if not stream:
            raise ApiError(400, "invalid_request", "stream_options is only allowed when stream is true",
                           param="stream_options")
        for key in stream_options:
            if key not in STREAM_OPTIONS:
                raise unsupported(f"stream_options.{key}", f"stream_options.{key} is not supported")


def check_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with non-text content refused (the model would see a placeholder, not the
    image) and `developer` read as `system` (OpenAI's newer name; chat templates know system)."""
    out = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if isinstance(role, str) and role not in ROLES:
            raise ApiError(400, "invalid_request", f"messages[{i}].role {role!r} is not a chat role",
                           param=f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in TEXT_PART_TYPES:
                    raise unsupported(f"messages[{i}].content[{j}]",
                                      f"content parts of type {kind!r} are not supported: the model reads text")
        out.append({**m, "role": "system"} if role == "developer" else m)
    return out


def json_schema(response_format: dict[str, Any] | None, enforceable: bool) -> dict[str, Any] | None:
    """The schema to constrain the output with (None for plain text). A schema the engine
    cannot enforce (`enforceable` False, e.g. MLX without a grammar engine) is a 400."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema") or {"type": "object"}
    elif kind == "json_schema":
        # OpenAI nests it as json_schema.schema; llama-server also takes a top-level schema.
        spec = response_format.get("json_schema")
        schema = (spec.get("schema") if isinstance(spec, dict) else None) or response_format.get("schema")
        if not isinstance(schema, dict):
            raise ApiError(400, "invalid_request", "response_format json_schema needs a schema object",
                           param="response_format.json_schema.schema")
    else:
        raise ApiError(400, "invalid_request", f"unsupported response_format type {kind!r}",
                       param="response_format.type")
    if not enforceable:
        raise unsupported("response_format", f"response_format {kind} is not supported by this engine: "
                                             "it cannot constrain its output to a schema")
    return schema


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    """One `chat.completion.chunk` event; `head` holds id, created and model."""
    return sse({**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def error_event(exc: BaseException) -> str:
    """A failure after the stream started (the status line is sent): the error envelope as an event."""
    err = api_error_for(exc)
    return sse(error_body(err.code, err.message, err.type, err.param))


def event_stream(events: AsyncIterator[str]) -> StreamingResponse:
    """Server-sent events, never cached or buffered by a proxy on the way."""
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def usage_chunk(head: dict[str, Any], usage: dict[str, Any]) -> str:
    """The include_usage chunk: no choices, the whole request's usage."""
    return sse({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
