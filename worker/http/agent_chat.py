"""The reply to an agent's compaction request at /v1/chat/completions (worker/agents/).

The compaction is the service's `agent_compaction` job (by default, `agent_wait` instant, the
deterministic checkpoint at once, the model's narrative refined in the background and carried
into that agent session's next compaction); it is cancelled when the client goes away.
It answers as OpenAI does: a `chat.completion`, or with `stream` the role chunk at once,
SSE comments while the pipeline works (with `agent_wait` model a compaction takes tens of
seconds and a client or proxy must not take silence for a dead stream), the summary as one
content chunk, the finish chunk, the include_usage chunk with `choices: []`, then `[DONE]`.
Usage follows the agent's profile (the request's messages and the summary, with the model's
own tokenizer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from ..agents import AgentCompaction, AgentRequest
from ..service.service import CompactdService
from . import chat
from .errors import ApiError

KEEPALIVE_S = 10.0  # an SSE comment this often while the pipeline runs
DISCONNECT_POLL_S = 0.25


def _usage(service: CompactdService, req: AgentRequest, body: dict[str, Any],
           result: AgentCompaction) -> dict[str, Any]:
    prompt, completion = service.agent_usage(req, body, result)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0}}


def _meta(result: AgentCompaction) -> dict[str, Any]:
    cp = result.checkpoint
    return {"agent_compaction": {"mode": result.mode, "messages": result.messages, "version": cp.version,
                                 "fallback": cp.verification.fallback,
                                 "model_calls": len(cp.timings.model)}}


async def agent_completion(req: AgentRequest, request: Request, service: CompactdService,
                           messages: list[dict[str, Any]], head: dict[str, Any], stream: bool,
                           include_usage: bool, max_tokens: int | None) -> Any:
    """The summary, in the agent's template, as a completion or a stream of chunks."""
    body = {"messages": messages}
    job = service.agent_compaction(req, body, max_tokens=max_tokens)
    assert job.future is not None
    t0 = time.perf_counter()

    if not stream:
        while True:
            done, _ = await asyncio.wait({job.future}, timeout=DISCONNECT_POLL_S)
            if done:
                break
            if await request.is_disconnected():
                service.cancel(job, "client disconnected")
                raise ApiError(499, "client_closed", "client disconnected")
        result: AgentCompaction = job.future.result()
        usage = await asyncio.to_thread(_usage, service, req, body, result)
        service.chat_done(time.perf_counter() - t0)
        return {**head, "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                             "finish_reason": "stop"}],
                "usage": usage, "compactd": _meta(result)}

    async def events() -> AsyncIterator[str]:
        finished = False
        try:
            yield chat.chunk(head, {"role": "assistant", "content": ""})
            while True:
                done, _ = await asyncio.wait({job.future}, timeout=KEEPALIVE_S)
                if done:
                    break
                yield ": compacting\n\n"
            finished = True
            exc = job.future.exception()
            if exc is not None:
                yield chat.error_event(exc)
                return
            result = job.future.result()
            yield chat.chunk(head, {"content": result.text})
            yield chat.chunk(head, {}, "stop", compactd=_meta(result))
            if include_usage:
                yield chat.usage_chunk(head, await asyncio.to_thread(_usage, service, req, body, result))
            yield "data: [DONE]\n\n"
            service.chat_done(time.perf_counter() - t0)
        finally:
            if not finished:  # the client went away: stop the pipeline at its next token
                service.cancel(job, "client disconnected")

    return chat.event_stream(events())


__all__ = ["agent_completion"]
