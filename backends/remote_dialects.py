"""What each OpenAI-compatible server offers beyond `/v1/chat/completions`, so that the remote
backend can count exactly with the engine's own tokenizer.

No two servers agree on tokenization endpoints:

| server               | tokenize                                   | chat template                  |
|----------------------|--------------------------------------------|--------------------------------|
| llama-server, compactd | `POST /tokenize {content}` -> `{tokens}` | `POST /apply-template` -> `{prompt}` |
| vLLM                 | `POST /tokenize {model, prompt}` -> `{tokens, count, max_model_len}` | `POST /tokenize {model, messages}`; text via `POST /detokenize` -> `{prompt}` |
| llama-cpp-python     | `POST /extras/tokenize {input}` -> `{tokens}` (adds BOS) | none: rendered locally from the GGUF |
| mlx_lm.server        | none                                       | none                           |

`probe` asks in that order, once, with a short text: a 404 means "not this server", a 400 or
422 on `/tokenize` means "a `/tokenize` of another shape" (vLLM refuses llama-server's
`content` body for want of `prompt`). A server that answers none of them is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .base import BackendError, ChatMessage

PROBE_TEXT = "compactd probe"  # any short text: only whether and how the engine answers matters
WRONG_SHAPE = (400, 422)  # a validation error: the path exists with another request shape

# (path, JSON body) -> the raw response; transport errors are already BackendErrors
Post = Callable[[str, dict[str, Any]], httpx.Response]


@dataclass(frozen=True)
class Dialect:
    """One server family's endpoints and request shapes."""

    name: str
    tokenize_path: str
    # Where the engine renders a chat template, or None: compactd renders it locally.
    template_path: str | None
    # Token ids the engine's tokenize adds to any text (llama-cpp-python adds the BOS of models
    # that want one): stripped, since `tokenize` means the text's own tokens.
    added: tuple[int, ...] = ()
    context: int = 0  # the context size the engine told while probing (vLLM's max_model_len)
    model: str | None = field(default=None, compare=False)

    def tokenize_body(self, text: str) -> dict[str, Any]:
        if self.name == "vllm":
            return _with_model({"prompt": text, "add_special_tokens": False}, self.model)
        if self.name == "llama-cpp-python":
            return _with_model({"input": text}, self.model)
        return {"content": text, "add_special": False, "parse_special": True}

    def tokens(self, data: Any) -> list[int]:
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(f"{self.tokenize_path} ({self.name}) returned no token list")
        # llama-server's with_pieces answers [{id, piece}]; everyone else [int]
        ids = [t["id"] if isinstance(t, dict) else int(t) for t in tokens]
        n = len(self.added)
        if n and tuple(ids[:n]) == self.added:
            ids = ids[n:]
        return ids

    def chat_body(self, messages: list[ChatMessage], add_generation_prompt: bool,
                  tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "add_generation_prompt": add_generation_prompt}
        if tools is not None:  # sent only when given: both servers' bodies carry OpenAI `tools`
            body["tools"] = tools
        if self.name == "vllm":  # add_special_tokens defaults to False for chat in vLLM
            return _with_model(body, self.model)
        return body

    def response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        """llama-cpp-python's server accepts only `text` and `json_object` (the schema beside
        it) and answers 500 to OpenAI's `json_schema`; the others take OpenAI's form."""
        if self.name == "llama-cpp-python":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}


LLAMA_SERVER = Dialect("llama-server", "/tokenize", "/apply-template")


def _with_model(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    # vLLM answers 404 to a model name it does not serve; no name means the served one
    return {"model": model, **body} if model else body


def probe(post: Post, base_url: str, model: str | None) -> Dialect:
    """The first dialect whose tokenize answers, in the order of the module table."""
    tried: list[str] = []
    response = post("/tokenize", LLAMA_SERVER.tokenize_body(PROBE_TEXT))
    tried.append(f"/tokenize ({response.status_code})")
    if response.status_code == 200:
        LLAMA_SERVER.tokens(_json(response))
        return LLAMA_SERVER
    if response.status_code in WRONG_SHAPE:
        vllm = Dialect("vllm", "/tokenize", "/tokenize", model=model)
        answer = post("/tokenize", vllm.tokenize_body(PROBE_TEXT))
        tried.append(f"/tokenize with vLLM's prompt ({answer.status_code})")
        if answer.status_code == 200:
            data = _json(answer)
            vllm.tokens(data)
            return Dialect("vllm", "/tokenize", "/tokenize", context=int(data.get("max_model_len") or 0), model=model)
    extras = Dialect("llama-cpp-python", "/extras/tokenize", None, model=model)
    answer = post("/extras/tokenize", extras.tokenize_body(""))
    tried.append(f"/extras/tokenize ({answer.status_code})")
    if answer.status_code == 200:
        return Dialect("llama-cpp-python", "/extras/tokenize", None, added=tuple(extras.tokens(_json(answer))),
                       model=model)
    raise BackendError(
        f"the engine at {base_url} offers no tokenizer compactd knows, so it cannot count exactly: tried "
        f"{', '.join(tried)}. Supported: llama-server, vLLM, llama-cpp-python[server], compactd serve"
    )


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise BackendError(f"{response.request.url} answered with non-JSON") from None
