"""The real set of the fidelity benchmark (its core; the command line is benchmarks/fidelity_real.py,
and benchmarks/fidelity.py calls `run_real` and `plot` from here, so neither of those two imports the
other): every real agent transcript in tests/fixtures that
has an expected-facts file (benchmarks/data/real-facts/), compacted whole at an 8k and a 32k
context, scored per kind of fact, and compared with the agent's own in-session summary.

    python -m benchmarks.fidelity_real [--quick] [--no-model] [--out benchmarks/results]

`compactd bench fidelity` (and `make bench`) runs it after the written/window cases and puts
it under "real" in fidelity.json; it also writes fidelity_real.png. Run alone, it writes
fidelity_real.json too.

What each approach sees (the same transcript for all; the JSON repeats this under "approaches"):
- compactd (`--no-model` and the default model): the whole imported transcript, full tool
  outputs, as an agent appends it to compactd; its checkpoint is the summary plus the verbatim
  tail it chose, and that whole checkpoint (what the agent continues from) is scored.
- naive-150w and template (the opencode/pi section template), same engine and model: the
  messages before compactd's tail, the way opencode and pi send them to their summarizer: tool
  results cut at 2,000 characters, tool calls as name + arguments, starting at the agent's own
  last in-session summary when there is one (given as the previous summary, as pi does), the
  newest messages that fit the summarizer window in one call (older ones left out and
  counted). Their checkpoint is their summary plus compactd's system message and tail, scored
  the same way. Full runs call them at 32k only: on 2 cores a call per transcript per size and
  baseline would add hours, and the 8k and 32k heads differ only by the tail.
- agent-summary: the readable text of the agent's own in-session summary, read from the raw
  record named in the facts file; scored only on the facts from before it (the later ones
  cannot be in it). compactd is scored on the same subset for the comparison.

A refused compaction (`explicit`, as `compactd compact`: only a context that cannot hold the
system prompt plus a minimal summary, or nothing outside the tail) is reported
as a refusal with its reason and counted, never a crash; any other exception is recorded as
"failed" and counted apart (a bug to fix, but the rest of a long run is kept). Scoring rules: benchmarks/real_facts.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    NAIVE_MAX_TOKENS,
    NAIVE_PROMPT,
    TEMPLATE_SYSTEM,
    TEMPLATE_USER,
    generate,
    invented,
    raw_text,
    save_figure,
)
from benchmarks.real_facts import (
    KINDS,
    RealCase,
    agent_summary_text,
    kept,
    load_cases,
    message_text,
    pool,
    score_text,
)

CONTEXTS = (8_000, 16_000, 32_000)  # the agent context limits each transcript is compacted at
BASELINE_CONTEXTS = (32_000,)  # the model baselines' sizes (see the docstring: runtime)
TOOL_RESULT_CUT = 2_000  # opencode and pi cut each tool result at 2,000 characters for their summarizer
PROMPT_MARGIN = 128  # tokens kept free in the baseline window for the chat template and wrappers
PREVIOUS_SHARE = 0.5  # the agent's previous summary takes at most this share of the baseline window
# Model steps that would start after this are skipped and listed per transcript: ~60 model
# calls of the 1.5B would take 3+ hours on 2 cores.
MODEL_TIME_CAP_S = 80 * 60
QUICK_CASE = "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source"  # the smallest (28 messages)
QUICK_CONTEXTS = (8_000, 32_000)  # quick: no-model at two sizes
SPLITS = ("tune", "heldout")  # the halves of benchmarks/data/real-facts (README.md), reported apart
MASK_KEEP = 10  # observation masking keeps the newest 10 tool outputs (The Complexity Trap, arXiv 2508.21433)
MASK_PLACEHOLDER = "[Old tool output omitted for brevity.]"
MASK_BUDGET = ("tokens: compactd's checkpoint at the same window (`tokens.after`, the same Qwen counter), "
               "masked transcript fitted newest-first into it, the first user message (the task) kept; where compactd "
               "refused, the usable window (context limit - reserve), and if the system prompt and task alone exceed "
               "it, a refusal (a miss of every fact)")
QUICK_MODEL_CONTEXT = 8_000  # quick: one model run (the 0.5B) at the small size
QUICK_MAX_TOKENS = 200  # quick: the model run's output bound
APPROACHES = {
    "compactd": "compact() with the default model: the whole imported transcript, full tool outputs; "
                "scored: the checkpoint (summary + verbatim tail)",
    "compactd-no-model": "compact(use_model=False): the same input; scored: the checkpoint (summary + verbatim tail)",
    "naive-150w": f"'Summarize the work log in at most 150 words.': the messages before compactd's tail from the agent's "
                  f"last in-session summary on (as the previous summary), tool results cut at {TOOL_RESULT_CUT} "
                  "characters, the newest that fit one summarizer window; scored: its summary + compactd's tail",
    "template": "the opencode/pi section template (no ledger, schema or verification): the same input as naive-150w; "
                "scored: its summary + compactd's tail",
    "masking": f"observation masking (The Complexity Trap, arXiv 2508.21433), no model: the live transcript with every "
               f"tool output but the newest {MASK_KEEP} replaced by {MASK_PLACEHOLDER!r}; budget: {MASK_BUDGET}; "
               "scored: that text",
    "agent-summary": "the agent's own in-session summary, readable text of the raw record; scored on the facts before it",
}


def _say(msg: str) -> None:
    print(f"[fidelity-real] {msg}", file=sys.stderr, flush=True)


# --- compactd --------------------------------------------------------------------------------


def run_compactd(session: Any, backend: Any, counter: Any, context_limit: int, use_model: bool,
                 max_new_tokens: int, case: RealCase, summary_facts: list[Any]) -> dict[str, Any]:
    from worker.pipeline import CompactionConfig, CompactionRefused, compact

    mode = "model" if use_model else "no-model"
    # explicit: what `compactd compact` does (no loop guard, never larger than the live context).
    config = CompactionConfig(context_limit=context_limit, use_model=use_model, max_new_tokens=max_new_tokens,
                              explicit=True)
    t0 = time.perf_counter()
    try:
        result = compact(session, backend, config, counter=counter)
    except CompactionRefused as exc:  # scored as a miss of every fact (nothing is left to continue from)
        _say(f"{case.name} @ {context_limit} {mode}: refused: {exc}")
        return {"context_limit": context_limit, "mode": mode, "refused": str(exc),
                "wall_s": round(time.perf_counter() - t0, 2), "score": score_text("", case.facts),
                "before_agent_summary": score_text("", summary_facts) if summary_facts else None}
    except Exception as exc:  # a bug, not a refusal: recorded and counted, the hours-long run goes on
        _say(f"{case.name} @ {context_limit} {mode}: FAILED: {type(exc).__name__}: {exc}")
        return {"context_limit": context_limit, "mode": mode, "refused": None,
                "failed": f"{type(exc).__name__}: {exc}", "wall_s": round(time.perf_counter() - t0, 2)}
    cp = result.checkpoint
    text = message_text(cp.messages)
    score = score_text(text, case.facts)
    trust = trust_checks(cp, session, case)
    source = raw_text(session.messages)
    missed = [{"kind": f.kind, "text": f.text[:200], "where": f.where,
               "why": "dropped by compactd (in the imported transcript, not in the checkpoint)" if kept(f, source)
               else "not found in the transcript as imported (the scorer cannot find it in the input either)"}
              for f in case.facts if not kept(f, text)]
    _say(f"{case.name} @ {context_limit} {mode}: {score['kept']}/{score['total']} kept, "
         f"{len(trust['invented'])} invented, {len(trust['pending_called_done'])} pending called done")
    stats = cp.timings.model
    return {
        "context_limit": context_limit, "mode": mode, "refused": None,
        "wall_s": round(time.perf_counter() - t0, 2),
        "score": score, **trust, "missed": missed,
        "summary_only": score_text(cp.summary_text, case.facts),
        "before_agent_summary": score_text(text, summary_facts) if summary_facts else None,
        "tokens": cp.tokens.to_dict(), "budget": cp.budget.to_dict(), "lang": cp.lang,
        "head_messages": len(cp.audit.dropped), "tail_messages": len(cp.tail_message_ids),
        "model": {"prompt_tokens": sum(s.prompt_tokens for s in stats),
                  "decode_tokens": sum(s.decode_tokens for s in stats),
                  "narrative_left_out": cp.timings.narrative_left_out, "fallback": cp.verification.fallback},
        "tail_message_ids": cp.tail_message_ids,
        "checkpoint_messages": cp.messages,
        "text": text,
    }


def trust_checks(cp: Any, session: Any, case: RealCase) -> dict[str, list[str]]:
    """What the checkpoint must never do: name an identifier or path found nowhere in the
    transcript (in the narrative, the only text a model writes), or list work the transcript
    leaves open (its `open` facts) under Done."""
    narrative = cp.narrative or {}
    written = "\n".join([narrative.get("goal", ""), *narrative.get("next_steps", []),
                         *(d.get("decision", "") + " " + d.get("reason", "") for d in narrative.get("key_decisions", []))])
    done = "\n".join(f"{i['text']} {' '.join(i['evidence'])}" for i in cp.work_state.get("done", []))
    return {"invented": invented(written, raw_text(session.messages)),
            "pending_called_done": [f.text for f in case.facts if f.kind == "open" and done and kept(f, done)]}


# --- baselines -------------------------------------------------------------------------------


def render_for_summarizer(m: Any) -> str:
    """One message as opencode/pi hand it to their summarizer: text, calls with arguments,
    results cut at TOOL_RESULT_CUT characters."""
    parts = [m.text.strip()] if m.text.strip() else []
    parts += [f"[call {c.name}] {c.arguments_json()}" for c in m.tool_calls]
    parts += [f"[result {r.name}] {r.output[:TOOL_RESULT_CUT]}" for r in m.tool_results]
    return f"{m.role}: " + "\n".join(parts) if parts else ""


def baseline_input(session: Any, tail_ids: list[str], count: Any, window: int, max_tokens: int) -> tuple[str, str, dict[str, Any]]:
    """(previous summary, conversation, what was seen): the messages before the tail, from the
    agent's last in-session summary on, newest first into the window."""
    tail = set(tail_ids)
    cut = next((i for i, m in enumerate(session.messages) if m.id in tail), len(session.messages))
    before = session.messages[:cut]
    last_summary = max((i for i, m in enumerate(before) if m.is_summary), default=None)
    previous = before[last_summary].text if last_summary is not None else ""
    live = [m for m in before[(last_summary + 1) if last_summary is not None else 0:] if m.role != "system"]
    budget = window - max_tokens - PROMPT_MARGIN
    prev_tokens = count(previous) if previous else 0
    if prev_tokens > budget * PREVIOUS_SHARE:  # never let the old summary crowd out the new messages
        previous = previous[: int(len(previous) * budget * PREVIOUS_SHARE / prev_tokens)]
        prev_tokens = count(previous)
    room = budget - prev_tokens
    blocks: list[str] = []
    for m in reversed(live):
        block = render_for_summarizer(m)
        if not block:
            continue
        cost = count(block) + 4
        if cost > room:
            break
        blocks.append(block)
        room -= cost
    blocks.reverse()
    seen = {"previous_summary_chars": len(previous), "messages_before_tail": len(live),
            "messages_seen": len(blocks),
            "messages_left_out": sum(1 for m in live if render_for_summarizer(m)) - len(blocks),
            "window": window, "tool_result_cut_chars": TOOL_RESULT_CUT}
    return previous, "\n\n".join(blocks), seen


def run_baselines(case: RealCase, session: Any, backend: Any, compactd_run: dict[str, Any], max_new_tokens: int,
                  summary_facts: list[Any]) -> dict[str, Any]:
    window = backend.info().context_size or 8192
    out: dict[str, Any] = {}
    for name, max_tokens in (("naive-150w", min(NAIVE_MAX_TOKENS, max_new_tokens)), ("template", max_new_tokens)):
        previous, conversation, seen = baseline_input(session, compactd_run["tail_message_ids"], backend.count,
                                                      window, max_tokens)
        if name == "naive-150w":
            log = (f"Earlier summary:\n{previous}\n\n" if previous else "") + conversation
            messages = [{"role": "user", "content": NAIVE_PROMPT.format(words=150) + "\n\nWork log:\n" + log}]
        else:
            convo = (f"<previous-summary>\n{previous}\n</previous-summary>\n\n" if previous else "") + conversation
            messages = [{"role": "system", "content": TEMPLATE_SYSTEM},
                        {"role": "user", "content": TEMPLATE_USER.format(conversation=convo)}]
        _say(f"{case.name} @ {compactd_run['context_limit']}: {name} ({seen['messages_seen']} messages)")
        summary, run = generate(backend, messages, max_tokens)
        checkpoint = list(compactd_run["checkpoint_messages"])  # compactd's system message and tail ...
        at = _summary_index(compactd_run)
        checkpoint[at] = {**checkpoint[at], "content": summary}  # ... with this baseline's summary
        text = message_text(checkpoint)
        out[name] = {"context_limit": compactd_run["context_limit"], "saw": seen, "run": run,
                     "score": score_text(text, case.facts), "summary_only": score_text(summary, case.facts),
                     "before_agent_summary": score_text(text, summary_facts) if summary_facts else None,
                     "summary": summary}
    return out


def masked_messages(session: Any) -> tuple[list[Any], int]:
    """The live transcript (what the agent holds: no message an in-session summary replaced)
    with every tool output but the newest MASK_KEEP replaced by the placeholder; and how many
    were masked."""
    live = [m.model_copy(deep=True) for m in session.messages if not m.compacted]
    results = [p for m in live for p in m.tool_results]
    older = results[: max(0, len(results) - MASK_KEEP)]
    for part in older:
        part.output = MASK_PLACEHOLDER
    return live, len(older)


def run_masking(case: RealCase, masked: tuple[list[Any], list[int], int], budget: int,
                summary_facts: list[Any], context_limit: int) -> dict[str, Any]:
    """Observation masking at compactd's token budget: the first user message (the task) and
    the newest masked messages that fit `budget`; a window never starts on a tool result whose
    call it dropped."""
    messages, shares, n_masked = masked
    first = next((i for i, m in enumerate(messages) if m.role == "user"), 0)
    head = list(range(first + 1))  # the system prompt, if any, and the task
    room = budget - sum(shares[i] for i in head)
    if room < 0:  # not even the system prompt and the task fit: nothing to continue from
        return {"context_limit": context_limit, "budget_tokens": budget, "refused": "the system prompt and the task "
                f"alone exceed {budget} tokens", "score": score_text("", case.facts),
                "before_agent_summary": score_text("", summary_facts) if summary_facts else None}
    start = len(messages)
    while start - 1 > first and shares[start - 1] <= room:
        start -= 1
        room -= shares[start]
    while start < len(messages) and messages[start].role == "tool":
        start += 1  # its call was left out: the result alone would be an orphan
    kept_msgs = [messages[i] for i in head] + messages[start:]
    text = message_text([m.to_chat() for m in kept_msgs])
    return {"context_limit": context_limit, "budget_tokens": budget,
            "tokens": sum(shares[i] for i in head) + sum(shares[start:]),
            "messages_kept": len(kept_msgs), "messages_left_out": len(messages) - len(kept_msgs),
            "outputs_masked": n_masked, "score": score_text(text, case.facts),
            "before_agent_summary": score_text(text, summary_facts) if summary_facts else None}


def _summary_index(run: dict[str, Any]) -> int:
    """Where compactd's summary sits in its checkpoint: after the system message, if any."""
    msgs = run["checkpoint_messages"]
    return 1 if msgs and msgs[0].get("role") == "system" else 0


# --- one transcript --------------------------------------------------------------------------


def open_case(case: RealCase, counter: Any) -> tuple[dict[str, Any], Any, list[Any]]:
    """The transcript's record (sizes, fact counts, the agent's own summary scored), its session
    and the facts from before the agent's summary."""
    from worker.formats import load

    session = load(case.fixture)
    summary_facts = [f for f in case.facts if f.before_agent_summary]
    agent_text = agent_summary_text(case)
    out: dict[str, Any] = {
        "name": case.name, "split": case.split, "fixture": case.fixture.name, "format": case.format, "language": case.language,
        "messages": len(session.messages), "session_tokens": counter.total(session),
        "facts": {k: sum(1 for f in case.facts if f.kind == k) for k in KINDS},
        "facts_before_agent_summary": {k: sum(1 for f in summary_facts if f.kind == k) for k in KINDS},
        "agent_summary": None if agent_text is None else {
            "where": case.summary_where, "note": case.summary_note, "chars": len(agent_text),
            "tokens": counter.text(agent_text),
            "score": score_text(agent_text, summary_facts), "text": agent_text},
        "runs": [], "baselines": {}, "skipped": [],
    }
    return out, session, summary_facts


_MASKED: dict[str, tuple[list[Any], list[int], int]] = {}  # per transcript: masked messages, shares, count


def run_step(case: RealCase, out: dict[str, Any], session: Any, summary_facts: list[Any], backend: Any,
             counter: Any, context_limit: int, use_model: bool, with_baselines: bool, max_new_tokens: int) -> None:
    """One compaction of one transcript at one size (and the baselines on its head; the
    no-model run also sets observation masking's budget at that size)."""
    from worker.session import Session

    run = run_compactd(session, backend, counter, context_limit, use_model, max_new_tokens, case, summary_facts)
    done = not run["refused"] and not run.get("failed")
    if not use_model and not run.get("failed"):
        from worker.pipeline import CompactionConfig

        if case.name not in _MASKED:
            messages, n_masked = masked_messages(session)
            _MASKED[case.name] = (messages, counter.per_message(Session(messages=messages)), n_masked)
        # compactd refused: no checkpoint to match, so masking gets the whole usable window
        budget = run["tokens"]["after"] if done else CompactionConfig(context_limit=context_limit).budget().usable
        masking = run_masking(case, _MASKED[case.name], budget, summary_facts, context_limit)
        out["baselines"].setdefault(str(context_limit), {})["masking"] = masking
        masking["budget_from"] = "compactd checkpoint tokens.after" if done else "usable window (compactd refused)"
        _say(f"{case.name} @ {context_limit}: masking {masking['score']['kept']}/{masking['score']['total']} "
             f"({masking.get('messages_kept', 0)} messages in {masking['budget_tokens']} tokens)")
    if with_baselines and done:
        out["baselines"].setdefault(str(context_limit), {}).update(run_baselines(case, session, backend, run, max_new_tokens,
                                                             summary_facts))
    run.pop("checkpoint_messages", None)
    out["runs"].append(run)


def step_order(plan: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
    """No-model steps first (seconds), then model steps from the largest context down: the goals
    are set at 32k, so when the time cap cuts a full run it cuts the 8k model runs."""
    return sorted(plan, key=lambda step: (step[1], -step[0]))


# --- pooled figures --------------------------------------------------------------------------


def density(scores: list[dict[str, Any]], tokens: list[int]) -> float | None:
    """Facts kept per 1,000 tokens of what the reader continues from: kept / (tokens / 1000),
    pooled over the texts that exist (a refusal has none: it keeps nothing in no tokens)."""
    total = sum(tokens)
    return round(sum(s["kept"] for s in scores) / (total / 1000), 2) if total else None


def aggregate(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per approach and size, pooled over the transcripts (a refusal scored as a miss of every
    fact, and listed; a failure left out and listed); and the agent-summary comparison on the facts before each agent's summary.
    `facts_per_1k`: facts kept per 1,000 tokens of the scored text (`density`): compactd's
    checkpoint (`tokens.after`), masking's fitted transcript, the agent's summary (on the facts
    before it), each counted by the same Qwen counter."""
    rows: dict[str, dict[str, Any]] = {}
    for c in cases:
        for r in c["runs"]:
            key = f"compactd{'' if r['mode'] == 'model' else '-no-model'}@{r['context_limit']}"
            row = rows.setdefault(key, {"scores": [], "refused": [], "before": [], "failed": [], "invented": [],
                                        "pending_called_done": [], "dense": [], "tokens": []})
            if r["refused"]:  # a miss of every fact: pooled as such, and listed
                row["refused"].append({"case": c["name"], "reason": r["refused"]})
                row["scores"].append(r["score"])
                if r["before_agent_summary"]:
                    row["before"].append(r["before_agent_summary"])
            elif r.get("failed"):
                row["failed"].append({"case": c["name"], "error": r["failed"]})
            else:
                row["scores"].append(r["score"])
                row["dense"].append(r["score"])
                row["tokens"].append(r["tokens"]["after"])
                row["invented"] += [f"{c['name']}: {x}" for x in r.get("invented", [])]
                row["pending_called_done"] += [f"{c['name']}: {x}" for x in r.get("pending_called_done", [])]
                if r["before_agent_summary"]:
                    row["before"].append(r["before_agent_summary"])
        for ctx, baselines in c["baselines"].items():
            for name, b in baselines.items():
                row = rows.setdefault(f"{name}@{ctx}", {"scores": [], "refused": [], "before": [], "failed": [],
                                                        "dense": [], "tokens": []})
                row["scores"].append(b["score"])
                if b.get("refused"):
                    row["refused"].append({"case": c["name"], "reason": b["refused"]})
                elif b.get("tokens"):
                    row["dense"].append(b["score"])
                    row["tokens"].append(b["tokens"])
                if b["before_agent_summary"]:
                    row["before"].append(b["before_agent_summary"])
    agent = [c["agent_summary"]["score"] for c in cases if c["agent_summary"]]
    agent_tokens = [c["agent_summary"].get("tokens", 0) for c in cases if c["agent_summary"]]
    out = {key: {**pool(row["scores"]), "transcripts": len(row["scores"]) - len(row["refused"]),
                 "facts_per_1k": density(row["dense"], row["tokens"]), "tokens": sum(row["tokens"]),
                 "refused": len(row["refused"]),
                 # The issue's own measure ("where a checkpoint was produced", refusals counted apart):
                 # the same facts without the refused transcripts' (above, each refusal keeps none).
                 "where_produced": pool(row["dense"]),
                 "refusals": row["refused"], "failed": row["failed"], "before_agent_summary": pool(row["before"]) if row["before"] else None,
                 **({"invented": row["invented"], "pending_called_done": row["pending_called_done"]}
                    if key.startswith("compactd") else {})}
           for key, row in rows.items()}
    out["agent-summary"] = {**pool(agent), "transcripts": len(agent), "refused": 0, "refusals": [], "failed": [],
                            "facts_per_1k": density(agent, agent_tokens), "tokens": sum(agent_tokens),
                            "before_agent_summary": pool(agent) if agent else None}
    return out


def _method_key(key: str) -> tuple[int, int, str]:
    """Plot order: method, then window (agent-summary last)."""
    name, _, ctx = key.partition("@")
    order = ("compactd-no-model", "masking", "compactd", "naive-150w", "template", "agent-summary")
    return (order.index(name) if name in order else len(order), int(ctx or 0), key)


def plot(real: dict[str, Any], path: Path, title: str) -> None:
    """Retention per kind by method and window, one panel per half (the agent's own summary on
    the facts from before it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    halves = real.get("halves") or {"all": {"aggregate": real["aggregate"], "cases": real["cases"]}}
    fig, axes = plt.subplots(1, len(halves), figsize=(9 * len(halves), 6), squeeze=False)
    colors = {"compactd-no-model": "tab:blue", "masking": "tab:orange", "compactd": "tab:green",
              "naive-150w": "tab:gray", "template": "tab:purple", "agent-summary": "tab:red"}
    windows = sorted({int(k.partition("@")[2]) for h in halves.values() for k in h["aggregate"] if "@" in k})
    labels = [*KINDS, "all"]
    for axis, (split, half) in zip(axes[0], halves.items(), strict=True):
        agg = half["aggregate"]
        shown = sorted((k for k, a in agg.items() if a["total"]), key=_method_key)
        width = 0.85 / max(1, len(shown))
        for j, key in enumerate(shown):
            name, _, ctx = key.partition("@")
            a = agg[key]
            rates = [a["per_kind"][kind]["rate"] for kind in KINDS] + [a["rate"]]
            xs = [i + (j - (len(shown) - 1) / 2) * width for i in range(len(labels))]
            shade = 0.35 + 0.65 * (windows.index(int(ctx)) + 1) / len(windows) if ctx and windows else 1.0
            refused = f", {a['refused']} refused" if a["refused"] else ""
            note = " (facts before it)" if name == "agent-summary" else ""
            axis.bar(xs, [r or 0 for r in rates], width, color=colors.get(name, "black"), alpha=shade,
                     label=f"{key}{note} ({a['transcripts']}{refused})")
        axis.set_xticks(range(len(labels)), labels, fontsize=8)
        axis.set_ylim(0, 1.05)
        axis.set_title(f"{split} half: {len(half['cases'])} transcripts", fontsize=9)
        if shown:
            axis.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.07))  # under the bars, not on them
    axes[0][0].set_ylabel("expected facts kept (a refusal keeps none)")
    save_figure(fig, path, title)


def headline(real: dict[str, Any], aggregate_: dict[str, Any] | None = None, label: str = "real set") -> str:
    parts = []
    agg = real["aggregate"] if aggregate_ is None else aggregate_
    for key, a in sorted(agg.items(), key=lambda kv: _method_key(kv[0])):
        if not a["transcripts"] and not a["refused"] and not a["failed"]:
            continue  # e.g. the agent's summary on a set where no agent wrote one
        rate = "n/a" if a["rate"] is None else f"{a['rate']:.0%}"
        refused = (f", {a['refused']} refused" if a["refused"] else "") + (f", {len(a['failed'])} FAILED" if a["failed"] else "")
        trust = (f", {len(a['invented'])} invented, {len(a['pending_called_done'])} pending called done"
                 if "invented" in a else "")
        per_1k = f", {a['facts_per_1k']} facts/1k tokens" if a.get("facts_per_1k") is not None else ""
        parts.append(f"{key} {rate} ({a['kept']}/{a['total']}{refused}{trust}{per_1k})")
    return f"{label}: " + "; ".join(parts)


def run_real(backend: Any, quick: bool = False, no_model: bool = False,
             max_new_tokens: int | None = None, half: str | None = None,
             contexts: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The real set on an open backend (its model is the one the model runs use). `half`: only
    the tune or the held-out transcripts; `contexts`: only these windows (a model run of one half
    that fits its time cap on a small machine)."""
    from worker.pipeline.summarize import MAX_NEW_TOKENS

    t0 = time.monotonic()
    cases = [c for c in load_cases() if half is None or c.split == half]
    if quick:
        cases = [c for c in cases if c.name == QUICK_CASE]
        plan = [(ctx, False) for ctx in QUICK_CONTEXTS] + ([] if no_model else [(QUICK_MODEL_CONTEXT, True)])
        baseline_contexts: tuple[int, ...] = ()
        max_new_tokens = max_new_tokens or QUICK_MAX_TOKENS
    else:
        windows = contexts or CONTEXTS
        plan = [(ctx, use) for ctx in windows for use in ((False,) if no_model else (False, True))]
        baseline_contexts = () if no_model else tuple(c for c in BASELINE_CONTEXTS if c in windows)
        max_new_tokens = max_new_tokens or MAX_NEW_TOKENS
    from worker.tokens import TokenCounter

    counter = TokenCounter(backend)
    opened = [(c, *open_case(c, counter)) for c in cases]
    deadline = t0 + (MODEL_TIME_CAP_S if not quick else 10**9)
    for context_limit, use_model in step_order(plan):
        for case, out, session, summary_facts in opened:
            if use_model and time.monotonic() > deadline:
                out["skipped"].append({"context_limit": context_limit, "mode": "model",
                                       "reason": f"time cap ({MODEL_TIME_CAP_S // 60} min) reached"})
                continue
            run_step(case, out, session, summary_facts, backend, counter, context_limit, use_model,
                     use_model and context_limit in baseline_contexts, max_new_tokens)
    results = [out for _c, out, _s, _f in opened]
    real = {
        "model": backend.info().model_name, "quick": quick, "no_model_only": no_model,
        "settings": {"contexts": sorted({ctx for ctx, _ in plan}), "model_contexts": sorted({c for c, u in plan if u}),
                     "baseline_contexts": list(baseline_contexts), "tool_result_cut_chars": TOOL_RESULT_CUT,
                     "summarizer_window": backend.info().context_size, "max_new_tokens": max_new_tokens,
                     "temperature": 0.0},
        "approaches": APPROACHES,
        "rules": "benchmarks/real_facts.py: exact = whitespace-normalized substring; path = last two components "
                 "as a path; words = every identifier verbatim, else >= 60% of content words",
        "masking": {"keep_last_tool_outputs": MASK_KEEP, "placeholder": MASK_PLACEHOLDER, "budget": MASK_BUDGET,
                    "source": "The Complexity Trap (arXiv 2508.21433): observation masking"},
        "cases": results,
        "aggregate": aggregate(results),
        "halves": {split: {"cases": [c["name"] for c in results if c["split"] == split],
                           "aggregate": aggregate([c for c in results if c["split"] == split])}
                   for split in SPLITS},
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    real["headline"] = "\n  ".join(
        [headline(real, label=f"real set, {len(results)} transcripts")]
        + [headline(real, h["aggregate"], f"{split} half, {len(h['cases'])} transcripts")
           for split, h in real["halves"].items() if h["cases"]])
    return real
