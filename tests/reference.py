"""Independent references for exact counts (no tests in this module).

A count compactd reports is checked against what it does not itself compute: the chat
template rendered by transformers' own renderer (`render_jinja_template`, what
`apply_chat_template` uses) and tokenized by the engine's own tokenizer (llama-cpp-python's
`Llama.tokenize`, the GGUF's vocabulary inside llama.cpp). Neither goes through
backends/chat_template.py, backends/gguf_meta.py or worker/tokens.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class EngineReference:
    """llama.cpp's vocabulary and the GGUF's own template metadata (no weights loaded)."""

    def __init__(self, gguf: Path):
        from llama_cpp import Llama

        self.llama = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
        meta = self.llama.metadata
        self.template: str = meta["tokenizer.chat_template"]
        vocab = self.llama
        self.bos_token = _piece(vocab, int(meta["tokenizer.ggml.bos_token_id"])) if "tokenizer.ggml.bos_token_id" in meta else ""
        self.eos_token = _piece(vocab, int(meta["tokenizer.ggml.eos_token_id"]))
        self.add_bos = meta.get("tokenizer.ggml.add_bos_token", "false") == "true"

    def tokens(self, text: str, special: bool = False) -> int:
        """The engine's count of plain text (no BOS, special-token text as ordinary text)."""
        return len(self.llama.tokenize(text.encode(), add_bos=False, special=special))

    def render(self, chat: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None) -> str:
        """transformers' rendering of `chat` with the GGUF's template. Tool-call arguments are
        passed as mappings, as transformers documents for chat templates."""
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template([[_hf_shape(m) for m in chat]], tools=tools, chat_template=self.template,
                                            add_generation_prompt=add_generation_prompt,
                                            bos_token=self.bos_token, eos_token=self.eos_token)
        return rendered[0]

    def chat_tokens(self, chat: list[dict[str, Any]], add_generation_prompt: bool = True) -> int:
        """Tokens of `chat` as the engine evaluates it (special tokens parsed, BOS if wanted)."""
        text = self.render(chat, add_generation_prompt)
        if self.add_bos and self.bos_token and not text.startswith(self.bos_token):
            text = self.bos_token + text
        return len(self.llama.tokenize(text.encode(), add_bos=False, special=True))

    def close(self) -> None:
        self.llama.close()


def _piece(llama: Any, token_id: int) -> str:
    return llama.detokenize([token_id], special=True).decode("utf-8", errors="replace")


def _hf_shape(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    shaped = []
    for call in calls:
        fn = dict(call["function"])
        if isinstance(fn.get("arguments"), str):
            fn["arguments"] = json.loads(fn["arguments"])
        shaped.append({**call, "function": fn})
    return {**message, "tool_calls": shaped}
