"""GGUF metadata and the engine-free tokenizer, read once and cached.

`gguf.GGUFReader` spends 10-16 s materialising the 151k-entry vocabulary arrays, so what we
need from a GGUF (model facts, chat template, special tokens, and a HuggingFace `tokenizers`
tokenizer rebuilt from the vocabulary) is cached per file under the user cache dir.
The rebuilt tokenizer matches llama.cpp's ids exactly: no normalizer (llama.cpp does not
normalize), the pre-tokenizer regex of the GGUF's `tokenizer.ggml.pre`, byte-level BPE.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .base import BackendError
from .paths import cache_dir

GGUF_MAGIC = b"GGUF"

# Pre-tokenizer split patterns, as llama.cpp's llama-vocab.cpp defines them per `tokenizer.ggml.pre`.
PRETOKENIZER_REGEX = {
    # Qwen2/2.5/3: single digits.
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # Llama 3: digits in runs of up to three.
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

# Bump when the cached meta.json gains a field: caches of an older layout are rebuilt, not read
# with the new fields at their defaults.
CACHE_LAYOUT = 2

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4


@dataclass
class GGUFMeta:
    path: str
    size: int
    architecture: str
    name: str
    file_type: int
    quantization: str
    context_length: int
    vocab_size: int
    tokenizer_model: str
    tokenizer_pre: str
    chat_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool
    has_output_weight: bool
    hparams: dict[str, Any] = field(default_factory=dict)
    # Tensor data bytes: all, the token-embedding table, the output matrix (0 when tied).
    tensor_bytes: int = 0
    token_embd_bytes: int = 0
    output_bytes: int = 0
    n_tensors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# llama.cpp's LLAMA_FTYPE names for general.file_type.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Fail with one clear line unless `path` is a readable GGUF file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BackendError(f"model file not found: {p}")
    if p.is_dir():
        raise BackendError(f"expected a .gguf file, got a directory: {p}")
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BackendError(f"cannot read model file {p}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise BackendError(f"not a GGUF model file (bad magic {magic!r}): {p}")
    return p


def file_key(path: Path) -> str:
    """Cheap identity of a file for cache keys: path, size, mtime and the first 64 KiB."""
    st = path.stat()
    h = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    with path.open("rb") as f:
        h.update(f.read(65536))
    return h.hexdigest()[:24]


def _cache_for(path: Path) -> Path:
    d = cache_dir() / "gguf" / f"v{CACHE_LAYOUT}-{file_key(path)}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _open_reader(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - a broken file, reported as one line
        raise BackendError(f"cannot read GGUF {path} (truncated or corrupt?): {exc}") from None


def read_meta(path: str | os.PathLike) -> GGUFMeta:
    p = check_gguf_file(path)
    cached = _cache_for(p) / "meta.json"
    if cached.exists():
        return GGUFMeta(**json.loads(cached.read_text()))
    _build_cache(p)
    return GGUFMeta(**json.loads(cached.read_text()))


def _build_cache(p: Path) -> None:
    reader = _open_reader(p)
    arch = _field(reader, "general.architecture", "unknown")
    tokens = _field(reader, "tokenizer.ggml.tokens", []) or []
    token_types = _field(reader, "tokenizer.ggml.token_type", []) or []
    bos_id = _field(reader, "tokenizer.ggml.bos_token_id")
    eos_id = _field(reader, "tokenizer.ggml.eos_token_id")
    file_type = int(_field(reader, "general.file_type", -1))
    tensor_sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > p.stat().st_size:
        raise BackendError(f"GGUF file is truncated: {p} has {p.stat().st_size:,} bytes, its tensors need {end:,}")
    hparams = {}
    for key in reader.fields:
        if key.startswith(f"{arch}.") and isinstance(_field(reader, key), (int, float, str)):
            hparams[key[len(arch) + 1 :]] = _field(reader, key)
    meta = GGUFMeta(
        path=str(p.resolve()),
        size=p.stat().st_size,
        architecture=arch,
        name=_field(reader, "general.name", p.stem),
        file_type=file_type,
        quantization=FILE_TYPES.get(file_type, f"type {file_type}"),
        context_length=int(_field(reader, f"{arch}.context_length", 0)),
        vocab_size=len(tokens),
        tokenizer_model=_field(reader, "tokenizer.ggml.model", ""),
        tokenizer_pre=_field(reader, "tokenizer.ggml.pre", "") or "",
        chat_template=_field(reader, "tokenizer.chat_template"),
        bos_token=tokens[bos_id] if bos_id is not None and bos_id < len(tokens) else "",
        eos_token=tokens[eos_id] if eos_id is not None and eos_id < len(tokens) else "",
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        has_output_weight="output.weight" in tensor_sizes,
        hparams=hparams,
        tensor_bytes=sum(tensor_sizes.values()),
        token_embd_bytes=tensor_sizes.get("token_embd.weight", 0),
        output_bytes=tensor_sizes.get("output.weight", 0),
        n_tensors=len(tensor_sizes),
    )
    d = _cache_for(p)
    tok = _build_tokenizer(reader, meta, tokens, token_types)
    if tok is not None:
        tok.save(str(d / "tokenizer.json"))
    (d / "meta.json").write_text(json.dumps(meta.to_dict(), ensure_ascii=False))


def _build_tokenizer(reader: Any, meta: GGUFMeta, tokens: list[str], token_types: list[int]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    regex = PRETOKENIZER_REGEX.get(meta.tokenizer_pre)
    if meta.tokenizer_model != "gpt2" or regex is None:
        return None  # no exact engine-free rebuild for this vocabulary; the engine counts instead
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges", [])]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, merges, byte_fallback=False, ignore_merges=False, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken

    specials = [tokens[i] for i, t in enumerate(token_types) if t == TOKEN_TYPE_CONTROL]
    user_defined = [tokens[i] for i, t in enumerate(token_types) if t == TOKEN_TYPE_USER_DEFINED]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in user_defined])
    return tok


def tokenizer_json_path(path: str | os.PathLike) -> Path | None:
    """The cached tokenizer.json for a GGUF, building it on first use; None when the
    vocabulary has no exact engine-free rebuild."""
    meta = read_meta(path)
    tj = _cache_for(Path(meta.path)) / "tokenizer.json"
    return tj if tj.exists() else None


def load_tokenizer(path: str | os.PathLike) -> Any:
    from tokenizers import Tokenizer

    tj = tokenizer_json_path(path)
    if tj is None:
        meta = read_meta(path)
        raise BackendError(
            f"no engine-free tokenizer for vocabulary {meta.tokenizer_model}/{meta.tokenizer_pre or '-'} "
            f"of {meta.name}; count with the llama.cpp engine instead (--tokenizer engine)"
        )
    return Tokenizer.from_file(str(tj))
