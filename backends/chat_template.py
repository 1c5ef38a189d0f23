"""Render chat messages with the model's own chat template, as llama-cpp-python does.

llama-cpp-python's Jinja2ChatFormatter renders the GGUF's `tokenizer.chat_template` in an
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with messages,
bos/eos tokens and add_generation_prompt. We render the same way and feed the engine the
resulting token ids ourselves, so a count is exactly what the engine evaluates.

When a GGUF has no template, llama-cpp-python silently falls back to the llama-2 format:
we refuse instead, unless a known format is mapped explicitly (`chat_format`).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from .base import BackendError, ChatMessage

# Explicit mappings for GGUFs that carry no template. Gemma's format has no system role:
# a system message is folded into the first user turn (as Google's own template does).
KNOWN_FORMATS = {
    "gemma": (
        "{{ bos_token }}"
        "{% if messages[0]['role'] == 'system' %}"
        "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}"
        "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
        "{% for message in loop_messages %}"
        "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
        "<start_of_turn>{{ role }}\n{{ (first_user_prefix if loop.first else '') + (message['content'] or '') }}<end_of_turn>\n"
        "{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    ),
    "chatml": (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
}


def _raise(message: str) -> None:
    raise BackendError(f"chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    from jinja2 import BaseLoader
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(loader=BaseLoader(), trim_blocks=True, lstrip_blocks=True).from_string(
        template
    )


def _template_shape(message: ChatMessage) -> ChatMessage:
    """HF chat templates expect tool-call arguments as a mapping (they apply `tojson`), while
    the OpenAI wire format carries a JSON string: decode it so it is not encoded twice."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    shaped = []
    for call in calls:
        fn = dict(call.get("function") or {})
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                fn["arguments"] = json.loads(args)
            except ValueError:
                pass  # not JSON: the template shows the raw string
        shaped.append({**call, "function": fn})
    return {**message, "tool_calls": shaped}


class ChatTemplate:
    def __init__(self, template: str | None, bos_token: str, eos_token: str, chat_format: str | None = None,
                 model_name: str = "model"):
        if chat_format:
            if chat_format not in KNOWN_FORMATS:
                raise BackendError(f"unknown chat format {chat_format!r}: known are {', '.join(KNOWN_FORMATS)}")
            template = KNOWN_FORMATS[chat_format]
        if not template:
            raise BackendError(
                f"{model_name} has no chat template in its GGUF; refusing llama-cpp-python's silent llama-2 "
                f"fallback. Pass an explicit chat format ({', '.join(KNOWN_FORMATS)}) if you know it."
            )
        self.source = template
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._template = _compile(template)

    def prompt_text(self, messages: list[ChatMessage], add_generation_prompt: bool, add_bos: bool) -> str:
        """The full prompt as the engine evaluates it: BOS first when the model wants one and
        the template did not already emit it (as llama.cpp's tokenizer would add it)."""
        text = self.render(messages, add_generation_prompt)
        if add_bos and self.bos_token and not text.startswith(self.bos_token):
            return self.bos_token + text
        return text

    def render(self, messages: list[ChatMessage], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(
                messages=[_template_shape(m) for m in messages],
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=add_generation_prompt,
                raise_exception=_raise,
                strftime_now=_strftime_now,
                tools=None,
                functions=None,
                function_call=None,
                tool_choice=None,
            )
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template error is one line for the user
            raise BackendError(f"chat template failed: {exc}") from None
