"""The request and response bodies of the API, as pydantic models (FastAPI validates requests
with them and documents both in /openapi.json).

llama-server's /tokenize and /apply-template bodies are mirrored as they are, so that the
remote backend can be tested against compactd itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..service.records import JobStatus

# Far above any model's window (10M tokens exist), far below SQLite's 64-bit INTEGER: a bigger
# value is a client bug, answered 400 rather than overflowing the store (500).
MAX_CONTEXT_LIMIT = 1_000_000_000
MIN_CONTEXT_LIMIT = 256  # below this no checkpoint fits


class TokenizeRequest(BaseModel):
    """llama-server's /tokenize body."""

    content: str
    add_special: bool = False
    parse_special: bool = True  # compactd always parses special tokens (the engine does)
    with_pieces: bool = False


class TokenizeResponse(BaseModel):
    tokens: list[int]


class ApplyTemplateRequest(BaseModel):
    messages: list[dict[str, Any]]
    add_generation_prompt: bool = True  # an extension; llama-server always adds it
    tools: list[dict[str, Any]] | None = None  # OpenAI tool definitions, rendered by the template


class ApplyTemplateResponse(BaseModel):
    prompt: str


class V1TokenizeRequest(BaseModel):
    text: str


class V1TokenizeResponse(BaseModel):
    model: str
    tokens: list[int]
    count: int


class CountRequest(BaseModel):
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    # The tool definitions the agent sends beside `messages` (OpenAI `tools`): counted too.
    tools: list[dict[str, Any]] | None = None


class SessionTokensRequest(BaseModel):
    """POST /v1/sessions/{id}/tokens: the count with the agent's tool definitions included."""

    tools: list[dict[str, Any]] | None = None


class CountResponse(BaseModel):
    model: str
    tokens: int
    kind: Literal["text", "messages"]


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # the rest of OpenAI's parameters: http/chat.py checks them

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # compaction wants deterministic output
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    stop: str | list[str] | None = None


class TokenStatus(BaseModel):
    session_id: str
    tokens: int
    context_limit: int
    reserved: int
    usable: int
    overflow: bool
    pre_threshold: int
    rolling_ready: bool
    messages: int
    context_messages: int
    checkpoint_version: int | None
    counted_now: int


class JobView(BaseModel):
    id: str
    kind: str
    lane: str
    session_id: str | None
    status: JobStatus
    created: float
    started: float | None
    finished: float | None
    error: str | None
    result: Any = None
