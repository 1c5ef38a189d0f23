"""How Qwen Code, Kilo, Aider and Gemini CLI run headless and offline against loopback servers.

Shared by their e2e tests and by `capture_agents.py` (which recorded tests/fixtures/agents/):
each agent's config with its main model on the stub and its compaction model on `compactd_url`,
its environment (a temp home, the venv not on PATH, every phone-home off), and the turns that
make it compact. Found by the agents-more research (shared/research/agents-more.md, issue 25)
and checked live with the pinned versions in tests/integrations/agents.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.integrations.agents import bare_path

COMMAND = "python3 test_foo.py"
ERROR_LINE = "AssertionError: foo() returned 1, expected 2"
PROMPT = f"Run {COMMAND} and fix the bug in foo.py. Keep the function signature unchanged."
AGAIN = "Go on."
COMPACTD_MODEL = "qwen2.5-coder-1.5b"  # the name the agents' configs give compactd's model
TURN_TIMEOUT_S = 900  # one turn, with one compaction by compactd's 0.5B on a busy 2-core CPU


def project(root: Path) -> Path:
    """A project outside the clone: foo.py with the bug, and the test that shows it."""
    work = root / "work"
    work.mkdir(parents=True)
    (work / "foo.py").write_text("def foo():\n    return 1\n")
    (work / "test_foo.py").write_text(
        "from foo import foo\n\nassert foo() == 2, f\"foo() returned {foo()}, expected 2\"\nprint('ok')\n")
    return work


def base_env(home: Path, work: Path, drop: tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "COMPACTD_", "OPENAI_", "GEMINI_", "GOOGLE_", "QWEN_", "KILO", "AIDER_",
                                *drop))}
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        (home / name.lower()).mkdir(parents=True, exist_ok=True)
        env[f"XDG_{name}_HOME"] = str(home / name.lower())
    env.update(PATH=bare_path(), HOME=str(home), PWD=str(work), NO_COLOR="1", CI="1")
    return env


def run(argv: list[str], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=TURN_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# -- Kilo CLI 7.7.7: opencode's config, agent.compaction.model -----------------------------------

KILO_CONTEXT = 20_000
KILO_OUTPUT = 2_000
KILO_INFLATED = KILO_CONTEXT - 100  # over context - output - reserved: Kilo compacts before the next turn


def kilo_config(main_url: str) -> dict[str, Any]:
    """The project's kilo.json before `compactd integrate kilo`: the user's main model and choices."""
    return {
        "$schema": "https://app.kilo.ai/config.json",
        "provider": {
            "mainstub": {"npm": "@ai-sdk/openai-compatible", "name": "stub",
                         "options": {"baseURL": main_url, "apiKey": "none"},
                         "models": {"main-model": {"name": "stub", "tool_call": True,
                                                   "limit": {"context": KILO_CONTEXT, "output": KILO_OUTPUT}}}},
        },
        "model": "mainstub/main-model",
        "small_model": "mainstub/main-model",
        "compaction": {"auto": True, "tail_turns": 0},
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def kilo_env(home: Path, work: Path) -> dict[str, str]:
    env = base_env(home, work, drop=("OPENCODE",))
    env.update(KILO_DISABLE_MODELS_FETCH="1", KILO_DISABLE_SHARE="1", KILO_DISABLE_SESSION_INGEST="1",
               KILO_DISABLE_CLAUDE_CODE="1", KILO_DISABLE_DEFAULT_PLUGINS="1", KILO_DISABLE_AUTOUPDATE="1",
               KILO_DISABLE_LSP_DOWNLOAD="1", KILO_TELEMETRY_DISABLED="1")
    return env


def kilo_turns(exe: Path, work: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    return [run([str(exe), "run", PROMPT], work, env), run([str(exe), "run", "--continue", AGAIN], work, env)]


# -- Qwen Code 0.24.4: compactionModel, a modelProviders entry with its own baseUrl -------------

QWEN_WINDOW = 128_000  # auto compaction at min(0.85 W, W - 33000) = 95000 reported tokens
QWEN_INFLATED = 100_000


def qwen_settings(main_url: str) -> dict[str, Any]:
    """~/.qwen/settings.json before `compactd integrate qwen-code --global`: the user's main model."""
    return {
        "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
        "model": {"name": "main-model"},
        "modelProviders": {"openai": [
            {"id": "main-model", "name": "main (stub)", "baseUrl": main_url, "envKey": "MAIN_API_KEY",
             "generationConfig": {"contextWindowSize": QWEN_WINDOW}},
        ]},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }


def qwen_env(home: Path, work: Path, settings: dict[str, Any]) -> dict[str, str]:
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings, indent=1))
    env = base_env(home, work)
    env.update(MAIN_API_KEY="loopback-only", COMPACTD_API_KEY="none")
    return env


def qwen_turns(exe: Path, work: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    return [run([str(exe), "--yolo", PROMPT], work, env), run([str(exe), "--yolo", "--continue", AGAIN], work, env)]


# -- Gemini CLI 0.61.0: the Gemini API only, one base URL (GOOGLE_GEMINI_BASE_URL) for all --------
# README's set-up: the base URL is compactd's, compactd forwards every non-compaction request to
# its --gemini-upstream (here the stub) and answers the compaction, recognized by its structure
# under whatever model or `chat-compression-*` alias it names.

GEMINI_MAIN = "gemini-2.5-flash"
GEMINI_COMPACTION = f"compactd-{COMPACTD_MODEL}"  # the alias target the captures used
GEMINI_INFLATED = 600_000  # over the default compressionThreshold 0.5 of its 1,048,576-token limit


def gemini_settings(alias: str | None = None) -> dict[str, Any]:
    """What Gemini CLI needs to run headless and offline: API-key auth, no folder trust prompt,
    no telemetry, no update check, the main model pinned. `alias`: the capture's set-up, where
    `chat-compression-2.5-flash` names a model a router sends elsewhere (compactd needs none)."""
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "model": {"name": GEMINI_MAIN},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }
    if alias:
        settings["modelConfigs"] = {"customAliases": {"chat-compression-2.5-flash": {"modelConfig": {"model": alias}}}}
    return settings


def gemini_env(home: Path, work: Path, base_url: str, alias: str | None = None) -> dict[str, str]:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(gemini_settings(alias), indent=1))
    env = base_env(home, work)
    env.update(GEMINI_API_KEY="loopback-only", GOOGLE_GEMINI_BASE_URL=base_url, GEMINI_CLI_NO_RELAUNCH="1")
    return env


def gemini_turns(exe: Path, work: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    return [run([str(exe), "--yolo", "-p", PROMPT], work, env),
            run([str(exe), "--yolo", "--resume", "latest", "-p", AGAIN], work, env)]


# -- Aider 0.86.2: --weak-model, its api_base in .aider.model.settings.yml -----------------------

AIDER_MAIN = "openai/main-model"
AIDER_WEAK = f"openai/{COMPACTD_MODEL}"


def aider_files(work: Path) -> None:
    """Both models' limits (litellm knows neither name), as Aider's docs say to give them; the
    weak model's server is `compactd integrate aider`'s."""
    limits = {"max_input_tokens": 32000, "max_output_tokens": 4096, "input_cost_per_token": 0,
              "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}
    (work / ".aider.model.metadata.json").write_text(json.dumps({AIDER_MAIN: limits, AIDER_WEAK: limits}, indent=1))


def aider_env(home: Path, work: Path, main_url: str) -> dict[str, str]:
    env = base_env(home, work)
    env.update(OPENAI_API_BASE=main_url, OPENAI_API_KEY="loopback-only", LITELLM_LOCAL_MODEL_COST_MAP="True",
               AIDER_ANALYTICS_DISABLE="1", AIDER_CHECK_UPDATE="false", AIDER_SHOW_RELEASE_NOTES="false")
    return env


def aider_argv(exe: Path, message: str | Path, history_tokens: int, *extra: str) -> list[str]:
    """`message` a line (--message) or a file (--message-file): Aider logs its argv into
    .aider.chat.history.md, and the lines of a multi-line argument would come back from there as
    an assistant message."""
    message_args = ["--message-file", str(message)] if isinstance(message, Path) else ["--message", message]
    return [str(exe), "--model", AIDER_MAIN, "--weak-model", AIDER_WEAK, "--yes-always", "--no-stream",
            "--restore-chat-history", "--max-chat-history-tokens", str(history_tokens), "--map-tokens", "0",
            "--no-show-model-warnings", "--no-pretty", "--no-fancy-input", *extra, *message_args, "foo.py"]


def aider_turns(exe: Path, work: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """Aider's main model runs no tools: the user pastes what the failing command printed (run
    here, for real), under a history budget that keeps it whole. The second run restores that
    history (.aider.chat.history.md) under a budget of 100 tokens, so Aider summarizes it with
    the weak model at start-up, and its turn carries the summary.

    Why not --auto-test in one run: .aider.chat.history.md keeps command output as tool lines,
    which --restore-chat-history drops, and Aider 0.86.2 discards every summary it makes during
    a run (move_back_cur_messages appends "I updated the files." after the summarizer's
    snapshot, so summarize_end finds done_messages changed): only the start-up one lands."""
    out = subprocess.run(COMMAND.split(), cwd=work, capture_output=True, text=True, timeout=60)
    # No blank line: Aider logs one as "####", which its history parser then reads as the assistant's.
    printed = "\n".join(line for line in (out.stdout + out.stderr).splitlines() if line.strip())
    pasted = work.parent / "message.txt"  # outside the project: not a file Aider would add
    pasted.write_text(f"I ran `{COMMAND}` and got:\n{printed}\n{PROMPT.split('and ', 1)[1]}")
    return [run(aider_argv(exe, pasted, 8192, "--no-git"), work, env),
            run(aider_argv(exe, AGAIN, 100, "--no-git"), work, env)]
