"""The page, measured and photographed: how long `/` and a session's page take to render for the
bundled real transcripts (the 173k-token Claude Code session among them) with the real model's
tokenizer, and screenshots of each page from a real headless Chromium.

Render times are the whole HTML answer as a client waits for it (the page is server-rendered and
runs no script): the first (counting cold) and the median of the next ones (counts cached in the
store, as a served session has them), on an idle worker (each compaction's background refinement
is cancelled). Writes page.json and page_*.png under benchmarks/results.

Also the one home of the browser the tests drive: Debian's `chromium` through Playwright
(Playwright's own browser download is unreachable here).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._common import CC_TRACE, FIXTURES, N_THREADS, PI_TRACE, SWE_TRACE, machine_info, write_json

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ENV = "COMPACTD_CHROMIUM"  # a browser elsewhere than on PATH
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")  # root in a container
VIEWPORT = {"width": 1280, "height": 900}
RENDER_REPEATS = 5  # warm renders per page after the first; the median is reported
CONTEXT_LIMIT = 32_768
# The largest is Codex CLI's 173k-token session (the page's "under 1 s on 2 cores" goal).
TRANSCRIPTS = (SWE_TRACE, PI_TRACE, CC_TRACE, FIXTURES / "codex-cli-sessionbridge_019d6cca-56cc-7850-9ca0-e841d6382a98.jsonl")
SERVE_WAIT_S = 120  # the model is loaded before the app starts: this is only uvicorn's start-up


def chromium_path() -> str | None:
    """The Chromium to drive: $COMPACTD_CHROMIUM, else the first of CHROMIUM_NAMES on PATH."""
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        return given if Path(given).exists() else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def why_no_browser() -> str | None:
    """None when a browser can be driven; else the reason, as a skip message says it."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install 'compactd[dev]')"
    if chromium_path() is None:
        return (f"no Chromium found ({', '.join(CHROMIUM_NAMES)} on PATH, or ${CHROMIUM_ENV}); "
                "`apt-get install chromium` as root, which `make test` does where it can")
    return None


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_ARGS))


@contextmanager
def serving(app: Any, settings: Any) -> Iterator[str]:
    """`app` on a real uvicorn at 127.0.0.1 (port 0), as `compactd serve` runs it; yields its URL
    once /health answers 200 (the model loaded)."""
    import httpx
    import uvicorn

    from worker.http.app import bound_url, uvicorn_config

    server = uvicorn.Server(uvicorn_config(app, settings, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="compactd-page-bench", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + SERVE_WAIT_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        url = bound_url(server)
        while httpx.get(url + "/health").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("compactd did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _post_transcript(client: Any, sid: str, path: Path) -> dict[str, Any]:
    ctype = "application/x-ndjson" if path.suffix == ".jsonl" else "application/json"
    r = client.post(f"/v1/sessions/{sid}/messages", content=path.read_bytes(), headers={"content-type": ctype},
                    params={"context_limit": CONTEXT_LIMIT})
    r.raise_for_status()
    return r.json()


def _render_times(client: Any, path: str) -> dict[str, float]:
    times = []
    for _ in range(RENDER_REPEATS + 1):
        t0 = time.perf_counter()
        r = client.get(path, headers={"accept": "text/html"})
        times.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return {"first_ms": round(times[0], 1), "median_ms": round(statistics.median(times[1:]), 1),
            "bytes": len(r.content)}


def run(quick: bool = False, out_dir: Path = Path("benchmarks/results")) -> dict[str, Any]:
    import httpx

    from backends import load_backend
    from backends.models import FAST_MODEL
    from worker.config import Settings
    from worker.http.app import create_app
    from worker.service.store import Store

    out_dir.mkdir(parents=True, exist_ok=True)
    backend = load_backend(FAST_MODEL, n_threads=N_THREADS)
    backend.load()
    transcripts = TRANSCRIPTS[:1] if quick else TRANSCRIPTS
    settings = Settings(rolling=False, context_limit=CONTEXT_LIMIT)
    app = create_app(settings, backend_loader=lambda: backend, store=Store(":memory:"))  # closed at shutdown
    pages: dict[str, Any] = {}
    shots: list[str] = []
    with serving(app, settings) as url, httpx.Client(base_url=url, timeout=600) as client:
        for path in transcripts:
            sid = path.stem.split("_")[0]
            posted = _post_transcript(client, sid, path)
            compacted = client.post(f"/v1/sessions/{sid}/compact", params={"wait": "instant"})
            refine = (compacted.json().get("refinement") or {}).get("job_id") if compacted.is_success else None
            if refine:  # the model's narrative would share the 2 cores with the renders measured
                client.delete(f"/v1/jobs/{refine}")
            pages[sid] = {"transcript": path.name, "messages": posted["received"],
                          "tokens": posted.get("tokens", {}).get("tokens"),
                          "compaction": compacted.status_code,
                          "session_page": _render_times(client, f"/sessions/{sid}")}
        pages["/"] = _render_times(client, "/")
        largest = max(pages, key=lambda k: pages[k].get("tokens") or 0 if k != "/" else -1)
        reason = why_no_browser()
        if reason is None:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                browser = launch(p)
                page = browser.new_page(viewport=VIEWPORT)
                for name, path in (("sessions", "/"), ("session", f"/sessions/{largest}"),
                                  ("worker", "/worker")):
                    page.goto(url + path)
                    shot = out_dir / f"page_{name}.png"
                    page.screenshot(path=str(shot), full_page=name != "session")
                    shots.append(shot.name)
                browser.close()
    biggest = max((v for k, v in pages.items() if k != "/"), key=lambda v: v["tokens"] or 0)
    result = {
        "machine": machine_info(), "model": FAST_MODEL, "context_limit": CONTEXT_LIMIT, "pages": pages,
        "screenshots": shots, "browser": None if shots else why_no_browser(),
        "headline": (f"{biggest['transcript']} ({biggest['tokens']:,} tokens): its page renders in "
                     f"{biggest['session_page']['median_ms']:.0f} ms warm, {biggest['session_page']['first_ms']:.0f} ms "
                     f"cold; / in {pages['/']['median_ms']:.0f} ms"),
    }
    write_json(out_dir / "page.json", result)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1, ensure_ascii=False)[:2000])
    return result


__all__ = ["chromium_path", "launch", "run", "serving", "why_no_browser"]
