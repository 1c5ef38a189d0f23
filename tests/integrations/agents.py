"""The real agents the integration tests drive, installed from npm at pinned versions.

Each agent is installed once into its own prefix under a cache dir (COMPACTD_AGENTS_DIR, by
default the user cache's `compactd/agents`), so `make test` pays for the download once per
machine; a lock file keeps two test processes from installing the same one at once. A test
skips, with the reason, only where `node`/`npm` are missing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
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
