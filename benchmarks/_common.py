"""Shared helpers of the benchmarks: machine description, load-average gate, JSON output,
the fixture transcripts, weight bytes per decoded token, small statistics, and what the two
fidelity sets share (the baselines' prompts, one generation, invented-name checks). No engine is
imported here (a generation goes through the backend it is handed)."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
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


# --- fidelity: what the written and the real set share ---------------------------------------
# Both sets (benchmarks/fidelity.py, benchmarks/real_set.py) run their baselines and check
# invented names with these, so the real set never imports the written one for them.

N_CTX = 8192  # compactd's default summarizer window; the baselines get the same engine
NAIVE_MAX_TOKENS = 300  # 150 words is ~200 tokens; room for a model that overshoots
NAIVE_PROMPT = "Summarize the work log in at most {words} words."
TEMPLATE_SYSTEM = """You are summarizing a coding agent's conversation so that another agent can continue the work after its context is cleared.
Write the summary in exactly this format:

## Goal
## Constraints & Preferences
## Progress
### Done
### In Progress
### Blocked
## Key Decisions
## Next Steps
## Critical Context
## Relevant Files

Preserve exact file paths, commands, error strings. Be concise."""
TEMPLATE_USER = "<conversation>\n{conversation}\n</conversation>\n\nWrite the summary of the conversation above in the format given."

PATH_TOKEN = re.compile(
    r"(?<![\w/.:-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5}\b"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|json|md|rs|go|java|c|h|cpp|rb|toml|yaml|yml|cfg|ini|txt|sh|sql|lock)\b"
)
URL = re.compile(r"\b\w+://\S+")
IDENT = re.compile(
    r"`[^`\n]{2,80}`"
    r"|\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+(?:\(\))?"
    r"|\b[a-z]+[A-Z][A-Za-z0-9]*\b|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"
    r"|\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?"
)


def paths_in(text: str) -> list[str]:
    """File paths named in a text (URLs are not paths), without a leading `./`."""
    return [p.lstrip("./") if p.startswith("./") else p for p in PATH_TOKEN.findall(URL.sub(" ", text))]


def path_key(path: str) -> str:
    """The last two components: `/testbed/src/pkg/mod.py` and `src/pkg/mod.py` are one file."""
    parts = [p for p in path.strip().split("/") if p and p != "."]
    return "/".join(parts[-2:]).lower()


def invented(model_text: str, source: str, allowed: str = "") -> list[str]:
    """Identifiers in the model's text found nowhere in its input (case-insensitive)."""
    hay = (source + "\n" + allowed).lower()
    out = []
    for m in IDENT.finditer(model_text):
        cand = m.group(0).strip("`").strip()
        bare = cand.removesuffix("()").lower()
        if bare and bare not in hay and cand.lower() not in hay:
            out.append(cand)
    for p in paths_in(model_text):
        if p.lower() not in hay and path_key(p) not in hay:
            out.append(p)
    return list(dict.fromkeys(out))


def raw_text(messages: list[Any]) -> str:
    """Everything a transcript's messages hold as text (calls and results included): what an
    identifier must occur in not to be invented."""
    parts = []
    for m in messages:
        parts.append(m.text)
        parts += [c.name + " " + c.arguments_json() for c in m.tool_calls]
        parts += [r.output for r in m.tool_results]
    return "\n".join(parts)


def generate(backend: Any, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, dict[str, Any]]:
    """One greedy, isolated generation: the text and its timings (a baseline's summary)."""
    from backends.base import collect

    t0 = time.perf_counter()
    text, st = collect(backend.generate(messages, max_tokens=max_tokens, temperature=0.0, isolated=True))
    return text.strip(), {"prompt_tokens": st.prompt_tokens, "decode_tokens": st.decode_tokens,
                          "prompt_ms": round(st.prompt_ms, 1), "decode_ms": round(st.decode_ms, 1),
                          "wall_s": round(time.perf_counter() - t0, 2), "finish_reason": st.finish_reason}


def held_tokens(counter: Any, messages: list[Any], cp: Any) -> int:
    """What an agent holds after checkpoint `cp`: its system + summary, then every message after
    its boundary (the pipeline's own `before`)."""
    ids = [m.id for m in messages]
    start = ids.index(cp.boundary_message_id) + 1 if cp.boundary_message_id in ids else 0
    held = cp.messages[: len(cp.messages) - len(cp.tail_message_ids)]
    return counter.messages(held + [m.to_chat() for m in messages[start:]])

