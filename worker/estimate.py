"""Token estimators: the ones coding agents use, and a per-script calibrated one.

compactd itself counts with the model's real tokenizer; these exist to be measured against
it (benchmarks/tokenizer.py) and as a cheap fallback where no tokenizer is at hand. The agent
estimators reproduce the agents' own arithmetic, rounding included, because an agent's
compaction trigger fires on exactly that number.

The calibrated estimator counts characters per script class and weights each class with a
tokens-per-character rate fitted against a real vocabulary (weights in
`worker/data/estimator_weights.json`, written by `python -m benchmarks.tokenizer
--write-weights`). Importing this module costs nothing beyond the standard library; numpy is
imported only by `fit_weights`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path

WEIGHTS_PATH = Path(__file__).parent / "data" / "estimator_weights.json"

# Script classes, in feature order. Each is one column of the calibrated fit. Punctuation is
# split in two: ASCII punctuation merges into multi-character tokens (`->`, `"""`, `),`) while
# full-width/CJK punctuation (，。：「」) is its own token and also ends the Han word before it;
# one shared weight left 12% errors on punctuation-heavy Chinese files, two halve that.
CLASSES: tuple[str, ...] = (
    "han", "kana", "hangul", "latin", "digit", "punct", "wide_punct", "space", "other",
)

# Weight for a class the fitting corpus has no characters of (our corpus has no Korean): about
# one token per character, what byte-level BPE vocabularies give unfamiliar scripts, so an
# unseen script is overestimated rather than counted as free.
UNSEEN_CLASS_WEIGHT = 1.0

DEFAULT_VOCAB = "qwen2"  # the default model (Qwen2.5-Coder) uses the qwen2 vocabulary

# Code-point ranges (inclusive). Han includes the iteration marks 々/〇 because tokenizers
# treat them like ideographs; kana includes the prolonged-sound mark and half-width katakana.
_HAN_RANGES = (
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x3134F),  # Extensions B-G
    (0x3005, 0x3005),  # 々
    (0x3007, 0x3007),  # 〇
)
_KANA_RANGES = (
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana (incl. ー)
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0xFF66, 0xFF9F),  # half-width katakana
)
_HANGUL_RANGES = (
    (0xAC00, 0xD7AF),  # syllables
    (0x1100, 0x11FF),  # jamo
    (0x3130, 0x318F),  # compatibility jamo
)
_LATIN_MAX = 0x024F  # Basic Latin through Latin Extended-B: letters here are "latin"


def _in(cp: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


@lru_cache(maxsize=8192)
def classify(ch: str) -> str:
    """The script class of one character (one of CLASSES)."""
    cp = ord(ch)
    if cp < 0x80:  # the common case first: ASCII
        if ch.isalpha():
            return "latin"
        if ch.isdigit():
            return "digit"
        if ch.isspace():
            return "space"
        return "punct"
    if _in(cp, _HAN_RANGES):
        return "han"
    if _in(cp, _KANA_RANGES):
        return "kana"
    if _in(cp, _HANGUL_RANGES):
        return "hangul"
    if ch.isspace():
        return "space"
    if ch.isdigit():
        return "digit"
    if ch.isalpha():
        return "latin" if cp <= _LATIN_MAX else "other"
    # CJK/full-width punctuation (，。「」：（）), general punctuation, arrows, box drawing and
    # other BMP symbols, Latin-1 symbols (©, °, ×).
    if (
        cp <= 0xFF
        or 0x2000 <= cp <= 0x2BFF
        or 0x3000 <= cp <= 0x303F
        or 0xFE30 <= cp <= 0xFE4F
        or 0xFF00 <= cp <= 0xFF65
    ):
        return "wide_punct"
    return "other"  # emoji, Cyrillic, Greek, ...


def script_counts(text: str) -> dict[str, int]:
    """Characters per script class."""
    counts = dict.fromkeys(CLASSES, 0)
    for ch in text:
        counts[classify(ch)] += 1
    return counts


# --- the agents' estimators ------------------------------------------------------------


def chars4(text: str) -> int:
    """pi: Math.ceil(chars / 4) (JS length; equal to code points for BMP text)."""
    return math.ceil(len(text) / 4)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def utf16_4(text: str) -> int:
    """opencode: Math.round(text.length / 4) on UTF-16 code units (JS rounds .5 up)."""
    return (utf16_len(text) + 2) // 4


def bytes4(text: str) -> int:
    """Codex: (UTF-8 bytes + 3) / 4, i.e. ceil(bytes / 4)."""
    return (len(text.encode("utf-8")) + 3) // 4


def len3(text: str) -> int:
    """CoreCoder: len(text) // 3 (Python code points)."""
    return len(text) // 3


def cjk1_other4(text: str) -> int:
    """A common CJK-aware heuristic: each Han/kana/Hangul char 1 token, other chars 1/4."""
    c = script_counts(text)
    cjk = c["han"] + c["kana"] + c["hangul"]
    return math.ceil(cjk + (len(text) - cjk) / 4)


AGENT_ESTIMATORS: dict[str, Callable[[str], int]] = {
    "chars4": chars4,
    "utf16_4": utf16_4,
    "bytes4": bytes4,
    "len3": len3,
    "cjk1_other4": cjk1_other4,
}


# --- calibrated estimator --------------------------------------------------------------


@lru_cache(maxsize=4)
def _load_weights(path: str) -> dict[str, dict[str, float]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: v["weights"] for k, v in data.items() if not k.startswith("_")}


def available_vocabs(path: Path = WEIGHTS_PATH) -> list[str]:
    return sorted(_load_weights(str(path)))


def estimate_from_counts(counts: dict[str, int], weights: dict[str, float]) -> int:
    """Tokens for per-class character counts: ceil of the weighted sum."""
    return math.ceil(sum(weights.get(k, 0.0) * n for k, n in counts.items()) - 1e-9)


def estimate_tokens(text: str, vocab: str = DEFAULT_VOCAB, weights: dict[str, float] | None = None) -> int:
    """Calibrated token estimate of `text` for a vocabulary with stored weights ("qwen2",
    "gemma3", ...), or with explicit per-class `weights`."""
    if weights is None:
        table = _load_weights(str(WEIGHTS_PATH))
        if vocab not in table:
            raise KeyError(f"no estimator weights for vocabulary {vocab!r}; have {', '.join(sorted(table))}")
        weights = table[vocab]
    return estimate_from_counts(script_counts(text), weights)


def fit_weights(
    rows: Sequence[dict[str, int]], tokens: Sequence[int], classes: Iterable[str] = CLASSES
) -> dict[str, float]:
    """Non-negative least squares of tokens on per-class counts, minimising *relative* error
    (each row divided by its token count, so long and short samples weigh alike).

    Non-negativity by elimination rather than full Lawson-Hanson: solve, drop the classes that
    came out negative (weight 0), solve again; a dropped class never returns, which is enough
    when only sparse classes go negative. A class with no characters in the data gets
    UNSEEN_CLASS_WEIGHT.
    """
    import numpy as np

    classes = list(classes)
    x = np.array([[r.get(c, 0) for c in classes] for r in rows], dtype=float)
    y = np.array(tokens, dtype=float)
    scale = 1.0 / np.maximum(y, 1.0)
    xs, ys = x * scale[:, None], y * scale
    active = [i for i, _ in enumerate(classes) if x[:, i].any()]
    w = np.array([0.0 if x[:, i].any() else UNSEEN_CLASS_WEIGHT for i in range(len(classes))])
    while active:
        sol, *_ = np.linalg.lstsq(xs[:, active], ys, rcond=None)
        if (sol >= 0).all():
            w[active] = sol
            break
        active = [a for a, s in zip(active, sol, strict=True) if s >= 0]
    return {c: round(float(v), 6) for c, v in zip(classes, w, strict=True)}
