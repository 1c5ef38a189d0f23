"""GGUF → MLX model directory, without torch.

Recipe (measured in shared/research/feasibility-torchfree-paths.md): every GGUF tensor is
dequantized to float32 with `gguf.quants.dequantize`, renamed to the HuggingFace layout that
mlx-lm's model classes load, and streamed into one `model.safetensors` (the header is
written first from the known shapes, then one tensor at a time, so only one dequantized
tensor is in memory). Qwen2 needs no q/k un-permute: llama.cpp's converter only renames
qwen2 tensors (the permute is in its LlamaModel) and both sides use NEOX rope.

The tokenizer is the exact `tokenizers` rebuild of the GGUF vocabulary (no NFC normalizer,
same ids as llama.cpp), not a transformers tokenizer; tokenizer_config.json carries the
GGUF's own chat template, so the MLX backend renders and counts exactly as llama.cpp does.

Optional 4-bit quantization uses mlx-lm's own `load_model` / `quantize_model` /
`save_model` / `save_config` (not `mlx_lm.convert`, which would re-save the tokenizer through
transformers' Qwen2Tokenizer and add NFC). Everything is written into a temporary sibling
directory and renamed into place at the end: an interrupted convert leaves nothing
half-written under `out_dir`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .base import BackendError
from .gguf_meta import check_gguf_file, read_meta, tokenizer_json_path

Progress = Callable[[int, int], None]

SUPPORTED_ARCHITECTURES = ("qwen2",)
DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2}

# GGUF block-tensor suffix → HF module path, for qwen2 (q/k/v carry biases, o_proj does not).
_BLOCK_MAP = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

# Token texts llama.cpp treats as end-of-generation (llama-vocab.cpp), so MLX stops where
# llama.cpp stops; only those present in the vocabulary as control tokens are used.
_EOG_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
              "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
_TOKEN_TYPE_CONTROL = 3


@dataclass
class _Tensor:
    gguf_name: str
    name: str
    shape: tuple[int, ...]  # HF layout (out_features, in_features) = reversed GGUF ne
    source: Any  # the gguf ReaderTensor


def hf_name(gguf_name: str) -> str:
    """The HF/mlx-lm parameter name of a qwen2 GGUF tensor; BackendError if unknown."""
    if gguf_name in _TOP_MAP:
        return _TOP_MAP[gguf_name]
    if gguf_name.startswith("blk."):
        _, idx, rest = gguf_name.split(".", 2)
        if idx.isdigit() and rest in _BLOCK_MAP:
            return f"model.layers.{idx}.{_BLOCK_MAP[rest]}"
    raise BackendError(f"unexpected tensor {gguf_name!r} for a qwen2 GGUF; refusing to guess its mapping")


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _f32(x: float) -> float:
    """A float32 metadata value as its shortest decimal (9.99999997e-07 → 1e-06)."""
    return float(str(np.float32(x)))


def _open(gguf_path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(gguf_path))
    except Exception as exc:  # noqa: BLE001 - a broken file is one line for the user
        raise BackendError(f"cannot read GGUF {gguf_path} (truncated or corrupt?): {exc}") from None


def _check_extents(reader: Any, gguf_path: Path) -> None:
    # GGUFReader memory-maps lazily; a file cut inside the tensor data must be refused here,
    # not discovered as a numpy error halfway through the conversion.
    size = gguf_path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise BackendError(
                f"GGUF {gguf_path} is truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, "
                f"file has {size}"
            )


def _plan(reader: Any) -> list[_Tensor]:
    plan = []
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        plan.append(_Tensor(t.name, hf_name(t.name), shape, t))
    names = {p.name for p in plan}
    for required in ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.weight"):
        if required not in names:
            raise BackendError(f"GGUF lacks the tensor for {required}; not a complete qwen2 model")
    return plan


def build_config(reader: Any, meta: Any, plan: list[_Tensor], dtype: str) -> dict[str, Any]:
    """config.json for mlx-lm's qwen2 ModelArgs, from the GGUF metadata."""
    arch = meta.architecture
    h = lambda key, default=None: _field(reader, f"{arch}.{key}", default)  # noqa: E731
    scaling = h("rope.scaling.type")
    if scaling not in (None, "none"):
        raise BackendError(f"GGUF uses rope scaling {scaling!r}; the MLX converter does not map rope scaling yet")
    embed = next(p for p in plan if p.name == "model.embed_tokens.weight")
    n_layers = int(h("block_count"))
    layers = {int(p.gguf_name.split(".")[1]) for p in plan if p.gguf_name.startswith("blk.")}
    if layers != set(range(n_layers)):
        raise BackendError(f"GGUF says {n_layers} blocks but holds tensors for {len(layers)}; refusing")
    bos_id = _field(reader, "tokenizer.ggml.bos_token_id")
    eos_id = _field(reader, "tokenizer.ggml.eos_token_id")
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": int(h("embedding_length")),
        "intermediate_size": int(h("feed_forward_length")),
        "num_attention_heads": int(h("attention.head_count")),
        "num_key_value_heads": int(h("attention.head_count_kv", h("attention.head_count"))),
        "num_hidden_layers": n_layers,
        "rms_norm_eps": _f32(h("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": _f32(h("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(h("context_length", 32768)),
        "vocab_size": embed.shape[0],
        # mlx-lm's qwen2 defaults to tied embeddings and would drop lm_head in sanitize():
        # say explicitly whether the GGUF has its own output matrix.
        "tie_word_embeddings": not meta.has_output_weight,
        "hidden_act": "silu",
        "use_sliding_window": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": dtype,
        "compactd": {
            "converted_from": Path(meta.path).name,
            "source_name": meta.name,
            "source_quantization": meta.quantization,
            "converter": "compactd.backends.mlx_convert",
        },
    }


def _eog_ids(reader: Any) -> list[int]:
    tokens = _field(reader, "tokenizer.ggml.tokens", []) or []
    types = _field(reader, "tokenizer.ggml.token_type", []) or []
    ids = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        v = _field(reader, f"tokenizer.ggml.{key}")
        if v is not None:
            ids.append(int(v))
    index = {t: i for i, t in enumerate(tokens) if t in _EOG_TEXTS}
    for text in _EOG_TEXTS:
        i = index.get(text)
        if i is not None and i < len(types) and types[i] == _TOKEN_TYPE_CONTROL:
            ids.append(i)
    return list(dict.fromkeys(ids))


def _token_text(reader: Any, key: str) -> str | None:
    tokens = _field(reader, "tokenizer.ggml.tokens", []) or []
    i = _field(reader, f"tokenizer.ggml.{key}")
    return tokens[i] if i is not None and 0 <= i < len(tokens) else None


def _to_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype=np.float16)
    # bfloat16 by round-to-nearest-even on the float32 bit pattern (numpy has no bf16 type).
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


# Rows dequantized at a time: gguf's numpy dequantizers build several full-size temporaries,
# so the 151936-row embedding done in one go costs ~2 GB; in slices it costs a few MB.
_ROWS_PER_SLICE = 8192


def _dequantized(p: _Tensor, dtype: str) -> Iterator[np.ndarray]:
    """The tensor in `dtype`, as consecutive row slices (HF layout, C order)."""
    from gguf.quants import dequantize

    t = p.source
    data = t.data
    rows = data.shape[0] if data.ndim >= 2 else 1
    for start in range(0, rows, _ROWS_PER_SLICE):
        part = data[start : start + _ROWS_PER_SLICE] if data.ndim >= 2 else data
        try:
            a = dequantize(part, t.tensor_type)
        except NotImplementedError:
            raise BackendError(f"gguf cannot dequantize {t.tensor_type.name} (tensor {t.name})") from None
        yield _to_dtype(a, dtype)


def write_safetensors(path: Path, plan: list[_Tensor], dtype: str, progress: Progress | None = None) -> None:
    """Stream the dequantized tensors into one safetensors file, one row slice in memory at a time.
    The format is an 8-byte little-endian header length, a JSON header (padded to 8 bytes)
    with each tensor's dtype/shape/byte range, then the raw little-endian data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for p in plan:
        n = int(np.prod(p.shape)) * _ITEMSIZE[dtype]
        header[p.name] = {"dtype": dtype, "shape": list(p.shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    total = sum(p.source.n_bytes for p in plan)
    done = 0
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for p in plan:
            begin, end = header[p.name]["data_offsets"]
            written = 0
            for data in _dequantized(p, dtype):
                # safetensors is little-endian; memoryview writes without another full copy.
                data = data.astype(data.dtype.newbyteorder("<"), copy=False)
                f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
                written += data.nbytes
            if written != end - begin:
                raise BackendError(f"tensor {p.gguf_name} dequantized to {written} bytes, expected {end - begin}")
            done += p.source.n_bytes
            if progress:
                progress(done, total)


def _tokenizer_facts(reader: Any) -> dict[str, Any]:
    """What tokenizer_config/generation_config need from the GGUF, read while it is open."""
    return {
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"),
        "pad_token": _token_text(reader, "padding_token_id"),
        "eos_token_ids": _eog_ids(reader),
    }


def _write_tokenizer_files(out: Path, meta: Any, tokenizer_json: Path, facts: dict[str, Any]) -> None:
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    tok_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": meta.add_bos,
        "add_eos_token": False,
        "bos_token": meta.bos_token or None,
        "eos_token": meta.eos_token or None,
        "pad_token": facts["pad_token"],
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": meta.context_length,
    }
    if meta.chat_template:
        tok_config["chat_template"] = meta.chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False))
    gen = {
        "bos_token_id": facts["bos_token_id"],
        "eos_token_id": facts["eos_token_ids"],
        "pad_token_id": facts["pad_token_id"],
        "do_sample": False,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


def _quantize_into(dense: Path, out: Path, config: dict[str, Any], dtype: str, bits: int, group_size: int) -> dict:
    """Quantize the dense model in `dense` with mlx-lm's own utilities, saving weights into `out`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # mlx_lm imports transformers; nothing may reach the hub
    try:
        import mlx.core as mx
        from mlx.utils import tree_map
        from mlx_lm.utils import load_model, quantize_model, save_model
    except ImportError:
        raise BackendError("quantizing needs mlx-lm: pip install 'compactd[mlx]'") from None
    model, _ = load_model(dense, lazy=True)
    target = getattr(mx, dtype)
    model.update(tree_map(lambda v: v.astype(target) if mx.issubdtype(v.dtype, mx.floating) else v,
                          model.parameters()))
    with contextlib.redirect_stdout(io.StringIO()):  # quantize_model prints an [INFO] line
        model, qconfig = quantize_model(model, dict(config), group_size, bits)
    save_model(out, model, donate_model=True)
    return qconfig


def _stale_partials(out_dir: Path) -> None:
    # A convert killed outright (SIGKILL, power loss) cannot clean up after itself; remove
    # its hidden temp dirs next time, when the owning process is gone.
    for d in out_dir.parent.glob(f".{out_dir.name}.partial-*"):
        try:
            pid = int(d.name.rsplit("-", 2)[-2])
            os.kill(pid, 0)
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


def convert_gguf_to_mlx(
    gguf_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    quantize: bool = False,
    dtype: str = "float32",
    progress: Progress | None = None,
    overwrite: bool = False,
    q_bits: int = 4,
    q_group_size: int = 64,
) -> Path:
    """Convert a qwen2 GGUF into an MLX model directory and return its path.

    dtype: storage dtype of the dense weights (float32, float16 or bfloat16); the MLX backend
    runs in float32 on CPU whatever is stored. quantize: additionally quantize the linear
    layers with mlx-lm (affine, q_bits/q_group_size). Note the GGUF is already quantized, so
    this requantizes (lossy twice). progress(done, total): GGUF tensor bytes dequantized.
    """
    if dtype not in DTYPES:
        raise BackendError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    src = check_gguf_file(gguf_path)
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise BackendError(f"output path exists and is not a directory: {out}")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise BackendError(f"output directory {out} exists and is not empty (pass overwrite=True to replace it)")
    meta = read_meta(src)  # also refuses a file whose metadata cannot be read
    if meta.architecture not in SUPPORTED_ARCHITECTURES:
        raise BackendError(
            f"cannot convert architecture {meta.architecture!r} to MLX: supported are "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (llama needs a q/k un-permute that is not verified here)"
        )
    tokenizer_json = tokenizer_json_path(src)
    if tokenizer_json is None:
        raise BackendError(f"no exact tokenizer rebuild for {meta.name} ({meta.tokenizer_model}/{meta.tokenizer_pre})")

    reader = _open(src)
    _check_extents(reader, src)
    plan = _plan(reader)
    config = build_config(reader, meta, plan, dtype)
    facts = _tokenizer_facts(reader)

    out.parent.mkdir(parents=True, exist_ok=True)
    _stale_partials(out)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}-{time.monotonic_ns()}"
    dense = out.parent / f".{out.name}.partial-{os.getpid()}-dense{time.monotonic_ns()}"
    try:
        tmp.mkdir()
        if quantize:
            dense.mkdir()
            write_safetensors(dense / "model.safetensors", plan, DTYPES[dtype], progress)
            (dense / "config.json").write_text(json.dumps(config, indent=2))
            del reader, plan  # release the GGUF memory map before loading into MLX
            config = _quantize_into(dense, tmp, config, dtype, q_bits, q_group_size)
            shutil.rmtree(dense)
            from mlx_lm.utils import save_config

            save_config(config, tmp / "config.json")
        else:
            write_safetensors(tmp / "model.safetensors", plan, DTYPES[dtype], progress)
            (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        _write_tokenizer_files(tmp, meta, tokenizer_json, facts)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(dense, ignore_errors=True)
        raise
    return out


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished temp dir to `out`, replacing an existing (empty or overwritten) one."""
    if not out.exists():
        os.rename(tmp, out)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
