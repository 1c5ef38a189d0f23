"""Render chat messages with the model's own chat template, exactly as transformers does.

The reference is transformers' `apply_chat_template` (utils/chat_template_utils.py): the
template runs in an ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension and the `{% generation %}` tag, transformers' own `tojson` (values
as they are: no key sorting, no escaping of non-ASCII or `< > & '`), `raise_exception`,
`strftime_now`, the messages (None-valued keys dropped), the tool definitions (`tools`), and
the bos/eos tokens. A count therefore equals transformers' for the same tokenizer, and the
engine is fed the very token ids we count.

When a GGUF has no template, llama-cpp-python silently falls back to the llama-2 format:
we refuse instead, unless a known format is mapped explicitly (`chat_format`).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from .base import BackendError, ChatMessage

# The names a message's reasoning comes under; transformers copies it to the first and to
# `thinking` (gpt-oss templates read that one).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

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


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """transformers' tojson: the value as it is (no key sorting, no HTML or non-ASCII escapes),
    with json.dumps' options exposed. Jinja's built-in sorts keys and escapes `< > & '`."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _generation_extension() -> type:
    """`{% generation %}...{% endgeneration %}` renders its body (transformers uses the tag to
    mark assistant tokens for training masks; the rendered text is the body itself)."""
    import jinja2
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    return GenerationTag


class _TemplateDict:
    """transformers' `dict` global: builds dicts, exposes nothing else to the sandbox."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _namespace_class() -> type:
    """transformers' `namespace` global: a jinja Namespace refusing underscore-prefixed names."""
    import jinja2

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja's own signature trick
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes on a namespace: {name!r}")

    return TemplateNamespace


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    """The environment of transformers' `_compile_jinja_template`: sandboxed, trim/lstrip
    blocks, loopcontrols (`{% break %}`, `{% continue %}`), the generation tag, and its
    tojson / raise_exception / strftime_now / dict / namespace."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_generation_extension(), loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _namespace_class()
    return env.from_string(template)


def _template_shape(message: ChatMessage) -> ChatMessage:
    """A message as transformers hands it to the template: keys whose value is None dropped
    (`_normalize_chat_messages`), reasoning aliased under `reasoning_content` and `thinking`
    (`_alias_reasoning_fields`), and tool-call arguments as a mapping. HF templates apply
    `tojson` to the arguments and transformers expects a dict there, while the OpenAI wire
    format carries a JSON string: it is decoded (as vLLM and llama-server do) so it is not
    encoded twice."""
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
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

    def prompt_text(self, messages: list[ChatMessage], add_generation_prompt: bool, add_bos: bool,
                    tools: list[dict[str, Any]] | None = None) -> str:
        """The full prompt as the engine evaluates it: BOS first when the model wants one and
        the template did not already emit it (as llama.cpp's tokenizer would add it)."""
        text = self.render(messages, add_generation_prompt, tools)
        if add_bos and self.bos_token and not text.startswith(self.bos_token):
            return self.bos_token + text
        return text

    def render(self, messages: list[ChatMessage], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None) -> str:
        """The template's text for `messages`; `tools` are the tool definitions the agent sends
        (OpenAI `tools` entries), rendered where the template puts them."""
        try:
            return self._template.render(
                messages=[_template_shape(m) for m in messages],
                tools=tools,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template error is one line for the user
            raise BackendError(f"chat template failed: {exc}") from None
