"""Template parity: compactd renders and counts chat exactly as transformers' apply_chat_template.

The reference tokenizer is built by transformers itself from the bundled GGUF (its own GGUF
tokenizer converter, fed the file's metadata as read by the `gguf` package: transformers'
GGUF *reader* imports torch, its converter does not), with the chat template the GGUF carries.
Nothing of compactd's tokenizer rebuild or renderer is used on the reference side.

Session.to_chat() gives OpenAI wire messages (tool-call arguments as a JSON string);
transformers wants the arguments as a mapping, so the reference side decodes them first
(`hf_messages`), as an OpenAI-compatible server (vLLM, llama-server) does before templating.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.chat_template import KNOWN_FORMATS, ChatTemplate
from worker.cli import main
from worker.formats import load
from worker.session import Message, Session, TextPart, ToolCallPart, ToolResultPart
from worker.tokens import TokenCounter

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRANSCRIPTS = sorted(p for p in FIXTURES.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
MODEL = "qwen2.5-coder-0.5b"

# Tool definitions as an agent sends them: keys in their own (unsorted) order, CJK text, and the
# characters Jinja's built-in tojson escapes (< > & ').
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command; output > 30000 chars is cut & it's logged. 运行命令",
        "parameters": {"type": "object", "required": ["command"], "properties": {
            "command": {"type": "string", "description": "e.g. echo 'a' && ls <dir>"},
            "timeout": {"type": "integer", "description": "秒"}}}}},
    {"type": "function", "function": {
        "name": "edit", "description": "Replace text in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"]}}},
]


def hf_tokenizer(gguf_path: str, chat_template: str | None = None) -> Any:
    """transformers' own tokenizer for a GGUF (the path `from_pretrained(gguf_file=...)`
    takes, minus its torch-importing reader)."""
    from gguf import GGUFReader
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        _SPECIAL_TOKENS,
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    reader = GGUFReader(gguf_path)
    md = {k: f.contents() for k, f in reader.fields.items()
          if k.startswith("tokenizer.") or k == "general.architecture"}
    grouped = {group: {name: md[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in md}
               for group, renames in GGUF_TOKENIZER_MAPPING.items()}
    tokenizer_dict, config = grouped["tokenizer"], grouped["tokenizer_config"]
    for name, key in _SPECIAL_TOKENS.items():
        token_id = md.get(f"tokenizer.ggml.{key}")
        config[name] = tokenizer_dict["tokens"][token_id] if token_id is not None else None
    backend, _ = convert_gguf_tokenizer(md["general.architecture"], tokenizer_dict)
    if chat_template is not None:
        config["chat_template"] = chat_template
    return PreTrainedTokenizerFast(tokenizer_object=backend, **config)


def hf_messages(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI wire messages in the shape transformers documents: tool-call arguments as the
    value their JSON string encodes (a raw non-JSON string stays a string)."""
    out = []
    for m in chat:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c["function"])
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except (TypeError, ValueError):
                    pass
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def reference(hf: Any, chat: list[dict[str, Any]], add_generation_prompt: bool,
              tools: list[dict[str, Any]] | None = None) -> tuple[str, int]:
    """(transformers' rendered prompt, transformers' token count)."""
    msgs = hf_messages(chat)
    text = hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False)
    ids = hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True,
                                 return_dict=False)
    return text, len(ids)


@pytest.fixture(scope="module")
def hf_qwen(gguf_path):
    return hf_tokenizer(gguf_path)


@pytest.fixture(scope="module")
def qwen(llama_backend):
    return llama_backend  # counting uses the tokenizers rebuild: no weights are loaded


def test_the_reference_is_the_gguf_template(hf_qwen, qwen):
    assert hf_qwen.chat_template == qwen.template.source
    assert "tools" in hf_qwen.chat_template and "tojson" in hf_qwen.chat_template


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name[:40] for p in TRANSCRIPTS])
def test_fixture_renders_and_counts_as_transformers(path, tools, hf_qwen, qwen):
    chat = load(path).to_chat()
    assert chat
    for gen in (True, False):
        ref_text, ref_count = reference(hf_qwen, chat, gen, tools)
        assert qwen.render_messages(chat, gen, tools) == ref_text
        assert qwen.count_messages(chat, gen, tools) == ref_count


def test_counter_shares_plus_frame_equal_transformers_with_tools(hf_qwen, qwen):
    """The HTTP session count (cached shares + a frame holding the tools) is the exact count."""
    chat = load(FIXTURES / "codex-simonw_sample_codex_session.jsonl").to_chat()
    counter = TokenCounter(qwen)
    for tools in (None, TOOLS):
        total, _ = counter.count(chat, tools)
        assert total == reference(hf_qwen, chat, True, tools)[1]


def test_a_tool_call_with_cjk_counts_as_transformers(hf_qwen, qwen):
    """The issue's case: one tool call with a Chinese note (Jinja's tojson escaped every CJK
    character to \\uXXXX and sorted the keys)."""
    chat = [
        {"role": "user", "content": "记录一下"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "write_note", "arguments": json.dumps(
                {"path": "notes/今日.md", "note": "修复了登录页面的错误，明天继续测试 <b>&'", "tags": ["错误", "测试"]},
                ensure_ascii=False)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "已保存"},
    ]
    for gen in (True, False):
        text, count = reference(hf_qwen, chat, gen, TOOLS)
        assert qwen.render_messages(chat, gen, TOOLS) == text
        assert "修复了登录页面的错误" in text and '"path": "notes/今日.md", "note"' in text
        assert qwen.count_messages(chat, gen, TOOLS) == count


@pytest.mark.parametrize("gen_flag", [[], ["--no-generation-prompt"]], ids=["gen", "no-gen"])
def test_compactd_count_equals_transformers(gen_flag, tmp_path, capsys, hf_qwen):
    path = FIXTURES / "sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj"
    chat = load(path).to_chat()
    assert any(m.get("tool_calls") for m in chat)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps({"tools": TOOLS}, ensure_ascii=False))
    for extra, tools in (([], None), (["--tools", str(tools_file)], TOOLS)):
        assert main(["count", "--model", MODEL, "--json", *gen_flag, *extra, str(path)]) == 0
        row = json.loads(capsys.readouterr().out)["files"][0]
        assert row["tokens"] == reference(hf_qwen, chat, not gen_flag, tools)[1]


def test_count_tools_file_that_is_not_a_list_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "tools.json"
    bad.write_text('{"name": "bash"}')
    assert main(["count", "--model", MODEL, "--tools", str(bad), str(FIXTURES / "opencode_export_synthetic.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "must hold a JSON list of tool objects" in err


# -- hypothesis: sessions with tool calls, CJK text and shell quoting ---------------------------

TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("'\"`$\\|&;<>(){}[]*?!#~ \n\t")),  # shell quoting and JSON escapes
        st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK
        st.characters(min_codepoint=0x3040, max_codepoint=0x30FF),  # kana
        st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    ),
    max_size=40,
)
SHELL = st.builds(lambda a, b, c: f"grep -rn '{a}' \"{b}\" | sed 's/x/{c}/g' && echo $HOME", TEXT, TEXT, TEXT)
ARGS = st.one_of(
    st.dictionaries(st.sampled_from(["command", "path", "注释", "old", "new", "z", "a"]),
                    st.one_of(TEXT, SHELL, st.integers(), st.booleans(), st.lists(TEXT, max_size=3)),
                    min_size=1, max_size=4),
    TEXT.map(lambda t: "raw " + t),  # a raw, non-JSON argument string
)


@st.composite
def sessions(draw) -> Session:
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message(id="s", role="system", parts=[TextPart(text=draw(TEXT))]))
    for turn in range(draw(st.integers(1, 3))):
        msgs.append(Message(id=f"u{turn}", role="user", parts=[TextPart(text=draw(st.one_of(TEXT, SHELL)))]))
        for step in range(draw(st.integers(0, 2))):
            calls = [ToolCallPart(id=f"c{turn}{step}{k}", name=draw(st.sampled_from(["bash", "edit", "读取"])),
                                  arguments=draw(ARGS)) for k in range(draw(st.integers(1, 2)))]
            text = draw(st.one_of(st.just(""), TEXT))
            msgs.append(Message(id=f"a{turn}{step}", role="assistant",
                                parts=([TextPart(text=text)] if text else []) + calls))
            for k, c in enumerate(calls):
                msgs.append(Message(id=f"t{turn}{step}{k}", role="tool", parts=[
                    ToolResultPart(call_id=c.id, name=c.name, output=draw(st.one_of(TEXT, SHELL)))]))
        msgs.append(Message(id=f"r{turn}", role="assistant", parts=[TextPart(text=draw(TEXT))]))
    return Session(messages=msgs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(session=sessions(), gen=st.booleans(), with_tools=st.booleans())
def test_generated_sessions_render_and_count_as_transformers(session, gen, with_tools, hf_qwen, qwen):
    chat = session.to_chat()
    tools = TOOLS if with_tools else None
    text, count = reference(hf_qwen, chat, gen, tools)
    assert qwen.render_messages(chat, gen, tools) == text
    assert qwen.count_messages(chat, gen, tools) == count


# -- Jinja features transformers enables -----------------------------------------------------

FEATURES_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'stop' %}{% break %}{% endif %}"
    "{% if m.role == 'skip' %}{% continue %}{% endif %}"
    "{% if m.role == 'assistant' %}{% generation %}<a>{{ m.content }}</a>{% endgeneration %}"
    "{% else %}<{{ m.role }}>{{ m.content | tojson }}{% endif %}{% endfor %}"
    "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}"
    "{% if messages | length > 9 %}{{ raise_exception('too many') }}{% endif %}"
    "{% if add_generation_prompt %}<a>{% endif %}"
)


def test_break_continue_generation_and_tojson_render_as_transformers(hf_qwen):
    t = ChatTemplate(FEATURES_TEMPLATE, "", "")
    chat = [{"role": "user", "content": "中文 <b> & 'q'"}, {"role": "skip", "content": "x"},
            {"role": "assistant", "content": "ok"}, {"role": "stop", "content": ""}, {"role": "user", "content": "late"}]
    for gen in (True, False):
        ours = t.render(chat, gen, TOOLS)
        assert ours == hf_qwen.apply_chat_template(chat, tools=TOOLS, chat_template=FEATURES_TEMPLATE,
                                                   add_generation_prompt=gen, tokenize=False)
        assert "late" not in ours and '"中文 <b> & \'q\'"' in ours and '\n  {\n    "type": "function"' in ours


def test_raise_exception_is_one_clear_backend_error():
    from backends.base import BackendError

    with pytest.raises(BackendError, match="refused the messages: too many"):
        ChatTemplate(FEATURES_TEMPLATE, "", "").render([{"role": "user", "content": "x"}] * 10)


# -- gemma3-270m: a SentencePiece vocabulary with the mapped gemma template ------------------------


@pytest.fixture(scope="module")
def gemma(gemma_path):
    pytest.importorskip("llama_cpp")
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(gemma_path, chat_format="gemma", n_ctx=1024)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf_gemma(gemma_path):
    return hf_tokenizer(str(gemma_path), KNOWN_FORMATS["gemma"])


@pytest.mark.parametrize("name", ["codex-simonw_sample_codex_session.jsonl", "opencode_export_synthetic.json"])
def test_gemma_counts_as_transformers(name, gemma, hf_gemma):
    hf = hf_gemma
    chat = load(FIXTURES / name).to_chat()
    for gen in (True, False):
        text, count = reference(hf, chat, gen)
        assert gemma.render_messages(chat, gen) == text
        assert gemma.count_messages(chat, gen) == count


# -- the HTTP API: /v1/count and the session token count accept the agent's tools -----------------


def test_http_counts_with_tools_equal_transformers(gguf_path, hf_qwen):
    from fastapi.testclient import TestClient

    from backends.llama_cpp import LlamaCppBackend
    from tests.fakes import wait_until
    from worker.config import Settings
    from worker.http.app import create_app
    from worker.service.store import Store

    session = load(FIXTURES / "codex-simonw_sample_codex_session.jsonl")
    payload = session.to_openai()
    backend = LlamaCppBackend(gguf_path, n_ctx=8192, model_name=MODEL)
    app = create_app(Settings(context_limit=32768, rolling=False), backend_loader=lambda: backend,
                     store=Store(":memory:"))
    with TestClient(app) as client:
        # The model loads in the background (503 until then): on a busy machine that outlasts the append.
        assert wait_until(lambda: client.get("/health").status_code == 200, timeout=120)
        stored = client.post("/v1/sessions/s/messages", json=payload, params={"format": "openai"})
        assert stored.status_code == 200, stored.text
        chat = load(payload, "openai").to_chat()
        for gen in (True, False):
            body = {"messages": payload, "tools": TOOLS, "add_generation_prompt": gen}
            counted = client.post("/v1/count", json=body).json()
            assert counted["tokens"] == reference(hf_qwen, chat, gen, TOOLS)[1]
        with_tools = client.post("/v1/sessions/s/tokens", json={"tools": TOOLS}).json()
        assert with_tools["tokens"] == reference(hf_qwen, chat, True, TOOLS)[1]
        assert client.get("/v1/sessions/s/tokens").json()["tokens"] == reference(hf_qwen, chat, True)[1]
        prompt = client.post("/apply-template", json={"messages": payload, "tools": TOOLS}).json()["prompt"]
        assert prompt == reference(hf_qwen, chat, True, TOOLS)[0]
        refused = client.post("/v1/count", json={"text": "x", "tools": TOOLS})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
