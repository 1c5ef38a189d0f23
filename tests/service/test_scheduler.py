"""The scheduler: foreground before background, bounded queues, cancellation, preemption.

Runs on the deterministic ScriptedBackend (a real EngineThread, a scripted model)."""

from __future__ import annotations

import asyncio

import pytest

from backends.base import collect
from backends.engine_thread import BACKGROUND, FOREGROUND
from tests.fakes import ScriptedBackend, wait_until
from worker.service.records import PERSISTED_KINDS, JobKind, JobStatus
from worker.service.scheduler import (
    BACKGROUND_LANE,
    FOREGROUND_LANE,
    JobBackend,
    JobCancelled,
    Overloaded,
    Scheduler,
)


@pytest.fixture
def backend():
    b = ScriptedBackend(token_delay=0.01)  # a token takes time, as with a real model
    yield b
    b.close()


def gen_job(backend: ScriptedBackend, scheduler: Scheduler, tag: str):
    def run(job):
        return collect(JobBackend(backend, job, scheduler).generate([{"role": "user", "content": tag}], max_tokens=50))
    return run


async def until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def run_async(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_foreground_is_served_before_queued_background_work(backend):
    """The acceptance test: background work is queued behind a running background generation;
    a foreground job submitted last runs next, and the running one is preempted."""

    async def scenario():
        s = Scheduler()
        await s.start()
        backend.hold.clear()  # the first generation stalls at its first token
        bg = [s.submit("rolling", gen_job(backend, s, f"bg{i}"), lane=BACKGROUND_LANE) for i in range(3)]
        await until(lambda: len(backend.started) == 1)
        fg = s.submit("compact", gen_job(backend, s, "fg"), lane=FOREGROUND_LANE, preemptible=False)
        await until(lambda: fg.status == "running")
        backend.hold.set()
        await asyncio.wait([j.future for j in [*bg, fg]], timeout=20)
        await s.stop()
        return bg, fg

    bg, fg = run_async(scenario())
    order = [tag for _prio, tag in backend.started]
    assert order[0] == "bg0" and order[1] == "fg", order
    assert set(order[2:]) == {"bg1", "bg2"}
    assert fg.status == JobStatus.DONE and fg.result[0]  # the foreground job got its whole answer
    # bg0 was running when foreground model work arrived: stopped at its next token.
    assert bg[0].status == JobStatus.CANCELLED and bg[0].error.startswith("preempted")
    total = len(backend.reply.split())
    assert wait_until(lambda: len(backend.finished) == 4)
    assert any(t == "bg0" and not complete and n < total for t, n, complete in backend.finished)
    assert bg[1].status == JobStatus.DONE and bg[2].status == JobStatus.DONE
    prios = dict((tag, prio) for prio, tag in backend.started)
    assert prios["fg"] == FOREGROUND and prios["bg1"] == BACKGROUND


def test_full_lane_raises_overloaded_with_retry_after(backend):
    async def scenario():
        s = Scheduler(queue_size=2, runners={FOREGROUND_LANE: 1, BACKGROUND_LANE: 1})
        await s.start()
        backend.hold.clear()
        running = s.submit("chat", gen_job(backend, s, "a"))
        await until(lambda: running.status == "running")
        queued = [s.submit("chat", gen_job(backend, s, t)) for t in ("b", "c")]
        with pytest.raises(Overloaded) as info:
            s.submit("chat", gen_job(backend, s, "d"))
        # The background lane is bounded separately: foreground overload does not block it.
        other = s.submit("rolling", lambda job: "ok", lane=BACKGROUND_LANE)
        backend.hold.set()
        await asyncio.wait([j.future for j in [running, *queued, other]], timeout=20)
        await s.stop()
        return info.value, [running, *queued, other]

    exc, jobs = run_async(scenario())
    assert exc.lane == FOREGROUND_LANE and exc.retry_after >= 1
    assert "queue is full" in str(exc)
    assert all(j.status == JobStatus.DONE for j in jobs)


def test_job_kinds_are_one_enum_whose_values_are_the_stored_strings():
    async def scenario():
        s = Scheduler(runners={FOREGROUND_LANE: 1, BACKGROUND_LANE: 1})
        await s.start()
        plain = s.submit("chat", lambda job: "ok")  # the plain value is the kind
        typed = s.submit(JobKind.AGENT_COMPACTION, lambda job: "ok")
        with pytest.raises(ValueError):
            s.submit("agent_compact", lambda job: "ok")  # a second name for one job is refused
        await asyncio.wait([plain.future, typed.future], timeout=20)
        await s.stop()
        return plain, typed

    plain, typed = run_async(scenario())
    assert plain.kind is JobKind.CHAT and plain.kind == "chat" and f"{plain.kind}" == "chat"
    assert str(typed.kind) == "agent_compaction"
    assert [k.value for k in JobKind] == ["compact", "rolling", "refine", "chat", "agent_compaction", "agent_refine"]
    assert {str(k) for k in PERSISTED_KINDS} == {"compact", "rolling", "refine"}


def test_cancel_queued_job_never_runs_and_running_generation_stops_at_next_token(backend):
    ran: list[str] = []

    async def scenario():
        s = Scheduler(runners={FOREGROUND_LANE: 1, BACKGROUND_LANE: 1})
        await s.start()
        backend.hold.clear()
        running = s.submit("chat", gen_job(backend, s, "long"))
        await until(lambda: running.status == "running" and len(backend.started) == 1)
        queued = s.submit("chat", lambda job: ran.append("queued"))
        assert queued.status == JobStatus.QUEUED
        assert s.cancel(queued, "client disconnected")
        assert s.cancel(running, "client disconnected")
        backend.hold.set()
        await asyncio.wait([running.future], timeout=20)
        with pytest.raises(JobCancelled):
            queued.future.result()
        await s.stop()
        return running, queued

    running, queued = run_async(scenario())
    assert queued.status == JobStatus.CANCELLED and ran == []
    assert running.status == JobStatus.CANCELLED and running.error == "client disconnected"
    # The engine thread notices the closed stream at its next token.
    assert wait_until(lambda: any(tag == "long" for tag, _n, _c in backend.finished))
    produced = [n for tag, n, complete in backend.finished if tag == "long" and not complete]
    total = len(backend.reply.split())
    assert produced and produced[0] < total  # stopped early, the rest was never generated


def test_promoted_background_job_is_not_preempted(backend):
    async def scenario():
        s = Scheduler()
        await s.start()
        backend.hold.clear()
        bg = s.submit("rolling", gen_job(backend, s, "rolling"), lane=BACKGROUND_LANE)
        await until(lambda: len(backend.started) == 1)
        s.promote(bg)  # an agent now waits on it
        fg = s.submit("chat", gen_job(backend, s, "chat"), preemptible=False)
        await until(lambda: fg.status == "running")
        backend.hold.set()
        await asyncio.wait([bg.future, fg.future], timeout=20)
        await s.stop()
        return bg, fg

    bg, fg = run_async(scenario())
    assert bg.status == JobStatus.DONE and bg.lane == FOREGROUND_LANE
    assert fg.status == JobStatus.DONE
