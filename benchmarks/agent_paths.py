"""Each agent's own compaction against the same agent through compactd, on its real transcript.

    python -m benchmarks.agent_paths [--no-model] [--quick] [--out benchmarks/results]
    python -m benchmarks.agent_paths --latency [--repeats 5]   # the answer's latency per door

Why: issue 13 asks, for the same real transcript, what each agent's own compaction kept and
what it kept through compactd (exact errors, paths, commands, constraints). The real set of
benchmarks/fidelity_real.py compacts whole transcripts through `compact()`; here each agent's
integration is driven the way the agent drives it, on the transcript CUT just before the
agent's own compaction, so compactd sees what the agent's own summarizer saw:

- Claude Code (the four cc-* transcripts; cut before the `compact_boundary` line): Claude Code
  summarizes with its own model and cannot hand that over, so compactd feeds it through hooks.
  `compactd hook claude-code` runs as a subprocess (as Claude Code runs it) with the PreCompact
  input on stdin: its printed text is the facts Claude's summarizer is told to keep
  ("precompact"). SessionStart (source `compact`) reads the transcript as Claude Code leaves it
  after the compaction (the cut plus the boundary and the summary lines): its additionalContext
  is added to the next turn, so what Claude continues from is its own summary plus that context
  ("own+session_start", this agent's "through compactd"). Claude's summary written with the
  PreCompact facts cannot be rerun here (it needs Claude).
- opencode (opencode-darkfactory; cut before message 38, the user's compaction part): opencode's
  compaction request (the captured system prompt, the `<conversation>` blob serialized as
  opencode's compaction.ts does: `[User]:` with `[Attached mime: name]` lines, `[Assistant]:`,
  `[Assistant reasoning]:`, `[Assistant tool call]: name(json)`, `[Tool result]:` cut at 2,000
  characters + `[truncated]`, `[Tool error]:`; messages joined by a blank line) is POSTed to
  /v1/chat/completions with its x-session-id, streamed; the reply is scored. All 38 messages are
  sent, as opencode 1.2.5 (the version that wrote this session) summarized them; a current
  opencode would keep a recent tail out of the request and verbatim in its context.
- Codex (codex-desktop-sessionbridge; cut before its `compacted` record, line 877): the
  /v1/responses request in the captured shape (every `response_item` payload before the record
  as `input`, then Codex's compaction prompt; `request_kind: compaction` in the turn metadata),
  streamed; the summary is read from the `response.output_item.done` event. Codex's own summary
  is encrypted; what is readable of it is its replacement history (the user requests verbatim,
  short assistant replies), and that is what "own" scores.
- pi (pi_large-session; no compaction entry, so pi's own summary is n/a and compactd is scored
  on all facts): the records the pi extension posts (each `message` entry, chained by
  id/parentId; the whole file stands for pi's messagesToSummarize, a real pi would keep its
  recent turns itself) to /v1/sessions/pi-<id>/messages?format=pi, then
  /compact?tail=false&wait=model (wait=instant without the model); the checkpoint's
  summary_text is scored.

The HTTP paths run in-process on the real app (create_app, starlette's TestClient, an in-memory
store, no rolling summaries: the pi extension compacts right after its append), over the
bundled model's real tokenizer. Model use: the facts (errors, paths, commands, constraints)
come from compactd's deterministic ledger; the model writes only the narrative. By default each
path answers as the integration gets it: opencode, Codex and pi with the model (the default
1.5B; --quick the 0.5B), the Claude Code hook never. --no-model answers every path with the
deterministic checkpoint (the service's agent_wait "none", pi's wait=instant with its background
refinement cancelled) and never loads the weights: the backend refuses any generation and the
JSON counts attempts. The agent's own summary (benchmarks/real_facts.agent_summary_text) and
every path's text are scored by real_facts.score_text, on the facts from before the agent's
summary (pi: all facts). Each path also records `ledger`: the same facts scored on every
deterministic section compactd derives from the input it received, unbounded (Claude Code's
"own+session_start": its summary plus that), and the facts the path's text lost although the
ledger had them (a size bound cut them, or the template left them out); the headline's
"ledger unbounded" pools it. The fidelity run waits for the model (agent_wait=model), since
the narrative is what it scores.

--latency (agent_latency.json): how long each door makes its agent wait by default
(agent_wait=instant, pi's wait=instant): opencode and pi on /v1/chat/completions, the pi
extension's append + compact, Codex's /v1/responses, each on its real transcript cut at a
third, two thirds and all of it; "fresh": a session's first compaction; "refined": the
session's second one, after the background refinement of the first (on the first half) was
kept, so the answer carries its narrative. The answer path never calls the model; the
refinement's narrative is a canned answer (the refinement's own duration is not measured
here), so the weights are never loaded. p50/p95 over --repeats, the load average before and
after in the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    FIXTURES,
    N_THREADS,
    REPO,
    RESULTS_DIR,
    machine_info,
    peak_rss_mb,
    save_figure,
    write_json,
)
from benchmarks.real_facts import KINDS, RealCase, agent_summary_text, kept, load_cases, pool, score_text

AGENTS = ("claude-code", "opencode", "codex", "pi")
# The facts files' `format` per agent; the SWE-agent trajectory has no agent integration.
AGENT_FORMAT = {"claude-code": "claude-code", "opencode": "opencode", "codex": "codex", "pi": "pi"}
# codex-cli-sessionbridge has no compaction (nothing of Codex's own to compare); pi's only
# transcript has none either but is pi's only one, so it runs on all facts.
NEEDS_OWN_SUMMARY = {"claude-code": True, "opencode": True, "codex": True, "pi": False}
# --quick: one transcript per agent, the ones the agent paths were first measured on (the
# corpus has grown since; a quick run stays comparable).
QUICK_CASES = {
    "claude-code": "cc-spotter_8463c716-a2ea-4c14-9efa-87158ebd9f20",  # the one the other real-set tests use
    "opencode": "opencode-darkfactory_ses_39b7f9e89ffe7J0WzLzYrUt4eW",
    "codex": "codex-desktop-sessionbridge_019d7e8e-fef6-7481-9a1b-d8d36a852ac4",
    "pi": "pi_large-session",
}
REQUESTS = FIXTURES / "agents"  # the captured compaction requests whose shape each request copies
TOOL_RESULT_CUT = 2_000  # opencode cuts each tool output at 2,000 characters for its summarizer
TRUNCATED = "\n[truncated]"  # ... and marks the cut so (compaction.ts `truncate`)
HOOK_TIMEOUT_S = 60  # integrations/claude-code/settings.json gives each hook 60 s
HEALTH_WAIT_S = 120  # the app loads its backend in the background (the weights, with the model)
# The system record Claude Code writes right before its summary line: the PreCompact cut ends
# before it; SessionStart's transcript has it and the summary.
CC_BOUNDARY = "compact_boundary"
THROUGH = {"claude-code": "own+session_start", "opencode": "chat_completions", "codex": "responses",
           "pi": "session_compact"}  # the path each agent continues from when compactd is installed


def _say(msg: str) -> None:
    print(f"[agent-paths] {msg}", file=sys.stderr, flush=True)


# --- cuts ----------------------------------------------------------------------------------


def summary_line(case: RealCase) -> int:
    kind, _, num = (case.summary_where or "").partition(" ")
    if kind != "line":
        raise ValueError(f"{case.name}: the agent's summary is not at a line ({case.summary_where!r})")
    return int(num)


def jsonl_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def claude_code_cut(case: RealCase, tmp: Path) -> tuple[Path, Path, dict[str, Any]]:
    """(transcript at PreCompact, transcript at SessionStart, what was cut): lines before the
    compact_boundary, and those plus the boundary and the summary line."""
    lines = jsonl_lines(case.fixture)
    at = summary_line(case)
    boundary = json.loads(lines[at - 2])
    if boundary.get("subtype") != CC_BOUNDARY:
        raise ValueError(f"{case.name}: line {at - 1} is not the compact_boundary")
    before, after = tmp / f"{case.name}.precompact.jsonl", tmp / f"{case.name}.sessionstart.jsonl"
    before.write_text("\n".join(lines[: at - 2]) + "\n", encoding="utf-8")
    after.write_text("\n".join(lines[:at]) + "\n", encoding="utf-8")
    return before, after, {"where": f"lines 1-{at - 2} (before the compact_boundary at line {at - 1})",
                           "records": at - 2, "session_id": boundary.get("sessionId"), "cwd": boundary.get("cwd")}


# --- what the ledger had -------------------------------------------------------------------


def ledger_text(session: Any) -> str:
    """Every deterministic section compactd derives from `session` (the goal, constraints,
    progress, errors and commands, files), unbounded: what a path's text could at most keep
    without the model. None (a transcript with no conversation yet) derives nothing."""
    from worker.agents.claude_code import fact_sections
    from worker.pipeline.checkpoint import whole_quotes

    if session is None:
        return ""
    sections, _lang = fact_sections(session)
    return "\n".join(section.body() for section in whole_quotes(sections).values())


def ledger_check(ledger: str, text: str, facts: list[Any]) -> dict[str, Any]:
    """The unbounded ledger's score on the same facts, and the facts it has that `text` lost
    (a bound cut them, or the agent's template left them out)."""
    lost = [{"kind": f.kind, "text": f.text[:200]} for f in facts if kept(f, ledger) and not kept(f, text)]
    score = score_text(ledger, facts)
    return {"chars": len(ledger), "kept": score["kept"], "total": score["total"],
            "per_kind": {k: {"kept": v["kept"], "total": v["total"]} for k, v in score["per_kind"].items()},
            "lost_by_path": lost}


# --- Claude Code: the hook, as a subprocess ------------------------------------------------


def run_hook(payload: dict[str, Any]) -> dict[str, Any]:
    """`compactd hook claude-code` with `payload` on stdin, as Claude Code runs it."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "worker.cli", "hook", "claude-code"], input=json.dumps(payload),
                          capture_output=True, text=True, cwd=REPO, timeout=HOOK_TIMEOUT_S)
    out = done.stdout[:-1] if done.stdout.endswith("\n") else done.stdout  # print()'s newline
    return {"rc": done.returncode, "stdout": out, "stderr": done.stderr[-2000:], "bytes": len(out.encode()),
            "wall_s": round(time.perf_counter() - t0, 2)}


def claude_code_paths(case: RealCase, facts: list[Any], own: str | None, tmp: Path) -> tuple[dict[str, Any], dict]:
    from worker.agents.claude_code import MAX_OUTPUT_BYTES, load_transcript

    before, after, cut = claude_code_cut(case, tmp)
    base = {"session_id": cut["session_id"], "cwd": cut["cwd"]}
    pre = run_hook({**base, "transcript_path": str(before), "hook_event_name": "PreCompact", "trigger": "auto",
                    "custom_instructions": ""})
    start = run_hook({**base, "transcript_path": str(after), "hook_event_name": "SessionStart", "source": "compact"})
    paths: dict[str, Any] = {}
    paths["precompact"] = {"text": pre["stdout"], "rc": pre["rc"], "bytes": pre["bytes"], "wall_s": pre["wall_s"],
                           "byte_budget": MAX_OUTPUT_BYTES, "stderr": pre["stderr"],
                           "saw": "the transcript before the compact_boundary (Claude's summarizer sees the same)"}
    context = ""
    if start["rc"] == 0 and start["stdout"]:
        context = json.loads(start["stdout"])["hookSpecificOutput"]["additionalContext"]
    paths["session_start"] = {"text": context, "rc": start["rc"], "bytes": len(context.encode()),
                              "wall_s": start["wall_s"], "byte_budget": MAX_OUTPUT_BYTES, "stderr": start["stderr"],
                              "saw": "the transcript after the compaction (cut + boundary + Claude's summary)"}
    paths["own+session_start"] = {"text": f"{own or ''}\n\n{context}", "composed_of": ["own", "session_start"],
                                  "saw": "what Claude continues from with the hooks: its summary, then the context"}
    for p in paths.values():
        p["score"] = score_text(p["text"], facts)
    paths["precompact"]["ledger"] = ledger_check(ledger_text(load_transcript(before)), pre["stdout"], facts)
    after_ledger = ledger_text(load_transcript(after))
    paths["session_start"]["ledger"] = ledger_check(after_ledger, context, facts)
    # Claude's summary plus the whole ledger: what the SessionStart context could add unbounded.
    paths["own+session_start"]["ledger"] = ledger_check(f"{own or ''}\n\n{after_ledger}",
                                                        paths["own+session_start"]["text"], facts)
    return paths, cut


# --- opencode: its compaction request ------------------------------------------------------


def _truncate(text: str) -> str:
    return text if len(text) <= TOOL_RESULT_CUT else text[:TOOL_RESULT_CUT] + TRUNCATED


def opencode_serialize(message: dict[str, Any]) -> str:
    """One export message as opencode's compaction serializer writes it into `<conversation>`."""
    info, parts = message.get("info") or {}, [p for p in message.get("parts") or [] if isinstance(p, dict)]
    if info.get("role") == "user":
        text = "\n".join(p.get("text", "") for p in parts if p.get("type") == "text" and not p.get("ignored")
                         and p.get("text"))
        files = [f"[Attached {p.get('mime')}: {p.get('filename') or 'file'}]" for p in parts if p.get("type") == "file"]
        return "\n".join(([f"[User]: {text}"] if text else []) + files)
    lines: list[str] = []
    for p in parts:
        kind = p.get("type")
        if kind == "text" and p.get("text"):
            lines.append(f"[Assistant]: {p['text']}")
        elif kind == "reasoning" and p.get("text"):
            lines.append(f"[Assistant reasoning]: {p['text']}")
        elif kind == "tool":
            state = p.get("state") or {}
            lines.append(f"[Assistant tool call]: {p.get('tool')}({json.dumps(state.get('input'), separators=(',', ':'), ensure_ascii=False)})")
            if state.get("status") == "completed":
                compacted = (state.get("time") or {}).get("compacted")
                lines.append("[Tool result]: " + ("[Old tool result content cleared]" if compacted
                                                  else _truncate(str(state.get("output") or ""))))
            elif state.get("status") == "error":
                lines.append(f"[Tool error]: {state.get('error')}")
    return "\n".join(lines)


def opencode_request(case: RealCase) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """(headers, body, what was cut): the captured request with this session's conversation."""
    export = json.loads(case.fixture.read_text(encoding="utf-8"))
    summary_at = int((case.summary_where or "").partition(" ")[2])
    messages = export["messages"]
    cut = summary_at
    if any(p.get("type") == "compaction" for p in messages[summary_at - 1]["parts"]):
        cut = summary_at - 1  # the user's compaction part: the request, not the conversation
    blob = "\n\n".join(s for s in (opencode_serialize(m) for m in messages[:cut]) if s)
    captured = json.loads((REQUESTS / "opencode-compaction-request.json").read_text(encoding="utf-8"))
    body = json.loads(json.dumps(captured["body"]))
    user = body["messages"][1]["content"]
    body["messages"][1]["content"] = re.sub(r"<conversation>\n.*?\n</conversation>",
                                            lambda _m: f"<conversation>\n{blob}\n</conversation>", user, count=1,
                                            flags=re.S)
    session = str(export["info"]["id"])
    headers = {"x-session-id": session, "x-session-affinity": session, "content-type": "application/json"}
    tools = [p for m in messages[:cut] for p in m["parts"] if p.get("type") == "tool"]
    long = sum(1 for p in tools if len(str((p.get("state") or {}).get("output") or "")) > TOOL_RESULT_CUT)
    return headers, body, {"where": f"messages 0-{cut - 1} (before the compaction request at message {cut})",
                           "records": cut, "blob_chars": len(blob), "tool_results": len(tools),
                           "tool_results_cut": long}


def sse_events(text: str) -> list[dict[str, Any]]:
    out = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                out.append(json.loads(line[6:]))
    return out


def opencode_path(app: AgentApp, case: RealCase, facts: list[Any]) -> tuple[dict[str, Any], dict]:
    headers, body, cut = opencode_request(case)
    t0 = time.perf_counter()
    generations = app.backend.generations
    resp = app.client.post("/v1/chat/completions", json=body, headers=headers)
    resp.raise_for_status()
    chunks = sse_events(resp.text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    meta = next((c["compactd"] for c in chunks if c.get("compactd")), {})
    errors = [c["error"] for c in chunks if c.get("error")]
    path = {"text": text, "wall_s": round(time.perf_counter() - t0, 2), "compactd": meta, "errors": errors,
            "generations": app.backend.generations - generations, "request_chars": len(json.dumps(body)),
            "saw": "opencode's request: system prompt + <conversation> blob, tool results cut at 2,000 characters"}
    path["score"] = score_text(text, facts)
    from worker.agents import profiles

    req = profiles.recognize(body, headers)
    received = profiles.get(req.agent).read(req, body).session
    path["ledger"] = ledger_check(ledger_text(received), text, facts)
    export = json.loads(case.fixture.read_text(encoding="utf-8"))
    kilo = wire_path(app, kilo_body(export["messages"][: cut["records"]], None), facts, received,
                     "Kilo's request: opencode's blob under Kilo's own system prompt")
    return {"chat_completions": path, "kilo_chat": kilo}, cut


def wire_path(app: AgentApp, body: dict[str, Any], facts: list[Any], received: Any, saw: str) -> dict[str, Any]:
    """The same conversation in another agent's wire shape (Kilo, Qwen Code, Aider) on
    /v1/chat/completions, streamed: its reply scored on the same facts."""
    t0 = time.perf_counter()
    generations = app.backend.generations
    resp = app.client.post("/v1/chat/completions", json={**body, "stream": True})
    text = _chat_text(resp)
    chunks = sse_events(resp.text)
    path = {"text": text, "wall_s": round(time.perf_counter() - t0, 2),
            "compactd": next((c["compactd"] for c in chunks if c.get("compactd")), {}),
            "generations": app.backend.generations - generations, "request_chars": len(json.dumps(body)), "saw": saw}
    path["score"] = score_text(text, facts)
    path["ledger"] = ledger_check(ledger_text(received), text, facts)
    return path


# --- Codex: the /v1/responses compaction request -------------------------------------------


def codex_request(case: RealCase) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """(headers, body, what was cut): the captured request's shape with this rollout's items."""
    lines = jsonl_lines(case.fixture)
    at = summary_line(case)
    records = [json.loads(line) for line in lines[: at - 1]]
    if json.loads(lines[at - 1]).get("type") != "compacted":
        raise ValueError(f"{case.name}: line {at} is not a compacted record")
    meta = next((r["payload"] for r in records if r.get("type") == "session_meta"), {})
    items = [r["payload"] for r in records if r.get("type") == "response_item"]
    captured = json.loads((REQUESTS / "codex-compaction-request.json").read_text(encoding="utf-8"))
    body = json.loads(json.dumps(captured["body"]))
    session = str(meta.get("id") or case.name)
    turn = json.loads(body["client_metadata"]["x-codex-turn-metadata"])
    turn.update(session_id=session, thread_id=session)
    body["client_metadata"].update({"x-codex-turn-metadata": json.dumps(turn), "session_id": session,
                                    "thread_id": session})
    body["prompt_cache_key"] = session
    body["input"] = items + [body["input"][-1]]  # the history, then Codex's compaction prompt
    headers = {"x-codex-turn-metadata": json.dumps(turn), "session-id": session, "accept": "text/event-stream",
               "content-type": "application/json"}
    return headers, body, {"where": f"lines 1-{at - 1} (before the compacted record at line {at})",
                           "records": at - 1, "input_items": len(items)}


def codex_path(app: AgentApp, case: RealCase, facts: list[Any]) -> tuple[dict[str, Any], dict]:
    headers, body, cut = codex_request(case)
    t0 = time.perf_counter()
    generations = app.backend.generations
    resp = app.client.post("/v1/responses", json=body, headers=headers)
    resp.raise_for_status()
    events = sse_events(resp.text)
    done = [e["item"] for e in events if e.get("type") == "response.output_item.done"]
    text = "".join(c.get("text", "") for item in done for c in item.get("content") or [])
    failed = [e["response"].get("error") for e in events if e.get("type") == "response.failed"]
    path = {"text": text, "wall_s": round(time.perf_counter() - t0, 2), "errors": failed,
            "events": [e.get("type") for e in events], "generations": app.backend.generations - generations,
            "request_chars": len(json.dumps(body)),
            "saw": "Codex's request: every response_item before the compacted record, then its compaction prompt"}
    path["score"] = score_text(text, facts)
    from worker.agents.profiles import session_from_input

    path["ledger"] = ledger_check(ledger_text(session_from_input(body, "ledger")), text, facts)
    return {"responses": path}, cut


# --- pi: the extension's two calls ---------------------------------------------------------


def pi_records(case: RealCase) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """(records, session id, what was cut): each `message` entry of the file, chained by
    id/parentId, as the extension posts pi's messagesToSummarize."""
    raw = [json.loads(line) for line in jsonl_lines(case.fixture) if line.strip()]
    header = next((r for r in raw if r.get("type") == "session"), {})
    records: list[dict[str, Any]] = []
    for r in raw:
        if r.get("type") == "message":
            records.append({"type": "message", "id": f"c0-{len(records)}",
                            "parentId": records[-1]["id"] if records else None, "message": r["message"]})
    return records, f"pi-{header.get('id') or case.name}", {"where": "the whole file (pi never compacted it)",
                                                          "records": len(raw), "messages_posted": len(records)}


def pi_path(app: AgentApp, case: RealCase, facts: list[Any]) -> tuple[dict[str, Any], dict]:
    records, session, cut = pi_records(case)
    t0 = time.perf_counter()
    generations = app.backend.generations
    appended = app.client.post(f"/v1/sessions/{session}/messages", params={"format": "pi"}, json=records)
    appended.raise_for_status()
    wait = "model" if app.use_model else "instant"
    resp = app.client.post(f"/v1/sessions/{session}/compact", params={"tail": "false", "wait": wait})
    resp.raise_for_status()
    result = resp.json()
    generated = app.backend.generations - generations  # before the refinement below could start
    refinement = result.get("refinement") or {}
    if refinement.get("job_id"):  # the model narrative the service queues after an instant answer
        app.client.delete(f"/v1/jobs/{refinement['job_id']}")
    text = result["checkpoint"]["summary_text"]
    path = {"text": text, "wall_s": round(time.perf_counter() - t0, 2), "wait": wait, "mode": result.get("mode"),
            "model_calls": result.get("model_calls"), "fallback": result.get("fallback"),
            "refinement_cancelled": bool(refinement.get("job_id")),
            "received": appended.json().get("received"), "generations": generated,
            "saw": "the extension's records: every message entry, untruncated (pi's own summarizer cuts at 2,000)"}
    path["score"] = score_text(text, facts)
    from worker.formats import load

    session_read = load(records, format="pi")
    path["ledger"] = ledger_check(ledger_text(session_read), text, facts)
    chat = session_read.to_chat()
    qwen = wire_path(app, qwen_body(chat, None), facts, session_read,
                     "Qwen Code's request: the session as structured messages, its compression prompt")
    aider = wire_path(app, aider_body([m for m in chat if m["role"] in ("user", "assistant")], None), facts,
                      session_read, "Aider's request: the user and assistant text as its # USER / # ASSISTANT head")
    return {"session_compact": path, "qwen_code_chat": qwen, "aider_chat": aider}, cut


# --- the app -------------------------------------------------------------------------------


class LentBackend:
    """The benchmark's backend lent to the app: the app's shutdown does not close it; it counts
    generations and, with the model off, refuses them (nothing loads the weights)."""

    def __init__(self, backend: Any, use_model: bool):
        self._backend, self.use_model, self.generations = backend, use_model, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.generations += 1
        if not self.use_model:
            from backends.base import BackendError

            raise BackendError("agent_paths --no-model: generation refused")
        return self._backend.generate(*args, **kwargs)

    def close(self) -> None:
        pass


class AgentApp:
    """The real compactd app in-process (starlette TestClient, lifespan included)."""

    def __init__(self, backend: Any, use_model: bool, lent: LentBackend | None = None, wait: str | None = None):
        from starlette.testclient import TestClient

        from worker.config import Settings
        from worker.http.app import create_app
        from worker.service.store import Store

        self.use_model = use_model
        self.backend = lent or LentBackend(backend, use_model)

        def load() -> Any:
            if use_model and lent is None:
                backend.load()
            return self.backend

        app = create_app(Settings(rolling=False), backend_loader=load, store=Store(":memory:"))
        app.state.service.config.agent_wait = wait or ("model" if use_model else "none")
        self.client = TestClient(app)

    def __enter__(self) -> AgentApp:
        self.client.__enter__()
        deadline = time.monotonic() + HEALTH_WAIT_S
        while self.client.get("/health").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("compactd's backend did not load")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)


# --- one transcript ------------------------------------------------------------------------


def agent_of(case: RealCase) -> str | None:
    return next((a for a, f in AGENT_FORMAT.items() if f == case.format), None)


def select_cases(quick: bool) -> list[tuple[str, RealCase]]:
    """(agent, case) for every transcript an agent path runs on; quick: one per agent."""
    chosen = []
    for case in load_cases():
        agent = agent_of(case)
        if agent is None or (NEEDS_OWN_SUMMARY[agent] and not case.summary_where):
            continue
        if quick and case.name != QUICK_CASES[agent]:
            continue
        chosen.append((agent, case))
    return sorted(chosen, key=lambda ac: (AGENTS.index(ac[0]), ac[1].name))


def run_case(agent: str, case: RealCase, app: AgentApp, tmp: Path) -> dict[str, Any]:
    on_before = bool(case.summary_where)
    facts = [f for f in case.facts if f.before_agent_summary] if on_before else list(case.facts)
    own = agent_summary_text(case)
    out: dict[str, Any] = {
        "agent": agent, "name": case.name, "fixture": case.fixture.name, "language": case.language,
        "scored_on": "facts before the agent's own summary" if on_before else "all facts (the agent never compacted)",
        "facts": {k: sum(1 for f in facts if f.kind == k) for k in KINDS},
        "own": None if own is None else {"where": case.summary_where, "note": case.summary_note, "chars": len(own),
                                         "score": score_text(own, facts), "text": own},
        "through": THROUGH[agent],
    }
    t0 = time.perf_counter()
    try:
        if agent == "claude-code":
            paths, cut = claude_code_paths(case, facts, own, tmp)
        elif agent == "opencode":
            paths, cut = opencode_path(app, case, facts)
        elif agent == "codex":
            paths, cut = codex_path(app, case, facts)
        else:
            paths, cut = pi_path(app, case, facts)
    except Exception as exc:  # recorded and counted: the other agents' paths still run
        _say(f"{case.name}: FAILED: {type(exc).__name__}: {exc}")
        out.update(failed=f"{type(exc).__name__}: {exc}", paths={}, cut=None)
        return out
    for p in paths.values():
        p["chars"] = len(p["text"])
        p["headings"] = re.findall(r"^## .+", p["text"], re.M)
    out.update(cut=cut, paths=paths, wall_s=round(time.perf_counter() - t0, 2))
    own_rate = "n/a" if own is None else f"{out['own']['score']['kept']}/{out['own']['score']['total']}"
    through = paths[THROUGH[agent]]["score"]
    _say(f"{agent} {case.name}: own {own_rate}, through compactd {through['kept']}/{through['total']}")
    return out


# --- pooled figures ------------------------------------------------------------------------


def _pool(scores: list[dict[str, Any]]) -> dict[str, Any] | None:
    return pool(scores) if scores else None


def aggregate(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per agent, pooled over its transcripts: its own summary, the path it continues from
    through compactd, and each path apart."""
    out: dict[str, Any] = {}
    for agent in AGENTS:
        mine = [c for c in cases if c["agent"] == agent]
        if not mine:
            continue
        done = [c for c in mine if not c.get("failed")]
        names = list(dict.fromkeys(n for c in done for n in c["paths"]))
        out[agent] = {
            "transcripts": len(done), "failed": [{"case": c["name"], "error": c["failed"]} for c in mine
                                                 if c.get("failed")],
            "own": _pool([c["own"]["score"] for c in done if c["own"]]),
            "through": THROUGH[agent],
            "through_compactd": _pool([c["paths"][THROUGH[agent]]["score"] for c in done]),
            # the same text with compactd's whole ledger instead of its bounded rendering
            "through_ledger_unbounded": _pool([c["paths"][THROUGH[agent]]["ledger"] for c in done]),
            "paths": {n: _pool([c["paths"][n]["score"] for c in done if n in c["paths"]]) for n in names},
        }
    return out


def _rate(pooled: dict[str, Any] | None) -> str:
    if not pooled or pooled["rate"] is None:
        return "n/a"
    return f"{pooled['rate']:.0%} ({pooled['kept']}/{pooled['total']})"


def headline(result: dict[str, Any]) -> str:
    parts = []
    for agent, a in result["aggregate"].items():
        failed = f", {len(a['failed'])} FAILED" if a["failed"] else ""
        parts.append(f"{agent} own {_rate(a['own'])} -> through compactd {_rate(a['through_compactd'])}"
                     f" [ledger unbounded {_rate(a['through_ledger_unbounded'])}]{failed}")
    mode = "model" if result["use_model"] else "no model"
    return f"agent paths ({mode}), facts kept: " + "; ".join(parts)


def plot(result: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = result["aggregate"]
    agents = list(agg)
    fig, axes = plt.subplots(1, max(1, len(agents)), figsize=(4.2 * max(1, len(agents)), 4.2), sharey=True,
                             squeeze=False)
    labels = [*KINDS, "all"]
    for ax, agent in zip(axes[0], agents, strict=False):
        a = agg[agent]
        bars = [("own", a["own"]), (f"through compactd ({a['through']})", a["through_compactd"])]
        if agent == "claude-code" and "precompact" in a["paths"]:
            bars.append(("PreCompact facts (told to keep)", a["paths"]["precompact"]))
        width = 0.8 / len(bars)
        for k, (name, pooled) in enumerate(bars):
            xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(labels))]
            if pooled is None:
                ax.bar(xs, [0] * len(labels), width, label=f"{name}: n/a")
                ax.text(len(labels) / 2 - 0.5, 0.5, f"{name}: n/a", ha="center", fontsize=7)
                continue
            rates = [pooled["per_kind"][kind]["rate"] for kind in KINDS] + [pooled["rate"]]
            ax.bar(xs, [r or 0 for r in rates], width, label=name)
            ax.text(xs[-1], (pooled["rate"] or 0) + 0.02, f"{pooled['kept']}/{pooled['total']}", ha="center",
                    fontsize=6, rotation=90)
        ref = a["through_compactd"] or a["own"]
        for i, kind in enumerate(KINDS):  # a kind with no facts here: no bar, and said so
            if ref and not ref["per_kind"][kind]["total"]:
                ax.text(i, 0.02, "no facts", ha="center", fontsize=6, rotation=90)
        ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=30)
        ax.set_ylim(0, 1.4)
        ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.set_title(f"{agent} ({a['transcripts']} transcript{'s' if a['transcripts'] != 1 else ''})", fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
    axes[0][0].set_ylabel("facts kept (before the agent's summary; pi: all)")
    save_figure(fig, path, title)


# --- the run -------------------------------------------------------------------------------


def open_backend(model: str) -> Any:
    """The bundled model through llama.cpp, as `compactd serve` opens it; with the model off it
    only counts (the tokenizer rebuild: the weights are never loaded)."""
    from backends import load_backend
    from backends.llama_cpp import DEFAULT_N_CTX

    return load_backend(model, engine="llama", n_ctx=DEFAULT_N_CTX, n_threads=N_THREADS)


def run(quick: bool = False, out_dir: Path = RESULTS_DIR, use_model: bool = True, model: str | None = None) -> dict:
    """Every agent path on its transcripts (quick: one per agent); writes agent_paths.json and
    agent_paths.png under out_dir."""
    from backends.models import DEFAULT_MODEL, FAST_MODEL

    model = model or (FAST_MODEL if quick else DEFAULT_MODEL)
    t0 = time.monotonic()
    backend = open_backend(model)
    cases: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="agent-paths-") as tmp, AgentApp(backend, use_model) as app:
            for agent, case in select_cases(quick):
                cases.append(run_case(agent, case, app, Path(tmp)))
            generations = app.backend.generations
    finally:
        backend.close()
    result: dict[str, Any] = {
        "benchmark": "agent-paths", "machine": machine_info(), "quick": quick, "use_model": use_model,
        "model": model if use_model else None, "tokenizer": model,
        "settings": {"tool_result_cut_chars": TOOL_RESULT_CUT, "hook_timeout_s": HOOK_TIMEOUT_S,
                     "rolling": False, "store": ":memory:", "threads": N_THREADS},
        "generations": generations,
        "approaches": {
            "own": "the agent's own in-session summary (real_facts.agent_summary_text; Codex: its readable "
                   "replacement history); pi: n/a",
            "precompact": "Claude Code: `compactd hook claude-code` PreCompact stdout (the facts its summarizer is told "
                          "to keep)",
            "session_start": "Claude Code: SessionStart(compact) additionalContext alone",
            "own+session_start": "Claude Code: its own summary + the SessionStart context (what it continues from)",
            "chat_completions": "opencode: its compaction request to /v1/chat/completions, the streamed reply",
            "responses": "Codex: its compaction request to /v1/responses, the streamed summary",
            "session_compact": "pi: the extension's records, /compact?tail=false, the checkpoint's summary_text",
        },
        "rules": "benchmarks/real_facts.py: exact = whitespace-normalized substring; path = last two components "
                 "as a path; words = every identifier verbatim, else >= 60% of content words",
        "cases": cases,
        "aggregate": aggregate(cases),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "peak_rss_mb": peak_rss_mb(),
    }
    result["headline"] = headline(result)
    write_json(out_dir / "agent_paths.json", result)
    plot(result, out_dir / "agent_paths.png",
         f"each agent's own compaction vs through compactd ({model if use_model else 'no model'})")
    return result

# --- latency: how long each door makes its agent wait (--latency) --------------------------

LATENCY_FRACTIONS = (1 / 3, 2 / 3, 1.0)  # each transcript cut at a third, two thirds, all of it
LATENCY_DOORS = ("opencode", "pi_chat", "pi_extension", "codex", "kilo", "qwen_code", "aider", "gemini")
REFINE_WAIT_S = 60.0
# The background refinement's narrative (the answer path never calls the model).
CANNED_NARRATIVE = json.dumps({"goal": "Carry on with the user's task",
                               "key_decisions": [{"decision": "Keep the refined narrative", "reason": "benchmark"}],
                               "next_steps": ["Continue"]})


class CannedBackend(LentBackend):
    """The real tokenizer; every generation is the canned narrative, at once."""

    def __init__(self, backend: Any):
        super().__init__(backend, True)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        from backends.base import GenerationStats

        self.generations += 1
        return iter([CANNED_NARRATIVE, GenerationStats(decode_tokens=1, finish_reason="stop")])


def _with_blob(text: str, blob: str, prior: str | None, prior_tag: str) -> str:
    text = re.sub(r"<conversation>\n.*?\n</conversation>", lambda _m: f"<conversation>\n{blob}\n</conversation>",
                  text, count=1, flags=re.S)
    if prior is not None:
        if f"<{prior_tag}>" in text:
            text = re.sub(rf"<{prior_tag}>\n.*?\n</{prior_tag}>", lambda _m: f"<{prior_tag}>\n{prior}\n</{prior_tag}>",
                          text, count=1, flags=re.S)
        else:
            end = text.index("</conversation>") + len("</conversation>")
            text = text[:end] + f"\n\n<{prior_tag}>\n{prior}\n</{prior_tag}>" + text[end:]
    return text


def opencode_body(messages: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    name = "opencode-compaction-update-request" if prior is not None else "opencode-compaction-request"
    body = json.loads((REQUESTS / f"{name}.json").read_text(encoding="utf-8"))["body"]
    blob = "\n\n".join(s for s in (opencode_serialize(m) for m in messages) if s)
    body["messages"][1]["content"] = _with_blob(body["messages"][1]["content"], blob, prior, "prior-summary")
    return body


def pi_serialize(message: dict[str, Any]) -> str:
    """One pi message as pi's serializeConversation writes it into `<conversation>`."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [
        b for b in content or [] if isinstance(b, dict)]
    text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text" and b.get("text"))
    role = message.get("role")
    if role == "user":
        return f"[User]: {text}" if text else ""
    if role == "toolResult":
        return f"[Tool result]: {_truncate(text)}" if text else ""
    lines = [f"[Assistant thinking]: {b['thinking']}" for b in blocks if b.get("type") == "thinking" and b.get("thinking")]
    lines += [f"[Assistant]: {text}"] if text else []
    calls = [f"{b.get('name')}(" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}"
                                           for k, v in (b.get("arguments") or {}).items()) + ")"
             for b in blocks if b.get("type") == "toolCall"]
    lines += [f"[Assistant tool calls]: {'; '.join(calls)}"] if calls else []
    return "\n".join(lines)


def pi_chat_body(messages: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    body = json.loads((REQUESTS / "pi-compaction-request.json").read_text(encoding="utf-8"))["body"]
    blob = "\n\n".join(s for s in (pi_serialize(m) for m in messages) if s)
    block = body["messages"][-1]["content"][0]
    block["text"] = _with_blob(block["text"], blob, prior, "previous-summary")
    return body


def kilo_body(messages: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    """opencode's request (Kilo's compaction.ts is opencode's) under Kilo's captured system prompt."""
    body = opencode_body(messages, prior)
    kilo = json.loads((REQUESTS / "kilo-compaction-request.json").read_text(encoding="utf-8"))["body"]
    body["messages"][0] = kilo["messages"][0]
    return body


QWEN_RESUME = ("Resume the prior task using the summary above. Do not repeat or acknowledge the summary; "
               "continue from where the work left off.")  # Qwen's words after the summary it keeps
QWEN_ACK = "Got it. Thanks for the additional context!"


def qwen_body(chat: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    """Qwen Code's captured request with this session's messages (after its kept summary)."""
    body = json.loads((REQUESTS / "qwen-code-compaction-request.json").read_text(encoding="utf-8"))["body"]
    kept = [{"role": "user", "content": f"{prior}\n\n{QWEN_RESUME}"}, {"role": "assistant", "content": QWEN_ACK}] \
        if prior is not None else []
    body["messages"] = [body["messages"][0], *kept, *chat, body["messages"][-1]]
    return body


def aider_body(chat: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    """Aider's captured summarize request with this session's user and assistant text as its
    "# USER / # ASSISTANT" head (aider/history.py), an earlier summary first."""
    from worker.agents.profiles import AIDER_SUMMARY_PREFIX

    body = json.loads((REQUESTS / "aider-compaction-request.json").read_text(encoding="utf-8"))["body"]
    entries = ([("USER", f"{AIDER_SUMMARY_PREFIX}\n{prior}"), ("ASSISTANT", "Ok.")] if prior is not None else []) + [
        (m["role"].upper(), m["content"]) for m in chat if isinstance(m.get("content"), str) and m["content"]]
    body["messages"][1]["content"] = "".join(f"# {role}\n{text.rstrip()}\n" for role, text in entries)
    return body


def gemini_contents(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages as Gemini `contents` (user / model turns; tool calls as functionCall
    parts, their results as functionResponse parts under the call's name)."""
    names: dict[str, str] = {}
    contents: list[dict[str, Any]] = []
    for m in chat:
        if m["role"] == "tool":
            name = names.get(m.get("tool_call_id") or "", "run_shell_command")
            part = {"functionResponse": {"id": m.get("tool_call_id"), "name": name,
                                         "response": {"output": m.get("content") or ""}}}
            role = "user"
        else:
            parts: list[dict[str, Any]] = [{"text": m["content"]}] if isinstance(m.get("content"), str) and \
                m["content"] else []
            for call in m.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
                args = call["function"].get("arguments") or "{}"
                try:
                    parsed = json.loads(args)
                except ValueError:
                    parsed = {"raw": args}
                parts.append({"functionCall": {"id": call["id"], "name": call["function"]["name"], "args": parsed}})
            if not parts:
                continue
            role = "model" if m["role"] == "assistant" else "user"
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"] += parts
                continue
            contents.append({"role": role, "parts": parts})
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].append(part)
        else:
            contents.append({"role": role, "parts": [part]})
    return contents


def gemini_body(chat: list[dict[str, Any]], prior: str | None) -> dict[str, Any]:
    """Gemini CLI's captured draft request with this session as its `contents` (after its kept
    snapshot: Gemini puts it first, as a user turn, and acknowledges it)."""
    body = json.loads((REQUESTS / "gemini-compaction-request.json").read_text(encoding="utf-8"))["body"]
    head, ask = body["contents"][0], body["contents"][-1]
    kept = [{"role": "user", "parts": [{"text": prior}]}, {"role": "model", "parts": [{"text": QWEN_ACK}]}] \
        if prior is not None else [head]
    body["contents"] = [*kept, *gemini_contents(chat), ask]
    return body


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + REFINE_WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: the refinement did not end")
        time.sleep(0.02)


def _agent_refined(app: AgentApp) -> bool:
    from worker.service.service import AGENT_KEY

    return not app.client.app.state.service.refiner.pending_keys(AGENT_KEY)


def _chat_text(resp: Any) -> str:
    resp.raise_for_status()
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in sse_events(resp.text) if c.get("choices"))


def _codex_text(resp: Any) -> str:
    resp.raise_for_status()
    done = [e["item"] for e in sse_events(resp.text) if e.get("type") == "response.output_item.done"]
    return "".join(c.get("text", "") for item in done for c in item.get("content") or [])


class Door:
    """One door's transcript and its two requests (a fresh one, an update after a refinement)."""

    def __init__(self, door: str, case: RealCase):
        self.door, self.case = door, case
        if door == "opencode":
            headers, body, cut = opencode_request(case)
            export = json.loads(case.fixture.read_text(encoding="utf-8"))
            self.items = export["messages"][: cut["records"]]
        elif door == "kilo":
            _headers, _body, cut = opencode_request(case)
            self.items = json.loads(case.fixture.read_text(encoding="utf-8"))["messages"][: cut["records"]]
        elif door == "codex":
            self.headers, self.body, _cut = codex_request(case)
            self.items = self.body["input"][:-1]
        elif door in ("qwen_code", "aider", "gemini"):
            from worker.formats import load

            records, _session, _cut = pi_records(case)  # pi's session, as the structured chat it is
            chat = load(records, format="pi").to_chat()
            self.items = [m for m in chat if m["role"] in ("user", "assistant")] if door == "aider" else chat
        else:
            records, _session, _cut = pi_records(case)
            self.items = records if door == "pi_extension" else [r["message"] for r in records]

    def run(self, app: AgentApp, items: list[Any], session: str, prior: str | None, first: int) -> str:
        """One compaction of `items` (an update on `prior` where given); returns the text."""
        c = app.client
        if self.door == "opencode":
            return _chat_text(c.post("/v1/chat/completions", json=opencode_body(items, prior),
                                     headers={"x-session-id": session}))
        if self.door == "pi_chat":
            return _chat_text(c.post("/v1/chat/completions", json=pi_chat_body(items, prior)))
        if self.door == "kilo":
            return _chat_text(c.post("/v1/chat/completions", json=kilo_body(items, prior),
                                     headers={"x-session-id": session}))
        if self.door == "qwen_code":
            return _chat_text(c.post("/v1/chat/completions", json=qwen_body(items, prior)))
        if self.door == "aider":
            return _chat_text(c.post("/v1/chat/completions", json={**aider_body(items, prior), "stream": True}))
        if self.door == "gemini":
            resp = c.post("/v1beta/models/gemini-2.5-flash:generateContent", json=gemini_body(items, prior))
            resp.raise_for_status()
            return "".join(p.get("text", "") for p in resp.json()["candidates"][0]["content"]["parts"])
        if self.door == "pi_extension":
            sid = f"pi-{session}"
            c.post(f"/v1/sessions/{sid}/messages", params={"format": "pi"}, json=items).raise_for_status()
            r = c.post(f"/v1/sessions/{sid}/compact", params={"tail": "false", "wait": "instant"})
            r.raise_for_status()
            return r.json()["checkpoint"]["summary_text"]
        turn = json.loads(self.headers["x-codex-turn-metadata"])
        turn.update(session_id=session, thread_id=session)
        meta = json.dumps(turn)
        body = json.loads(json.dumps(self.body))
        body["client_metadata"]["x-codex-turn-metadata"] = meta
        kept = [i for i in items[:first] if i.get("role") == "developer"] if prior is not None else []
        summary = [{"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": f"Another language model started to solve this "
                                                               f"problem and produced a summary.\n{prior}"}]}]
        body["input"] = (kept + summary + items if prior is not None else items) + [self.body["input"][-1]]
        return _codex_text(c.post("/v1/responses", json=body, headers={**self.headers, "x-codex-turn-metadata": meta,
                                                                         "session-id": session}))

    def time_once(self, app: AgentApp, n: int, refined: bool, tag: str) -> float:
        items = self.items[:n]
        if not refined:
            t0 = time.perf_counter()
            self.run(app, items, tag, None, 0)
            return time.perf_counter() - t0
        half = max(1, n // 2)
        text = self.run(app, items[:half], tag, None, 0)
        if self.door == "pi_extension":
            _wait(lambda: app.client.get(f"/v1/sessions/pi-{tag}/checkpoint").json().get("mode") == "refined", tag)
        else:
            _wait(lambda: _agent_refined(app), tag)
        t0 = time.perf_counter()
        self.run(app, items[half:], tag, text, half)
        return time.perf_counter() - t0


def latency(repeats: int = 5, out_dir: Path = RESULTS_DIR, model: str | None = None) -> dict[str, Any]:
    """Every door's answer latency by default (agent_wait=instant); writes agent_latency.json."""
    import uuid

    from backends.models import DEFAULT_MODEL
    from benchmarks._common import load_average, percentile

    model = model or DEFAULT_MODEL
    cases = {agent_of(c): c for c in load_cases() if agent_of(c) in ("opencode", "codex", "pi")
             and (c.summary_where or agent_of(c) == "pi")}
    backend = open_backend(model)
    rows: list[dict[str, Any]] = []
    load_before = load_average()
    t_all = time.monotonic()
    try:
        with AgentApp(backend, True, lent=CannedBackend(backend), wait="instant") as app:
            for door in LATENCY_DOORS:
                d = Door(door, cases["opencode" if door in ("opencode", "kilo") else "codex" if door == "codex"
                                     else "pi"])
                for frac in LATENCY_FRACTIONS:
                    n = max(2, round(len(d.items) * frac))
                    for refined in (False, True):
                        times = [d.time_once(app, n, refined, f"lat-{uuid.uuid4().hex[:12]}") for _ in range(repeats)]
                        row = {"door": door, "transcript": d.case.name, "items": n, "of": len(d.items),
                               "previous": "refined" if refined else "fresh", "repeats": repeats,
                               "p50_s": round(percentile(times, 50) or 0, 3),
                               "p95_s": round(percentile(times, 95) or 0, 3),
                               "max_s": round(max(times), 3), "times_s": [round(t, 3) for t in times]}
                        rows.append(row)
                        _say(f"{door} {n}/{len(d.items)} {row['previous']}: p50 {row['p50_s']} s, "
                             f"p95 {row['p95_s']} s")
            generations = app.backend.generations
    finally:
        backend.close()
    result = {
        "benchmark": "agent-latency", "machine": machine_info(), "tokenizer": model,
        "load_average_before": load_before, "load_average_after": load_average(),
        "settings": {"agent_wait": "instant", "pi_wait": "instant", "rolling": False, "store": ":memory:",
                     "repeats": repeats, "refinement": "canned narrative (the answer path never calls the model)"},
        "generations": generations, "rows": rows,
        "worst_p95_s": max(r["p95_s"] for r in rows), "elapsed_s": round(time.monotonic() - t_all, 1),
    }
    write_json(out_dir / "agent_latency.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-model", action="store_true", help="deterministic answers on every path (no weights loaded)")
    ap.add_argument("--quick", action="store_true", help="one transcript per agent (the 0.5B with the model)")
    ap.add_argument("--model", default=None, help="bundled model name (default: 1.5B full, 0.5B quick)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--latency", action="store_true", help="each door's answer latency (agent_latency.json)")
    ap.add_argument("--repeats", type=int, default=5, help="--latency: repeats per cell")
    args = ap.parse_args(argv)
    if args.latency:
        out = latency(args.repeats, args.out, args.model)
        print(f"worst p95 {out['worst_p95_s']} s over {len(out['rows'])} cells")
        return 0
    result = run(quick=args.quick, out_dir=args.out, use_model=not args.no_model, model=args.model)
    print(result["headline"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
