"""The real agents the integration tests drive, installed from npm (Aider: PyPI) at pinned versions.

Each agent is installed once into its own prefix under a cache dir (COMPACTD_AGENTS_DIR, by
default the user cache's `compactd/agents`), so `make test` pays for the download once per
machine; a lock file keeps two test processes from installing the same one at once. A test
skips, with the reason, only where `node`/`npm` are missing. Aider is a Python package: it gets
its own venv in the cache (its pins would fight compactd's), made by the interpreter this
venv was made from, with pip's own cache.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

NPM_INSTALL_TIMEOUT_S = 900  # opencode-ai pulls a ~100 MB platform binary on a cold cache


@dataclass(frozen=True)
class Agent:
    package: str
    version: str
    bin: str  # the executable npm links under node_modules/.bin


# The versions the agents-as-clients research ran; bump together with a fresh capture.
OPENCODE = Agent("opencode-ai", "1.18.33", "opencode")
PI = Agent("@mariozechner/pi-coding-agent", "0.73.1", "pi")
CODEX = Agent("@openai/codex", "0.171.0", "codex")
CLAUDE_CODE = Agent("@anthropic-ai/claude-code", "2.1.197", "claude")
# The versions the agents-more research ran (issue 25); Kilo 7.8.1's platform packages are
# missing from the registry, 7.7.7 installs.
QWEN_CODE = Agent("@qwen-code/qwen-code", "0.24.4", "qwen")
KILO = Agent("@kilocode/cli", "7.7.7", "kilo")
GEMINI_CLI = Agent("@google/gemini-cli", "0.61.0", "gemini")
AIDER = Agent("aider-chat", "0.86.2", "aider")  # PyPI: install_aider()
PIP_INSTALL_TIMEOUT_S = 900  # aider-chat pulls ~150 packages (litellm, tree-sitter, numpy) on a cold cache


def agents_dir() -> Path:
    override = os.environ.get("COMPACTD_AGENTS_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("compactd")) / "agents"


def install(agent: Agent) -> Path:
    """The agent's executable, installing it first if this machine has not yet."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the real agents")
    prefix = agents_dir() / f"{agent.package.replace('/', '__')}@{agent.version}"
    exe = prefix / "node_modules" / ".bin" / agent.bin
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(prefix),
                 f"{agent.package}@{agent.version}"],
                check=True, timeout=NPM_INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL,
            )
    if not exe.exists():
        raise RuntimeError(f"npm installed {agent.package}@{agent.version} but {exe} is missing")
    return exe


def install_aider(agent: Agent = AIDER) -> Path:
    """Aider's executable, in its own venv under the cache dir (created on first use)."""
    prefix = agents_dir() / f"{agent.package}@{agent.version}"
    venv = prefix / "venv"
    exe = venv / "bin" / agent.bin
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            base = Path(sys.base_prefix) / "bin" / "python3"
            subprocess.run([str(base if base.exists() else sys.executable), "-m", "venv", "--clear", str(venv)],
                           check=True, timeout=120, stdin=subprocess.DEVNULL)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", f"{agent.package}=={agent.version}"],
                           check=True, timeout=PIP_INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if not exe.exists():
        raise RuntimeError(f"pip installed {agent.package}=={agent.version} but {exe} is missing")
    return exe


# -- set-up as README says: `compactd integrate AGENT` in the project, the venv not on PATH --------

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # where `compactd` lives (`make demo`: .venv/bin)


def bare_path() -> str:
    """PATH without the venv's bin dir: `compactd` is not a command there (the user never
    activated the venv)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != VENV_BIN.resolve())
    assert shutil.which("compactd", path=path) is None, path
    return path


def checkout_env(**extra: str) -> dict[str, str]:
    """For what runs compactd's code (integrate, the hook it writes): PYTHONPATH names this
    checkout, since the venv's editable install may be another checkout's."""
    return {"PYTHONPATH": str(REPO), **extra}


def integrate(agent: str, project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """`compactd integrate AGENT ARGS` run as README says: the venv's interpreter, cwd the
    project (outside the repository), PATH without the venv; its stdout."""
    assert not project.resolve().is_relative_to(REPO), project
    done = subprocess.run([sys.executable, "-m", "worker.cli", "integrate", agent, *args], cwd=project,
                          env={"PATH": bare_path(), "HOME": str(project), **(env or {}), **checkout_env()},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout.startswith("wrote: "), (done.stdout, done.stderr)
    return done.stdout
