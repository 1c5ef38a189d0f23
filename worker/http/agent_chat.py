"""The reply to an agent's compaction request at /v1/chat/completions (worker/agents/).

Runs as one foreground job on the scheduler (never preempted, cancelled when the client goes
away); by default (`agent_wait` instant) that job is the deterministic checkpoint, no model call,
and the model's narrative is refined afterwards in one background job per agent session
(`queue_refinement`, shared with Codex's door), carried into that session's next compaction.
It answers as OpenAI does: a `chat.completion`, or with `stream` the role chunk at once,
SSE comments while the pipeline works (a compaction takes tens of seconds and a client or
proxy must not take silence for a dead stream), the summary as one content chunk, the finish
chunk, the include_usage chunk with `choices: []`, then `[DONE]`. Usage counts the request's
messages and the summary with the model's own tokenizer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from ..agents import AgentCompaction, AgentCompactor, AgentRequest, AgentWait, Refinement, received_session
from ..service.records import JobKind, JobStatus
from ..service.scheduler import BACKGROUND_LANE, FOREGROUND_LANE, Job, JobBackend, Overloaded
from ..service.service import CompactdService
from . import chat
from .errors import ApiError

KEEPALIVE_S = 10.0  # an SSE comment this often while the pipeline runs
DISCONNECT_POLL_S = 0.25


def compactor_of(request: Request) -> AgentCompactor:
    """The app's one AgentCompactor (its rolling states), made on first use."""
    state = request.app.state
    if getattr(state, "agent_compactor", None) is None:
        state.agent_compactor = AgentCompactor()
    return state.agent_compactor


def agent_wait(request: Request) -> AgentWait:
    """The app's `agent_wait` setting: instant (the default), model, or none (no model at all)."""
    return getattr(request.app.state, "agent_wait", "instant")


def submit_agent(service: CompactdService, compactor: AgentCompactor, req: AgentRequest, received: Any,
                 max_tokens: int | None, wait: AgentWait, **run_options: Any) -> Job:
    """The agent's compaction as one foreground job, never preempted; a refinement it makes
    stale is cancelled first. Call on the event loop."""
    backend = service.require_backend()
    compactor.prepare(req, received, run_options.get("after"))  # NothingToCompact before a job is queued
    stale = compactor.superseded(req)
    if stale is not None:
        service.cancel(stale, "superseded by a newer compaction")

    def run(job: Job) -> AgentCompaction:
        assert service.counter is not None
        return compactor.run(req, received, JobBackend(backend, job, service.scheduler), service.counter,
                             max_tokens, job.priority, wait, **run_options)

    job = service.scheduler.submit(JobKind.AGENT_COMPACTION, run, lane=FOREGROUND_LANE, preemptible=False)
    assert job.future is not None
    job.future.add_done_callback(lambda f: _answered(service, compactor, f))
    return job


def _answered(service: CompactdService, compactor: AgentCompactor, future: Any) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    refinement = getattr(future.result(), "refinement", None)
    if refinement is not None:
        queue_refinement(service, compactor, refinement)


def queue_refinement(service: CompactdService, compactor: AgentCompactor, refinement: Refinement) -> Job | None:
    """The model's narrative for an answered instant checkpoint, in the background lane (one per
    agent session: a newer compaction cancels it; a preempted one runs again while still wanted)."""
    backend = service.require_backend()

    def run(job: Job) -> dict[str, Any]:
        assert service.counter is not None
        return compactor.refine(refinement, JobBackend(backend, job, service.scheduler), service.counter,
                                job.priority)

    try:
        job = service.scheduler.submit(JobKind.AGENT_REFINE, run, lane=BACKGROUND_LANE)
    except Overloaded:
        service.metrics.inc("compactd_refinements_total", status="skipped_overload")
        return None
    compactor.refining[refinement.key] = job

    def ended(_f: Any) -> None:
        if compactor.refining.get(refinement.key) is job:
            del compactor.refining[refinement.key]
        outcome = (job.result or {}).get("status", "done") if job.status == JobStatus.DONE else job.status
        service.metrics.inc("compactd_refinements_total", status=outcome)
        preempted = job.status == JobStatus.CANCELLED and (job.error or "").startswith("preempted")
        state = compactor.state_of(refinement.key)
        if preempted and state is not None and state.checkpoint is refinement.answered:
            queue_refinement(service, compactor, refinement)

    assert job.future is not None
    job.future.add_done_callback(ended)
    return job


def _usage(service: CompactdService, messages: list[dict[str, Any]], text: str) -> dict[str, Any]:
    backend = service.require_backend()
    prompt = backend.count_messages(messages)
    completion = backend.count(text)
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
    job = submit_agent(service, compactor_of(request), req, received_session(req, messages), max_tokens,
                       agent_wait(request))
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
        usage = await asyncio.to_thread(_usage, service, messages, result.text)
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
                yield chat.usage_chunk(head, await asyncio.to_thread(_usage, service, messages, result.text))
            yield "data: [DONE]\n\n"
            service.chat_done(time.perf_counter() - t0)
        finally:
            if not finished:  # the client went away: stop the pipeline at its next token
                service.cancel(job, "client disconnected")

    return chat.event_stream(events())


__all__ = ["agent_completion", "agent_wait", "compactor_of", "queue_refinement", "submit_agent"]
