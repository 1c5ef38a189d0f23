"""Decode speed against inference threads, on an idle machine and with one core kept busy.

    python -m benchmarks.threads [--model NAME] [--tokens 48] [--out benchmarks/results]

Why: `compactd serve` shares the machine with the agent and the user's tools. This measures
`--threads` 1 and 2 (llama.cpp's n_threads), each alone and while another process spins one
core (a bounded busy loop), so the default can leave the machine usable without giving up
decode speed. Writes threads.json (machine and load average included).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS_DIR, load_average, machine_info, write_json

BUSY_S = 600  # the busy loop's own bound: it never outlives a run cut short
PROMPT = [{"role": "user", "content": "Write a Python function that parses an ISO date and explain each step."}]


def busy_core() -> subprocess.Popen:
    code = f"import time\nend = time.time() + {BUSY_S}\nwhile time.time() < end:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def decode_tps(model: str, threads: int, tokens: int, repeats: int) -> dict[str, Any]:
    from backends import load_backend
    from backends.base import collect

    backend = load_backend(model, engine="llama", n_threads=threads)
    backend.load()
    try:
        collect(backend.generate(PROMPT, max_tokens=8))  # warm-up
        runs = []
        for _ in range(repeats):
            _text, stats = collect(backend.generate(PROMPT, max_tokens=tokens))
            runs.append(round(stats.decode_tps, 2))
    finally:
        backend.close()
    return {"decode_tps": sorted(runs)[len(runs) // 2], "runs": runs}


def run(model: str | None, tokens: int, repeats: int, out_dir: Path) -> dict[str, Any]:
    from backends.models import DEFAULT_MODEL

    model = model or DEFAULT_MODEL
    rows = []
    load_before = load_average()
    for busy in (False, True):
        for threads in (1, 2):
            spinner = busy_core() if busy else None
            try:
                time.sleep(0.5 if busy else 0)
                row = {"threads": threads, "other_core_busy": busy, **decode_tps(model, threads, tokens, repeats),
                       "load_average": load_average()}
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            rows.append(row)
            print(f"threads {threads}, busy core {busy}: {row['decode_tps']} tok/s", flush=True)
    result = {"benchmark": "threads", "machine": machine_info(), "model": model, "tokens": tokens,
              "repeats": repeats, "load_average_before": load_before, "rows": rows}
    write_json(out_dir / "threads.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    run(args.model, args.tokens, args.repeats, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
