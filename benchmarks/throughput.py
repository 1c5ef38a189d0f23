"""Throughput benchmark: what compactd costs on this machine, and against what bound.

    python -m benchmarks.throughput [--quick] [--out benchmarks/results]

Writes `throughput.json` (every number) and `throughput.png` (latency vs history length,
tok/s by engine, compactd vs raw llama-cpp-python). Sections:

- summarize_vs_raw: compactd's summarize call (`backend.generate`, JSON schema, isolated, a
  cache key) against `llama_cpp.Llama(...).create_completion` on the same token ids with the
  same settings (greedy, same grammar, same threads/batch/context), alternated, both cold.
- bandwidth: numpy copy/read of a large array (1 and 2 threads), the decode bound it implies
  for the model (bytes read per token = GGUF tensor bytes without the embedding gather, plus
  the KV cache at the context in use), and measured decode as a share of that bound.
- latency_curve: end-to-end `compact()` as a synthetic agent history grows (4k -> 64k tokens),
  cold (fresh cache key, fresh counter); stage split and summarizer prompt size per point.
- successive: 10 compactions of one growing session (each at overflow, each building on the
  previous checkpoint): p50/p95.
- prefix_and_swap: KV prefix reuse (same session key, warm) vs cold on the same input, and the
  rolling-summary swap (`compact(use_model=False, swap=True, previous=rolling)`) vs a
  synchronous compaction of the same overflowing session.
- counting: llama.cpp `engine_tokenize` vs `tokenizers` one by one vs `count_batch`, whole
  session counts, and the incremental re-count after one append (`TokenCounter.per_message`).
- engines: tok/s on one short prompt per engine (llama.cpp 0.5B/1.5B; MLX float32/q4 in full
  mode only: Linux CPU MLX runs at ~1-3 tok/s).
- memory: current and peak RSS after each phase.

Full mode: the default 1.5B for summarize_vs_raw and latency_curve, the 0.5B for successive,
prefix_and_swap and counting (so the run stays under ~45 min on 2 cores); sizes past the time
cap are skipped and listed under `capped`. --quick: the 0.5B only, tiny sizes (~1-2 min).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import (
    N_THREADS,
    PI_TRACE,
    RESULTS_DIR,
    SWE_TRACE,
    figure_title,
    held_tokens,
    machine_info,
    peak_rss_mb,
    percentile,
    save_figure,
    wait_for_quiet,
    weight_bytes,
    write_outputs,
)

N_CTX = 8192  # compactd's default engine context (the summarizer window)
N_BATCH = 512  # compactd's default batch; the raw call gets the same
KV_BYTES_PER_ELEMENT = 2  # llama.cpp's default f16 K and V cache
FULL_TIME_CAP_S = 40 * 60  # curve points that would start after this are skipped (a quiet run: ~40 min)
SWAP_REPS = 5  # a swap is milliseconds: repeat it for a p50/p95
MLX_MAX_TOKENS = 8  # Linux CPU MLX decodes ~1-3 tok/s: a few tokens give the rate
BANDWIDTH_THREADS = (1, 2)
SHORT_PROMPT = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Count from 1 to 40, separated by spaces."},
]  # a short prompt with a long, predictable answer: decode speed without a long prefill


@dataclass(frozen=True)
class Plan:
    model: str  # summarize_vs_raw and latency_curve
    fast_model: str  # successive, prefix_and_swap, counting
    compare_prompt_tokens: int
    compare_max_tokens: int
    compare_reps: int
    bandwidth_mib: int
    bandwidth_reps: int
    curve_sizes: tuple[int, ...]
    curve_reps: tuple[int, ...]  # per size
    max_new_tokens: int  # the summarizer's output bound in every compaction here
    successive: int
    successive_limit: int  # context limit of the successive series
    prefix_size: int  # history of the prefix/swap session before it overflows
    counting_messages: int | None  # None: the whole pi session
    short_max_tokens: int
    mlx: bool


FULL = Plan(
    model="qwen2.5-coder-1.5b", fast_model="qwen2.5-coder-0.5b",
    compare_prompt_tokens=1000, compare_max_tokens=96, compare_reps=2,
    bandwidth_mib=256, bandwidth_reps=5,
    curve_sizes=(4096, 8192, 16384, 32768, 65536), curve_reps=(3, 3, 3, 1, 1),  # p50/p95 where a run is < 2 min
    max_new_tokens=700, successive=10, successive_limit=8192, prefix_size=8000,
    counting_messages=None, short_max_tokens=24, mlx=True,
)
QUICK = Plan(  # a smoke run: no separate curve (the prefix/swap and successive runs are compactions too)
    model="qwen2.5-coder-0.5b", fast_model="qwen2.5-coder-0.5b",
    compare_prompt_tokens=300, compare_max_tokens=16, compare_reps=1,
    bandwidth_mib=64, bandwidth_reps=3,
    curve_sizes=(), curve_reps=(),
    max_new_tokens=128, successive=2, successive_limit=8192, prefix_size=5000,
    counting_messages=200, short_max_tokens=12, mlx=False,
)


def _say(msg: str) -> None:
    print(f"[throughput] {msg}", file=sys.stderr, flush=True)


def current_rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    import os

    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


# --- synthetic agent history -------------------------------------------------------------


@dataclass(frozen=True)
class TurnShape:
    code_lines: int  # lines of the file the agent reads
    log_lines: int  # lines of the failing test run


# Tool output dominates real agent histories; this shape (~3.6k tokens a turn) puts the
# summarizer's narrative (text, calls, one line per result) at ~8% of the history. The bundled
# pi session runs at 5-30%, so its summarizer prompts are up to ~4x longer per history token.
BIG_TURN = TurnShape(code_lines=140, log_lines=50)


def _code(k: int, lines: int) -> str:
    out = [f'"""Module {k}: records, parsing and validation for batch {k}."""', "", "from __future__ import annotations", ""]
    i = 0
    while len(out) < lines:
        out += [
            f"def parse_field_{k}_{i}(raw: dict, default: int = {i}) -> int:",
            f'    """Read field_{k}_{i} from a raw record; fall back to the default."""',
            f"    value = raw.get('field_{k}_{i}', default)",
            "    if isinstance(value, str) and value.strip().isdigit():",
            "        return int(value.strip())",
            f"    return int(value) if value is not None else {i}",
            "",
        ]
        i += 1
    return "\n".join(f"{n + 1:4d}  {line}" for n, line in enumerate(out[:lines]))


def _failing_log(k: int, lines: int) -> str:
    body = ["============================= test session starts ==============================",
            f"collected {12 + k % 7} items", ""]
    for i in range(lines - 10):
        body.append(f"tests/test_mod{k}.py::test_case_{i} PASSED" + " " * 20 + f"[{(i + 1) * 100 // lines:3d}%]")
    body += [
        "=================================== FAILURES ===================================",
        f"_______________________________ test_roundtrip_{k} _______________________________",
        f"    def test_roundtrip_{k}():",
        f">       assert parse_field_{k}_0({{'field_{k}_0': ' 7 '}}) == 7",
        f"E       KeyError: 'field_{k}_0'",
        f"src/pkg/mod{k}.py:3: KeyError",
        f"FAILED tests/test_mod{k}.py::test_roundtrip_{k} - KeyError: 'field_{k}_0'",
        f"========================= 1 failed, {lines - 10} passed in 0.{k % 9 + 1}2s =========================",
    ]
    return "\n".join(body)


def synthetic_turns(shape: TurnShape, start: int = 0) -> Iterator[list[dict[str, Any]]]:
    """Endless agent turns in OpenAI chat shape: a request, a file read, a failing test run, an
    edit, a passing run, a reply. Deterministic; every turn names its own files and error."""
    k = start
    while True:
        path, test = f"src/pkg/mod{k}.py", f"tests/test_mod{k}.py"
        calls = [
            ("read_file", {"path": path}, _code(k, shape.code_lines)),
            ("bash", {"command": f"python -m pytest {test} -q"}, _failing_log(k, shape.log_lines)),
            ("edit_file", {"path": path, "old": f"raw.get('field_{k}_0', default)",
                           "new": f"raw.get('field_{k}_0', raw.get('legacy_{k}', default))"}, "Edited 1 location."),
            ("bash", {"command": f"python -m pytest {test} -q"}, f"{shape.log_lines - 9} passed in 0.3s"),
        ]
        msgs: list[dict[str, Any]] = [{
            "role": "user",
            "content": f"Batch {k}: {test} fails on records without field_{k}_0. Fix {path} so legacy "
                       f"records (legacy_{k}) still parse, and keep parse_field_{k}_0's signature.",
        }]
        for i, (name, args, output) in enumerate(calls):
            cid = f"call_{k}_{i}"
            msgs.append({"role": "assistant", "content": "" if i else f"Looking at {path} first.",
                         "tool_calls": [{"id": cid, "type": "function",
                                         "function": {"name": name, "arguments": json.dumps(args)}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": output})
        msgs.append({"role": "assistant",
                     "content": f"Fixed: parse_field_{k}_0 now falls back to legacy_{k}; {test} passes."})
        yield msgs
        k += 1


def _import(chat: list[dict[str, Any]], sid: str) -> Any:
    from worker.formats.openai import load_messages

    return load_messages(chat, session_id=sid)


def synthetic_session(counter: Any, tokens: int, shape: TurnShape, sid: str) -> tuple[Any, Iterator]:
    """A system prompt plus whole synthetic turns until the exact count reaches `tokens`;
    returns the session and the turn iterator (to grow it further)."""
    turns = synthetic_turns(shape)
    chat: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent working in a Python repository."}]
    while True:
        chat += next(turns)
        session = _import(chat, sid)
        if counter.total(session) >= tokens:
            return session, turns


def append_turn(session: Any, turns: Iterator) -> Any:
    chat = session.to_chat(placeholder=False) + next(turns)
    return _import(chat, session.id)


def limit_for(usable: int) -> int:
    """The context limit whose usable budget (limit - min(20k, limit/4)) is `usable`."""
    from worker.tokens import DEFAULT_RESERVED

    return usable * 4 // 3 if usable // 3 <= DEFAULT_RESERVED else usable + DEFAULT_RESERVED


# --- memory bandwidth --------------------------------------------------------------------


def _timed_threads(fn: Any, parts: list[tuple[Any, Any]]) -> float:
    threads = [threading.Thread(target=fn, args=p) for p in parts]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def memory_bandwidth(mib: int, reps: int) -> dict[str, Any]:
    """Best-of-reps GB/s of a large float64 copy (2 bytes moved per byte: read + write) and a
    read-only reduction, on 1 and 2 threads (numpy releases the GIL in both)."""
    import numpy as np

    n = mib * 2**20 // 8
    src = np.random.default_rng(0).random(n)
    dst = np.zeros_like(src)
    out: dict[str, Any] = {"array_mib": mib, "reps": reps, "gb_per_s": {}}
    for threads in BANDWIDTH_THREADS:
        chunks = np.array_split(np.arange(n), threads)
        bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks]
        copy_parts = [(dst[a:b], src[a:b]) for a, b in bounds]
        read_parts = [(src[a:b], None) for a, b in bounds]
        copy_t = min(_timed_threads(lambda d, s: np.copyto(d, s), copy_parts) for _ in range(reps))
        read_t = min(_timed_threads(lambda s, _unused: np.add.reduce(s), read_parts) for _ in range(reps))
        out["gb_per_s"][f"{threads}_thread"] = {
            "copy": round(2 * src.nbytes / copy_t / 1e9, 2),
            "read": round(src.nbytes / read_t / 1e9, 2),
        }
    best = max(v["read"] for v in out["gb_per_s"].values())
    out["read_gb_per_s_best"] = best
    return out


def kv_bytes_per_token(meta: Any) -> int:
    hp = meta.hparams
    layers = int(hp.get("block_count", 0))
    heads = int(hp.get("attention.head_count", 1)) or 1
    kv_heads = int(hp.get("attention.head_count_kv", heads))
    head_dim = int(hp.get("attention.key_length") or int(hp.get("embedding_length", 0)) // heads)
    return 2 * layers * kv_heads * head_dim * KV_BYTES_PER_ELEMENT


def decode_bound(bandwidth_gbs: float, weights: int, kv_per_token: int, context: int) -> float:
    """tok/s if every decode step only streamed the weights and the KV cache at `context`."""
    return bandwidth_gbs * 1e9 / (weights + kv_per_token * context)


# --- summarize call vs raw llama-cpp-python ----------------------------------------------


def compare_prompt(backend: Any, target_tokens: int) -> list[dict[str, str]]:
    """compactd's own summarizer prompt over the first blocks of the bundled SWE trace."""
    from worker.formats import load
    from worker.pipeline.summarize import build_prompt, narrative_lines

    blocks = narrative_lines(load(SWE_TRACE).messages)
    taken: list[str] = []
    for block in blocks:
        taken.append(block)
        if backend.count_messages(build_prompt("\n\n".join(taken), "", None, "en")) >= target_tokens:
            break
    return build_prompt("\n\n".join(taken), "", None, "en")


def _raw_call(llm: Any, ids: list[int], max_tokens: int, schema: dict[str, Any]) -> dict[str, Any]:
    import llama_cpp as lc

    llm.reset()  # cold: no prefix left from the previous call
    lc.llama_perf_context_reset(llm.ctx)
    t0 = time.perf_counter()
    grammar = lc.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    ttft = None
    parts = []
    for chunk in llm.create_completion(prompt=ids, max_tokens=max_tokens, temperature=0.0, top_k=1,
                                       repeat_penalty=1.0, grammar=grammar, stop=[], stream=True, seed=0):
        text = chunk["choices"][0].get("text") or ""
        if text and ttft is None:
            ttft = (time.perf_counter() - t0) * 1000
        parts.append(text)
    wall = (time.perf_counter() - t0) * 1000
    perf = lc.llama_perf_context(llm.ctx)
    return _call_record(len(ids), int(perf.n_p_eval), perf.t_p_eval_ms, int(perf.n_eval), perf.t_eval_ms,
                        ttft or wall, wall, "".join(parts))


def _compactd_call(backend: Any, messages: list[dict[str, str]], max_tokens: int, schema: dict[str, Any],
                   key: str) -> dict[str, Any]:
    from backends.base import GenerationStats

    backend._model.call(lambda llm: llm.reset())  # cold, like the raw call
    t0 = time.perf_counter()
    ttft = None
    parts: list[str] = []
    stats = GenerationStats()
    for item in backend.generate(messages, max_tokens=max_tokens, temperature=0.0, json_schema=schema,
                                 isolated=True, cache_key=key):
        if isinstance(item, GenerationStats):
            stats = item
            continue
        if ttft is None:
            ttft = (time.perf_counter() - t0) * 1000
        parts.append(item)
    wall = (time.perf_counter() - t0) * 1000
    rec = _call_record(stats.prompt_tokens, stats.prompt_tokens - stats.cached_prompt_tokens, stats.prompt_ms,
                       stats.decode_tokens, stats.decode_ms, ttft or wall, wall, "".join(parts))
    rec["engine_ttft_ms"] = round(stats.ttft_ms, 1)
    return rec


def _call_record(prompt: int, evaluated: int, prompt_ms: float, decode: int, decode_ms: float,
                 ttft: float, wall: float, text: str) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt, "evaluated_tokens": evaluated, "prompt_ms": round(prompt_ms, 1),
        "prompt_tps": round(evaluated / prompt_ms * 1000, 2) if prompt_ms else 0.0,
        "decode_tokens": decode, "decode_ms": round(decode_ms, 1),
        "decode_tps": round(decode / decode_ms * 1000, 2) if decode_ms else 0.0,
        "ttft_ms": round(ttft, 1), "wall_ms": round(wall, 1), "text": text,
    }


def _median(records: list[dict[str, Any]], key: str) -> float:
    return round(percentile([r[key] for r in records], 50) or 0.0, 2)


def summarize_vs_raw(backend: Any, plan: Plan) -> dict[str, Any]:
    import llama_cpp

    from worker.pipeline.summarize import NARRATIVE_SCHEMA

    messages = compare_prompt(backend, plan.compare_prompt_tokens)
    ids = backend.prompt_ids(messages)
    raw = llama_cpp.Llama(model_path=str(backend.path), n_ctx=backend.n_ctx, n_threads=backend.n_threads,
                          n_batch=backend.n_batch, seed=0, verbose=False)
    backend.load()
    runs: dict[str, list[dict[str, Any]]] = {"compactd": [], "raw": []}
    try:
        for rep in range(plan.compare_reps):
            order = ("raw", "compactd") if rep % 2 == 0 else ("compactd", "raw")
            for who in order:
                _say(f"summarize vs raw: rep {rep + 1}/{plan.compare_reps}, {who}")
                if who == "raw":
                    runs["raw"].append(_raw_call(raw, ids, plan.compare_max_tokens, NARRATIVE_SCHEMA))
                else:
                    runs["compactd"].append(_compactd_call(backend, messages, plan.compare_max_tokens,
                                                           NARRATIVE_SCHEMA, f"bench-compare-{rep}"))
    finally:
        raw.close()
        del raw
        gc.collect()
    med = {who: {k: _median(rs, k) for k in COMPARE_KEYS} for who, rs in runs.items()}
    best = {who: best_of(rs) for who, rs in runs.items()}
    same = len({r["text"] for rs in runs.values() for r in rs}) == 1
    for rs in runs.values():
        for r in rs:
            r["text"] = r["text"][:200]
    return {
        "model": backend.model_name, "prompt_tokens": len(ids), "max_tokens": plan.compare_max_tokens,
        "settings": {"n_ctx": backend.n_ctx, "n_threads": backend.n_threads, "n_batch": backend.n_batch,
                     "temperature": 0.0, "top_k": 1, "grammar": "NARRATIVE_SCHEMA", "cold": True},
        "median": med, "ratio_compactd_over_raw": _ratio(med),
        "best": best, "ratio_best_compactd_over_raw": _ratio(best),  # least disturbed by other processes
        "same_output_text": same, "runs": runs,
    }


COMPARE_KEYS = ("prompt_tps", "decode_tps", "ttft_ms", "wall_ms")


def best_of(records: list[dict[str, Any]]) -> dict[str, float]:
    """Fastest of the repetitions: max for rates, min for times."""
    return {k: (max if k.endswith("tps") else min)(r[k] for r in records) for k in COMPARE_KEYS}


def _ratio(stats: dict[str, dict[str, float]]) -> dict[str, float | None]:
    return {k: round(stats["compactd"][k] / stats["raw"][k], 3) if stats["raw"][k] else None for k in COMPARE_KEYS}


# --- compaction latency -------------------------------------------------------------------


def _compaction_record(result: Any, wall_ms: float) -> dict[str, Any]:
    cp = result.checkpoint
    model = cp.timings.model
    return {
        "wall_ms": round(wall_ms, 1),
        "stages_ms": dict(cp.timings.stages_ms),
        "narrative_left_out": cp.timings.narrative_left_out,
        "model_calls": len(model),
        "prompt_tokens": sum(m.prompt_tokens for m in model),
        "cached_prompt_tokens": sum(m.cached_prompt_tokens for m in model),
        "prompt_ms": round(sum(m.prompt_ms for m in model), 1),
        "decode_tokens": sum(m.decode_tokens for m in model),
        "decode_ms": round(sum(m.decode_ms for m in model), 1),
        "tokens": cp.tokens.to_dict(),
        "fallback": cp.verification.fallback,
    }


def _timed_compact(session: Any, backend: Any, config: Any, **kw: Any) -> tuple[Any, dict[str, Any]]:
    from worker.pipeline import compact
    from worker.tokens import TokenCounter

    kw.setdefault("counter", TokenCounter(backend))
    t0 = time.perf_counter()
    result = compact(session, backend, config, **kw)
    return result, _compaction_record(result, (time.perf_counter() - t0) * 1000)


def _p(values: list[float]) -> dict[str, float | int | None]:
    return {"n": len(values), "p50": _r(percentile(values, 50)), "p95": _r(percentile(values, 95)),
            "min": _r(min(values) if values else None), "max": _r(max(values) if values else None)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def latency_curve(backend: Any, plan: Plan, deadline: float) -> tuple[list[dict[str, Any]], list[int]]:
    from worker.pipeline import CompactionConfig, CompactionRefused
    from worker.pipeline.summarize import narrative_lines
    from worker.tokens import TokenCounter

    counter = TokenCounter(backend)
    points, capped = [], []
    for size, reps in zip(plan.curve_sizes, plan.curve_reps, strict=True):
        if time.monotonic() > deadline:
            capped.append(size)
            _say(f"latency curve: {size} skipped (time cap)")
            continue
        session, _turns = synthetic_session(counter, size, BIG_TURN, f"curve-{size}")
        history = counter.total(session)
        config = CompactionConfig(context_limit=limit_for(size), max_new_tokens=plan.max_new_tokens)
        runs = []
        for rep in range(reps):
            _say(f"latency curve: {history} tokens, rep {rep + 1}/{reps}")
            fresh = session.model_copy(update={"id": f"curve-{size}-{rep}-{time.monotonic_ns()}"})  # cold key
            try:
                _result, rec = _timed_compact(fresh, backend, config)
            except CompactionRefused as exc:
                runs.append({"refused": str(exc)})
                break
            runs.append(rec)
        runs = [r for r in runs if "refused" not in r] or runs
        if "refused" in runs[0]:
            points.append({"target_tokens": size, "history_tokens": history, "refused": runs[0]["refused"]})
            continue
        walls = [r["wall_ms"] / 1000 for r in runs]
        points.append({
            "target_tokens": size, "history_tokens": history, "messages": len(session.messages),
            "narrative_tokens": backend.count("\n\n".join(narrative_lines(session.messages))),
            "context_limit": config.context_limit, "e2e_s": _p(walls), "runs": runs,
        })
    return points, capped


def successive(backend: Any, plan: Plan) -> dict[str, Any]:
    """One session grows; each time what the agent holds reaches the usable budget it is
    compacted, building on the previous checkpoint."""
    from worker.pipeline import CompactionConfig
    from worker.tokens import TokenCounter

    counter = TokenCounter(backend)  # one long-lived counter, as the service keeps
    config = CompactionConfig(context_limit=plan.successive_limit, max_new_tokens=plan.max_new_tokens)
    usable = config.budget().usable
    session, turns = synthetic_session(counter, usable, BIG_TURN, "successive")
    previous = None
    runs = []
    for i in range(plan.successive):
        _say(f"successive compaction {i + 1}/{plan.successive}")
        result, rec = _timed_compact(session, backend, config, previous=previous, counter=counter)
        rec["messages"] = len(session.messages)
        runs.append(rec)
        previous = result.checkpoint
        while held_tokens(counter, session.messages, previous) < usable:
            session = append_turn(session, turns)
    walls = [r["wall_ms"] / 1000 for r in runs]
    return {"model": backend.model_name, "context_limit": plan.successive_limit, "usable": usable,
            "e2e_s": _p(walls), "runs": runs}


def prefix_and_swap(backend: Any, plan: Plan) -> dict[str, Any]:
    """A: the session at ~70% of usable is compacted (what a rolling update does). It then
    grows to overflow; B compacts it with A's session key (warm KV prefix), C with a fresh key
    (cold), D swaps in A's ready summary without a model call."""
    from worker.pipeline import CompactionConfig
    from worker.tokens import TokenCounter

    counter = TokenCounter(backend)
    limit = limit_for(int(plan.prefix_size / 0.7))
    config = CompactionConfig(context_limit=limit, max_new_tokens=plan.max_new_tokens)
    usable = config.budget().usable
    base, turns = synthetic_session(counter, plan.prefix_size, BIG_TURN, "prefix")
    _say("prefix/swap: A (rolling update, cold)")
    a_result, a_rec = _timed_compact(base, backend, config, counter=counter)
    grown = base
    while counter.total(grown) < usable:
        grown = append_turn(grown, turns)
    held = counter.total(grown)
    _say("prefix/swap: B (same key: warm prefix)")
    _b, warm = _timed_compact(grown, backend, config, counter=counter)
    _say("prefix/swap: C (fresh key: cold)")
    cold_session = grown.model_copy(update={"id": f"prefix-cold-{time.monotonic_ns()}"})
    _c, cold = _timed_compact(cold_session, backend, config, counter=counter)
    swap_config = CompactionConfig(context_limit=limit, use_model=False, swap=True)
    swaps = []
    for _ in range(SWAP_REPS):
        _d, rec = _timed_compact(grown, backend, swap_config, counter=counter,
                                 previous=a_result.checkpoint, held_tokens=held)
        swaps.append(rec)
    swap_ms = [r["wall_ms"] for r in swaps]
    return {
        "model": backend.model_name, "context_limit": limit, "usable": usable,
        "history_tokens_rolling": counter.total(base), "history_tokens_overflow": held,
        "rolling_update": a_rec,
        "kv_prefix": {
            "warm": warm, "cold": cold,
            "cached_share": round(warm["cached_prompt_tokens"] / warm["prompt_tokens"], 3) if warm["prompt_tokens"] else 0,
            "prompt_ms_saved": round(cold["prompt_ms"] - warm["prompt_ms"], 1),
            "e2e_speedup": round(cold["wall_ms"] / warm["wall_ms"], 2) if warm["wall_ms"] else None,
        },
        "swap": {"e2e_ms": _p(swap_ms), "runs": swaps},
        "sync_cold_s": round(cold["wall_ms"] / 1000, 2),
        "sync_warm_s": round(warm["wall_ms"] / 1000, 2),
        "swap_speedup_vs_sync_cold": round(cold["wall_ms"] / percentile(swap_ms, 50)) if swap_ms else None,
    }


# --- counting ------------------------------------------------------------------------------


def _best_ms(fn: Any, reps: int = 3) -> tuple[float, Any]:
    best, value = math.inf, None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, (time.perf_counter() - t0) * 1000)
    return best, value


def counting(backend: Any, plan: Plan) -> dict[str, Any]:
    from worker.formats import load
    from worker.tokens import TokenCounter

    session = load(PI_TRACE)
    if plan.counting_messages is not None:
        session.messages = session.messages[: plan.counting_messages]
    texts = [json.dumps(m.to_chat(), ensure_ascii=False) for m in session.messages]
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    engine_ms, engine_counts = _best_ms(lambda: [len(backend.engine_tokenize(t)) for t in texts], reps=1)
    single_ms, single_counts = _best_ms(lambda: [backend.count(t) for t in texts])
    batch_ms, batch_counts = _best_ms(lambda: backend.count_batch(texts))
    tokens = sum(batch_counts)

    def rate(ms: float) -> dict[str, float]:
        return {"ms": round(ms, 1), "tokens_per_s": round(tokens / ms * 1000), "mb_per_s": round(n_bytes / ms / 1000, 2)}

    fresh = TokenCounter(backend)
    total_ms, total = _best_ms(lambda: fresh.total(session), reps=1)
    cold_ms, _ = _best_ms(lambda: fresh.per_message(session), reps=1)
    warm_ms, _ = _best_ms(lambda: fresh.per_message(session), reps=1)
    grown = session.model_copy(deep=True)
    grown.messages.append(grown.messages[-1].model_copy(update={"id": "appended"}))
    incr_ms, _ = _best_ms(lambda: fresh.per_message(grown), reps=1)
    total_after_ms, _ = _best_ms(lambda: fresh.total(grown), reps=1)
    return {
        "corpus": f"{PI_TRACE.name}: {len(texts)} messages as chat JSON",
        "texts": len(texts), "bytes": n_bytes, "tokens": tokens,
        "engine_tokenize_single": rate(engine_ms),
        "tokenizers_single": rate(single_ms),
        "tokenizers_count_batch": rate(batch_ms),
        "engine_equals_tokenizers": engine_counts == single_counts == batch_counts,
        "session": {
            "messages": len(session.messages), "tokens": total,
            "total_exact_ms": round(total_ms, 1),
            "per_message_cold_ms": round(cold_ms, 1),
            "per_message_unchanged_ms": round(warm_ms, 1),
            "per_message_after_one_append_ms": round(incr_ms, 1),
            "total_exact_after_append_ms": round(total_after_ms, 1),
        },
    }


# --- engines on one short prompt ------------------------------------------------------------


def short_prompt_run(backend: Any, max_tokens: int, label: str) -> dict[str, Any]:
    from backends.base import collect

    _say(f"short prompt: {label}")
    backend.load()
    if backend.engine_name == "llama.cpp":
        backend._model.call(lambda llm: llm.reset())  # no prefix reuse from earlier calls
    t0 = time.perf_counter()
    text, st = collect(backend.generate(SHORT_PROMPT, max_tokens=max_tokens, isolated=False, cache_key=None))
    wall = (time.perf_counter() - t0) * 1000
    return {"engine": label, "prompt_tokens": st.prompt_tokens, "cached_prompt_tokens": st.cached_prompt_tokens,
            "prompt_tps": round(st.prompt_tps, 2), "decode_tokens": st.decode_tokens,
            "decode_tps": round(st.decode_tps, 2), "ttft_ms": round(st.ttft_ms, 1), "wall_ms": round(wall, 1),
            "peak_memory_mb": round(st.peak_memory_mb, 1), "text": text[:80]}


def mlx_runs(gguf: Path, max_tokens: int) -> tuple[list[dict[str, Any]], list[str]]:
    notes: list[str] = []
    try:
        from backends.gguf_meta import file_key
        from backends.mlx import MlxBackend
        from backends.mlx_convert import convert_gguf_to_mlx
        from backends.paths import cache_dir
    except ImportError as exc:
        return [], [f"MLX skipped: {exc}"]
    out = []
    for quant in ("float32", "q4"):
        d = cache_dir() / "mlx" / f"{file_key(gguf)}-{quant}"
        try:
            if not (d / "config.json").exists():
                _say(f"converting {gguf.name} to MLX {quant}")
                convert_gguf_to_mlx(gguf, d, quantize=quant == "q4", overwrite=True)
            backend = MlxBackend(d, prompt_cache=False)
            try:
                out.append(short_prompt_run(backend, max_tokens, f"mlx {quant} 0.5B"))
            finally:
                backend.close()
        except Exception as exc:  # noqa: BLE001 - MLX is optional here: noted, not fatal
            notes.append(f"MLX {quant} skipped: {type(exc).__name__}: {exc}")
    return out, notes


# --- output ---------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    pts = [p for p in result["latency_curve"]["points"] if "e2e_s" in p]
    if pts:
        xs = [p["history_tokens"] for p in pts]
        ax.plot(xs, [p["e2e_s"]["p50"] for p in pts], "o-", label="end to end (p50)")
        ax.plot(xs, [percentile([r["prompt_ms"] / 1000 for r in p["runs"]], 50) for p in pts], "s--", label="prefill")
        ax.plot(xs, [percentile([r["decode_ms"] / 1000 for r in p["runs"]], 50) for p in pts], "^--", label="decode")
        for p in pts:
            ax.annotate(f"{p['runs'][0]['prompt_tokens']} prompt tok", (p["history_tokens"], p["e2e_s"]["p50"]),
                        fontsize=7, textcoords="offset points", xytext=(4, 4))
        ax.set_xscale("log", base=2)
    swap = result["prefix_and_swap"]["swap"]["e2e_ms"]["p50"]
    ax.axhline(swap / 1000, color="green", lw=1, ls=":", label=f"rolling-summary swap p50 ({swap:.0f} ms)")
    for r in result["successive"]["runs"]:
        ax.plot(r["tokens"]["before"], r["wall_ms"] / 1000, "x", color="gray", ms=5)
    ax.plot([], [], "x", color="gray", label=f"successive compactions ({result['successive']['model']})")
    ax.set_xlabel("history tokens (synthetic agent session)")
    ax.set_ylabel("seconds")
    ax.set_title(f"compaction latency, {result['latency_curve']['model']}")
    ax.legend(fontsize=8)

    ax = axes[1]
    engines = result["engines"]
    labels = [e["engine"] for e in engines]
    xs = range(len(engines))
    ax.bar([x - 0.2 for x in xs], [e["prompt_tps"] for e in engines], 0.4, label="prompt tok/s")
    ax.bar([x + 0.2 for x in xs], [e["decode_tps"] for e in engines], 0.4, label="decode tok/s")
    bound = result["bandwidth"].get("decode_bound_tps", {})
    for x, e in zip(xs, engines, strict=True):
        b = bound.get(e.get("model_key", ""))
        if b:
            ax.plot([x + 0.0, x + 0.4], [b, b], color="red", lw=2)
    ax.plot([], [], color="red", lw=2, label="decode bound (bandwidth / weights)")
    ax.set_xticks(list(xs), labels, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_title("tok/s by engine (short prompt; MLX: Linux CPU)")
    ax.legend(fontsize=8)

    ax = axes[2]
    cmp_ = result["summarize_vs_raw"]["best"]
    metrics = [("prompt_tps", "prompt tok/s"), ("decode_tps", "decode tok/s"), ("ttft_ms", "TTFT s"),
               ("wall_ms", "wall s")]
    vals = {who: [cmp_[who][k] / (1000 if k.endswith("_ms") else 1) for k, _ in metrics] for who in ("raw", "compactd")}
    xs = range(len(metrics))
    ax.bar([x - 0.2 for x in xs], vals["raw"], 0.4, label="raw llama-cpp-python")
    ax.bar([x + 0.2 for x in xs], vals["compactd"], 0.4, label="compactd summarize call")
    ax.set_xticks(list(xs), [m[1] for m in metrics])
    ax.set_title(f"same prompt ({result['summarize_vs_raw']['prompt_tokens']} tok), "
                 f"{result['summarize_vs_raw']['model']}\nbest of reps: compactd vs raw llama-cpp-python", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path, figure_title("throughput", result["machine"], N_THREADS))


def headline(result: dict[str, Any]) -> str:
    cmp_ = result["summarize_vs_raw"]
    med = cmp_["best"]["compactd"]
    ratio = cmp_["ratio_best_compactd_over_raw"]
    bw = result["bandwidth"]
    pts = [p for p in result["latency_curve"]["points"] if "e2e_s" in p]
    curve = ", ".join(f"{p['history_tokens'] // 1000}k {p['e2e_s']['p50']:.0f}s" for p in pts) or "no curve points"
    ps = result["prefix_and_swap"]
    succ = result["successive"]["e2e_s"]
    return (
        f"{cmp_['model']}: prompt {med['prompt_tps']:.0f} tok/s, decode {med['decode_tps']:.1f} tok/s "
        f"(compactd/raw {ratio['prompt_tps']}/{ratio['decode_tps']}, TTFT x{ratio['ttft_ms']}); "
        f"decode = {bw['decode_share_of_bound']:.0%} of the {bw['read_gb_per_s_best']} GB/s bound; "
        f"compaction {curve}; {succ['n']} successive p50/p95 {succ['p50']}/{succ['p95']}s, "
        f"swap p50 {ps['swap']['e2e_ms']['p50']:.0f} ms vs sync {ps['sync_cold_s']:.1f}s ({ps['model']})"
    )


def run(quick: bool = False, out_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    from backends.gguf_meta import read_meta
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import resolve

    t_start = time.monotonic()
    plan = QUICK if quick else FULL
    quiet = wait_for_quiet(max_wait_s=0 if quick else 180, say=_say)
    machine = machine_info()
    t_measure = time.monotonic()  # the time cap counts from here, not from the quiet wait
    notes: list[str] = []
    if not quiet["quiet"]:
        notes.append(f"load average {quiet['load_when_started']} above {quiet['threshold']} at start: "
                     "other processes shared the 2 cores, numbers are pessimistic")
    memory: dict[str, float] = {"start_rss_mb": current_rss_mb()}

    _say("memory bandwidth")
    bw = memory_bandwidth(plan.bandwidth_mib, plan.bandwidth_reps)
    models: dict[str, Any] = {}
    for name in dict.fromkeys((plan.model, plan.fast_model)):
        path = resolve(name).path
        meta = read_meta(path)
        models[name] = {"path": str(path), "file_bytes": path.stat().st_size, "quantization": meta.quantization,
                        "tensor_bytes": weight_bytes(meta), "kv_bytes_per_context_token": kv_bytes_per_token(meta)}
    main_backend = LlamaCppBackend(resolve(plan.model).path, n_ctx=N_CTX, n_threads=N_THREADS,
                                   n_batch=N_BATCH, model_name=plan.model)
    fast_backend = main_backend if plan.fast_model == plan.model else LlamaCppBackend(
        resolve(plan.fast_model).path, n_ctx=N_CTX, n_threads=N_THREADS, n_batch=N_BATCH, model_name=plan.fast_model)
    try:
        t0 = time.perf_counter()
        main_backend.load()
        main_backend.engine_state()  # the load happens on the engine thread: wait for it
        memory["model_load_s"] = round(time.perf_counter() - t0, 2)
        memory["after_main_model_load_rss_mb"] = current_rss_mb()

        _say("summarize call vs raw llama-cpp-python")
        compare = summarize_vs_raw(main_backend, plan)
        memory["after_compare_rss_mb"] = current_rss_mb()

        engines = [dict(short_prompt_run(main_backend, plan.short_max_tokens, f"llama.cpp {plan.model}"),
                        model_key=plan.model)]
        if fast_backend is not main_backend:
            engines.append(dict(short_prompt_run(fast_backend, plan.short_max_tokens, f"llama.cpp {plan.fast_model}"),
                                model_key=plan.fast_model))
        if plan.mlx:
            mlx, mlx_notes = mlx_runs(resolve(plan.fast_model).path, MLX_MAX_TOKENS)
            engines += mlx
            notes += mlx_notes
        memory["after_engines_rss_mb"] = current_rss_mb()

        _say("counting")
        count = counting(fast_backend, plan)
        swap = prefix_and_swap(fast_backend, plan)
        succ = successive(fast_backend, plan)
        memory["after_fast_model_rss_mb"] = current_rss_mb()

        deadline = t_measure + (FULL_TIME_CAP_S if not quick else 10**9)
        points, capped = latency_curve(main_backend, plan, deadline)
        memory["after_curve_rss_mb"] = current_rss_mb()
    finally:
        main_backend.close()
        if fast_backend is not main_backend:
            fast_backend.close()
    memory["peak_rss_mb"] = peak_rss_mb()
    memory["note"] = ("process-wide: both models, the raw llama-cpp-python copy during the comparison (the same "
                      "file mapped twice counts twice) and MLX in full mode; one compactd with the 1.5B is the "
                      "after_main_model_load figure plus the KV states it keeps")

    # Decode bound: the best read bandwidth over the bytes one decode step streams.
    main = models[plan.model]
    context = compare["prompt_tokens"] + compare["max_tokens"] // 2
    bound = decode_bound(bw["read_gb_per_s_best"], main["tensor_bytes"]["read_per_token"],
                         main["kv_bytes_per_context_token"], context)
    measured = compare["best"]["compactd"]["decode_tps"]
    bw.update({
        "model": plan.model,
        "weights_read_per_token_bytes": main["tensor_bytes"]["read_per_token"],
        "context_tokens": context,
        "decode_bound_tps_at_context": round(bound, 1),
        "decode_measured_tps": measured,
        "decode_share_of_bound": round(measured / bound, 3) if bound else None,
        "decode_bound_tps": {
            name: round(decode_bound(bw["read_gb_per_s_best"], m["tensor_bytes"]["read_per_token"], 0, 0), 1)
            for name, m in models.items()
        },
        "rule": "bound = read GB/s / (GGUF tensor bytes minus the token-embedding table when a separate "
                "output matrix exists + f16 KV bytes x context)",
    })
    if capped:
        notes.append(f"latency curve capped at {FULL_TIME_CAP_S // 60} min: sizes {capped} not run")
    result: dict[str, Any] = {
        "benchmark": "throughput",
        "quick": quick,
        "machine": machine,
        "load": quiet,
        "threads": N_THREADS,
        "plan": asdict(plan),
        "models": models,
        "notes": notes,
        "summarize_vs_raw": compare,
        "bandwidth": bw,
        "latency_curve": {"model": plan.model, "points": points, "capped": capped,
                          "session": f"synthetic agent turns ({BIG_TURN}), cold key and counter per run"},
        "successive": succ,
        "prefix_and_swap": swap,
        "counting": count,
        "engines": engines,
        "memory": memory,
    }
    result["headline"] = headline(result)
    result["elapsed_s"] = round(time.monotonic() - t_start, 1)
    write_outputs(result, out_dir, "throughput", plot)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="0.5B only, tiny sizes (~1-2 min)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    result = run(quick=args.quick, out_dir=args.out)
    print(result["headline"])
    print(f"wrote {args.out / 'throughput.json'} and {args.out / 'throughput.png'} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
