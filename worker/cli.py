"""`compactd`: count, compact, inspect, and manage local models.

Every failure the user can cause (bad file, unknown model, unreadable input, a compaction
that would not help) is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backends.base import BackendError

EXIT_USAGE = 2


class CliError(Exception):
    """One line for the user, exit code 2."""


def _console():
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def _progress(description: str, enabled: bool = True):
    """A rich progress bar on stderr; yields a callback(done, total)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=_console(), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _load_backend(args: argparse.Namespace, **options: Any):
    from backends import load_backend

    if getattr(args, "threads", None):
        options["n_threads"] = args.threads
    if getattr(args, "ctx", None):
        options["n_ctx"] = args.ctx
    if getattr(args, "tokenizer", None) and args.tokenizer != "auto":
        options["tokenizer"] = args.tokenizer
    with _progress(f"assembling model {args.model or 'default'}") as cb:
        return load_backend(args.model, engine=getattr(args, "engine", "auto"), progress=cb, **options)


def _read_text(path: str) -> str:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CliError(f"input not found: {path}") from None
    except IsADirectoryError:
        raise CliError(f"input is a directory: {path}") from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def _load_session(path: str, fmt: str):
    from .formats import load as load_session

    p = Path(path)
    if not p.exists():
        raise CliError(f"input not found: {path}")
    if p.is_dir():
        raise CliError(f"input is a directory: {path}")
    try:
        return load_session(p, format=fmt)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None


def _print_json(obj: Any, out: str | None = None) -> None:
    text = json.dumps(obj, ensure_ascii=False, indent=2)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


def _signed_error(estimate: int, real: int) -> float:
    return round((estimate - real) / real * 100, 1) if real else 0.0


# -- commands ---------------------------------------------------------------------------


def cmd_models(args: argparse.Namespace) -> int:
    from backends.models import list_models

    rows = list_models()
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        flag = " (default)" if r["default"] else ""
        state = "assembled" if r["assembled"] else ("installed" if r["installed"] else "not installed")
        print(f"{r['name']}{flag}: {r['role']}")
        print(f"  {state}, {r['size']:,} bytes, sha256 {r['sha256']}")
        print(f"  path: {r['path']}")
        print(f"  weights from: {r['source']} — licence {r['license']}")
    print("Any GGUF file or MLX model directory also works with --model PATH.")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    backend = _load_backend(args)
    info = backend.info().to_dict()
    if args.json:
        _print_json(info)
    else:
        for k, v in info.items():
            print(f"{k}: {v}")
    return 0


def _count_input(path: str, fmt: str, backend, counter) -> tuple[int, str, str]:
    """(real tokens, the text measured, what it was): a transcript is counted as the engine
    would be sent it (chat template included), anything else as plain text."""
    from .formats import FORMATS, FormatError, detect

    text = _read_text(path)
    if fmt == "text":
        return backend.count(text), text, "text"
    if fmt == "auto":
        try:
            fmt = detect(Path(path))
        except FormatError:
            return backend.count(text), text, "text"
    if fmt not in FORMATS:
        raise CliError(f"unknown format {fmt!r}: use auto, text or one of {', '.join(FORMATS)}")
    session = _load_session(path, fmt)
    chat = session.to_chat()
    return counter.total(session), backend.render_messages(chat) if chat else "", fmt


def cmd_count(args: argparse.Namespace) -> int:
    from .tokens import TokenCounter

    backend = _load_backend(args)
    counter = TokenCounter(backend)
    rows = []
    for path in args.files:
        real, text, kind = _count_input(path, args.format, backend, counter)
        chars = len(text)
        nbytes = len(text.encode("utf-8"))
        chars4 = math.ceil(chars / 4)
        bytes4 = math.ceil(nbytes / 4)
        rows.append({
            "file": path, "format": kind, "tokens": real, "chars": chars, "bytes": nbytes,
            "chars_per_4": chars4, "chars_per_4_error_pct": _signed_error(chars4, real),
            "bytes_per_4": bytes4, "bytes_per_4_error_pct": _signed_error(bytes4, real),
        })
    info = backend.info()
    if args.json:
        _print_json({"model": info.model_name, "tokenizer": info.extra.get("tokenizer"), "files": rows})
        return 0
    for r in rows:
        kind = "" if r["format"] == "text" else f" ({r['format']} transcript, chat template included)"
        print(f"{r['file']}{kind}: {r['tokens']} tokens, {r['chars']} chars, {r['bytes']} bytes; "
              f"chars/4 {r['chars_per_4']} ({r['chars_per_4_error_pct']:+.1f}%), "
              f"bytes/4 {r['bytes_per_4']} ({r['bytes_per_4_error_pct']:+.1f}%)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .formats import inspect as inspect_session
    from .tokens import TokenCounter

    session = _load_session(args.input, args.format)
    report = inspect_session(session)
    if not args.no_count:
        backend = _load_backend(args)
        report["tokens"] = TokenCounter(backend).total(session)
        report["model"] = backend.info().model_name
    if args.json:
        _print_json(report)
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from .pipeline import CompactionConfig, compact

    session = _load_session(args.input, args.format)
    if not session.messages:
        raise CliError(f"{args.input}: the session has no messages")
    backend = _load_backend(args)
    config = CompactionConfig(
        context_limit=args.context_limit, reserved=args.reserved, max_output_tokens=args.max_output_tokens,
        use_model=not args.no_model,
    )
    try:
        config.budget()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    console = _console()
    t0 = time.perf_counter()
    result = compact(session, backend, config, progress=lambda msg: console.log(msg) if not args.quiet else None)
    cp = result.checkpoint
    wall = time.perf_counter() - t0
    if args.json:
        _print_json({
            "summary": cp.sections,
            "summary_text": cp.summary_text,
            "narrative": cp.narrative,
            "ledger": cp.ledger,
            "work_state": cp.work_state,
            "checkpoint_messages": cp.messages,
            "tokens": cp.tokens,
            "budget": cp.budget,
            "timings": {**cp.timings, "wall_s": round(wall, 2)},
            "verification": cp.verification,
            "audit": cp.audit,
            "model": backend.info().to_dict(),
        }, args.out)
        return 0
    lines = []
    for m in cp.messages:
        content = m.get("content") or ""
        calls = m.get("tool_calls") or []
        lines.append(f"===== {m['role']} =====")
        lines.append(content if len(content) < 4000 or m is cp.messages[0] else content[:4000] + " […]")
        for c in calls:
            lines.append(f"  → {c['function']['name']}({c['function']['arguments'][:200]})")
    text = "\n".join(lines)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    stats = cp.timings.get("model") or []
    model_line = ""
    if stats:
        pt = sum(s["prompt_tokens"] for s in stats)
        dt = sum(s["decode_tokens"] for s in stats)
        model_line = (f"; model: {pt} prompt tok at {stats[-1]['prompt_tps']:.0f} tok/s, {dt} generated at "
                      f"{stats[-1]['decode_tps']:.1f} tok/s, TTFT {stats[0]['ttft_ms'] / 1000:.1f}s")
    removed = len(cp.verification.get("removed", []))
    print(f"tokens {cp.tokens['before']} → {cp.tokens['after']} (summary {cp.tokens['summary']}, tail "
          f"{cp.tokens['tail']}); {wall:.1f}s total{model_line}; verification removed {removed}"
          + (f"; fallback: {cp.verification['fallback']}" if cp.verification.get("fallback") else ""))
    return 0


def cmd_convert_mlx(args: argparse.Namespace) -> int:
    from backends.mlx_convert import convert_gguf_to_mlx
    from backends.models import BUNDLED, resolve

    gguf = resolve(args.gguf).path if args.gguf in BUNDLED else Path(args.gguf)
    with _progress("converting to MLX") as cb:
        out = convert_gguf_to_mlx(gguf, args.outdir, quantize=args.quantize, progress=cb, overwrite=args.overwrite)
    print(f"MLX model written to {out}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from .estimate import estimate_tokens

    rows = [{"file": p, "estimated_tokens": estimate_tokens(_read_text(p), vocab=args.vocab)} for p in args.files]
    if args.json:
        _print_json(rows)
    else:
        for r in rows:
            print(f"{r['file']}: ~{r['estimated_tokens']} tokens (calibrated estimate, {args.vocab} vocabulary)")
    return 0


BENCHMARKS = ("tokenizer", "throughput", "fidelity")


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    names = BENCHMARKS if args.name == "all" else (args.name,)
    out_dir = Path(args.out)
    for name in names:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ImportError as exc:
            raise CliError(f"benchmark {name!r} is not available: {exc}") from None
        t0 = time.perf_counter()
        result = module.run(quick=args.quick, out_dir=out_dir)
        print(f"bench {name}: done in {time.perf_counter() - t0:.1f}s -> {out_dir / (name + '.json')}")
        if isinstance(result, dict) and result.get("headline"):
            print(f"  {result['headline']}")
    return 0


# -- parser -----------------------------------------------------------------------------


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=os.environ.get("COMPACTD_MODEL"),
                   help="bundled model name (see `compactd models`), a .gguf file or an MLX model dir")
    p.add_argument("--engine", choices=["auto", "llama", "mlx"], default=os.environ.get("COMPACTD_ENGINE", "auto"))
    p.add_argument("--threads", type=int, default=None, help="inference threads (default: all cores)")
    p.add_argument("--ctx", type=int, default=None, help="engine context size (default 8192)")
    p.add_argument("--tokenizer", choices=["auto", "engine", "tokenizers"], default="auto",
                   help="count with llama.cpp itself or the `tokenizers` rebuild of its vocabulary (same ids)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compactd", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list the bundled models and where they are")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("info", help="describe the loaded engine and model")
    _model_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("count", help="exact token counts of files, with the chars/4 and bytes/4 errors")
    _model_args(p)
    p.add_argument("files", nargs="+")
    p.add_argument("--format", default="auto",
                   help="auto (a transcript is counted as chat, other files as text), text, or a transcript format")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("inspect", help="what an agent transcript imports as")
    _model_args(p)
    p.add_argument("input")
    p.add_argument("--format", default="auto")
    p.add_argument("--no-count", action="store_true", help="skip the exact token count")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("compact", help="compact a transcript into a checkpoint")
    _model_args(p)
    p.add_argument("input")
    p.add_argument("--format", default="auto")
    p.add_argument("--context-limit", type=int, default=int(os.environ.get("COMPACTD_CONTEXT_LIMIT", 32_768)))
    p.add_argument("--reserved", type=int, default=None, help="tokens reserved for output (default min(20000, max output))")
    p.add_argument("--max-output-tokens", type=int, default=None)
    p.add_argument("--no-model", action="store_true", help="deterministic checkpoint only, no model call")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("convert-mlx", help="convert a GGUF into an MLX model directory (no hub)")
    p.add_argument("gguf", help="a .gguf file or a bundled model name")
    p.add_argument("outdir")
    p.add_argument("--quantize", action="store_true", help="4-bit quantize with mlx-lm (default: float32)")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_convert_mlx)

    p = sub.add_parser("estimate", help="calibrated token estimate without loading a tokenizer")
    p.add_argument("files", nargs="+")
    p.add_argument("--vocab", default="qwen2")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_estimate)
    p = sub.add_parser("bench", help="run a benchmark (writes JSON + PNG under benchmarks/results)")
    p.add_argument("name", choices=[*BENCHMARKS, "all"])
    p.add_argument("--quick", action="store_true", help="a small, fast run (the test suite's smoke mode)")
    p.add_argument("--out", default="benchmarks/results")
    p.set_defaults(func=cmd_bench)

    from .server import add_service_commands

    add_service_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .formats.openai import FormatError
    from .pipeline import CompactionRefused

    try:
        return args.func(args)
    except (CliError, BackendError, FormatError, CompactionRefused) as exc:
        print(f"compactd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("compactd: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
