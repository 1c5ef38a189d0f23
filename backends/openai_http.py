"""A running OpenAI-compatible engine (llama-server with parallel slots, vLLM, mlx_lm.server,
or compactd itself) behind the backend protocol.

Exact counts need the engine's own tokenizer and template: they come from llama-server's
`POST /tokenize` and `POST /apply-template`; a server without them is refused with a clear
BackendError rather than counted with a guess. Generation streams `POST /v1/chat/completions`
(`response_format` json_schema for constrained output); the stats come from llama-server's
`timings` or the OpenAI `usage` where present, and from the wall clock otherwise.

`priority` and `isolated` are accepted and not forwarded: the remote engine schedules its own
slots (llama-server is FIFO). Closing the stream closes the HTTP response, which makes
llama-server stop generating.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from .base import BackendError, ChatMessage, GenerationStats, ModelInfo

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0  # a long prefill on a CPU engine sends nothing for minutes
DEFAULT_CONTEXT = 8192  # when the server tells no context size


class OpenAIHttpBackend:
    engine_name = "openai-http"
    supports_json_schema = True  # sent as response_format json_schema; the engine constrains the output
    meta = None  # the remote engine adds its own BOS: no GGUF metadata here

    def __init__(self, base_url: str, *, api_key: str | None = None, model: str | None = None,
                 timeout: float = READ_TIMEOUT_S, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # httpx.Client is thread-safe: the pipeline may count from several threads at once.
        self._client = httpx.Client(base_url=self.base_url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._model = model
        self._info: ModelInfo | None = None

    # -- HTTP ----------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = self._client.post(path, json=body)
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach the engine at {self.base_url}{path}: {exc}") from None
        if response.status_code == 404:
            raise BackendError(
                f"the engine at {self.base_url} has no {path} endpoint: exact counts need llama-server's "
                "/tokenize and /apply-template (or compactd serve)"
            )
        if response.status_code >= 400:
            raise BackendError(f"{self.base_url}{path} answered {response.status_code}: {_error_text(response)}")
        try:
            return response.json()
        except ValueError:
            raise BackendError(f"{self.base_url}{path} answered with non-JSON") from None

    def _get(self, path: str) -> Any | None:
        try:
            response = self._client.get(path)
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach the engine at {self.base_url}{path}: {exc}") from None
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def load(self) -> None:
        """Nothing to load here: the remote engine holds the weights."""

    # -- tokens --------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        data = self._post("/tokenize", {"content": text, "add_special": False, "parse_special": True})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(f"{self.base_url}/tokenize returned no token list")
        # with_pieces answers [{id, piece}]; plain answers [int]
        return [t["id"] if isinstance(t, dict) else int(t) for t in tokens]

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def render_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                        tools: list[dict[str, Any]] | None = None) -> str:
        # llama-server always appends the generation prompt; compactd honours the flag. Counts
        # built from differences (worker/tokens.py) are exact either way. `tools` is sent only
        # when given, as llama-server's OpenAI-style body carries it.
        body: dict[str, Any] = {"messages": messages, "add_generation_prompt": add_generation_prompt}
        if tools is not None:
            body["tools"] = tools
        data = self._post("/apply-template", body)
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            raise BackendError(f"{self.base_url}/apply-template returned no prompt")
        return prompt

    def count_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                       tools: list[dict[str, Any]] | None = None) -> int:
        return self.count(self.render_messages(messages, add_generation_prompt, tools))

    # -- generation ----------------------------------------------------------------------

    def generate(
        self,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
        priority: int = 0,
        isolated: bool = True,
        cache_key: str | None = None,
        stop: list[str] | None = None,
        **_ignored: Any,  # other engine-specific options (repeat_penalty...)
    ) -> Iterator[str | GenerationStats]:
        """cache_key and stop are accepted and not forwarded (the remote engine keeps its own
        prefix cache; stop strings were never sent)."""
        body: dict[str, Any] = {
            "messages": messages, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self._model or self.info().model_name:
            body["model"] = self._model or self.info().model_name
        if json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": json_schema, "strict": True}}
        return self._stream(body)

    def _stream(self, body: dict[str, Any]) -> Iterator[str | GenerationStats]:
        t0 = time.perf_counter()
        ttft = 0.0
        finish = ""
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}
        pieces = 0
        try:
            with self._client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise BackendError(f"{self.base_url}/v1/chat/completions answered {response.status_code}: "
                                       f"{_error_text(response)}")
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        event = json.loads(data)
                    except ValueError:
                        continue
                    if "error" in event:
                        raise BackendError(f"the engine failed mid-stream: {event['error']}")
                    usage = event.get("usage") or usage
                    timings = event.get("timings") or timings
                    for choice in event.get("choices") or []:
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            if not ttft:
                                ttft = (time.perf_counter() - t0) * 1000
                            pieces += 1
                            yield text
                        finish = choice.get("finish_reason") or finish
        except httpx.TransportError as exc:
            raise BackendError(f"lost the engine at {self.base_url}: {exc}") from None
        total = (time.perf_counter() - t0) * 1000
        yield _stats(usage, timings, ttft or total, total, pieces, finish or "stop")

    # -- description ---------------------------------------------------------------------

    def info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        models = self._get("/v1/models") or {}
        entry = (models.get("data") or [{}])[0] if isinstance(models, dict) else {}
        meta = entry.get("meta") or {}
        props = self._get("/props") or {}
        n_ctx = (meta.get("n_ctx") or (props.get("default_generation_settings") or {}).get("n_ctx")
                 or meta.get("n_ctx_train") or DEFAULT_CONTEXT)
        self._info = ModelInfo(
            engine=self.engine_name, engine_version=str(meta.get("engine") or props.get("build_info") or "remote"),
            model_name=self._model or str(entry.get("id") or "remote"), model_path=self.base_url,
            architecture=str(meta.get("architecture") or ""), quantization=str(meta.get("quantization") or ""),
            trained_context=int(meta.get("n_ctx_train") or 0), vocab_size=int(meta.get("n_vocab") or 0),
            context_size=int(n_ctx), accelerator="remote", extra={"base_url": self.base_url},
        )
        return self._info

    def close(self) -> None:
        self._client.close()


def _error_text(response: httpx.Response) -> str:
    try:
        err = response.json().get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err or response.text[:300])
    except (ValueError, AttributeError):
        return response.text[:300]


def _stats(usage: dict[str, Any], timings: dict[str, Any], ttft_ms: float, total_ms: float, pieces: int,
           finish: str) -> GenerationStats:
    if timings:  # llama-server (and compactd): engine-measured
        cached = int(timings.get("cache_n") or 0)
        return GenerationStats(
            prompt_tokens=int(timings.get("prompt_n") or 0) + cached, cached_prompt_tokens=cached,
            prompt_ms=float(timings.get("prompt_ms") or 0.0), decode_tokens=int(timings.get("predicted_n") or 0),
            decode_ms=float(timings.get("predicted_ms") or 0.0), ttft_ms=ttft_ms, total_ms=total_ms,
            finish_reason=finish,
        )
    details = usage.get("prompt_tokens_details") or {}
    return GenerationStats(  # wall clock: the prompt until the first token, decoding after it
        prompt_tokens=int(usage.get("prompt_tokens") or 0), cached_prompt_tokens=int(details.get("cached_tokens") or 0),
        prompt_ms=ttft_ms, decode_tokens=int(usage.get("completion_tokens") or pieces),
        decode_ms=max(0.0, total_ms - ttft_ms), ttft_ms=ttft_ms, total_ms=total_ms, finish_reason=finish,
    )
