"""The layering the architecture promises, checked on the source: http/ talks to the service
(never to the pipeline), config.py is a leaf, and `compactd --version` loads neither the service
nor the pipeline (nor does anything else the CLI answers before it needs them)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "worker"


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved to absolute names."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("path", sorted((WORKER / "http").glob("*.py")), ids=lambda p: p.name)
def test_http_never_imports_the_pipeline(path):
    assert not {m for m in imported_modules(path) if m.startswith("worker.pipeline")}


def test_config_is_a_leaf():
    assert not {m for m in imported_modules(WORKER / "config.py") if m.startswith(("worker", "backends"))}


def loaded_by(*args: str, stdin: str = "") -> tuple[subprocess.CompletedProcess, set[str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "worker.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=120)
    return done, {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}


def test_version_loads_neither_the_service_nor_the_pipeline():
    done, loaded = loaded_by("--version")
    assert done.returncode == 0 and done.stdout.startswith("compactd ")
    assert "worker.config" in loaded  # the flags are built from Settings
    assert not {m for m in loaded if m.startswith(("worker.service", "worker.pipeline"))}


def test_the_fail_open_hook_loads_no_service():
    done, loaded = loaded_by("hook", "claude-code", stdin="not json")
    assert done.returncode == 1 and "not JSON" in done.stderr
    assert not {m for m in loaded if m.startswith("worker.service")}
