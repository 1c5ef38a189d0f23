"""Shared helpers of the benchmarks: machine description, load-average gate, JSON output,
GGUF tensor sizes, small statistics. No engine is imported here."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path("benchmarks/results")

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


# --- GGUF tensor sizes -----------------------------------------------------------------
# read_meta has no tensor sizes and gguf.GGUFReader spends 10-16 s on the vocabulary, so the
# header is walked here: skip the metadata, read the tensor table, take sizes from offsets.

_GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_GGUF_STRING, _GGUF_ARRAY = 8, 9
GGUF_DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class TensorBytes:
    total: int  # bytes of all tensor data
    per_token: int  # bytes a decode step reads (the embedding table is only gathered from)
    token_embd: int
    output: int
    n_tensors: int

    def to_dict(self) -> dict[str, int]:
        return {"total": self.total, "read_per_token": self.per_token, "token_embd": self.token_embd,
                "output": self.output, "n_tensors": self.n_tensors}


def _u32(f: BinaryIO) -> int:
    return struct.unpack("<I", f.read(4))[0]


def _u64(f: BinaryIO) -> int:
    return struct.unpack("<Q", f.read(8))[0]


def _skip_value(f: BinaryIO, vtype: int) -> Any:
    if vtype == _GGUF_STRING:
        f.seek(_u64(f), os.SEEK_CUR)
        return None
    if vtype == _GGUF_ARRAY:
        etype, n = _u32(f), _u64(f)
        if etype in _GGUF_SCALARS:
            f.seek(_GGUF_SCALARS[etype] * n, os.SEEK_CUR)
        else:
            for _ in range(n):
                _skip_value(f, etype)
        return None
    size = _GGUF_SCALARS[vtype]
    raw = f.read(size)
    return int.from_bytes(raw, "little") if vtype in (4, 10) else None


def gguf_tensor_bytes(path: str | os.PathLike) -> TensorBytes:
    """Tensor data sizes of a GGUF (v2/v3). per_token: what one decode step reads, i.e. every
    tensor except the token-embedding table when a separate output matrix exists (the
    embedding is a row gather; with tied embeddings it is the output matrix and read whole)."""
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"not a GGUF file: {path}")
        _version, n_tensors, n_kv = _u32(f), _u64(f), _u64(f)
        alignment = GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key = f.read(_u64(f)).decode("utf-8", "replace")
            value = _skip_value(f, _u32(f))
            if key == "general.alignment" and value:
                alignment = value
        tensors: list[tuple[str, int]] = []
        for _ in range(n_tensors):
            name = f.read(_u64(f)).decode("utf-8", "replace")
            n_dims = _u32(f)
            f.seek(8 * n_dims + 4, os.SEEK_CUR)  # dims, ggml type
            tensors.append((name, _u64(f)))
        data_start = -(-f.tell() // alignment) * alignment
    data_size = size - data_start
    ordered = sorted(tensors, key=lambda t: t[1])
    sizes = {
        name: (ordered[i + 1][1] if i + 1 < len(ordered) else data_size) - off
        for i, (name, off) in enumerate(ordered)
    }
    embd = sizes.get("token_embd.weight", 0)
    output = sizes.get("output.weight", 0)
    per_token = data_size - embd if output else data_size
    return TensorBytes(data_size, per_token, embd, output, len(tensors))
