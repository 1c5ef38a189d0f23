"""`compactd serve` for real: a subprocess on 127.0.0.1 with the bundled 0.5B and a temp DB.

One model-backed summary in all (the rolling summary of the SWE-agent transcript, a few
thousand prompt tokens); the overflow compaction is then a swap, made without a model call.
The tests run in file order and share the server; the last one stops it with SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from backends.base import GenerationStats
from backends.openai_http import OpenAIHttpBackend
from tests.fakes import SessionBuilder, wait_until
from tests.test_reliability_common import ServeProcess
from worker.formats import load
from worker.formats.export import to_openai

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
TRAJ = ROOT / "tests/fixtures/sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
CONTEXT_LIMIT = 6000  # usable 4500: the ~8.9k-token transcript overflows it
MODEL_WAIT_S = 900  # a generous bound for one summary on a busy 2-core CPU
ERROR_LINE = 'RuntimeError("Cannot find version information")'
ZH_PHRASE = "连接池"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    db = tmp_path_factory.mktemp("serve") / "compactd.sqlite3"
    serve = ServeProcess(db, "--ctx", "8192", env={"COMPACTD_ROLLING": "1"}).start()
    try:
        serve.wait_healthy()
        client = httpx.Client(base_url=serve.url, timeout=MODEL_WAIT_S)
        yield {"url": serve.url, "proc": serve.proc, "client": client, "db": db}
        client.close()
    finally:
        serve.kill()


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def test_transcript_rolling_summary_then_swap_compaction(server):
    client: httpx.Client = server["client"]
    doc = json.loads(TRAJ.read_text())
    r = client.post("/v1/sessions/swe/messages", json=doc, params={"context_limit": CONTEXT_LIMIT})
    assert r.status_code == 200, r.text
    status = r.json()["tokens"]
    assert status["format"] if "format" in status else r.json()["format"] == "swe_agent"
    assert status["overflow"] and status["usable"] == 4500
    # Past the pre-threshold: the rolling summary is built in the background.
    assert wait_until(lambda: client.get("/v1/sessions/swe/tokens").json()["rolling_ready"],
                      timeout=MODEL_WAIT_S, interval=1.0)
    before = client.get("/metrics").text
    assert metric(before, "compactd_decode_tokens_total") > 0  # the rolling summary ran the model
    r = client.post("/v1/sessions/swe/compact")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "swap" and body["model_calls"] == 0
    after = client.get("/metrics").text
    # No model call on the critical path: the engine counters did not move.
    for name in ("compactd_decode_tokens_total", "compactd_prompt_tokens_total"):
        assert metric(after, name) == metric(before, name)
    assert metric(after, 'compactd_compactions_total{mode="swap"}') == 1
    assert body["tokens"]["after"] < status["usable"] < body["tokens"]["before"]
    cp = client.get("/v1/sessions/swe/checkpoint").json()
    assert cp["version"] == 1 and cp["mode"] == "swap"
    assert cp["messages"][0]["role"] == "system" and cp["summary_text"] in [m["content"] for m in cp["messages"]]
    assert "marshmallow" in cp["summary_text"]
    tokens = client.get("/v1/sessions/swe/tokens").json()
    assert tokens["checkpoint_version"] == 1 and not tokens["overflow"]
    anthropic = client.get("/v1/sessions/swe/checkpoint", params={"format": "anthropic"}).json()
    assert anthropic["system"] and anthropic["messages"]


def test_history_search_finds_a_tool_error_and_chinese_text(server):
    client: httpx.Client = server["client"]
    session = load(TRAJ)
    expected = next(m.id for m in session.messages if any(ERROR_LINE in p.output for p in m.tool_results))
    hits = client.get("/v1/sessions/swe/history/search", params={"q": ERROR_LINE}).json()["hits"]
    assert hits and hits[0]["message_id"] == expected

    zh = (SessionBuilder("zh").system("你是一个编程助手。")
          .user("数据库连接池在高并发下耗尽了，请帮我查一下 app/db/pool.py 的配置。")
          .tool("read_file", {"path": "app/db/pool.py"}, "MAX_CONNECTIONS = 5\nTIMEOUT = 30")
          .assistant("连接池上限只有 5，建议调到 50 并加上超时重试。")
          .user("好的，请修改并运行测试。")
          .tool("bash", {"command": "pytest tests/test_pool.py"}, "错误：连接超时（timeout=30s）", is_error=True)
          .build())
    chat = to_openai(zh)
    assert client.post("/v1/sessions/zh/messages", json=chat).status_code == 200
    hits = client.get("/v1/sessions/zh/history/search", params={"q": ZH_PHRASE}).json()
    assert hits["mode"] == "bm25"
    assert {h["message_id"] for h in hits["hits"]} == {f"m{i:05d}" for i, m in enumerate(chat)
                                                       if ZH_PHRASE in (m.get("content") or "")}
    around = client.get("/v1/sessions/zh/history/around", params={"message_id": "m00006", "radius": 1}).json()
    assert any("连接超时" in json.dumps(m, ensure_ascii=False) for m in around["messages"])
    # The exact count is the model's own tokenizer and template: compare with /v1/count.
    counted = client.post("/v1/count", json={"messages": chat}).json()["tokens"]
    assert client.get("/v1/sessions/zh/tokens").json()["tokens"] == counted


def test_remote_backend_against_compactd_serve(server, llama_backend):
    remote = OpenAIHttpBackend(server["url"])
    try:
        for text in ("def parse(value):\n    return Decimal(value)", "数据库连接池耗尽 <|im_end|>"):
            assert remote.tokenize(text) == llama_backend.tokenize(text)
        msgs = [{"role": "user", "content": "Say hello in one word."}]
        assert remote.count_messages(msgs) == llama_backend.count_messages(msgs)
        items = list(remote.generate(msgs, max_tokens=8))
        pieces = [i for i in items if isinstance(i, str)]
        assert pieces and isinstance(items[-1], GenerationStats)
        assert items[-1].decode_tokens >= 1 and items[-1].prompt_tokens == llama_backend.count_messages(msgs)
    finally:
        remote.close()


def test_metrics_and_clean_sigterm(server):
    text = server["client"].get("/metrics").text
    assert "compactd_time_to_first_token_seconds_bucket" in text and "compactd_queue_depth" in text
    proc: subprocess.Popen = server["proc"]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert time.monotonic() - t0 < 60
