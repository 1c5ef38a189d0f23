"""Bundled weights are verified: a model part that differs by one byte from the pinned release
is refused with a clear message (library and CLI), never loaded. The parts are the real ones
installed with compactd[models]; only the last is copied to a temp dir and altered."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from backends.base import BackendError
from backends.models import BUNDLED, FAST_MODEL, BundledModel, resolve
from worker.cli import main

FLIPPED_OFFSET = 4096  # inside the tensor data of the last part, far from any header


def tampered_model(tmp_path: Path) -> BundledModel:
    """FAST_MODEL, its last part replaced by a copy with one byte flipped."""
    original = BUNDLED[FAST_MODEL]
    parts = original.part_paths()
    copy = tmp_path / "parts" / parts[-1].name
    copy.parent.mkdir()
    shutil.copyfile(parts[-1], copy)
    with copy.open("r+b") as f:
        f.seek(FLIPPED_OFFSET)
        byte = f.read(1)[0]
        f.seek(FLIPPED_OFFSET)
        f.write(bytes([byte ^ 0xFF]))
    assert copy.stat().st_size == parts[-1].stat().st_size  # same size: only the sha256 can tell
    paths = [*parts[:-1], copy]

    class Tampered(BundledModel):
        def part_paths(self) -> list[Path]:
            return paths

    return Tampered(**{f.name: getattr(original, f.name) for f in dataclasses.fields(original)})


@pytest.fixture
def tampered(tmp_path, monkeypatch):
    if not BUNDLED[FAST_MODEL].installed():
        pytest.skip(f"{FAST_MODEL} is not installed")
    model = tampered_model(tmp_path)
    monkeypatch.setenv("COMPACTD_CACHE_DIR", str(tmp_path / "cache"))  # no verified copy to reuse
    monkeypatch.setitem(BUNDLED, FAST_MODEL, model)
    return model


def test_a_flipped_byte_in_a_part_is_refused(tampered):
    with pytest.raises(BackendError) as info:
        resolve(FAST_MODEL)
    message = str(info.value)
    assert message.startswith(f"model {FAST_MODEL}: assembled file does not match the pinned release")
    assert f"size {tampered.size} vs {tampered.size}" in message and tampered.sha256[:12] in message
    assert message.endswith("refusing to use it")
    models = Path(str(tampered.cache_path)).parent
    assert list(models.iterdir()) == []  # nothing half-written or stamped stays in the cache


def test_the_cli_refuses_it_in_one_line(tampered, capsys, tmp_path):
    transcript = tmp_path / "t.txt"
    transcript.write_text("hello")
    assert main(["count", "--model", FAST_MODEL, str(transcript)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match the pinned release" in err[0] and "refusing to use it" in err[0]
