"""The real set of the fidelity benchmark, run alone: every real transcript with an
expected-facts file, compacted at each window, scored per kind and per half (tune, heldout).
The set itself (cases, baselines, scoring, figure) is benchmarks/real_set.py; its docstring says
what each approach sees.

    python -m benchmarks.fidelity_real [--quick] [--no-model] [--half heldout] [--contexts 16000,32000]
                                       [--out benchmarks/results]

Writes fidelity_real.json and fidelity_real.png. `compactd bench fidelity` runs the same set
through benchmarks/real_set.py and puts it under "real" in fidelity.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks._common import (
    N_CTX,
    N_THREADS,
    RESULTS_DIR,
    figure_title,
    machine_info,
    peak_rss_mb,
    write_outputs,
)
from benchmarks.real_set import (  # noqa: F401  (re-exported: the names the tests and older callers use)
    CONTEXTS,
    QUICK_CASE,
    QUICK_CONTEXTS,
    QUICK_MODEL_CONTEXT,
    SPLITS,
    TOOL_RESULT_CUT,
    baseline_input,
    plot,
    render_for_summarizer,
    run_real,
    step_order,
)


def _contexts(text: str) -> tuple[int, ...]:
    try:
        windows = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of token counts: {text!r}") from None
    if not windows or min(windows) <= 0:
        raise argparse.ArgumentTypeError(f"windows must be positive token counts: {text!r}")
    return windows


def main(argv: list[str] | None = None) -> int:
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import DEFAULT_MODEL, FAST_MODEL, resolve

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest transcript: no-model, one 0.5B run")
    ap.add_argument("--no-model", action="store_true", help="compactd --no-model only (no model call: fast)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--model", default=None, help="bundled model name (default: 1.5B full, 0.5B quick)")
    ap.add_argument("--threads", type=int, default=N_THREADS)
    ap.add_argument("--half", choices=SPLITS, default=None, help="only the tune or the held-out transcripts")
    ap.add_argument("--contexts", type=_contexts, default=None,
                    help=f"comma-separated windows (default: {','.join(map(str, CONTEXTS))})")
    args = ap.parse_args(argv)
    model = args.model or (FAST_MODEL if args.quick else DEFAULT_MODEL)
    backend = LlamaCppBackend(resolve(model).path, n_ctx=N_CTX, n_threads=args.threads, model_name=model)
    try:
        real = run_real(backend, quick=args.quick, no_model=args.no_model, half=args.half, contexts=args.contexts)
    finally:
        backend.close()
    result = {"benchmark": "fidelity-real", "machine": machine_info(), "quick": args.quick, **real,
              "peak_rss_mb": peak_rss_mb()}
    title = figure_title(f"fidelity, real set, {model}" + (" (no model)" if args.no_model else ""), result["machine"])
    write_outputs(result, args.out, "fidelity_real", lambda r, path: plot(r, path, title))
    print(real["headline"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
