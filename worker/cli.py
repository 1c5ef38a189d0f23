"""`compactd`: count, compact, inspect, serve, search history, and manage local models.

Every subcommand lives here. Every failure the user can cause (bad file, unknown model,
unreadable input, a bad flag or COMPACTD_* value, a compaction that would not help) is one
line on stderr and exit code 2, never a traceback. Flags that are settings take their
defaults from `config.Settings`, so from the environment.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backends.base import BackendError

from .config import Settings, SettingsError, add_setting, load_settings

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

    if getattr(args, "engine", None) == "openai":
        from backends.openai_http import connect

        return connect(args.engine_url, model=args.model, n_ctx=args.ctx)
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


def _read_tools(path: str | None) -> list[dict] | None:
    """`--tools FILE`: a JSON list of tool definitions (OpenAI `tools` entries, or a request
    body holding one under "tools"), counted with each transcript as the agent sends them."""
    if path is None:
        return None
    try:
        data = json.loads(_read_text(path))
    except (ValueError, RecursionError):
        raise CliError(f"--tools {path} is not valid JSON") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise CliError(f"--tools {path} must hold a JSON list of tool objects")
    return data


def _count_input(path: str, fmt: str, backend, counter, tools: list[dict] | None = None,
                 add_generation_prompt: bool = True) -> tuple[int, str, str]:
    """(real tokens, the text measured, what it was): a transcript is counted as the engine
    would be sent it (chat template and tool definitions included), anything else as plain text."""
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
    text = backend.render_messages(chat, add_generation_prompt, tools) if chat else ""
    return counter.total(session, tools, add_generation_prompt), text, fmt


def cmd_count(args: argparse.Namespace) -> int:
    from .tokens import TokenCounter

    backend = _load_backend(args)
    counter = TokenCounter(backend)
    tools = _read_tools(args.tools)
    rows = []
    for path in args.files:
        real, text, kind = _count_input(path, args.format, backend, counter, tools, not args.no_generation_prompt)
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
        use_model=not args.no_model, explicit=True,
    )
    try:
        config.budget()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    console = _console()
    t0 = time.perf_counter()
    model = backend
    if config.use_model and not (args.quiet or args.json):
        from .eta import EtaBackend

        model = EtaBackend(backend, lambda line: print(line, file=sys.stderr, flush=True))
    result = compact(session, model, config, progress=lambda msg: console.log(msg) if not args.quiet else None)
    cp = result.checkpoint
    wall = time.perf_counter() - t0
    saved = _save_compaction(args, session, result, wall) if args.save else None
    if args.json:
        _print_json({
            "summary": cp.sections,
            "summary_text": cp.summary_text,
            "narrative": cp.narrative,
            "ledger": cp.ledger,
            "work_state": cp.work_state,
            "checkpoint_messages": cp.messages,
            "tokens": cp.tokens.to_dict(),
            "budget": cp.budget.to_dict(),
            "timings": {**cp.timings.to_dict(), "wall_s": round(wall, 2)},
            "verification": cp.verification.to_dict(),
            "audit": cp.audit.to_dict(),
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
    stats = cp.timings.model
    model_line = ""
    if stats:
        pt = sum(s.prompt_tokens for s in stats)
        dt = sum(s.decode_tokens for s in stats)
        model_line = (f"; model: {pt} prompt tok at {stats[-1].prompt_tps:.0f} tok/s, {dt} generated at "
                      f"{stats[-1].decode_tps:.1f} tok/s, TTFT {stats[0].ttft_ms / 1000:.1f}s")
    removed = len(cp.verification.removed)
    print(f"tokens {cp.tokens.before} → {cp.tokens.after} (summary {cp.tokens.summary}, tail "
          f"{cp.tokens.tail}); {wall:.1f}s total{model_line}; verification removed {removed}"
          + (f"; fallback: {cp.verification.fallback}" if cp.verification.fallback else ""))
    if saved:
        print(saved)
    return 0


def _save_compaction(args: argparse.Namespace, session: Any, result: Any, wall: float) -> str:
    """`compact --save`: the session (its messages, appended as the service appends them) and
    the checkpoint, as its next version, into the serve database."""
    from .config import default_db_path
    from .service.records import StoreError
    from .service.service import store_compaction
    from .service.store import Store

    db = args.db or default_db_path(args.data_dir)
    try:
        with Store(db) as store:
            store.create_session(session.id, context_limit=args.context_limit, source_format=session.source_format,
                                 exist_ok=True)
            store.update_session(session.id, context_limit=args.context_limit)
            store.append_messages(session.id, session.messages)
            latest = store.latest_checkpoint(session.id)
            version = store_compaction(store, session.id, result, latest.version if latest else None, "cli",
                                       wall * 1000)
    except StoreError as exc:
        raise CliError(f"cannot save to {db}: {exc}") from None
    return (f"saved: session {session.id} checkpoint v{version} in {db}; run `compactd serve` and open "
            f"{Settings().serve_url()}/sessions/{session.id}")


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


BENCHMARKS = ("tokenizer", "throughput", "real_sessions", "agent_paths", "fidelity", "chained", "page")
# The benchmarks plot with matplotlib, a dev extra (not core): checked before any work is done.
PLOT_INSTALL = "pip install matplotlib (or pip install 'compactd[dev]')"


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError(f"compactd bench needs matplotlib for its plots: {PLOT_INSTALL}") from None
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


# -- serve and history ------------------------------------------------------------------

# Every Settings field is a serve flag except `rolling`, which is --no-rolling.
SERVE_FLAGS = tuple(f for f in Settings.model_fields if f != "rolling")


def serve_settings(args: argparse.Namespace) -> Settings:
    """The serve flags (their defaults already from the environment) as validated Settings."""
    from .http.guards import check_bind

    settings = load_settings(**{f: getattr(args, f) for f in SERVE_FLAGS}, rolling=not args.no_rolling)
    check_bind(settings.host, settings.api_key_value())
    return settings


def preflight(settings: Settings) -> None:
    """What would otherwise only show later as a 503 fails the start instead (one line, exit 2):
    a missing, truncated or corrupt model file, and a database that cannot be opened. (Weights
    that pass the header and size checks but fail in llama.cpp still load in the background,
    and /health reports that error.)"""
    from .service.store import Store

    if settings.engine != "openai":
        from backends.models import resolve

        resolved = resolve(settings.model)
        if resolved.kind == "gguf":
            from backends.gguf_meta import read_meta

            read_meta(resolved.path)  # header, vocabulary, tensor extents: a cut file shows here
    Store(settings.store_path()).close()


# What `compactd serve` prints first on stdout, followed by its bound URL.
LISTENING = "compactd: listening on"


def startup_note(settings: Settings) -> str:
    """`serve`'s start-up line on stderr: the model loading, and --upstream / --gemini-upstream when set."""
    upstream = (f"; every other /v1/responses request goes to --upstream {_without_userinfo(settings.upstream)}"
                if settings.upstream else "")
    if settings.gemini_upstream:
        upstream += (f"; every other /v1beta request goes to --gemini-upstream "
                     f"{_without_userinfo(settings.gemini_upstream)}")
    return f"compactd: the model loads in the background; GET /health turns 200 when ready{upstream}"


def cmd_serve(args: argparse.Namespace) -> int:
    from .service.records import StoreError

    try:
        settings = serve_settings(args)
        preflight(settings)
    except (ValueError, BackendError, StoreError) as exc:
        raise CliError(str(exc)) from None
    import logging

    from .http.app import announcing_server, create_app, uvicorn_config

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)

    def announce(url: str) -> None:
        # The bound address (the real port for --port 0), on stdout's first line for scripts.
        print(f"{LISTENING} {url}", flush=True)
        print(startup_note(settings), file=sys.stderr)

    server = announcing_server(uvicorn_config(app, settings), announce)
    # uvicorn re-raises SIGTERM once its graceful shutdown is done; a requested stop of a
    # service is a clean exit, so the re-raised signal lands here and run() returns (exit 0).
    signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
    server.run()
    return 0 if server.started else 1


def _without_userinfo(url: str) -> str:
    """A URL as it may be printed: any user:password@ in it left out."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def cmd_hook_claude_code(args: argparse.Namespace) -> int:
    """A Claude Code hook (PreCompact / SessionStart): fails open, see worker/agents/claude_code.py."""
    from .agents.claude_code import EXIT_FAIL_OPEN, HookInputError, run_hook

    try:
        out = run_hook(sys.stdin.read())
    except HookInputError as exc:
        print(f"compactd: hook: {exc}", file=sys.stderr)
        return EXIT_FAIL_OPEN
    if out:
        print(out)
    return 0


def cmd_integrate(args: argparse.Namespace) -> int:
    """Writes (or with --print, prints) one agent's config for compactd; see worker/integrate.py."""
    from .integrate import CodexOptions, IntegrateError, describe, plan, write

    try:
        url = args.url or load_settings(**({"port": args.port} if args.port is not None else {})).serve_url()
        codex = CodexOptions(model=args.upstream_model, context_window=args.context_window,
                             auto_compact_limit=args.auto_compact_limit, env_key=args.env_key)
        if args.agent != "codex" and codex != CodexOptions():
            raise IntegrateError("--upstream-model, --context-window, --auto-compact-limit and --env-key are "
                                 "Codex's: use them with `integrate codex`")
        p = plan(args.agent, url, project=Path(args.project).absolute(), global_=args.global_, codex=codex)
        if not args.print:
            write(p)
    except (IntegrateError, SettingsError) as exc:
        raise CliError(str(exc)) from None
    for note in p.notes:
        print(f"compactd: note: {note}", file=sys.stderr)
    if args.print:
        sys.stdout.write(p.text)
        print(f"compactd: --print: {p.path} {'would change' if p.changed else 'is up to date'}; nothing written",
              file=sys.stderr)
    else:
        print(describe(p, url))
    return 0


def add_integrate_command(sub: Any) -> None:
    from .integrate import AGENTS

    p = sub.add_parser("integrate", help="set an agent up to compact through `compactd serve` (its config, merged)",
                       description="Writes AGENT's config for compactd, merged into what is there, with absolute "
                                   "commands and the serve URL; a second run changes nothing.")
    p.add_argument("agent", metavar="AGENT", help=f"one of {', '.join(AGENTS)}")
    p.add_argument("--global", dest="global_", action="store_true",
                   help="the user-level config instead of the project's (Codex has only the user-level one)")
    p.add_argument("--project", default=".", metavar="DIR", help="the project directory (default: the current one)")
    p.add_argument("--print", action="store_true", help="print the merged file instead of writing it")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="compactd's URL, no path (default: http://127.0.0.1:7433, or as "
                                     "COMPACTD_HOST / COMPACTD_PORT say)")
    where.add_argument("--port", type=int, help="the port `compactd serve --port` listens on")
    codex = p.add_argument_group("Codex (a model Codex does not know needs all three)")
    codex.add_argument("--upstream-model", metavar="NAME", help="Codex's `model`: the upstream's model name")
    codex.add_argument("--context-window", type=int, metavar="TOKENS", help="Codex's `model_context_window`")
    codex.add_argument("--auto-compact-limit", type=int, metavar="TOKENS",
                       help="Codex's `model_auto_compact_token_limit` (default: 90%% of --context-window)")
    codex.add_argument("--env-key", metavar="VAR",
                       help="the variable holding the upstream's API key, sent through (default OPENAI_API_KEY)")
    p.set_defaults(func=cmd_integrate)


def cmd_history_search(args: argparse.Namespace) -> int:
    from .config import default_db_path
    from .service.history import search
    from .service.records import StoreError
    from .service.store import Store

    try:
        with Store(args.db or default_db_path(args.data_dir)) as store:
            result = search(store, args.session, args.query, args.limit)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    print(f"{len(result['hits'])} hit(s) for {args.query!r} in {args.session} ({result['mode']})"
          + (f"; {result['note']}" if result["note"] else ""))
    for hit in result["hits"]:
        print(f"- {hit['message_id']} [{hit['role']}] score {hit['score']:.2f}: {hit['snippet']}")
    return 0


def add_service_commands(sub: Any, defaults: Settings) -> None:
    """`compactd serve` (one flag per Settings field) and `compactd history`."""
    p = sub.add_parser("serve", help="serve compactions, counts and summaries to local agents over HTTP")
    for field in SERVE_FLAGS:
        add_setting(p, defaults, field)
    p.add_argument("--no-rolling", action="store_true", default=not defaults.rolling,
                   help="no background rolling summaries [env COMPACTD_ROLLING=0]")
    p.set_defaults(func=cmd_serve)

    h = sub.add_parser("history", help="search a session's stored history")
    hsub = h.add_subparsers(dest="history_command", required=True)
    s = hsub.add_parser("search", help="full-text search (BM25) over one session, tool outputs included")
    s.add_argument("session")
    s.add_argument("query")
    add_setting(s, defaults, "db")
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_history_search, data_dir=defaults.data_dir)


# -- parser -----------------------------------------------------------------------------


def _model_args(p: argparse.ArgumentParser, defaults: Settings) -> None:
    add_setting(p, defaults, "model")
    add_setting(p, defaults, "engine")
    add_setting(p, defaults, "engine_url")
    add_setting(p, defaults, "threads")
    add_setting(p, defaults, "ctx")
    add_setting(p, defaults, "tokenizer")


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, via the package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("compactd")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(defaults: Settings | None = None) -> argparse.ArgumentParser:
    """Raises SettingsError when a COMPACTD_* variable is invalid (the flags' defaults)."""
    defaults = defaults or load_settings()
    parser = argparse.ArgumentParser(prog="compactd", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"compactd {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list the bundled models and where they are")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("info", help="describe the loaded engine and model")
    _model_args(p, defaults)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("count", help="exact token counts of files, with the chars/4 and bytes/4 errors")
    _model_args(p, defaults)
    p.add_argument("files", nargs="+")
    p.add_argument("--format", default="auto",
                   help="auto (a transcript is counted as chat, other files as text), text, or a transcript format")
    p.add_argument("--tools", metavar="FILE",
                   help="JSON list of the tool definitions the agent sends, counted with each transcript")
    p.add_argument("--no-generation-prompt", action="store_true",
                   help="count a transcript without the assistant header the template appends")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("inspect", help="what an agent transcript imports as")
    _model_args(p, defaults)
    p.add_argument("input")
    p.add_argument("--format", default="auto")
    p.add_argument("--no-count", action="store_true", help="skip the exact token count")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("compact", help="compact a transcript into a checkpoint")
    _model_args(p, defaults)
    p.add_argument("input")
    p.add_argument("--format", default="auto")
    add_setting(p, defaults, "context_limit")
    p.add_argument("--reserved", type=int, default=None, help="tokens reserved for output (default min(20000, max output))")
    p.add_argument("--max-output-tokens", type=int, default=None)
    p.add_argument("--no-model", action="store_true", help="deterministic checkpoint only, no model call")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--save", action="store_true",
                   help="store the session and this checkpoint in the serve database (`compactd serve`'s page shows them)")
    add_setting(p, defaults, "db")
    p.set_defaults(func=cmd_compact, data_dir=defaults.data_dir)

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

    add_service_commands(sub, defaults)
    add_integrate_command(sub)
    p = sub.add_parser("hook", help="an agent hook command (reads the hook's JSON on stdin)")
    hsub = p.add_subparsers(dest="agent", required=True)
    h = hsub.add_parser("claude-code", help="Claude Code PreCompact / SessionStart(compact) hook: compactd's facts, no model")
    h.set_defaults(func=cmd_hook_claude_code)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except SettingsError as exc:
        print(f"compactd: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
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
