"""Shared helpers of the benchmarks: machine description, load-average gate, JSON output,
the fixture transcripts, weight bytes per decoded token, small statistics. No engine is imported here."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path("benchmarks/results")
# The bundled real transcripts the benchmarks run on (the tests' fixtures).
FIXTURES = REPO / "tests" / "fixtures"
SWE_TRACE = FIXTURES / "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
CC_TRACE = FIXTURES / "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
PI_TRACE = FIXTURES / "pi_large-session.jsonl"

# Two cores: any other busy process halves what llama.cpp gets (its threads spin on barriers),
# so measurements start only once the 1-minute load average is below this ...
QUIET_LOAD = 1.0
# ... or after this long, noted in the JSON (a benchmark must finish, not wait forever).
QUIET_WAIT_MAX_S = 180.0
QUIET_POLL_S = 10.0

# All runs use both cores and say so in their JSON.
N_THREADS = 2


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (ValueError, OSError, AttributeError):
        return None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_info() -> dict[str, Any]:
    """Where and when a benchmark ran: CPU, cores, RAM, Python, commit, date, load average."""
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gib": ram_gib(),
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_commit_short": _git("rev-parse", "--short", "HEAD"),
        # The results an earlier benchmark of the same `make bench` just wrote are not a change.
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".",
                               ":(exclude)benchmarks/results")),
        "load_average_1_5_15": load_average(),
    }


def wait_for_quiet(
    max_wait_s: float = QUIET_WAIT_MAX_S,
    threshold: float = QUIET_LOAD,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Wait (up to max_wait_s) for the 1-minute load average to drop below `threshold`;
    return what was seen, for the JSON."""
    start = load_average()
    t0 = time.monotonic()
    while load_average() and load_average()[0] > threshold and time.monotonic() - t0 < max_wait_s:
        if say:
            say(f"load average {load_average()[0]:.2f} > {threshold}: waiting")
        time.sleep(QUIET_POLL_S)
    end = load_average()
    return {
        "load_at_start": start,
        "waited_s": round(time.monotonic() - t0, 1),
        "load_when_started": end,
        "quiet": bool(end) and end[0] <= threshold,
        "threshold": threshold,
    }


def peak_rss_mb() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def save_figure(fig: Any, path: Path, title: str) -> None:
    """One look for every benchmark's PNG: its title (what ran, where, at which commit), saved, closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_title(name: str, machine: dict[str, Any], threads: int | None = None) -> str:
    cores = f", {threads} threads" if threads else ""
    return f"compactd {name} — {machine['cpu_model']}{cores}, {machine['date'][:10]}, {machine['git_commit_short']}"


def write_outputs(result: dict[str, Any], out_dir: Path, name: str, plot: Any) -> None:
    """NAME.json, then NAME.png: the JSON first, so a plotting bug never loses the numbers."""
    write_json(out_dir / f"{name}.json", result)
    plot(result, out_dir / f"{name}.png")


# --- weights read per decoded token ------------------------------------------------------


def weight_bytes(meta: Any) -> dict[str, int]:
    """Tensor data sizes of a GGUF (from `read_meta`). read_per_token: what one decode step
    reads, i.e. every tensor except the token-embedding table when a separate output matrix
    exists (the embedding is a row gather; with tied embeddings it is the output matrix and is
    read whole)."""
    per_token = meta.tensor_bytes - meta.token_embd_bytes if meta.output_bytes else meta.tensor_bytes
    return {"total": meta.tensor_bytes, "read_per_token": per_token, "token_embd": meta.token_embd_bytes,
            "output": meta.output_bytes, "n_tensors": meta.n_tensors}
