"""How a local coding agent uses compactd: append turns, read the exact count, compact at
overflow, send the checkpoint.

    compactd serve --model qwen2.5-coder-0.5b          # in another terminal
    python examples/agent_client.py --context-limit 6000

The agent here replays a recorded transcript step by step (an OpenAI-shape message list; the
bundled SWE-agent trajectory by default). After each turn it asks compactd for the exact
token count of what it would send; past the usable budget it asks for a compaction (a swap
when compactd's rolling summary is ready, a model call otherwise) and from then on sends the
checkpoint's messages followed by the new turns. With --ask it sends the final context to
compactd's own /v1/chat/completions, as an agent would to its model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the transcript importers turn the demo trajectory into chat messages

DEFAULT_TRANSCRIPT = ROOT / "tests/fixtures/sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"


def steps_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a chat into agent steps: a user message, or an assistant message with the tool
    results that answer it (what an agent appends after each model call)."""
    steps: list[list[dict[str, Any]]] = []
    for m in messages:
        if not steps or m["role"] == "assistant" or (m["role"] == "user" and m.get("content")):
            steps.append([])
        steps[-1].append(m)
    return steps


def load_chat(path: Path) -> list[dict[str, Any]]:
    from worker.formats import load
    from worker.formats.export import to_openai

    return to_openai(load(path))


def check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        error = response.json().get("error", {})
        retry = response.headers.get("retry-after")
        raise SystemExit(f"compactd said {response.status_code} {error.get('code')}: {error.get('message')}"
                         + (f" (retry after {retry}s)" if retry else ""))
    return response.json()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:7433")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--transcript", type=Path, default=DEFAULT_TRANSCRIPT)
    ap.add_argument("--context-limit", type=int, default=6000, help="the agent model's context window")
    ap.add_argument("--session", default=None)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between steps (the agent's own model calls)")
    ap.add_argument("--ask", default=None, help="finally send this question with the compacted context")
    args = ap.parse_args(argv)

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    client = httpx.Client(base_url=args.base_url, headers=headers, timeout=900)
    session = args.session or f"demo-{uuid.uuid4().hex[:8]}"
    health = client.get("/health")
    if health.status_code != 200:
        raise SystemExit(f"compactd is not ready ({health.status_code}): is `compactd serve` running and loaded?")

    context: list[dict[str, Any]] = []  # what this agent would send its model
    for n, turn in enumerate(steps_of(load_chat(args.transcript)), start=1):
        time.sleep(args.pause)  # an agent's model call between steps: lets the rolling summary start
        # 1. Append the new turn (only the new messages; compactd keeps the whole history).
        check(client.post(f"/v1/sessions/{session}/messages", json=turn,
                          params={"context_limit": args.context_limit}))
        context += turn
        # 2. The exact count of the agent's context, with the model's tokenizer and template.
        status = check(client.get(f"/v1/sessions/{session}/tokens"))
        print(f"step {n}: {status['tokens']} / {status['usable']} usable tokens"
              f"{' (rolling summary ready)' if status['rolling_ready'] else ''}")
        if not status["overflow"]:
            continue
        # 3. Overflow: compact (waits; a swap when the rolling summary is ready).
        result = check(client.post(f"/v1/sessions/{session}/compact"))
        print(f"  compacted ({result['mode']}, {result['model_calls']} model calls, {result['seconds']}s): "
              f"{result['tokens']['before']} -> {result['tokens']['after']} tokens")
        # 4. From now on the agent sends the checkpoint, then its new turns.
        context = check(client.get(f"/v1/sessions/{session}/checkpoint"))["messages"]

    print(f"final context: {len(context)} messages; first is {context[0]['role']}, "
          f"summary starts: {json.dumps(context[1]['content'][:80]) if len(context) > 1 else '-'}")
    hits = check(client.get(f"/v1/sessions/{session}/history/search", params={"q": "Traceback"}))["hits"]
    print(f"history search 'Traceback': {len(hits)} hit(s)" + (f", first in {hits[0]['message_id']}" if hits else ""))
    if args.ask:
        reply = check(client.post("/v1/chat/completions", json={
            "messages": context + [{"role": "user", "content": args.ask}], "max_tokens": 128}))
        print("model:", reply["choices"][0]["message"]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
