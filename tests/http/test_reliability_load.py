"""Load (issue 7.3): concurrent agents append to their own sessions over real HTTP on 127.0.0.1
and compact whenever the server says the context overflows, while rolling summaries run in the
background. Nothing may be lost (each session's final message count is exact, its checkpoint
chain has no gap), overload must be a 429 with Retry-After (never a timeout), and every
foreground compaction must finish despite the background work. Half the clients answer at
overflow from the instant checkpoint, half wait for the model; their first compactions meet
while the engine stalls, so the 429 path is met on a fast machine as on a slow one.

The server runs on the SQLite file store (a temp file), as `compactd serve` does, so the
figures include its commits and WAL. `make test`: 8 clients x 25 appends. COMPACTD_RELIABILITY_FULL=1: 8 x 200. Both on the
deterministic engine (tests/test_server_fakes.py: a real EngineThread with foreground/background
priorities, a fixed narrative streamed at TOKEN_DELAY_S per token), so the figures measure the
server, store, scheduler and counting, not a model.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fakes import ScriptedBackend, wait_until
from tests.test_reliability_common import FULL, LoopbackServer, percentile, record
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store

CLIENTS = 8
APPENDS = 200 if FULL else 25  # per client, one message per request
CONTEXT_LIMIT = 4000  # usable 3000: a session overflows after ~6 turns of 400-word tool outputs
OUTPUT_WORDS = 400
QUEUE_SIZE = 1  # waiting jobs per lane: small, so concurrent compactions meet the 429 path
TOKEN_DELAY_S = 0.005  # the fake engine's decode time per token (~60-token narrative)
DEBOUNCE_S = 0.2  # rolling summaries start soon after a burst of appends
REQUEST_TIMEOUT_S = 60  # a request that takes longer counts as a timeout: there must be none
RETRY_CAP_S = 1.0  # a client sleeps min(Retry-After, this): the test stays short, the header is still checked
MAX_ATTEMPTS = 200  # per compaction, 429s included
RUN_DEADLINE_S = 1200 if FULL else 240  # the whole run stops by itself after this
# At their first overflow the clients meet and compact at once while the engine stalls for
# HOLD_S: the odd clients wait for the model (as pi's extension does), so a model job holds the
# foreground lane and the others must meet the 429 path, whatever the machine's speed.
HOLD_S = 2.0
GATE_TIMEOUT_S = 60  # a client that never reaches its first overflow breaks the gate, not the run


@dataclass
class ClientLog:
    append_s: list[float] = field(default_factory=list)
    compact_s: list[float] = field(default_factory=list)  # one successful request
    compact_total_s: list[float] = field(default_factory=list)  # first attempt to result, 429 waits included
    statuses: Counter = field(default_factory=Counter)
    modes: Counter = field(default_factory=Counter)
    retry_after_missing: int = 0
    timeouts: int = 0
    errors: list[str] = field(default_factory=list)
    checkpoints: int = 0
    added: int = 0


def message(k: int) -> dict[str, Any]:
    """The k-th message of a session: user, assistant call, tool result, assistant reply."""
    turn, step = divmod(k, 4)
    if step == 0:
        return {"role": "user", "content": f"Turn {turn}: fix the failing test in src/app/module_{turn}.py"}
    if step == 1:
        return {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{turn}", "type": "function",
                "function": {"name": "bash", "arguments": f'{{"command": "pytest tests/test_module_{turn}.py"}}'}}]}
    if step == 2:
        out = " ".join(f"line{turn}_{i}" for i in range(OUTPUT_WORDS))
        return {"role": "tool", "tool_call_id": f"call_{turn}",
                "content": f"FAILED tests/test_module_{turn}.py::test_case - AssertionError: expected {turn}\n{out}"}
    return {"role": "assistant", "content": f"Module {turn}: the handler returns the wrong value; fixing it."}


def compact(client: httpx.Client, sid: str, log: ClientLog, deadline: float, wait: str) -> None:
    first = time.perf_counter()
    for _ in range(MAX_ATTEMPTS):
        if time.monotonic() > deadline:
            log.errors.append("deadline passed while compacting")
            return
        t0 = time.perf_counter()
        try:
            r = client.post(f"/v1/sessions/{sid}/compact", params={"wait": wait})
        except httpx.TimeoutException:
            log.timeouts += 1
            return
        log.statuses[f"compact {r.status_code}"] += 1
        if r.status_code == 429:
            retry = r.headers.get("retry-after", "")
            if not retry.isdigit() or int(retry) < 1:
                log.retry_after_missing += 1
            time.sleep(min(float(retry or 1), RETRY_CAP_S))
            continue
        if r.status_code == 200:
            log.compact_s.append(time.perf_counter() - t0)
            log.compact_total_s.append(time.perf_counter() - first)
            log.modes[r.json()["mode"]] += 1
            log.checkpoints += 1
        elif r.status_code != 409:  # 409: refused with a reason (it would not free enough)
            log.errors.append(f"compact {r.status_code}: {r.text[:200]}")
        return
    log.errors.append("compaction still overloaded after MAX_ATTEMPTS")


def agent(url: str, index: int, log: ClientLog, deadline: float, gate: threading.Barrier) -> None:
    sid = f"load-{index}"
    wait = "model" if index % 2 else "instant"
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        for k in range(APPENDS):
            if time.monotonic() > deadline:
                log.errors.append(f"deadline passed after {k} appends")
                return
            t0 = time.perf_counter()
            try:
                r = client.post(f"/v1/sessions/{sid}/messages", json=[message(k)],
                                params={"context_limit": CONTEXT_LIMIT})
            except httpx.TimeoutException:
                log.timeouts += 1
                continue
            log.append_s.append(time.perf_counter() - t0)
            log.statuses[f"append {r.status_code}"] += 1
            if r.status_code != 200:
                log.errors.append(f"append {r.status_code}: {r.text[:200]}")
                continue
            log.added += r.json()["added"]
            if r.json()["tokens"]["overflow"]:
                if log.checkpoints == 0 and not gate.broken:
                    try:
                        gate.wait(GATE_TIMEOUT_S)
                    except threading.BrokenBarrierError:
                        log.errors.append("the clients never met at their first overflow")
                compact(client, sid, log, deadline, wait)


def ms(values: list[float], q: float) -> float:
    return round(percentile(values, q) * 1000, 1)


def test_concurrent_agents_lose_nothing_and_overload_is_429(tmp_path):
    backend = ScriptedBackend(token_delay=TOKEN_DELAY_S)
    store = Store(tmp_path / "compactd.sqlite3")  # the SQLite file store, as `compactd serve` runs
    settings = Settings(context_limit=CONTEXT_LIMIT, queue_size=QUEUE_SIZE)
    app = create_app(settings, backend_loader=lambda: backend, store=store)
    app.state.service.config.debounce_s = DEBOUNCE_S
    logs = [ClientLog() for _ in range(CLIENTS)]

    def stall_engine() -> None:  # the gate's action, run once when every client has arrived
        backend.hold.clear()
        threading.Timer(HOLD_S, backend.hold.set).start()

    gate = threading.Barrier(CLIENTS, action=stall_engine)
    try:
        with LoopbackServer(app, settings) as srv:
            assert wait_until(lambda: httpx.get(srv.url + "/health").status_code == 200)
            deadline = time.monotonic() + RUN_DEADLINE_S
            threads = [threading.Thread(target=agent, args=(srv.url, i, logs[i], deadline, gate), daemon=True)
                       for i in range(CLIENTS)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join(RUN_DEADLINE_S + REQUEST_TIMEOUT_S)
            wall = time.perf_counter() - t0
            assert not any(t.is_alive() for t in threads)
            service = app.state.service
            assert wait_until(lambda: all(service.scheduler.running(lane) == 0 and service.scheduler.depth(lane) == 0
                                          for lane in ("foreground", "background")), timeout=60)
            with httpx.Client(base_url=srv.url, timeout=REQUEST_TIMEOUT_S) as client:
                for i, log in enumerate(logs):
                    info = client.get(f"/v1/sessions/load-{i}").json()
                    assert info["messages"] == APPENDS and log.added == APPENDS, (i, info, log.errors[:3])
                    # Instant answers are followed by their refined version, committed in the background.
                    chain = store.checkpoints(f"load-{i}")
                    refined = sum(1 for c in chain if c.data["audit"]["mode"] == "refined")
                    assert info["checkpoint_version"] == ((log.checkpoints + refined) or None)
                    assert [c.version for c in chain] == list(range(1, log.checkpoints + refined + 1))
            rolling = {k: service.metrics.value("compactd_rolling_updates_total", status=k)
                       for k in ("done", "cancelled", "stale", "refused", "skipped_overload", "failed")}
    finally:
        backend.hold.set()
        backend.close()
        store.close()
    every = ClientLog()
    for log in logs:
        every.append_s += log.append_s
        every.compact_s += log.compact_s
        every.compact_total_s += log.compact_total_s
        every.statuses.update(log.statuses)
        every.modes.update(log.modes)
        every.retry_after_missing += log.retry_after_missing
        every.timeouts += log.timeouts
        every.errors += log.errors
    record("load_full" if FULL else "load_small", {
        "clients": CLIENTS, "appends_per_client": APPENDS, "wall_s": round(wall, 1),
        "append_ms_p50": ms(every.append_s, 50), "append_ms_p95": ms(every.append_s, 95),
        "compact_ms_p50": ms(every.compact_s, 50), "compact_ms_p95": ms(every.compact_s, 95),
        "compact_with_retries_ms_p50": ms(every.compact_total_s, 50),
        "compact_with_retries_ms_p95": ms(every.compact_total_s, 95),
        "compactions": len(every.compact_s), "modes": dict(every.modes), "statuses": dict(every.statuses),
        "timeouts": every.timeouts, "rolling_updates": rolling,
    })
    assert not every.errors, every.errors[:10]
    assert every.timeouts == 0 and every.retry_after_missing == 0
    assert every.statuses[f"append {200}"] == CLIENTS * APPENDS
    assert every.statuses["compact 429"] > 0, every.statuses  # the overload path was exercised
    assert len(every.compact_s) >= CLIENTS  # every session overflowed at least once and was compacted
