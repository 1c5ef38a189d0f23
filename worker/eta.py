"""A progress line with an ETA before a long model call, for the CLI.

On a CPU the prompt's prefill sets a compaction's latency (minutes for a long history), and a
one-shot `compactd compact` otherwise looks hung. `EtaBackend` wraps the backend the pipeline
uses: before each generation whose prompt is long it counts the prompt exactly and reports
"summarizing 3,912 prompt tokens (~45 s at 87 tok/s)...". The rate is the prefill rate the
engine measured on its previous call (GenerationStats.prompt_tps), or, before any, a quick
calibration call on a short prompt. No pipeline code changes: it is only a backend in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from backends.base import Backend, GenerationStats

ETA_MIN_PROMPT_TOKENS = 512  # a shorter prompt is read in seconds on any engine here: no line, no calibration
CALIBRATION_TOKENS = 128  # ~1-3 s of prefill on a 2-core CPU with the 1.5B: cheap next to a minutes-long call
CALIBRATION_TEXT = "The build failed in src/app/main.py because the import order changed; fix it and rerun. "


def format_seconds(seconds: float) -> str:
    """45 s, 3 min 20 s, 1 h 05 min."""
    s = max(1, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_line(prompt_tokens: int, prompt_tps: float) -> str:
    if prompt_tps <= 0:
        return f"summarizing {prompt_tokens:,} prompt tokens..."
    return (f"summarizing {prompt_tokens:,} prompt tokens "
            f"(~{format_seconds(prompt_tokens / prompt_tps)} at {prompt_tps:,.0f} tok/s)...")


class EtaBackend:
    """The backend, with `say(eta_line(...))` before each long generation. Everything but
    `generate` passes through; `prompt_tps` is the last measured prefill rate."""

    def __init__(self, backend: Backend, say: Callable[[str], None], *,
                 min_prompt_tokens: int = ETA_MIN_PROMPT_TOKENS):
        self._backend = backend
        self._say = say
        self._min = min_prompt_tokens
        self.prompt_tps: float = 0.0
        self.calibrations = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, messages: list[dict[str, Any]], **kwargs: Any) -> Iterator[str | GenerationStats]:
        n = self._backend.count_messages(messages)
        if n >= self._min:
            if not self.prompt_tps:
                self.calibrate()
            self._say(eta_line(n, self.prompt_tps))
        return self._watch(self._backend.generate(messages, **kwargs))

    def calibrate(self) -> float:
        """One short isolated call (one token out) that measures the prefill rate."""
        self.calibrations += 1
        text, words = CALIBRATION_TEXT, CALIBRATION_TEXT
        while self._backend.count(text) < CALIBRATION_TOKENS:
            text += words
        stream = self._backend.generate([{"role": "user", "content": text}], max_tokens=1, isolated=True)
        for item in self._watch(stream):
            del item
        return self.prompt_tps

    def _watch(self, stream: Iterator[str | GenerationStats]) -> Iterator[str | GenerationStats]:
        try:
            for item in stream:
                if isinstance(item, GenerationStats) and item.prompt_tps > 0:
                    self.prompt_tps = item.prompt_tps
                yield item
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()


__all__ = ["CALIBRATION_TOKENS", "ETA_MIN_PROMPT_TOKENS", "EtaBackend", "eta_line", "format_seconds"]
