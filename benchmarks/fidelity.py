"""Fidelity benchmark: what a compaction keeps, what it invents, and whether it gets the work
state right, for compactd and for two baselines run with the same model on the same input.

    python -m benchmarks.fidelity [--quick] [--out benchmarks/results] [--model NAME]

Writes `fidelity.json` (every fact, every output) and `fidelity.png` (retention by kind); the
real set (every real transcript, expected facts written by hand, the agent's own summary) is
benchmarks/real_set.py (run alone: benchmarks/fidelity_real.py), under "real" in the same JSON, with `fidelity_real.png`.

Inputs: windows of the vendored transcripts in tests/fixtures (SWE-agent marshmallow trace,
Claude Code cc-spotter, pi) and two sessions written here with a known work state (one in
Chinese; both with a "do not change the public signature of X" constraint and one piece of
work still failing at the end). Each is compacted to a budget below its size
(usable = 75% of the window's tokens).

Methods, all on the *head* compactd chose (the messages it compacts; the verbatim tail is
the same for everyone and is not scored):
- compactd: `compact()` - ledger, evidence-based work state, schema-bound narrative, verify.
- naive-150w: "Summarize the work log in at most 150 words." over the head's messages cut to
  800 characters each: the recorded failure (compaction-brief.md).
- template: the opencode/pi section template alone (Goal / Constraints & Preferences /
  Progress (Done / In Progress / Blocked) / Key Decisions / Next Steps / Critical Context /
  Relevant Files, "preserve exact file paths, commands, error strings") over the same
  narrative compactd's model reads (text, calls with arguments, one line per tool result),
  without the ledger's facts, the schema or verification.

Key facts come from the head by rules written here, independent of worker/facts/ledger.py: exact
error lines, file paths, shell commands, the user's constraints, the assistant's stated
decisions (the last kind is a heuristic). A fact is retained when the summary contains it
(errors and commands exactly, whitespace-normalized; paths by their last two components;
constraints and decisions by their specific identifiers, or most content words when they
have none, with the negation kept for "do not" constraints). Invented identifiers: paths,
snake/camel/dotted names and `code` spans in the model-written text that occur nowhere in
the input. Work-state errors (written sessions only): pending work the summary calls done.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import (
    CC_TRACE,
    IDENT,
    N_CTX,
    N_THREADS,
    NAIVE_MAX_TOKENS,
    NAIVE_PROMPT,
    PATH_TOKEN,
    PI_TRACE,
    RESULTS_DIR,
    SWE_TRACE,
    TEMPLATE_SYSTEM,
    TEMPLATE_USER,
    figure_title,
    generate,
    invented,
    machine_info,
    path_key,
    paths_in,
    peak_rss_mb,
    raw_text,
    save_figure,
    wait_for_quiet,
    write_outputs,
)

USABLE_SHARE = 0.75  # compact each input to a budget below its size: an overflow
NAIVE_CUT_CHARS = 800  # the recorded failure cut every message at 800 characters
FULL_WINDOW_NARRATIVE = 1500  # fixture windows: prefixes whose narrative reaches this many tokens
QUICK_WINDOW_MESSAGES = 14  # quick: the SWE trace up to its first edit attempt (~6k tokens)
QUICK_MAX_TOKENS = 200  # quick: every method's output bound (full: compactd's own, 700)
MAX_LISTED = 6  # missing facts / invented names listed per method and input

METHODS = ("compactd", "naive-150w", "template")
KINDS = ("error", "path", "command", "constraint", "decision")



def _say(msg: str) -> None:
    print(f"[fidelity] {msg}", file=sys.stderr, flush=True)


# --- inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkItem:
    label: str
    keys: tuple[str, ...]  # a summary line naming any of these talks about the item


@dataclass
class Case:
    name: str
    source: str
    session: Any
    pending: tuple[WorkItem, ...] = ()
    done: tuple[WorkItem, ...] = ()
    notes: list[str] = field(default_factory=list)


def _call(name: str, args: dict[str, Any], output: str, cid: str, text: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": text,
         "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


FILLER_VERBS = ("format", "validate", "normalize", "serialize", "merge", "export", "load", "describe")
FILLER_FUNCTIONS = 12  # helpers around the code that matters: files an agent reads are not 20 lines


def _filler(nouns: tuple[str, ...]) -> str:
    """Plausible helper functions, so the files and logs have a realistic size."""
    out = []
    for i in range(FILLER_FUNCTIONS):
        verb, noun = FILLER_VERBS[i % len(FILLER_VERBS)], nouns[i % len(nouns)]
        out += [
            "", "",
            f"def {verb}_{noun}(value, *, strict: bool = False):",
            f'    """{verb.capitalize()} one {noun.replace("_", " ")}; strict mode rejects unknown fields."""',
            "    if value is None:",
            f'        raise ValueError("{noun} is required") if strict else None',
            f"    result = dict(value) if isinstance(value, dict) else {{'{noun}': value}}",
            f"    result.setdefault('kind', '{noun}')",
            "    return result",
        ]
    return "\n".join(out)


def _numbered(code: str, nouns: tuple[str, ...] = ()) -> str:
    body = code.strip("\n") + (_filler(nouns) if nouns else "")
    return "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(body.splitlines()))


def _pytest_log(test_file: str, passed: int, failures: list[tuple[str, str, str]], secs: str) -> str:
    """A `pytest -v` log: header, one line per test, then (test, source line, error line) per failure."""
    stem = Path(test_file).stem.removeprefix("test_")
    total = passed + len(failures)
    out = ["============================= test session starts ==============================",
           "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0 -- /work/.venv/bin/python",
           "rootdir: /work/repo", "configfile: pyproject.toml", f"collected {total} items", ""]
    names = [f"test_{stem}_{i}" for i in range(passed)] + [t for t, _s, _e in failures]
    for i, name in enumerate(names):
        status = "FAILED" if i >= passed else "PASSED"
        out.append(f"{test_file}::{name} {status}".ljust(70) + f"[{(i + 1) * 100 // total:3d}%]")
    if failures:
        out.append("=================================== FAILURES ===================================")
    for test, src, err in failures:
        out += [f"____________________________ {test} ____________________________", "",
                f"    def {test}():", f">       {src}", f"E       {err}", "", f"{test_file}:42: {err.split(':')[0]}"]
    if failures:
        out.append("=========================== short test summary info ============================")
        out += [f"FAILED {test_file}::{t} - {e}" for t, _s, e in failures]
        out.append(f"========================= {len(failures)} failed, {passed} passed in {secs}s =========================")
    else:
        out.append(f"============================== {passed} passed in {secs}s ==============================")
    return "\n".join(out)


INVOICE_PY = '''
"""Invoices: line items, tax and the total finance reports."""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal


@dataclass
class LineItem:
    sku: str
    quantity: int
    unit_price: Decimal


@dataclass
class Invoice:
    customer_id: str
    tax_rate: float = 0.19
    items: list[LineItem] = field(default_factory=list)

    def add(self, sku: str, quantity: int, unit_price: Decimal) -> None:
        self.items.append(LineItem(sku, quantity, unit_price))

    def subtotal(self) -> Decimal:
        return sum((i.unit_price * i.quantity for i in self.items), Decimal("0"))

    def total(self, currency: str = "EUR") -> Decimal:
        """Subtotal plus tax, rounded to cents. Called positionally by billing, exports, reports."""
        subtotal = self.subtotal()
        return Decimal(str(round(float(subtotal) * (1 + self.tax_rate), 2)))

    def lines(self) -> list[str]:
        return [f"{i.sku} x{i.quantity} @ {i.unit_price}" for i in self.items]
'''

DISCOUNTS_PY = '''
"""Volume discounts applied before tax."""
from decimal import Decimal

BULK_THRESHOLD = 100
BULK_RATE = 0.05


def discounted_price(price: Decimal, quantity: int, rate: float = BULK_RATE) -> Decimal:
    """Unit price after the bulk discount (orders of BULK_THRESHOLD units or more)."""
    if quantity < BULK_THRESHOLD:
        return price
    return price * (1 - rate)


def describe(rate: float) -> str:
    return f"{rate:.0%} off from {BULK_THRESHOLD} units"
'''

TEST_INVOICE_PY = '''
import pytest
from decimal import Decimal

from billing.invoice import Invoice


@pytest.mark.parametrize("price,expected", [("10.00", "11.90"), ("0.99", "1.18")])
def test_total_simple(price, expected):
    inv = Invoice("c1")
    inv.add("sku-1", 1, Decimal(price))
    assert inv.total() == Decimal(expected)


def test_total_rounds_half_up():
    inv = Invoice("c2", tax_rate=0.0)
    inv.add("sku-2", 1, Decimal("58.435"))
    assert inv.total() == Decimal("58.44")
'''


def invoice_case() -> Case:
    """English, five turns; the discount test still fails at the end (pending)."""
    from worker.formats.openai import load_messages

    p, d, t = "src/billing/invoice.py", "src/billing/discounts.py", "tests/test_invoice.py"
    chat: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent in the billing repository."}]
    chat.append({"role": "user", "content": (
        "The invoice totals are off by a cent: src/billing/invoice.py rounds 58.435 to 58.43 but finance expects "
        "58.44. Fix the rounding. Do not change the public signature of Invoice.total(), three services call it "
        "positionally.")})
    chat += _call("read_file", {"path": p}, _numbered(INVOICE_PY, ("line_item", "tax_rate", "customer", "currency")), "c1", "Let me read the module first.")
    fail = "AssertionError: assert Decimal('58.43') == Decimal('58.44')"
    chat += _call("bash", {"command": f"python -m pytest {t} -v"},
                  _pytest_log(t, 11, [("test_total_rounds_half_up", "assert inv.total() == Decimal(\"58.44\")", fail)], "0.21"), "c2")
    chat.append({"role": "assistant", "content": (
        "round() on a float rounds the binary value of 58.435, which is slightly below it, so it gives 58.43. "
        "I'll use Decimal.quantize with ROUND_HALF_UP instead of round(), because the amounts are already Decimal "
        "and finance wants half-up rounding.")})
    chat += _call("edit_file", {"path": p, "old": "return Decimal(str(round(float(subtotal) * (1 + self.tax_rate), 2)))",
                                "new": "return (subtotal * (1 + Decimal(str(self.tax_rate)))).quantize(Decimal(\"0.01\"), rounding=ROUND_HALF_UP)"},
                  "Edited src/billing/invoice.py (1 replacement).", "c3")
    chat += _call("bash", {"command": f"python -m pytest {t} -v"}, _pytest_log(t, 12, [], "0.19"), "c4")
    chat.append({"role": "assistant", "content": "Rounding fixed: Invoice.total() now quantizes with ROUND_HALF_UP and tests/test_invoice.py passes (12 passed)."})

    chat.append({"role": "user", "content": "Now tests/test_discounts.py fails too, please fix it."})
    td = "tests/test_discounts.py"
    type_err = "TypeError: unsupported operand type(s) for *: 'decimal.Decimal' and 'float'"
    chat += _call("bash", {"command": f"python -m pytest {td} -v"},
                  _pytest_log(td, 6, [("test_bulk_discount_rounding", "assert discounted_price(Decimal(\"10.52\"), 100) == Decimal(\"10.00\")", type_err)], "0.11"), "c5")
    chat += _call("read_file", {"path": d}, _numbered(DISCOUNTS_PY, ("discount_tier", "coupon", "price_list")), "c6")
    chat.append({"role": "assistant", "content": "The discount rate is a float. I'll convert it with Decimal(str(rate)) rather than changing the callers, since describe() and the CLI pass floats."})
    chat += _call("edit_file", {"path": d, "old": "return price * (1 - rate)", "new": "return price * (1 - Decimal(str(rate)))"},
                  "Edited src/billing/discounts.py (1 replacement).", "c7")
    assert_err = "AssertionError: assert Decimal('9.9940') == Decimal('10.00')"
    chat += _call("bash", {"command": f"python -m pytest {td} -v"},
                  _pytest_log(td, 6, [("test_bulk_discount_rounding", "assert discounted_price(Decimal(\"10.52\"), 100) == Decimal(\"10.00\")", assert_err)], "0.12"), "c8")
    chat.append({"role": "assistant", "content": "The TypeError is gone, but test_bulk_discount_rounding still fails: the discounted price is not rounded to cents yet. That is not fixed."})

    chat.append({"role": "user", "content": "Leave the discounts for now. First add a regression test for the 58.435 case to tests/test_invoice.py, and keep the pytest parametrize style the other tests use."})
    chat += _call("read_file", {"path": t}, _numbered(TEST_INVOICE_PY, ("fixture_invoice", "sample_item")), "c9")
    chat += _call("edit_file", {"path": t, "old": "def test_total_rounds_half_up():",
                                "new": "@pytest.mark.parametrize(\"price,expected\", [(\"58.435\", \"58.44\"), (\"0.005\", \"0.01\")])\ndef test_total_half_up_regression(price, expected):"},
                  "Edited tests/test_invoice.py (1 replacement).", "c10")
    chat += _call("bash", {"command": f"python -m pytest {t} -v"}, _pytest_log(t, 13, [], "0.20"), "c11")
    chat.append({"role": "assistant", "content": "Added test_total_half_up_regression (parametrized, 58.435 -> 58.44); tests/test_invoice.py: 13 passed."})

    chat.append({"role": "user", "content": "Update CHANGELOG.md with a line about the rounding fix."})
    chat += _call("edit_file", {"path": "CHANGELOG.md", "old": "## Unreleased\n", "new": "## Unreleased\n- Invoice totals round half-up to cents (58.435 -> 58.44).\n"},
                  "Edited CHANGELOG.md (1 replacement).", "c12")
    chat.append({"role": "assistant", "content": "CHANGELOG.md updated under Unreleased."})
    chat.append({"role": "user", "content": "Thanks. What is still open?"})
    chat.append({"role": "assistant", "content": f"Only {td}::test_bulk_discount_rounding, which fails with {assert_err}."})
    return Case(
        "written-en-invoice", "written for this benchmark", load_messages(chat, session_id="fid-invoice"),
        pending=(WorkItem("discount test still failing", ("test_discounts", "test_bulk_discount", "bulk discount")),),
        done=(WorkItem("rounding fix", ("ROUND_HALF_UP", "rounding fix", "58.435")),
              WorkItem("regression test", ("regression",))),
    )


LOADER_PY = '''
"""读取 YAML 配置，合并默认值。"""
import yaml

DEFAULTS = {"host": "127.0.0.1", "port": 8080, "debug": False}


def parse_config(path: str, *, strict: bool = False) -> dict:
    """读取配置文件并与 DEFAULTS 合并；strict=True 时未知键报错。"""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    unknown = set(data) - set(DEFAULTS)
    if strict and unknown:
        raise ValueError(f"unknown keys: {sorted(unknown)}")
    return {**DEFAULTS, **data}
'''

ENV_PY = '''
"""环境变量覆盖配置项。"""
import os


def apply_env(config: dict) -> dict:
    out = dict(config)
    for key in config:
        value = os.environ.get(key.upper())
        if value is not None:
            out[key] = type(config[key])(value)
    return out
'''


def loader_zh_case() -> Case:
    """Chinese, five turns; the environment-override test still fails at the end (pending)."""
    from worker.formats.openai import load_messages

    p, e, t, te = "config/loader.py", "config/env.py", "tests/test_loader.py", "tests/test_env_override.py"
    chat: list[dict[str, Any]] = [{"role": "system", "content": "你是一个在 Python 仓库里工作的编程助手。"}]
    chat.append({"role": "user", "content": (
        "config/loader.py 里的 parse_config() 读取空的 YAML 文件时会崩溃：TypeError: 'NoneType' object is not "
        "iterable。请修复。不要修改 parse_config() 的公开签名，也不要引入新的依赖。")})
    chat += _call("read_file", {"path": p}, _numbered(LOADER_PY, ("config_section", "default_value", "yaml_node")), "z1", "先看一下 loader 的实现。")
    none_err = "TypeError: 'NoneType' object is not iterable"
    chat += _call("bash", {"command": f"python -m pytest {t} -v"},
                  _pytest_log(t, 8, [("test_empty_file_uses_defaults", "assert parse_config(str(empty)) == DEFAULTS", none_err)], "0.15"), "z2")
    chat.append({"role": "assistant", "content": (
        "yaml.safe_load 对空文件返回 None。我决定在 parse_config() 内部改用 `yaml.safe_load(f) or {}`，"
        "而不是让每个调用方判断 None，因为所有调用方都假设返回 dict。")})
    chat += _call("edit_file", {"path": p, "old": "data = yaml.safe_load(f)", "new": "data = yaml.safe_load(f) or {}"},
                  "已编辑 config/loader.py（1 处替换）。", "z3")
    chat += _call("bash", {"command": f"python -m pytest {t} -v"}, _pytest_log(t, 9, [], "0.14"), "z4")
    chat.append({"role": "assistant", "content": "已修复：空的 YAML 文件现在返回默认配置，tests/test_loader.py 全部通过（9 passed）。"})

    chat.append({"role": "user", "content": "另外 tests/test_env_override.py 也失败了：环境变量 APP_PORT 没有覆盖配置文件里的 port。"})
    port_err = "AssertionError: assert 8080 == 9090"
    chat += _call("bash", {"command": f"python -m pytest {te} -v"},
                  _pytest_log(te, 3, [("test_port_from_env", "assert apply_env(cfg)[\"port\"] == 9090", port_err)], "0.09"), "z5")
    chat += _call("read_file", {"path": e}, _numbered(ENV_PY, ("env_var", "override", "port_setting")), "z6")
    chat.append({"role": "assistant", "content": "环境变量应该带 APP_ 前缀。我改用 os.environ.get(f\"APP_{key.upper()}\") 来读取，而不是去掉前缀，因为部署脚本已经在用 APP_PORT。"})
    chat += _call("edit_file", {"path": e, "old": "os.environ.get(key.upper())", "new": "os.environ.get(f\"APP_{key.upper()}\")"},
                  "已编辑 config/env.py（1 处替换）。", "z7")
    key_err = "KeyError: 'APP_PORT'"
    chat += _call("bash", {"command": f"python -m pytest {te} -v"},
                  _pytest_log(te, 3, [("test_port_from_env", "monkeypatch.delenv(\"APP_PORT\")", key_err)], "0.10"), "z8")
    chat.append({"role": "assistant", "content": "还没有修好：现在报 KeyError: 'APP_PORT'，测试里 monkeypatch 的顺序可能有问题，需要继续排查。"})

    chat.append({"role": "user", "content": "先放一放。请在 README.md 里补充一段说明：空的配置文件会使用默认值。"})
    chat += _call("edit_file", {"path": "README.md", "old": "## 配置\n", "new": "## 配置\n\n空的配置文件会使用默认值（host、port、debug）。\n"},
                  "已编辑 README.md（1 处替换）。", "z9")
    chat.append({"role": "assistant", "content": "已在 README.md 的“配置”一节补充了空配置文件的说明。"})
    chat.append({"role": "user", "content": "跑一下全部测试。"})
    chat += _call("bash", {"command": "python -m pytest -q"},
                  f"FAILED {te}::test_port_from_env - {key_err}\n1 failed, 23 passed in 0.81s", "z10")
    chat.append({"role": "assistant", "content": f"除了 {te} 之外全部通过。"})
    chat.append({"role": "user", "content": "好的，明天继续。"})
    chat.append({"role": "assistant", "content": f"好的。剩下的是 {te} 的 {key_err}。"})
    return Case(
        "written-zh-config", "written for this benchmark (Chinese)", load_messages(chat, session_id="fid-config-zh"),
        pending=(WorkItem("env override test still failing", ("test_env_override", "APP_PORT", "环境变量")),),
        done=(WorkItem("empty YAML fix", ("NoneType", "safe_load", "空的 YAML", "空 YAML")),
              WorkItem("README note", ("README",))),
    )


def _no_dangling(messages: list[Any]) -> list[Any]:
    """Drop trailing messages until every tool call in the window has its result."""
    while messages:
        calls = {c.id for m in messages for c in m.tool_calls}
        answered = {r.call_id for m in messages for r in m.tool_results}
        if calls <= answered and messages[-1].role != "user":
            return messages
        messages = messages[:-1]
    return messages


def fixture_window(path: Path, name: str, count_text: Any, narrative_target: int | None = None,
                   max_messages: int | None = None) -> Case:
    """A prefix of a transcript: the shortest whose summarizer narrative reaches the target, or
    the first `max_messages`, taken before any in-session summary (the messages as the agent
    first had them: the importer's `compacted` marks, set by that later summary, are cleared)."""
    from worker.formats import load
    from worker.pipeline.summarize import narrative_lines

    session = load(path)
    full = len(session.messages)
    first_summary = next((i for i, m in enumerate(session.messages) if m.is_summary), full)
    live = [m.model_copy(update={"compacted": False}) for m in session.messages[:first_summary]]
    n = min(len(live), max_messages or len(live))
    if narrative_target is not None:
        for n in range(1, len(live) + 1):
            if count_text("\n\n".join(narrative_lines(live[:n]))) >= narrative_target:
                break
    session.messages = _no_dangling(live[:n])
    session.id = f"fid-{name}"
    return Case(name, f"{path.name}: first {len(session.messages)} of {full} messages", session)


# --- key facts, by rules written here (not worker/facts/ledger.py) --------------------------------

ERROR_CLAUSE = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b: [^\n。！？；]*[^\s。！？；]")
ERROR_LINE = re.compile(r"^(?:E\s{2,}\S.*|FAILED \S.*|(?:fatal|error)(?:\[\w+\])?: \S.*|npm ERR! \S.*)", re.I)
CODE_LINE_END = re.compile(r"[,;{(\[]$")  # `error: ColorValueSchema,` is code, not an error
SHELL_TOOL = re.compile(r"bash|shell|exec|terminal|run_command|command_run", re.I)
CONSTRAINT_EN = re.compile(r"\b(?:do not|don't|never|must|should not|shouldn't|avoid|keep|only|without|make sure|"
                           r"always|cannot|can't)\b", re.I)
CONSTRAINT_ZH = re.compile(r"不要|不能|不得|禁止|别|必须|保持|只能|务必|不许|勿")
DECISION_EN = re.compile(r"\b(?:instead of|rather than|decided|decide to|i'll use|i will use|we'll use|switch(?:ed)? to|"
                         r"chose|going with)\b", re.I)
DECISION_ZH = re.compile(r"决定|改用|而不是|选择|采用")
NEGATION = re.compile(r"\b(?:not|never|no|don't|do not|avoid|without|keep|unchanged|preserve)\b|不要|不能|不得|禁止|别|勿|保持|不", re.I)
SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")  # "Invoice.total()" is not a sentence end
STOPWORDS = frozenset("""the a an and or but to of in on for with is are was be it this that as by at from into not never
do don't please must should keep also then than will would can could just only make sure this these those there their
them they have has had been being about after before again because which while where when what""".split())
MAX_FACT_CHARS = 240  # longer lines are cut: a summary citing one quotes its beginning
MIN_ERROR_CHARS = 12  # "AssertionError" alone says nothing


@dataclass(frozen=True)
class Fact:
    kind: str
    text: str


def norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


def _tool_outputs(m: Any) -> list[str]:
    return [r.output for r in m.tool_results]


def _command_of(call: Any) -> str | None:
    if not SHELL_TOOL.search(call.name):
        return None
    args = call.argument_dict()
    cmd = args.get("command", args.get("cmd"))
    if isinstance(cmd, list):
        cmd = " ".join(str(c) for c in cmd)
    if not isinstance(cmd, str) or not cmd.strip():
        return None
    return cmd.strip().splitlines()[0].strip()[:MAX_FACT_CHARS]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_SPLIT.split(text) if s and 8 <= len(s.strip()) <= 400]


def extract_facts(messages: list[Any]) -> list[Fact]:
    """Key facts of a list of session messages: errors from tool output and user text, paths
    from tool arguments and user/assistant text, shell commands, user constraints, assistant
    decisions. Deduplicated, in order of first appearance."""
    found: dict[tuple[str, str], Fact] = {}

    def add(kind: str, text: str) -> None:
        text = text.strip()[:MAX_FACT_CHARS]
        key = (kind, path_key(text) if kind == "path" else norm(text))
        if text and key not in found:
            found[key] = Fact(kind, text)

    for m in messages:
        if m.compacted:
            continue
        texts = _tool_outputs(m) + ([m.text] if m.role == "user" else [])
        for block in texts:
            for line in block.splitlines():
                s = line.strip()
                clause = ERROR_CLAUSE.search(s)
                if clause and len(clause.group(0)) >= MIN_ERROR_CHARS:
                    add("error", clause.group(0))
                elif ERROR_LINE.match(s) and len(s) >= MIN_ERROR_CHARS and not CODE_LINE_END.search(s):
                    add("error", re.sub(r"^E\s+", "", s))
        for call in m.tool_calls:
            for key, value in call.argument_dict().items():
                if isinstance(value, str) and re.search(r"path|file", key, re.I) and "\n" not in value:
                    if PATH_TOKEN.fullmatch(value.strip()) or "/" in value:
                        add("path", value.strip())
            cmd = _command_of(call)
            if cmd:
                add("command", cmd)
                for p in paths_in(cmd):
                    add("path", p)
        if m.role in ("user", "assistant") and m.text:
            for p in paths_in(m.text):
                add("path", p)
            for s in _sentences(m.text):
                if m.role == "user" and (CONSTRAINT_EN.search(s) or CONSTRAINT_ZH.search(s)):
                    add("constraint", s)
                if m.role == "assistant" and (DECISION_EN.search(s) or DECISION_ZH.search(s)):
                    add("decision", s)
    return list(found.values())


def _specifics(text: str) -> list[str]:
    found = [m.group(0).strip("`").removesuffix("()") for m in IDENT.finditer(text)]
    found += [path_key(p) for p in paths_in(text)]
    return [s for s in dict.fromkeys(found) if len(s) >= 3]


def _content_units(text: str) -> set[str]:
    words = {w for w in re.findall(r"[a-z][a-z0-9_]{3,}", text.lower()) if w not in STOPWORDS}
    han = re.findall(r"[\u4e00-\u9fff]", text)
    return words | {a + b for a, b in zip(han, han[1:], strict=False)}


def retained(fact: Fact, summary: str) -> bool:
    s_norm = norm(summary)
    f_norm = norm(fact.text)
    if f_norm and f_norm in s_norm:
        return True
    if fact.kind == "error":
        return False
    if fact.kind == "path":
        return path_key(fact.text) in s_norm
    if fact.kind == "command":
        bare = re.sub(r"^cd \S+ && ", "", f_norm)
        return bool(bare) and bare in s_norm
    specifics = _specifics(fact.text)
    if specifics:
        if not all(sp.lower() in s_norm for sp in specifics):
            return False
        if fact.kind == "constraint" and NEGATION.search(fact.text):
            first = specifics[0].lower()
            return any(first in norm(line) and NEGATION.search(line) for line in summary.splitlines())
        return True
    units = _content_units(fact.text)
    if not units:
        return False
    share = len(units & _content_units(summary)) / len(units)
    return share >= (0.6 if fact.kind == "constraint" else 0.5)


# --- scoring ---------------------------------------------------------------------------------

SECTION_PATTERNS = {
    "Goal": r"goal|目标", "Constraints & Preferences": r"constraints|约束", "Progress": r"progress|进展",
    "Key Decisions": r"key decisions|decisions|关键决策", "Next Steps": r"next steps|下一步",
    "Critical Context": r"critical context|关键上下文", "Relevant Files": r"relevant files|相关文件",
}
DONE_HEADING = re.compile(r"\bdone\b|\bcompleted\b|已完成", re.I)
PENDING_HEADING = re.compile(r"in progress|blocked|next steps|pending|remaining|todo|进行中|受阻|阻塞|下一步|待办", re.I)
DONE_WORDS = re.compile(r"\b(?:done|completed?|fixed|resolved|passe[sd]|passing|finished|implemented|works)\b|"
                        r"已修复|修复了|已完成|完成了|已解决|通过", re.I)
PENDING_WORDS = re.compile(r"\b(?:not|pending|todo|still|remaining|remains|yet|fails?|failing|failed|in progress|"
                           r"blocked|next|need|needs|should|will|investigate)\b|未|还没|仍|待|失败|需要|继续|进行中|阻塞|下一步",
                           re.I)


QUOTED_OR_ERROR = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|\b[A-Z]\w*(?:Error|Exception)\b:.*")


def sections_present(summary: str) -> list[str]:
    heads = [line for line in summary.splitlines() if re.match(r"^\s*(?:#{1,4}\s|\*\*|\d+\.\s|[A-Za-z &]+:)", line)
             or re.match(r"^\s*#", line)]
    return [name for name, rx in SECTION_PATTERNS.items() if any(re.search(rx, h, re.I) for h in heads)]


def _claims(summary: str) -> list[tuple[str, str]]:
    """(line, 'done' | 'pending' | '') for each line: its Done / pending heading, else its own words."""
    out, ctx = [], ""
    for line in summary.splitlines():
        stripped = line.strip()
        if re.match(r"^(?:#{1,4}\s|\*\*[^*]+\*\*:?$|[A-Za-z ]+:$)", stripped):
            ctx = "done" if DONE_HEADING.search(stripped) else "pending" if PENDING_HEADING.search(stripped) else ""
            continue
        words = QUOTED_OR_ERROR.sub(" ", stripped)  # "is not iterable" inside an error is not a claim
        if ctx:  # under a Done / In Progress heading the heading is the claim ("- fix the failing test")
            out.append((stripped, ctx))
        elif PENDING_WORDS.search(words):
            out.append((stripped, "pending"))
        elif DONE_WORDS.search(words):
            out.append((stripped, "done"))
        else:
            out.append((stripped, ctx))
    return out


def work_state_errors(summary: str, pending: tuple[WorkItem, ...], done: tuple[WorkItem, ...]) -> dict[str, Any]:
    claims = _claims(summary)

    def about(item: WorkItem) -> list[tuple[str, str]]:
        return [(line, c) for line, c in claims if any(k.lower() in line.lower() for k in item.keys)]

    called_done = [p.label for p in pending if any(c == "done" for _l, c in about(p))]
    lost = [p.label for p in pending if not about(p)]
    done_called_pending = [d.label for d in done
                           if about(d) and all(c == "pending" for _l, c in about(d))]
    return {"pending_called_done": called_done, "pending_not_mentioned": lost,
            "done_called_pending": done_called_pending,
            "errors": len(called_done), "checked_pending": len(pending), "checked_done": len(done)}


def score(summary: str, model_text: str, facts: list[Fact], source: str, allowed: str, case: Case,
          count: Any, summary_limit: int, head_tokens: int) -> dict[str, Any]:
    per_kind: dict[str, Any] = {}
    for kind in KINDS:
        of_kind = [f for f in facts if f.kind == kind]
        kept = [f for f in of_kind if retained(f, summary)]
        per_kind[kind] = {"total": len(of_kind), "kept": len(kept),
                          "rate": round(len(kept) / len(of_kind), 3) if of_kind else None,
                          "missing": [f.text for f in of_kind if f not in kept][:MAX_LISTED]}
    inv = invented(model_text, source, allowed)
    tokens = count(summary)
    return {
        "retention": per_kind,
        "retention_all": round(sum(v["kept"] for v in per_kind.values()) / max(1, len(facts)), 3),
        "invented_identifiers": len(inv), "invented_examples": inv[:MAX_LISTED],
        "sections_present": sections_present(summary),
        "summary_tokens": tokens, "summary_limit": summary_limit, "within_budget": tokens <= summary_limit,
        "compression": round(head_tokens / tokens, 1) if tokens else None,
        "work_state": work_state_errors(summary, case.pending, case.done) if case.pending or case.done else None,
    }


# --- methods ---------------------------------------------------------------------------------


def naive_messages(head: list[Any]) -> list[dict[str, str]]:
    """The recorded failure's input: every message rendered and cut at 800 characters."""
    lines = []
    for m in head:
        body = m.text
        for c in m.tool_calls:
            body += f"\n[call {c.name}] {c.arguments_json()}"
        for r in m.tool_results:
            body += f"\n[result {r.name}] {r.output}"
        lines.append(f"{m.role}: {body.strip()}"[:NAIVE_CUT_CHARS])
    prompt = NAIVE_PROMPT.format(words=150) + "\n\nWork log:\n" + "\n\n".join(lines)
    return [{"role": "user", "content": prompt}]


def template_messages(head: list[Any]) -> list[dict[str, str]]:
    from worker.pipeline.summarize import narrative_lines

    return [{"role": "system", "content": TEMPLATE_SYSTEM},
            {"role": "user", "content": TEMPLATE_USER.format(conversation="\n\n".join(narrative_lines(head)))}]


def run_case(case: Case, backend: Any, max_new_tokens: int) -> dict[str, Any]:
    from worker.pipeline import CompactionConfig, CompactionRefused, compact
    from worker.pipeline.tail import TAIL_MIN_TOKENS
    from worker.tokens import TokenCounter

    counter = TokenCounter(backend)
    tokens = counter.total(case.session)
    usable = int(tokens * USABLE_SHARE)
    limit = usable * 4 // 3  # make_budget reserves a quarter of a window this small
    _say(f"{case.name}: {len(case.session.messages)} messages, {tokens} tokens -> usable {usable}")
    t0 = time.perf_counter()
    try:
        result = compact(case.session, backend, CompactionConfig(context_limit=limit, max_new_tokens=max_new_tokens,
                                                                 explicit=True),
                         counter=counter)
    except CompactionRefused as exc:
        return {"name": case.name, "source": case.source, "refused": str(exc)}
    compact_s = round(time.perf_counter() - t0, 2)
    cp = result.checkpoint
    dropped = {d.id for d in cp.audit.dropped}
    head = [m for m in case.session.messages if m.id in dropped]
    head_tokens = sum(d.tokens for d in cp.audit.dropped)
    facts = extract_facts(head)
    source = raw_text(case.session.messages)
    limit_summary = cp.budget.summary_limit
    outputs: dict[str, dict[str, Any]] = {}

    model_text = "\n".join(cp.sections.get(s, "") for s in ("Goal", "Key Decisions", "Next Steps"))
    stats = cp.timings.model
    outputs["compactd"] = {
        **score(cp.summary_text, model_text, facts, source, "", case, backend.count, limit_summary, head_tokens),
        "run": {"wall_s": compact_s, "prompt_tokens": sum(s.prompt_tokens for s in stats),
                "decode_tokens": sum(s.decode_tokens for s in stats), "narrative_left_out": cp.timings.narrative_left_out,
                "fallback": cp.verification.fallback,
                "verification_removed": len(cp.verification.removed)},
        "text": cp.summary_text,
    }
    for method, messages, max_tokens, allowed in (
        ("naive-150w", naive_messages(head), min(NAIVE_MAX_TOKENS, max_new_tokens), NAIVE_PROMPT),
        ("template", template_messages(head), max_new_tokens, TEMPLATE_SYSTEM),
    ):
        _say(f"{case.name}: {method}")
        text, run = generate(backend, messages, max_tokens)
        outputs[method] = {**score(text, text, facts, source, allowed, case, backend.count, limit_summary, head_tokens),
                           "run": run, "text": text}
    return {
        "name": case.name, "source": case.source, "messages": len(case.session.messages),
        "session_tokens": tokens, "context_limit": limit, "usable": usable,
        "tail_min_tokens": TAIL_MIN_TOKENS,
        "head_messages": len(head), "head_tokens": head_tokens,
        "facts": {k: sum(1 for f in facts if f.kind == k) for k in KINDS},
        "fact_list": [{"kind": f.kind, "text": f.text} for f in facts],
        "checkpoint_tokens": cp.tokens.to_dict(), "lang": cp.lang,
        "methods": outputs,
    }


def aggregate(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled over inputs: retention per kind (kept / total), invented identifiers, work-state
    errors, budget overruns, sections."""
    done = [c for c in cases if "methods" in c]
    out: dict[str, Any] = {}
    for method in METHODS:
        rows = [c["methods"][method] for c in done]
        kinds = {}
        for kind in KINDS:
            total = sum(r["retention"][kind]["total"] for r in rows)
            kept = sum(r["retention"][kind]["kept"] for r in rows)
            kinds[kind] = {"kept": kept, "total": total, "rate": round(kept / total, 3) if total else None}
        total = sum(v["total"] for v in kinds.values())
        ws = [r["work_state"] for r in rows if r["work_state"]]
        out[method] = {
            "retention": kinds,
            "retention_all": round(sum(v["kept"] for v in kinds.values()) / total, 3) if total else None,
            "invented_identifiers": sum(r["invented_identifiers"] for r in rows),
            "pending_called_done": sum(w["errors"] for w in ws),
            "pending_not_mentioned": sum(len(w["pending_not_mentioned"]) for w in ws),
            "pending_checked": sum(w["checked_pending"] for w in ws),
            "over_budget": sum(1 for r in rows if not r["within_budget"]),
            "mean_sections_present": round(sum(len(r["sections_present"]) for r in rows) / len(rows), 2) if rows else None,
            "mean_compression": round(sum(r["compression"] or 0 for r in rows) / len(rows), 1) if rows else None,
        }
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = result["aggregate"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 4.6), gridspec_kw={"width_ratios": [3, 1.3]})
    labels = [*KINDS, "all"]
    width = 0.8 / len(METHODS)
    for k, method in enumerate(METHODS):
        rates = [agg[method]["retention"][kind]["rate"] for kind in KINDS] + [agg[method]["retention_all"]]
        xs = [i + (k - (len(METHODS) - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(xs, [r or 0 for r in rates], width, label=method)
        for bar, r in zip(bars, rates, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, (r or 0) + 0.01, "n/a" if r is None else f"{r:.0%}",
                    ha="center", fontsize=7)
    totals = [agg["compactd"]["retention"][kind]["total"] for kind in KINDS]
    ax.set_xticks(range(len(labels)), [f"{kind}\n(n={n})" for kind, n in zip(KINDS, totals, strict=True)]
                  + [f"all\n(n={sum(totals)})"])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("key facts of the compacted messages retained")
    ax.set_title(f"retention by kind, {len(result['cases'])} inputs, {result['model']}")
    ax.legend(fontsize=8)
    metrics = ("invented_identifiers", "pending_called_done", "over_budget")
    xs = range(len(metrics))
    top = max([agg[method][m] for method in METHODS for m in metrics] + [1])
    for k, method in enumerate(METHODS):
        vals = [agg[method][m] for m in metrics]
        bars = ax2.bar([x + (k - 1) * width for x in xs], vals, width, label=method)
        for bar, v in zip(bars, vals, strict=True):
            ax2.text(bar.get_x() + bar.get_width() / 2, v + top * 0.02, str(v), ha="center", fontsize=8)
    ax2.set_ylim(0, top * 1.25)
    ax2.set_xticks(list(xs), ["invented\nidentifiers", "pending work\ncalled done", "over summary\nbudget"], fontsize=8)
    ax2.set_title("errors (counts, all inputs)")
    save_figure(fig, path, figure_title("fidelity", result["machine"]))


def headline(result: dict[str, Any]) -> str:
    agg = result["aggregate"]
    parts = []
    for method in METHODS:
        a = agg[method]
        parts.append(f"{method} {a['retention_all']:.0%} kept, {a['invented_identifiers']} invented, "
                     f"{a['pending_called_done']}/{a['pending_checked']} pending called done")
    return f"{result['model']}, {len(result['cases'])} inputs: " + "; ".join(parts)


def build_cases(quick: bool, count_text: Any) -> list[Case]:
    if quick:
        return [fixture_window(SWE_TRACE, "swe-marshmallow", count_text, max_messages=QUICK_WINDOW_MESSAGES)]
    return [
        fixture_window(SWE_TRACE, "swe-marshmallow", count_text),  # the whole trace (28 messages)
        fixture_window(CC_TRACE, "cc-spotter", count_text, FULL_WINDOW_NARRATIVE),
        fixture_window(PI_TRACE, "pi", count_text, FULL_WINDOW_NARRATIVE),
        invoice_case(),
        loader_zh_case(),
    ]


def run(quick: bool = False, out_dir: Path = RESULTS_DIR, model: str | None = None,
        threads: int = N_THREADS) -> dict[str, Any]:
    """Score every method on every input; write JSON + PNG to `out_dir`. `threads`: scores do
    not depend on it; on a shared 2-core machine 1 thread avoids llama.cpp's spinning barriers."""
    from backends.llama_cpp import LlamaCppBackend
    from backends.models import DEFAULT_MODEL, FAST_MODEL, resolve
    from benchmarks.real_set import plot as plot_real
    from benchmarks.real_set import run_real
    from worker.pipeline.summarize import MAX_NEW_TOKENS

    t_start = time.monotonic()
    model = model or (FAST_MODEL if quick else DEFAULT_MODEL)
    quiet = wait_for_quiet(max_wait_s=0, say=_say)  # scores do not depend on load: record it, never wait
    machine = machine_info()
    notes = [] if quiet["quiet"] else [f"load average {quiet['load_when_started']} at start (other processes): "
                                       "timings are pessimistic; scores are not affected"]
    max_new_tokens = QUICK_MAX_TOKENS if quick else MAX_NEW_TOKENS
    backend = LlamaCppBackend(resolve(model).path, n_ctx=N_CTX, n_threads=threads, model_name=model)
    try:
        cases = [run_case(c, backend, max_new_tokens) for c in build_cases(quick, backend.count)]
        real = run_real(backend, quick=quick)  # the real set (benchmarks/real_set.py)
    finally:
        backend.close()
    result: dict[str, Any] = {
        "benchmark": "fidelity",
        "quick": quick,
        "machine": machine,
        "load": quiet,
        "model": model,
        "threads": threads,
        "settings": {"n_ctx": N_CTX, "usable_share": USABLE_SHARE, "max_new_tokens": max_new_tokens,
                     "naive_cut_chars": NAIVE_CUT_CHARS, "naive_max_tokens": NAIVE_MAX_TOKENS,
                     "temperature": 0.0},
        "rules": {
            "facts": "extracted from the head (messages compactd compacted) by benchmarks/fidelity.py, not worker/facts/ledger.py",
            "retention": "errors and commands: exact (whitespace-normalized); paths: last two components; "
                         "constraints/decisions: their identifiers (with a negation for 'do not') or >=60%/50% of content words",
            "invented": "identifier/path in the model-written text (compactd: Goal, Key Decisions, Next Steps; "
                        "baselines: the whole output) absent from the input (case-insensitive)",
            "work_state": "written sessions only: a line naming a pending item, under a Done heading or with done words "
                          "and no pending words",
            "decisions": "heuristic: assistant sentences with 'instead of', 'rather than', 'I'll use', 决定, 改用 ...",
        },
        "notes": notes,
        "cases": cases,
        "aggregate": aggregate(cases),
        "real": real,
        "peak_rss_mb": peak_rss_mb(),
    }
    result["headline"] = headline(result) + "\n  " + real["headline"]
    result["elapsed_s"] = round(time.monotonic() - t_start, 1)
    write_outputs(result, out_dir, "fidelity", plot)
    plot_real(real, out_dir / "fidelity_real.png", figure_title(f"fidelity, real set, {model}", machine))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small window of the SWE trace and the smallest real transcript, with the 0.5B")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR)
    ap.add_argument("--model", default=None, help="bundled model name (default: 1.5B full, 0.5B quick)")
    ap.add_argument("--threads", type=int, default=N_THREADS, help="llama.cpp threads (scores do not depend on it)")
    args = ap.parse_args(argv)
    result = run(quick=args.quick, out_dir=args.out, model=args.model, threads=args.threads)
    print(result["headline"])
    print(f"wrote {args.out / 'fidelity.json'}, fidelity.png and fidelity_real.png in {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
