"""The page's logic over HTTP, on the deterministic backend (the browser tests in
test_page_browser.py run the real model and a real Chromium): escaping, errors for a browser
and for an API client, pagination, the API key rules, and the typed views it renders."""

from __future__ import annotations

import base64
import re

import httpx
import pytest
from markupsafe import escape as escape_html

from tests.fakes import ScriptedBackend, openai_messages, served_app, work_session
from worker.service.views import Gauge

SCRIPT = "<script>window.__pwned = 1</script>"
BROWSER = {"accept": "text/html,application/xhtml+xml"}


@pytest.fixture(scope="module")
def server():
    with served_app(ScriptedBackend(), context_limit=8000) as srv:
        yield srv


def post(url: str, sid: str, messages: list[dict]) -> None:
    r = httpx.post(f"{url}/v1/sessions/{sid}/messages", json=messages, timeout=60)
    assert r.status_code == 200, r.text


def test_the_sessions_page_lists_a_posted_session_with_its_count(server):
    post(server.url, "listed", openai_messages(work_session(turns=4, words=40)))
    tokens = httpx.get(f"{server.url}/v1/sessions/listed/tokens").json()["tokens"]
    r = httpx.get(server.url + "/", headers=BROWSER)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    row = re.search(r'<tr class="session" data-id="listed">.*?</tr>', r.text, re.S)
    assert row is not None
    assert f'<b class="exact">{tokens:,}</b>' in row.group(0)


def test_transcript_text_is_escaped_everywhere(server):
    msgs = [{"role": "user", "content": f"fix the login {SCRIPT} page"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "bash", "arguments": '{"command": "cat <script>x</script>"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": f'<img src=x onerror="window.__pwned=1"> {SCRIPT}'}]
    post(server.url, "xss", msgs)
    assert httpx.post(f"{server.url}/v1/sessions/xss/compact").status_code in (200, 409)
    pages = ["/sessions/xss", "/sessions/xss?q=script", "/sessions/xss/messages",
             "/sessions/xss/around?message_id=m00000", "/"]
    for path in pages:
        r = httpx.get(server.url + path, headers=BROWSER)
        assert r.status_code == 200, (path, r.text[:300])
        assert SCRIPT not in r.text and "<img src=x" not in r.text, path
    around = httpx.get(server.url + "/sessions/xss/around?message_id=m00000", headers=BROWSER).text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in around


def test_errors_are_a_page_for_a_browser_and_the_envelope_for_a_client(server):
    r = httpx.get(server.url + "/sessions/nope", headers=BROWSER)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "unknown session" in r.text
    r = httpx.get(server.url + "/sessions/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(server.url + "/?page=abc")
    assert r.status_code == 400 and r.json()["error"]["param"] == "page"
    r = httpx.get(server.url + "/?page=0", headers=BROWSER)
    assert r.status_code == 400 and "<h1>400" in r.text
    # The API's own paths answer a browser with JSON too: only the page renders pages.
    assert httpx.get(server.url + "/v1/sessions/nope", headers=BROWSER).json()["error"]["code"] == "not_found"


def test_long_message_lists_are_paginated(server):
    post(server.url, "long", openai_messages(work_session(turns=60, words=10)))
    n = httpx.get(server.url + "/v1/sessions/long").json()["messages"]
    assert n > 100
    first = httpx.get(server.url + "/sessions/long/messages", headers=BROWSER).text
    last = httpx.get(server.url + f"/sessions/long/messages?page={-(-n // 100)}", headers=BROWSER).text
    assert first.count("<tr><td class=\"n\">") == 100
    assert f'<td class="n">{n - 1}</td>' in last and '<td class="n">0</td>' not in last


def test_the_worker_page_names_the_model_and_the_lanes(server):
    r = httpx.get(server.url + "/worker", headers=BROWSER)
    assert r.status_code == 200
    assert "scripted" in r.text.lower() or "Model" in r.text
    assert "foreground" in r.text and "background" in r.text


def test_chars4_error_is_against_the_exact_count():
    g = Gauge(tokens=1000, usable=4000, context_limit=8000, chars=2400, chars4=600)
    assert g.chars4_error == pytest.approx(-40.0) and g.share == 0.25


def test_the_page_needs_the_key_on_a_keyed_server():
    with served_app(ScriptedBackend(), api_key="s3cret") as srv:
        r = httpx.get(srv.url + "/", headers=BROWSER)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
        assert httpx.get(srv.url + "/").headers["www-authenticate"] == "Bearer"
        basic = "Basic " + base64.b64encode(b"me:s3cret").decode()
        assert httpx.get(srv.url + "/", headers={**BROWSER, "authorization": basic}).status_code == 200
        wrong = "Basic " + base64.b64encode(b"me:nope").decode()
        assert httpx.get(srv.url + "/", headers={**BROWSER, "authorization": wrong}).status_code == 401
        assert httpx.get(srv.url + "/", headers={"authorization": "Bearer s3cret"}).status_code == 200


def test_a_long_checkpoint_chain_is_paged_newest_first(server):
    for _ in range(12):
        post(server.url, "chain", openai_messages(work_session(turns=8, words=120)))
        r = httpx.post(f"{server.url}/v1/sessions/chain/compact", params={"wait": "model"}, timeout=60)
        assert r.status_code == 200, r.text
    n = httpx.get(f"{server.url}/v1/sessions/chain").json()["checkpoint_version"]
    assert n >= 12
    first = httpx.get(f"{server.url}/sessions/chain", headers=BROWSER).text
    assert re.findall(r'<details class="cp" id="v(\d+)"', first) == [str(v) for v in range(n, n - 10, -1)]
    assert '<a href="/sessions/chain?cp_page=2">2</a>' in first
    rest = httpx.get(f"{server.url}/sessions/chain?cp_page=2", headers=BROWSER).text
    assert re.findall(r'<details class="cp" id="v(\d+)"', rest) == [str(v) for v in range(n - 10, 0, -1)]


def test_a_refusal_is_listed_with_its_reason(server):
    system = {"role": "system", "content": " ".join(f"rule{i}" for i in range(7000))}  # over usable (6000) alone
    post(server.url, "refused", [system] + openai_messages(work_session(turns=3, words=40)))
    r = httpx.post(f"{server.url}/v1/sessions/refused/compact", params={"wait": "model"}, timeout=60)
    assert r.status_code == 409 and r.json()["error"]["code"] == "compaction_refused"
    page = httpx.get(f"{server.url}/sessions/refused", headers=BROWSER).text
    table = re.search(r'<table id="refusals">.*?</table>', page, re.S)
    assert table is not None
    assert str(escape_html(r.json()["error"]["message"])) in table.group(0)
