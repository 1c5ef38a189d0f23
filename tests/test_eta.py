"""The CLI's ETA line before a long model call (worker/eta.py), on the ScriptedBackend (logic
only): its GenerationStats report prompt_ms = 1.0, so the measured prefill rate is exactly
1000 x the prompt's tokens per second."""

from __future__ import annotations

from backends.base import collect
from tests.fakes import ScriptedBackend
from worker.eta import CALIBRATION_TOKENS, ETA_MIN_PROMPT_TOKENS, EtaBackend, eta_line, format_seconds

SCRIPTED_PROMPT_MS = 1.0  # tests/fakes.py: every generation reports this prefill time


def long_messages(words: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Summarize."},
            {"role": "user", "content": " ".join(f"w{i}" for i in range(words))}]


def test_format_seconds_and_the_line():
    assert [format_seconds(s) for s in (0.2, 45, 200, 3900)] == ["1 s", "45 s", "3 min 20 s", "1 h 05 min"]
    assert eta_line(3912, 87.0) == "summarizing 3,912 prompt tokens (~45 s at 87 tok/s)..."
    assert eta_line(3912, 0.0) == "summarizing 3,912 prompt tokens..."


def test_a_long_call_is_announced_with_the_measured_rate():
    backend = ScriptedBackend()
    lines: list[str] = []
    eta = EtaBackend(backend, lines.append)
    try:
        msgs = long_messages(2000)
        n = backend.count_messages(msgs)
        assert n >= ETA_MIN_PROMPT_TOKENS
        text, stats = collect(eta.generate(msgs, max_tokens=50))
        assert text == backend.reply and stats.prompt_tokens == n
        # Before any measured call: one calibration call of CALIBRATION_TOKENS+ tokens, one token out.
        assert eta.calibrations == 1 and backend.generate_calls == 2
        calibration = backend.count_messages(backend.prompts[0])
        assert backend.count(backend.prompts[0][0]["content"]) >= CALIBRATION_TOKENS
        assert lines == [eta_line(n, calibration / (SCRIPTED_PROMPT_MS / 1000))]
        # The next call uses the rate the engine measured on the previous one: no calibration.
        collect(eta.generate(msgs, max_tokens=50))
        assert eta.calibrations == 1 and backend.generate_calls == 3
        assert lines[1] == eta_line(n, n / (SCRIPTED_PROMPT_MS / 1000))
        assert lines[1].startswith(f"summarizing {n:,} prompt tokens (~1 s at ")
    finally:
        backend.close()


def test_a_short_call_is_silent_and_other_methods_pass_through():
    backend = ScriptedBackend()
    lines: list[str] = []
    eta = EtaBackend(backend, lines.append)
    try:
        collect(eta.generate(long_messages(20), max_tokens=5))
        assert lines == [] and eta.calibrations == 0 and backend.generate_calls == 1
        assert eta.count("a b c") == 3 and eta.info().model_name == "scripted"
    finally:
        backend.close()
