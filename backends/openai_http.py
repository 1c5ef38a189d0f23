"""A running OpenAI-compatible engine (llama-server, vLLM, llama-cpp-python's server, or
compactd itself) behind the backend protocol.

Exact counts need the engine's own tokenizer and template. Which endpoints give them differs by
server (remote_dialects.py); the backend probes once, on first use, and then uses:
- tokens: llama-server's `/tokenize`, else vLLM's `/tokenize`, else llama-cpp-python's
  `/extras/tokenize`;
- the chat template: the engine's own (llama-server's `/apply-template`, vLLM's `/tokenize`
  with messages) when it has one; otherwise the template of a local GGUF (`template_model`,
  the CLI's `--model`: the file the engine serves), rendered as llama-cpp-python's server
  renders it and tokenized remotely; with neither, a BackendError naming the missing endpoint.
A server with no tokenizer endpoint at all (mlx_lm.server) is refused rather than guessed at.

Generation streams `POST /v1/chat/completions` (`response_format` with the schema for
constrained output, in the form the server accepts); the stats come from llama-server's
`timings` or the OpenAI `usage` where present, and from the wall clock otherwise (a server that
reports no prompt size gets compactd's exact count of the messages).

`priority` and `isolated` are accepted and not forwarded: the remote engine schedules its own
slots (llama-server is FIFO). Closing the stream closes the HTTP response, which makes
llama-server stop generating.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from .base import BackendError, ChatMessage, GenerationStats, ModelInfo
from .chat_template import ChatTemplate
from .remote_dialects import Dialect, probe

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0  # a long prefill on a CPU engine sends nothing for minutes
DEFAULT_CONTEXT = 8192  # when neither the server nor the caller tells the context size


class OpenAIHttpBackend:
    engine_name = "openai-http"
    supports_json_schema = True  # sent as response_format; the engine constrains the output
    meta = None  # the remote engine adds its own BOS: no GGUF metadata here

    def __init__(self, base_url: str, *, api_key: str | None = None, model: str | None = None,
                 template_model: str | None = None, n_ctx: int | None = None,
                 timeout: float = READ_TIMEOUT_S, transport: httpx.BaseTransport | None = None):
        """template_model: a GGUF path or bundled model name whose chat template is rendered
        locally when the engine renders none (llama-cpp-python's server). n_ctx: the engine's
        context size where the server does not tell it (llama-cpp-python's `--n_ctx`)."""
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # httpx.Client is thread-safe: the pipeline may count from several threads at once.
        self._client = httpx.Client(base_url=self.base_url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._model = model
        self._template_model = template_model
        self._n_ctx = n_ctx
        self._info: ModelInfo | None = None
        self._dialect: Dialect | None = None
        self._local: tuple[ChatTemplate, bool] | None = None  # (template, add_bos)
        self._lock = threading.Lock()

    # -- HTTP ----------------------------------------------------------------------------

    def _raw_post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        try:
            return self._client.post(path, json=body)
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach the engine at {self.base_url}{path}: {exc}") from None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self._raw_post(path, body)
        if response.status_code == 404:
            raise BackendError(f"the engine at {self.base_url} has no {path} endpoint")
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
        """Probe the engine's endpoints now (otherwise on first use); the weights are remote."""
        self.dialect()

    def dialect(self) -> Dialect:
        """Which server this is, probed once (remote_dialects.probe)."""
        with self._lock:
            if self._dialect is None:
                name = self._model or self._served_model()
                self._dialect = probe(self._raw_post, self.base_url, name)
            return self._dialect

    def _served_model(self) -> str | None:
        models = self._get("/v1/models") or {}
        data = models.get("data") if isinstance(models, dict) else None
        return str(data[0].get("id")) if data and isinstance(data[0], dict) and data[0].get("id") else None

    # -- tokens --------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        d = self.dialect()
        return d.tokens(self._post(d.tokenize_path, d.tokenize_body(text)))

    def count(self, text: str) -> int:
        return len(self.tokenize(text))

    def render_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                        tools: list[dict[str, Any]] | None = None) -> str:
        # llama-server always appends the generation prompt; compactd honours the flag. Counts
        # built from differences (worker/tokens.py) are exact either way. `tools` is sent only
        # when given, as the servers' OpenAI-style bodies carry it.
        d = self.dialect()
        if d.template_path is None:
            return self._local_template()[0].render(messages, add_generation_prompt, tools)
        if d.name == "vllm":  # vLLM renders only into tokens: its /detokenize gives the text
            data = self._post("/detokenize", {**({"model": d.model} if d.model else {}),
                                              "tokens": self._chat_tokens(d, messages, add_generation_prompt, tools)})
            prompt = data.get("prompt") if isinstance(data, dict) else None
        else:
            data = self._post(d.template_path, d.chat_body(messages, add_generation_prompt, tools))
            prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            raise BackendError(f"{self.base_url}{d.template_path} ({d.name}) returned no prompt")
        return prompt

    def count_messages(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
                       tools: list[dict[str, Any]] | None = None) -> int:
        d = self.dialect()
        if d.template_path is None:
            template, add_bos = self._local_template()
            return self.count(template.prompt_text(messages, add_generation_prompt, add_bos, tools))
        if d.name == "vllm":
            return len(self._chat_tokens(d, messages, add_generation_prompt, tools))
        return self.count(self.render_messages(messages, add_generation_prompt, tools))

    def _chat_tokens(self, d: Dialect, messages: list[ChatMessage], add_generation_prompt: bool,
                     tools: list[dict[str, Any]] | None = None) -> list[int]:
        data = self._post(d.template_path or d.tokenize_path, d.chat_body(messages, add_generation_prompt, tools))
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(f"{self.base_url}{d.tokenize_path} ({d.name}) returned no token list for messages")
        return [int(t) for t in tokens]

    def _local_template(self) -> tuple[ChatTemplate, bool]:
        """The chat template of the local GGUF the engine serves, for a server that renders
        none (the way llama-cpp-python's server renders it: chat_template.py)."""
        if self._local is not None:
            return self._local
        d = self.dialect()
        if not self._template_model:
            raise BackendError(
                f"the engine at {self.base_url} ({d.name}) renders no chat template (it has no /apply-template "
                "and no vLLM /tokenize for messages), so chat counts need the template locally: pass --model "
                "with the GGUF the engine serves"
            )
        from .gguf_meta import read_meta
        from .models import resolve

        resolved = resolve(self._template_model)
        if resolved.kind != "gguf":
            raise BackendError(f"--model must name the GGUF the engine serves to read its chat template, "
                               f"got {resolved.path}")
        meta = read_meta(resolved.path)
        template = ChatTemplate(meta.chat_template, meta.bos_token, meta.eos_token, resolved.chat_format,
                                self._template_model)
        self._local = (template, meta.add_bos)
        return self._local

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
            body["response_format"] = self.dialect().response_format(json_schema)
        return self._stream(body, messages)

    def _stream(self, body: dict[str, Any], messages: list[ChatMessage]) -> Iterator[str | GenerationStats]:
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
        stats = _stats(usage, timings, ttft or total, total, pieces, finish or "stop")
        if not stats.prompt_tokens:  # llama-cpp-python streams no usage: count the prompt exactly here
            try:
                stats.prompt_tokens = self.count_messages(messages)
            except BackendError:
                pass  # the text came back; a stats field is not worth failing it
        yield stats

    # -- description ---------------------------------------------------------------------

    def info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        models = self._get("/v1/models") or {}
        entry = (models.get("data") or [{}])[0] if isinstance(models, dict) else {}
        meta = entry.get("meta") or {}
        props = self._get("/props") or {}
        # the caller's figure first (llama-cpp-python tells none), then llama-server's, vLLM's
        n_ctx = (self._n_ctx or meta.get("n_ctx") or (props.get("default_generation_settings") or {}).get("n_ctx")
                 or entry.get("max_model_len") or meta.get("n_ctx_train") or DEFAULT_CONTEXT)
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


def connect(engine_url: str | None, *, model: str | None = None, n_ctx: int | None = None,
            api_key: str | None = None) -> OpenAIHttpBackend:
    """The backend for `--engine openai`: `--engine-url` is the engine; `--model`, when given
    beside it, names the local GGUF whose chat template is used where the engine renders none
    (without `--engine-url`, `--model` is taken as the URL, as before)."""
    url = engine_url or model
    if not url:
        raise BackendError("--engine openai needs --engine-url (the engine's base URL)")
    return OpenAIHttpBackend(url, api_key=api_key, template_model=model if engine_url else None, n_ctx=n_ctx)
