"""Token estimators (worker.estimate) and the tokenizer benchmark (benchmarks.tokenizer)."""

from __future__ import annotations

import json
import random

import pytest

from worker import estimate as est

# Held-out files: the calibrated qwen2 estimate stays within this relative error of the real
# tokenizer on every one (measured worst: 5.0%, zh-hans-vuedocs-quick-start.md).
HELD_OUT_BOUND = 0.06


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from backends.base import BackendError
    from backends.gguf_meta import load_tokenizer
    from backends.models import DEFAULT_MODEL, resolve

    try:
        return load_tokenizer(resolve(DEFAULT_MODEL).path)
    except BackendError as exc:
        pytest.skip(f"default model not installed: {exc}")


@pytest.fixture(scope="module")
def engine_vocab(qwen_tokenizer):
    """llama.cpp's own tokenizer of the same GGUF: the independent reference for the
    benchmark's counts (which come from the engine-free rebuild, qwen_tokenizer)."""
    pytest.importorskip("llama_cpp")
    from backends.models import DEFAULT_MODEL, resolve
    from tests.reference import EngineReference

    ref = EngineReference(resolve(DEFAULT_MODEL).path)
    yield ref
    ref.close()


def real_count(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


# --- agent estimators: the agents' own arithmetic, rounding included ----------------------


def test_chars4_rounds_up():
    assert est.chars4("") == 0
    assert est.chars4("abcd") == 1
    assert est.chars4("abcde") == 2
    assert est.chars4("中文中文中") == 2  # code points, not bytes


def test_utf16_4_rounds_half_up_on_utf16_units():
    assert est.utf16_4("a") == 0  # Math.round(0.25)
    assert est.utf16_4("ab") == 1  # Math.round(0.5) rounds up in JS
    assert est.utf16_4("abcdef") == 2  # Math.round(1.5)
    assert est.utf16_len("😀") == 2  # astral char = surrogate pair
    assert est.utf16_4("😀😀") == 1


def test_bytes4_ceil_of_utf8_bytes():
    assert est.bytes4("abcd") == 1
    assert est.bytes4("abcde") == 2
    assert est.bytes4("中") == 1  # 3 bytes
    assert est.bytes4("中文") == 2  # 6 bytes
    assert est.bytes4("中文测试") == 3  # 12 bytes


def test_len3_floors_code_points():
    assert est.len3("ab") == 0
    assert est.len3("abcdefg") == 2
    assert est.len3("中文测试") == 1


def test_cjk_aware_heuristic():
    assert est.cjk1_other4("中文ab") == 3  # 2 + 2/4 = 2.5 -> 3
    assert est.cjk1_other4("かな한글") == 4
    assert est.cjk1_other4("abcdefgh") == 2


# --- script classes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ch", "cls"),
    [
        ("中", "han"), ("漢", "han"), ("々", "han"), ("\U00020000", "han"),
        ("あ", "kana"), ("カ", "kana"), ("ー", "kana"), ("ｶ", "kana"),
        ("한", "hangul"), ("ㄱ", "hangul"),
        ("a", "latin"), ("Z", "latin"), ("é", "latin"),
        ("7", "digit"), ("٣", "digit"),
        (",", "punct"), ("`", "punct"), ("{", "punct"),
        ("，", "wide_punct"), ("。", "wide_punct"), ("「", "wide_punct"), ("→", "wide_punct"), ("×", "wide_punct"),
        (" ", "space"), ("\n", "space"), ("\u3000", "space"),
        ("😀", "other"), ("Ж", "other"),
    ],
)
def test_classify(ch, cls):
    assert est.classify(ch) == cls


def test_script_counts_cover_every_char():
    text = "修复 bug：`foo()` 返回 42。カタカナ 한국어 😀\n"
    counts = est.script_counts(text)
    assert set(counts) == set(est.CLASSES)
    assert sum(counts.values()) == len(text)
    assert counts["han"] == 4 and counts["kana"] == 4 and counts["hangul"] == 3
    assert counts["latin"] == 6 and counts["digit"] == 2 and counts["other"] == 1


# --- calibrated estimator -----------------------------------------------------------------


def test_estimate_with_explicit_weights():
    assert est.estimate_tokens("", weights={"han": 1.0}) == 0
    assert est.estimate_tokens("中文abcd", weights={"han": 1.0, "latin": 0.25}) == 3
    assert est.estimate_tokens("中文abcde", weights={"han": 1.0, "latin": 0.25}) == 4  # 3.25 rounds up


def test_stored_weights_cover_default_vocab():
    assert est.DEFAULT_VOCAB in est.available_vocabs()
    data = json.loads(est.WEIGHTS_PATH.read_text(encoding="utf-8"))
    weights = data[est.DEFAULT_VOCAB]["weights"]
    assert set(weights) == set(est.CLASSES)
    assert all(w >= 0 for w in weights.values())
    # An unseen script must not be free.
    assert weights["hangul"] > 0
    with pytest.raises(KeyError):
        est.estimate_tokens("x", vocab="no-such-vocab")


def test_fit_recovers_linear_weights():
    rng = random.Random(7)
    truth = {"han": 0.6, "kana": 0.5, "latin": 0.2, "digit": 1.0, "punct": 0.5, "space": 0.25}
    rows = [{c: rng.randint(0, 400) for c in truth} for _ in range(60)]
    tokens = [sum(truth[c] * r[c] for c in truth) for r in rows]
    fitted = est.fit_weights(rows, tokens)
    for c, w in truth.items():
        assert fitted[c] == pytest.approx(w, abs=1e-6)
    assert fitted["hangul"] == est.UNSEEN_CLASS_WEIGHT  # no data: the stated prior


def test_fit_is_non_negative():
    rows = [{"latin": 100, "space": 10}, {"latin": 100, "space": 30}, {"latin": 50, "space": 40}]
    tokens = [30, 25, 10]  # would want a negative space weight
    fitted = est.fit_weights(rows, tokens)
    assert all(w >= 0 for w in fitted.values())


def test_calibrated_within_bound_on_held_out_files(qwen_tokenizer):
    from benchmarks.tokenizer import corpus_files, split

    files = corpus_files()
    parts = split(files)
    held = [f for f in files if parts[f.name] == "held_out"]
    assert {f.lang for f in held} >= {"zh-hans", "zh-hant", "ja", "en"}
    for f in held:
        real = real_count(qwen_tokenizer, f.text)
        calibrated = est.estimate_tokens(f.text, "qwen2")
        assert abs(calibrated - real) / real <= HELD_OUT_BOUND, f.name
        if f.lang.startswith("zh"):
            # The reason the estimator exists: chars/4 undercounts Chinese by far more.
            assert (est.chars4(f.text) - real) / real < -0.25, f.name


# --- benchmark smoke test -----------------------------------------------------------------


def test_benchmark_quick_run(tmp_path, engine_vocab):
    from benchmarks.tokenizer import DATA_DIR, run

    result = run(quick=True, out_dir=tmp_path)
    js, png = tmp_path / "tokenizer.json", tmp_path / "tokenizer.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = json.loads(js.read_text(encoding="utf-8"))
    assert stored["quick"] is True and stored["machine"]["cpu_count"]
    assert {r["lang"] for r in stored["files"]} >= {"zh-hans", "zh-hant", "ja", "en"}
    for rec in stored["files"]:
        text = (DATA_DIR / rec["file"]).read_text(encoding="utf-8")
        # The benchmark's qwen2 count is exactly the engine's own tokenization of the file.
        assert rec["real_tokens"]["qwen2"] == engine_vocab.tokens(text)
        assert rec["estimates"]["chars4"] == est.chars4(text)
    zh = result["summary"]["qwen2"]["zh-hans"]["chars4"]
    # Recomputed from the files with the engine's tokenizer: chars/4 on simplified Chinese.
    zh_files = [(DATA_DIR / r["file"]).read_text(encoding="utf-8") for r in stored["files"] if r["lang"] == "zh-hans"]
    real = [engine_vocab.tokens(t) for t in zh_files]
    signed = [(est.chars4(t) - n) / n for t, n in zip(zh_files, real, strict=True)]
    assert zh["files"] == len(zh_files) and zh["real_tokens"] == sum(real)
    assert zh["mean_signed_error"] == round(sum(signed) / len(signed), 4)
    assert zh["tail_20k_holds_real_tokens"] == round(20_000 * sum(real) / sum(est.chars4(t) for t in zh_files))
    # What the benchmark exists to show: chars/4 undercounts Chinese, so a 20k tail overflows.
    assert zh["mean_signed_error"] < -0.2 and zh["tail_20k_holds_real_tokens"] > 25_000
