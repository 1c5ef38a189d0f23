"""Record what Qwen Code, Kilo, Aider and Gemini CLI send: `python -m tests.integrations.capture_agents OUT AGENT...`

Runs the pinned agent exactly as its e2e test does (tests/integrations/more_agents.py), but
with a second logging stub in compactd's place that answers each compaction request in the
agent's own template, so the agent accepts it and goes on. Writes every request both stubs got
(method, path, headers, body: verbatim) to OUT/AGENT/{main,compaction}-NNN.json, and the
agent's output to OUT/AGENT/run-N.log. tests/fixtures/agents/ holds the ones chosen from it.
Loopback only; each run bounded by more_agents.TURN_TIMEOUT_S.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.integrations import more_agents as m
from tests.integrations.agent_stub import AgentStub
from tests.integrations.agents import GEMINI_CLI, KILO, QWEN_CODE, install, install_aider, integrate

QWEN_TAGS = ("primary_request_and_intent", "key_technical_concepts", "files_and_code_sections", "errors_and_fixes",
             "problem_solving", "all_user_messages", "pending_tasks", "current_work", "next_step")
GEMINI_TAGS = ("overall_goal", "active_constraints", "key_knowledge", "artifact_trail", "file_system_state",
               "recent_actions", "task_state")
REPLIES = {
    "qwen-code": "<analysis>CAPTURE</analysis>\n<state_snapshot>\n"
                 + "".join(f"<{t}>CAPTURE-{t}</{t}>\n" for t in QWEN_TAGS) + "</state_snapshot>",
    "gemini": "<state_snapshot>\n" + "".join(f"<{t}>CAPTURE-{t}</{t}>\n" for t in GEMINI_TAGS) + "</state_snapshot>",
    "kilo": "## Objective\nCAPTURE\n\n## Important Details\n- CAPTURE\n\n## Work State\n### Completed\n- CAPTURE\n"
            "### Active\n- CAPTURE\n### Blocked\n- none\n\n## Next Move\nCAPTURE\n\n## Relevant Files\n- foo.py",
    "aider": "I asked you to run the tests (CAPTURE-SUMMARY).",
}
# Aider's whole-file edit format, the bug fixed: the commit that follows asks the weak model for a message.
AIDER_FIX = "foo.py\n```\ndef foo():\n    return 2\n```\n"


def capture(agent: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"capture-{agent}-") as tmp, \
            AgentStub(m.COMMAND, compaction_reply=REPLIES[agent]) as compaction:
        root = Path(tmp)
        work, home = m.project(root), root / "home"
        inflate = {"kilo": m.KILO_INFLATED, "qwen-code": m.QWEN_INFLATED, "gemini": m.GEMINI_INFLATED}.get(agent)
        stub = AgentStub(m.COMMAND, inflate_once=inflate, again_prompt=m.AGAIN if agent == "gemini" else None,
                         forward_prefix="compactd-", forward_url=compaction.base,
                         )
        with stub:
            if agent == "kilo":
                (work / "kilo.json").write_text(json.dumps(m.kilo_config(stub.url), indent=1))
                integrate("kilo", work, "--url", compaction.base)
                runs = m.kilo_turns(install(KILO), work, m.kilo_env(home, work))
            elif agent == "qwen-code":
                env = m.qwen_env(home, work, m.qwen_settings(stub.url))
                integrate("qwen-code", work, "--global", "--url", compaction.base, env={"HOME": str(home)})
                runs = m.qwen_turns(install(QWEN_CODE), work, env)
            elif agent == "gemini":
                runs = m.gemini_turns(install(GEMINI_CLI), work, m.gemini_env(home, work, stub.base, alias=m.GEMINI_COMPACTION))
            else:
                exe = install_aider()
                m.aider_files(work)
                integrate("aider", work, "--url", compaction.base)
                env = m.aider_env(home, work, stub.url)
                runs = m.aider_turns(exe, work, env)
                # A commit: the weak model writes its message.
                subprocess.run(["git", "init", "-q"], cwd=work, check=True)
                subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init",
                                "--allow-empty"], cwd=work, check=True)
                stub.reply = AIDER_FIX
                runs.append(m.run(m.aider_argv(exe, "Fix foo.py so the test passes.", 8192), work, env))
        for i, done in enumerate(runs):
            (out / f"run-{i}.log").write_text(f"argv={done.args}\nrc={done.returncode}\n--- stdout\n{done.stdout}\n"
                                              f"--- stderr\n{done.stderr}")
        for name, server in (("main", stub), ("compaction", compaction)):
            for i, req in enumerate(server.requests):
                (out / f"{name}-{i:03d}.json").write_text(json.dumps(req, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    for name in sys.argv[2:]:
        capture(name, Path(sys.argv[1]) / name)
