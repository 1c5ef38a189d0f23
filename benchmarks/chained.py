"""Chained compactions (issue 22, item 5): one real session compacted again and again, each
time at overflow after the previous checkpoint plus the turns that followed it, as an agent
that keeps working after each compaction does.

    python -m benchmarks.chained [--quick] [--case NAME] [--out benchmarks/results]   (or: compactd bench chained)

Why: a summary of a summary forgets (the "telephone game" of every agent that re-summarizes
its own summary). compactd carries its ledger verbatim from one checkpoint to the next
(`extract_ledger(..., previous=...)`), so the only ways a fact can go are the ledger's bounds
and its own supersession rules. This measures what is left, after up to CHAIN compactions, of
the facts the FIRST checkpoint's ledger held that are still true at the end:

RULES (below): what "kept" and "still true" mean.

Also reported, without a goal: how many of the facts the first checkpoint's TEXT showed are in
the last checkpoint's text (the text is budgeted, so newer facts may outrank older ones).

Every transcript of the real set (tests/fixtures, with a facts file) that overflows the window
at least twice is run, at each window of CONTEXTS, with no model (the ledger is the pipeline's;
the model writes only the narrative).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    N_CTX,
    RESULTS_DIR,
    figure_title,
    held_tokens,
    machine_info,
    save_figure,
    write_outputs,
)
from benchmarks.real_facts import load_cases

CHAIN = 5  # the chain: five compactions in a row
CONTEXTS = (8_000, 16_000, 32_000)  # the windows of the real set
GOAL = 0.99  # share of the first checkpoint's still-true ledger facts the last one must hold
MIN_COMPACTIONS = 2  # a chain of one compaction has nothing to carry
RETRY_SHARE = 0.10  # after a refusal, the next try waits for this share of usable more (the loop guard's own)
RULES = ("kept: the fact's key is in the last checkpoint's ledger. Keys: a file's path, an error's line (resolved "
         "or not: a later pass resolves it, the line stays), a command's text (a re-run updates its status), a "
         "commit, a branch, a pull request's number, a quoted user message. No longer true, and not counted: a test tally that a newer tally "
         "of the same command replaced (the ledger keeps only the latest test results). Nothing else is excused.")


def ledger_keys(ledger: dict[str, Any]) -> dict[str, set[str]]:
    """The facts of a stored ledger, by kind, as the keys the module docstring names."""
    return {
        "files": {f["path"] for f in ledger.get("files", [])},
        "errors": {e["text"] for e in ledger.get("errors", [])},
        "commands": {c["command"] for c in ledger.get("commands", [])},
        "tallies": {_tally_key(t) for t in ledger.get("tallies", [])},
        "commits": {c.get("sha") or c["text"] for c in ledger.get("commits", [])},
        "branches": {b["name"] for b in ledger.get("branches", [])},
        "pull_requests": {f"#{p['number']}" for p in ledger.get("pull_requests", [])},
        "user": {u["message_id"] for u in ledger.get("user_instructions", [])},
    }


def superseded_tallies(first: dict[str, Any], last: dict[str, Any]) -> set[str]:
    """The first ledger's tallies that a newer tally of the same command replaced."""
    newest = {t.get("command"): t["last_seq"] for t in last.get("tallies", [])}
    return {_tally_key(t) for t in first.get("tallies", []) if newest.get(t.get("command"), 0) > t["last_seq"]}


def _tally_key(tally: dict[str, Any]) -> str:
    return f"{tally.get('command')}\x00{tally['text']}"


def _held_or_total(counter: Any, messages: list[Any], checkpoints: list[Any]) -> int:
    return held_tokens(counter, messages, checkpoints[-1]) if checkpoints else counter.messages(
        [m.to_chat() for m in messages])


def chain(session: Any, backend: Any, counter: Any, context_limit: int) -> list[Any]:
    """Grow `session` message by message from its start; compact at each overflow, building on
    the previous checkpoint; stop after CHAIN compactions or at the session's end."""
    from worker.pipeline import CompactionConfig, CompactionRefused, compact

    config = CompactionConfig(context_limit=context_limit, use_model=False)
    usable = config.budget().usable
    # Every compaction of the chain is compactd's: the agent's own in-session summaries are left
    # out (what they covered stays in the history, as compactd's store keeps it).
    messages = [m for m in session.messages if not m.is_summary]
    checkpoints: list[Any] = []
    n = 1
    while n <= len(messages) and len(checkpoints) < CHAIN:
        prefix = messages[:n]
        held = _held_or_total(counter, prefix, checkpoints)
        if held < usable:
            n += 1
            continue
        grown = session.model_copy(update={"messages": prefix})
        try:
            result = compact(grown, backend, config, previous=checkpoints[-1] if checkpoints else None,
                             counter=counter)
        except CompactionRefused:
            # Nothing outside the tail yet, or too little freed (the loop guard): the agent goes
            # on, and the next try waits until it holds RETRY_SHARE of usable more.
            wait_for = held + int(RETRY_SHARE * usable)
            while n < len(messages) and _held_or_total(counter, messages[:n], checkpoints) < wait_for:
                n += 1
            n += 1
            continue
        checkpoints.append(result.checkpoint)
        n += 1
    return checkpoints


def score_chain(checkpoints: list[Any]) -> dict[str, Any]:
    first, last = checkpoints[0].ledger, checkpoints[-1].ledger
    before, after = ledger_keys(first), ledger_keys(last)
    gone = superseded_tallies(first, last)
    kinds = {}
    for kind, keys in before.items():
        true = keys - gone if kind == "tallies" else keys
        kinds[kind] = {"first": len(true), "kept": len(true & after[kind]),
                       "lost": sorted(k.replace("\x00", " | ")[:160] for k in true - after[kind])}
    total = sum(k["first"] for k in kinds.values())
    kept = sum(k["kept"] for k in kinds.values())
    return {"compactions": len(checkpoints), "still_true": total, "kept": kept,
            "share": round(kept / total, 4) if total else None, "superseded": len(gone), "kinds": kinds,
            "text": _text_share(checkpoints[0], checkpoints[-1]),
            "tokens": [cp.tokens.to_dict() for cp in checkpoints]}


def _text_share(first: Any, last: Any) -> dict[str, int]:
    """Of the ledger facts the first checkpoint's text showed, how many the last one's shows."""
    keys = ledger_keys(first.ledger)
    shown = [k for kind in ("files", "errors", "commands") for k in keys[kind] if k in first.summary_text]
    return {"shown_first": len(shown), "shown_last": sum(1 for k in shown if k in last.summary_text)}


QUICK_CASE = "cc-entirecli_847ff7d2-4a55-44d7-a3f5-a3afd89f1ee1"  # held out; five compactions at 8k
QUICK_CONTEXTS = (8_000,)


def run(quick: bool = False, out_dir: Path | None = None, names: list[str] | None = None,
        contexts: tuple[int, ...] = CONTEXTS) -> dict[str, Any]:
    """`quick`: QUICK_CASE at 8k only (as `compactd bench chained --quick` and the test run it)."""
    if quick:
        names, contexts = [QUICK_CASE], QUICK_CONTEXTS
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import FAST_MODEL, resolve
    from worker.formats import load
    from worker.tokens import TokenCounter

    t0 = time.monotonic()
    backend = LlamaCppBackend(resolve(FAST_MODEL).path, n_ctx=N_CTX, model_name=FAST_MODEL)  # counts only
    counter = TokenCounter(backend)
    rows = []
    try:
        for case in load_cases():
            if names and case.name not in names:
                continue
            session = load(case.fixture)
            for ctx in contexts:
                checkpoints = chain(session, backend, counter, ctx)
                if len(checkpoints) < MIN_COMPACTIONS:
                    continue
                row = {"name": case.name, "split": case.split, "context_limit": ctx, **score_chain(checkpoints)}
                print(f"[chained] {case.name} @ {ctx}: {row['compactions']} compactions, "
                      f"{row['kept']}/{row['still_true']} kept", file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        backend.close()
    full = [r for r in rows if r["compactions"] == CHAIN]
    total = sum(r["still_true"] for r in full)
    kept = sum(r["kept"] for r in full)
    result = {
        "benchmark": "chained", "machine": machine_info(), "chain": CHAIN, "goal": GOAL,
        "rules": RULES,
        "rows": rows,
        "full_chains": {"runs": len(full), "still_true": total, "kept": kept,
                        "share": round(kept / total, 4) if total else None},
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    result["headline"] = (f"{len(full)} chains of {CHAIN}: {kept}/{total} still-true facts of the first ledger kept"
                          f" ({result['full_chains']['share']}, goal {GOAL})")
    if out_dir is not None:
        write_outputs(result, out_dir, "chained",
                      lambda r, path: plot(r, path, figure_title("chained compactions, no model", r["machine"])))
    return result


def plot(result: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(rows) + 1.5))
    labels = [f"{r['name'][:40]} @ {r['context_limit'] // 1000}k ({r['compactions']}×)" for r in rows]
    ax.barh(labels, [100 * (r["share"] or 0) for r in rows], color="#4c72b0")
    ax.axvline(100 * result["goal"], color="#c44e52", linestyle="--", label=f"goal {result['goal']:.0%}")
    ax.set_xlabel("first checkpoint's still-true ledger facts in the last checkpoint (%)")
    ax.set_xlim(0, 100)
    ax.legend(loc="lower left")
    save_figure(fig, path, title)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--case", action="append", help="only this transcript (facts file stem); repeatable")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_CASE} at 8k only")
    args = ap.parse_args(argv)
    print(run(args.quick, args.out, args.case)["headline"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
