"""The page in a real headless Chromium (Debian's `chromium`, driven by Playwright), over the real
app with the bundled 0.5B counting: a session posted through the API appears on `/`; its page
shows the exact count, a compaction's kept and left-out items and an exact error line of the
checkpoint; the history search finds a Chinese phrase; the diff shows a changed section; and no
script that a transcript carries ever runs.

The transcript is the bundled SWE-agent run (tests/fixtures, MIT), whose file
`src/marshmallow/fields.py` the checkpoint must keep; the test then adds a failing pytest run
(`assert 344 == 345`, the transcript's own wrong output) so that the second checkpoint holds an
error line. Skipped, with the reason, only
where no browser can be driven (`make test` installs Chromium where it can).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from benchmarks.page import VIEWPORT, launch, why_no_browser
from tests.fakes import SWE_TRACE, Borrowed, ServerThread
from tests.injection_cases import CASES
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store

pytestmark = pytest.mark.model
# Playwright's assertions wait for the page, as a person's eyes would; a plain count does not.
expect = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                             "(pip install 'compactd[dev]')").expect

SID, ZH_SID = "swe-page", "zh-page"
CONTEXT_LIMIT = 6000  # usable 4,500: the ~8.9k-token transcript overflows it
ERROR_LINE = "assert 344 == 345"  # the failing run's, written before compactd ran
PATH = "src/marshmallow/fields.py"
ZH_PHRASE = "数据库连接池"
ZH_TURNS = [
    {"role": "user", "content": "请检查为什么服务在高并发下会超时。不要修改数据库迁移文件。"},
    {"role": "assistant", "content": "我先查看日志。"},
    {"role": "user", "content": f"日志显示{ZH_PHRASE}已经耗尽，请把最大连接数调到五十，并保留原来的超时设置。"},
    {"role": "assistant", "content": "好的，我会修改配置文件中的连接数，超时设置保持不变。"},
]
# A script in every place a transcript puts text: the user's words, a tool call, a tool output.
PWNED = "window.__compactd_pwned"
HOSTILE = [
    {"role": "user", "content": f"<script>{PWNED} = 1</script> please fix the <b>bold</b> bug"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "x1", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": f"echo '<img src=x onerror=\"{PWNED}=2\">'"})}}]},
    {"role": "tool", "tool_call_id": "x1",
     "content": f"<svg onload=\"{PWNED}=3\"></svg><iframe src=\"javascript:{PWNED}=4\"></iframe>\n"
                + "\n".join(c.payload for c in CASES)},
    {"role": "user", "content": "ok, now the <script> tag is in the output"},
]


@pytest.fixture(scope="module")
def browser():
    reason = why_no_browser()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(llama_backend):
    app = create_app(Settings(rolling=False, context_limit=CONTEXT_LIMIT),
                     backend_loader=lambda: Borrowed(llama_backend), store=Store(":memory:"))
    with ServerThread(app, wait_health=True) as srv, httpx.Client(base_url=srv.url, timeout=600) as client:
        r = client.post(f"/v1/sessions/{SID}/messages", json=json.loads(SWE_TRACE.read_text()))
        assert r.status_code == 200, r.text
        first = client.post(f"/v1/sessions/{SID}/compact", params={"wait": "instant"})
        assert first.status_code == 200, first.text
        # New turns with a new error, then a second compaction: v2 differs from v1.
        r = client.post(f"/v1/sessions/{SID}/messages", json=[
            {"role": "user", "content": "Now run the full test suite for fields and report any failure."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t9", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": "pytest tests/test_fields.py -q"})}}]},
            {"role": "tool", "tool_call_id": "t9", "content": "F.\nE       assert 344 == 345\n"
             "FAILED tests/test_fields.py::TestTimeDelta::test_ms - assert 344 == 345\n1 failed, 1 passed in 0.12s"},
            {"role": "assistant", "content": "One test still fails: the rounding is not applied yet."},
            {"role": "user", "content": "Fix it, and keep the public API unchanged."},
        ])
        assert r.status_code == 200, r.text
        second = client.post(f"/v1/sessions/{SID}/compact", params={"wait": "instant"})
        assert second.status_code == 200, second.text
        for sid, turns in ((ZH_SID, ZH_TURNS), ("hostile", HOSTILE)):
            assert client.post(f"/v1/sessions/{sid}/messages", json=turns).status_code == 200
        yield {"url": srv.url, "client": client, "app": app,
               "versions": (first.json()["checkpoint_version"], second.json()["checkpoint_version"])}


def follow(page, target) -> None:
    """Click a link or submit button and wait for the page it loads: Playwright's click returns
    once the navigation commits, before the new document is parsed (a count read then finds 0)."""
    (page.locator(target) if isinstance(target, str) else target).click()
    page.wait_for_load_state("load")


@pytest.fixture
def page(browser, tmp_path):
    p = browser.new_page(viewport=VIEWPORT)
    yield p
    p.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    p.close()


def test_a_posted_session_appears_on_the_sessions_page(served, page):
    page.goto(served["url"] + "/")
    row = page.locator(f'tr.session[data-id="{SID}"]')
    expect(row).to_have_count(1)
    exact = served["client"].get(f"/v1/sessions/{SID}/tokens").json()["tokens"]
    assert row.locator("b.exact").inner_text() == f"{exact:,}"
    assert "swe_agent" in row.inner_text()
    follow(page, page.locator(f'tr.session[data-id="{SID}"] a').first)
    assert page.url.endswith(f"/sessions/{SID}")


def test_the_session_page_shows_count_kept_left_out_and_the_error_line(served, page):
    client, store = served["client"], served["app"].state.service.store
    page.goto(f"{served['url']}/sessions/{SID}")
    exact = client.get(f"/v1/sessions/{SID}/tokens").json()["tokens"]
    assert page.locator("#gauge b.exact").inner_text() == f"{exact:,}"
    v1, v2 = served["versions"]
    stored = {c.version: c.data for c in store.checkpoints(SID)}

    def opened(version: int):
        cp = page.locator(f"details#v{version}")
        if cp.get_attribute("open") is None:
            cp.locator("summary").click()
        return cp

    # v2 saw the failing pytest run: its checkpoint holds the error line, and the page shows it exactly.
    errors = [e["text"] for e in stored[v2]["ledger"]["errors"]]
    assert any(ERROR_LINE in e for e in errors), errors
    kept = opened(v2).locator(".facts.kept").inner_text()
    for line in errors:
        assert line in kept
    assert PATH in kept
    # v1 summarized the transcript's head: the page says how many messages and tokens it left out.
    left_out = opened(v1).locator("ul.left-out").inner_text()
    dropped = stored[v1]["audit"]["dropped"]
    assert dropped and f"{len(dropped)} message(s), {sum(d['tokens'] for d in dropped):,} tokens" in left_out
    # A cited message id links to that message in the history.
    link = page.locator(f"details#v{v2} .facts.kept a.cite").first
    expect(link).to_have_count(1)
    follow(page, link)
    assert "/around?message_id=" in page.url
    expect(page.locator(".msg.target")).to_have_count(1)


def test_the_history_search_finds_a_chinese_phrase(served, page):
    page.goto(f"{served['url']}/sessions/{ZH_SID}")
    page.fill("input[name=q]", ZH_PHRASE)
    follow(page, "form.inline button[type=submit]")
    results = page.locator("#search-results")
    expect(results).to_have_count(1)
    assert results.locator("mark").first.inner_text() == ZH_PHRASE
    assert "耗尽" in results.inner_text()
    # chars/4 undercounts Chinese: the gauge shows it beside the exact count.
    gauge = page.locator("#gauge").inner_text()
    exact = served["client"].get(f"/v1/sessions/{ZH_SID}/tokens").json()["tokens"]
    assert f"{exact:,}" in gauge and re.search(r"\(-\d+ %\)", gauge), gauge


def test_the_diff_shows_a_changed_section(served, page):
    a, b = served["versions"]
    page.goto(f"{served['url']}/sessions/{SID}")
    page.select_option("select[name=a]", str(a))
    page.select_option("select[name=b]", str(b))
    follow(page, page.get_by_role("button", name="Diff", exact=True))
    diff = page.locator("#diff")
    changed = diff.locator("h3.changed")
    expect(changed.first).to_be_visible()
    assert changed.count() >= 1
    assert diff.locator(".add").count() >= 1
    assert "assert 344 == 345" in diff.inner_text()


def test_no_script_from_a_transcript_ever_runs(served, page):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    base = served["url"]
    for path in ("/", "/sessions/hostile", "/sessions/hostile?q=script", "/sessions/hostile/messages",
                 "/sessions/hostile/around?message_id=m00000&radius=5"):
        page.goto(base + path)
        assert page.evaluate(f"typeof {PWNED}") == "undefined", path
        assert page.locator("script").count() == 0, path
        assert page.locator("iframe, svg[onload], img[onerror]").count() == 0, path
    assert "<script>" in page.locator("body").inner_text()  # shown as text
    assert dialogs == []


def test_the_worker_page_names_the_model(served, page):
    page.goto(served["url"] + "/worker")
    info = served["client"].get("/v1/models").json()["data"][0]
    assert info["id"] in page.locator("#model").inner_text()
    assert page.locator("#lanes tr").count() == 3  # header + two lanes
    assert Path(page.url).name == "worker"
