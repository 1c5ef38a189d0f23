"""The page: what compactd counted, kept and dropped, for a person with a browser.

Server-rendered (Jinja2, autoescaped: every piece of transcript text is escaped, a `<script>` in
a message stays text), no JavaScript, no build step, no asset from anywhere: the style sheet
is inline. It reads the service's typed view records (worker/service/views.py) and is served
on the API's port under the API's rules: loopback by default, the API key for any other bind
(a browser gives it as the password of HTTP Basic auth, see guards.ApiKeyMiddleware).

- `/`: the sessions, each with its exact count against its window and chars/4 beside it, its
  last compaction and what the worker is doing for it;
- `/sessions/{id}`: what fills the window, token use over time, every checkpoint version
  (kept by section with links to the source messages, left out, removed, timings), a diff of
  any two versions, the history search;
- `/sessions/{id}/messages`, `/sessions/{id}/around`: the raw history, paged;
- `/worker`: the model, the engine, the lanes, running jobs and recent latencies.

An error answers a browser with a page and anything else with the API's JSON envelope.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup, escape

from ..service.history import HIT_CLOSE, HIT_OPEN
from ..service.service import CompactdService
from .errors import ApiError

TEMPLATES = Path(__file__).resolve().parent / "templates"
SESSIONS_PER_PAGE = 50  # each row counts its session's context: a page stays well under a second
MESSAGES_PER_PAGE = 100
CHECKPOINTS_PER_PAGE = 10  # each version shows every section: a long chain is paged, newest first
PREVIEW_CHARS = 240  # a message list shows the start of each message; `around` shows it whole
SEARCH_LIMIT = 20
PLOT_W, PLOT_H = 900, 180  # the token-use plot's drawing box, in SVG units
ID_TOKEN_RE = re.compile(r"[\w.:-]+")  # how a message id is written in a checkpoint (cited form)

page = APIRouter(tags=["page"], default_response_class=HTMLResponse)


def get_service(request: Request) -> CompactdService:
    return request.app.state.service


Service = Annotated[CompactdService, Depends(get_service)]


# ----------------------------------------------------------------------------- rendering


def _when(ts: float | None) -> str:
    if not ts:
        return "–"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _ago(ts: float | None) -> str:
    if not ts:
        return "–"
    return _seconds(max(0.0, time.time() - ts)) + " ago"


def _seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 90:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min"


def _num(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else (f"{n:,.1f}" if isinstance(n, float) else str(n))


def _linked(line: str, cites: dict[str, str], session_id: str) -> Markup:
    """The line escaped, with each message id it cites linked to that message in the history."""
    out, pos = [], 0
    for m in ID_TOKEN_RE.finditer(line):
        full = cites.get(m.group(0).strip(".:"))
        if full is None:
            continue
        word = m.group(0).strip(".:")
        start = m.start() + m.group(0).index(word)
        out += [escape(line[pos:start]),
                Markup('<a class="cite" href="/sessions/{}/around?message_id={}">{}</a>').format(
                    quote(session_id, safe=""), quote(full, safe=""), word)]
        pos = start + len(word)
    out.append(escape(line[pos:]))
    return Markup("").join(out)


def _marked(snippet: str) -> Markup:
    """A search snippet escaped, its «hits» as <mark>."""
    parts = re.split(f"({re.escape(HIT_OPEN)}.*?{re.escape(HIT_CLOSE)})", snippet)
    return Markup("").join(Markup("<mark>{}</mark>").format(p[1:-1]) if p.startswith(HIT_OPEN) and
                           p.endswith(HIT_CLOSE) else escape(p) for p in parts)


def _plot_svg(plot: Any) -> Markup:
    """Token use over time as an inline SVG: the context after each message, the usable line,
    and each compaction as a drop with its version."""
    if plot is None or not plot.points:
        return Markup("")
    top, n = plot.top * 1.05, max(1, plot.messages - 1)

    def x(i: int) -> float:
        return round(i / n * PLOT_W, 1)

    def y(t: int) -> float:
        return round(PLOT_H - t / top * PLOT_H, 1)

    line = " ".join(f"{x(i)},{y(t)}" for i, t in plot.points)
    parts = [Markup('<svg class="plot" viewBox="0 -14 {} {}" role="img" aria-label="token use over time">').format(
        PLOT_W, PLOT_H + 46),
        Markup('<line class="usable" x1="0" x2="{}" y1="{}" y2="{}"/>').format(PLOT_W, y(plot.usable), y(plot.usable)),
        Markup('<text class="lbl" x="4" y="{}">usable {}</text>').format(y(plot.usable) - 3, _num(plot.usable)),
        Markup('<polyline class="use" points="{}"/>').format(line)]
    for i, version, before, after in plot.marks:
        anchor = "lbl end" if x(i) > PLOT_W * 0.8 else "lbl"  # a label at the right edge reads leftwards
        parts.append(Markup('<line class="cut" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>'
                            '<circle class="cut" cx="{0}" cy="{7}" r="3"/>'
                            '<text class="{8}" x="{0}" y="{3}">v{4}: {5} → {6}</text>').format(
            x(i), y(before), PLOT_H, PLOT_H + 14, version, _num(before), _num(after), y(after), anchor))
    parts.append(Markup('<text class="lbl" x="0" y="{}">message 0</text>'
                        '<text class="lbl end" x="{}" y="{}">message {}</text></svg>').format(
        PLOT_H + 28, PLOT_W, PLOT_H + 28, plot.messages - 1))
    return Markup("").join(parts)


ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True, lstrip_blocks=True)
ENV.filters.update(when=_when, ago=_ago, seconds=_seconds, num=_num, marked=_marked)
ENV.globals.update(linked=_linked, plot_svg=_plot_svg)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(ENV.get_template(name).render(**context), status_code=status)


def wants_html(request: Request) -> bool:
    """A browser asks for text/html; an API client (or a fuzzer) gets the JSON envelope."""
    return "text/html" in request.headers.get("accept", "")


def html_error(request: Request, err: ApiError) -> HTMLResponse | None:
    """The error page for a browser on a page route; None: answer with the JSON envelope."""
    route = request.scope.get("route")
    if not wants_html(request) or (route is not None and "page" not in getattr(route, "tags", ())):
        return None
    if route is None and request.url.path.startswith("/v1/"):
        return None
    return render("error.html", err.status, err=err, title=f"{err.status} {err.code}")


def _pages(total: int, per: int) -> int:
    return max(1, -(-total // per))


# ----------------------------------------------------------------------------- routes


@page.get("/", summary="The sessions page")
async def sessions_page(service: Service, page_no: int = Query(1, alias="page", ge=1, le=100_000)) -> Any:
    rows, total = await asyncio.to_thread(service.session_rows, (page_no - 1) * SESSIONS_PER_PAGE,
                                          SESSIONS_PER_PAGE)
    return render("sessions.html", title="compactd — sessions", rows=rows, total=total, page=page_no,
                  pages=_pages(total, SESSIONS_PER_PAGE), ready=service.ready)


@page.get("/sessions/{session_id}", summary="One session's page")
async def session_page(
    session_id: str, service: Service,
    q: str = Query("", max_length=500, description="history search"),
    a: int | None = Query(None, ge=1, description="diff: the older checkpoint version"),
    b: int | None = Query(None, ge=1, description="diff: the newer checkpoint version"),
    cp_page: int = Query(1, ge=1, le=100_000, description="page of checkpoint versions, newest first"),
) -> Any:
    detail = await asyncio.to_thread(service.session_detail, session_id)
    search = await asyncio.to_thread(service.search, session_id, q, SEARCH_LIMIT) if q.strip() else None
    versions = [c.version for c in detail.compactions]
    diff = None
    if len(versions) >= 2:
        a = a if a is not None else versions[1]
        b = b if b is not None else versions[0]
        if a != b:
            diff = await asyncio.to_thread(service.checkpoint_diff, session_id, a, b)
    start = (cp_page - 1) * CHECKPOINTS_PER_PAGE
    return render("session.html", title=f"compactd — {session_id}", d=detail, sid=session_id, q=q,
                  search=search, diff=diff, versions=versions, a=a, b=b,
                  shown=detail.compactions[start:start + CHECKPOINTS_PER_PAGE], cp_page=cp_page,
                  cp_pages=_pages(len(detail.compactions), CHECKPOINTS_PER_PAGE))


@page.get("/sessions/{session_id}/messages", summary="A session's messages, paged")
async def messages_page(session_id: str, service: Service,
                        page_no: int = Query(1, alias="page", ge=1, le=1_000_000)) -> Any:
    rows, total = await asyncio.to_thread(service.message_rows, session_id, (page_no - 1) * MESSAGES_PER_PAGE,
                                          MESSAGES_PER_PAGE, PREVIEW_CHARS)
    return render("messages.html", title=f"compactd — {session_id} messages", sid=session_id, rows=rows,
                  total=total, page=page_no, pages=_pages(total, MESSAGES_PER_PAGE))


@page.get("/sessions/{session_id}/around", summary="The raw messages around one message")
async def around_page(session_id: str, service: Service,
                      message_id: str = Query(..., min_length=1, max_length=500),
                      radius: int = Query(2, ge=0, le=20)) -> Any:
    around = await asyncio.to_thread(service.around, session_id, message_id, radius)
    return render("around.html", title=f"compactd — {message_id}", sid=session_id, around=around)


@page.get("/worker", summary="The worker page")
async def worker_page(service: Service) -> Any:
    return render("worker.html", title="compactd — worker", w=service.worker_view())
