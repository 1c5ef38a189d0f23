"""The served OpenAPI spec, fuzzed with schemathesis (issue 7.1): valid and invalid requests for
every operation against a real uvicorn on 127.0.0.1 (the fake deterministic backend): no 5xx,
and every error in the documented `{"error": {"code", "message", "param", "type"}}` shape; under
`/v1beta/` (Gemini CLI's endpoints) in Gemini's `{"error": {"code", "message", "status"}}`, its
`code` the HTTP status.

Session operations run twice: with generated ids (404s) and with the id of a seeded session
that holds a transcript and a checkpoint, so their success paths are fuzzed too.
COMPACTD_RELIABILITY_FULL=1 runs ~15x more cases."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from tests.fakes import ScriptedBackend, openai_messages, wait_until, work_session
from tests.test_reliability_common import FULL, LoopbackServer, record
from worker.config import Settings
from worker.http.app import create_app
from worker.service.store import Store

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 100 if FULL else 4  # per operation, mode and session choice
SEEDED = "seeded"
REQUEST_TIMEOUT_S = 60  # a hung request fails the test instead of stalling it


GEMINI_PREFIX = "/v1beta/"


def error_shaped(response: requests.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    if not (isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], dict)
            and bool(body["error"].get("message"))):
        return False
    if urlsplit(response.request.url).path.startswith(GEMINI_PREFIX):
        error = body["error"]
        return (set(error) == {"code", "message", "status"} and error["code"] == response.status_code
                and isinstance(error["status"], str) and error["status"].isupper())
    return set(body["error"]) == {"code", "message", "param", "type"}


def run_cases(strategy: Any, label: str, base_url: str, http: requests.Session, statuses: Counter[str],
              failures: list[tuple[str, int, str]]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def call(case: Any) -> None:
        response = case.call(base_url=base_url, session=http, timeout=REQUEST_TIMEOUT_S)
        statuses[f"{response.status_code // 100}xx"] += 1
        if response.status_code >= 500 or (response.status_code >= 400 and not error_shaped(response)):
            failures.append((label, response.status_code, response.text[:300]))

    call()


def test_openapi_fuzz_no_5xx_and_every_error_in_shape():
    backend = ScriptedBackend()
    app = create_app(Settings(context_limit=8000), backend_loader=lambda: backend, store=Store(":memory:"))
    statuses: Counter[str] = Counter()
    failures: list[tuple[str, int, str]] = []
    skipped: list[str] = []
    try:
        with LoopbackServer(app) as srv:
            assert wait_until(lambda: httpx.get(srv.url + "/health").status_code == 200)
            seed = httpx.post(f"{srv.url}/v1/sessions/{SEEDED}/messages", timeout=REQUEST_TIMEOUT_S,
                              json=openai_messages(work_session(turns=12, words=150)))
            assert seed.status_code == 200
            assert httpx.post(f"{srv.url}/v1/sessions/{SEEDED}/compact", timeout=REQUEST_TIMEOUT_S).status_code == 200
            schema = schemathesis.openapi.from_url(srv.url + "/openapi.json")
            http = requests.Session()
            t0 = time.perf_counter()
            operations = [r.ok() for r in schema.get_all_operations()]
            for op in operations:
                fixed: list[dict[str, Any] | None] = [None]
                if "{session_id}" in op.path:
                    fixed.append({"session_id": SEEDED})
                for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
                    for path_parameters in fixed:
                        strategy = op.as_strategy(generation_mode=mode, path_parameters=path_parameters)
                        try:
                            run_cases(strategy, op.label, srv.url, http, statuses, failures)
                        except Unsatisfiable:  # e.g. no invalid request exists for GET /health
                            skipped.append(f"{op.label} {mode.value}")
            seconds = time.perf_counter() - t0
    finally:
        backend.close()
    cases = sum(statuses.values())
    gemini = [op for op in operations if op.path.startswith(GEMINI_PREFIX)]
    assert len(gemini) == 3, [op.path for op in operations]  # generateContent, streamGenerateContent, countTokens
    record("schemathesis", {"operations": len(operations), "cases": cases, "statuses": dict(statuses),
                            "failures": len(failures), "seconds": round(seconds, 1),
                            "no_negative_cases": len(skipped)})
    assert not failures, failures[:10]
    assert cases >= len(operations) * EXAMPLES and statuses["2xx"] and statuses["4xx"]
