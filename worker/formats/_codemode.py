"""Codex code mode: the `exec` tool's JavaScript, read for the nested tool calls it makes.

Codex's code mode (openai/codex `codex-rs/code-mode/src/description.rs`, PUBLIC_TOOL_NAME
`exec`) exposes one freeform tool, `exec`, whose input is raw JavaScript run in a V8 isolate;
every other tool is called from it as `await tools.<name>(<string or object>)`, e.g.
`tools.exec_command({cmd: "cargo test", workdir: "/repo"})` or `tools.apply_patch("*** Begin
Patch ...")`. The rollout keeps only that JavaScript (`custom_tool_call` name `exec`) and the
cell's combined output (`custom_tool_call_output`), so the commands and patches are read out of
the source here. Only literal arguments are read (strings, numbers, booleans, nested objects
and arrays, template literals without `${}`); an argument built at run time is left out
rather than guessed.
"""

from __future__ import annotations

import json
import re
from typing import Any

# `tools.<identifier>(` : a nested call (identifiers are normalized tool names, description.rs
# normalize_code_mode_identifier: [A-Za-z_$][A-Za-z0-9_$]*).
NESTED_CALL_RE = re.compile(r"\btools\s*\.\s*([A-Za-z_$][\w$]*)\s*\(")
# The optional first-line pragma (description.rs CODE_MODE_PRAGMA_PREFIX).
PRAGMA_RE = re.compile(r"\A\s*// @exec:[^\n]*\n")
STRING_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


class _Unreadable(Exception):
    """An argument that is not a literal (a variable, a call, an interpolated template)."""


class _Reader:
    def __init__(self, src: str, pos: int) -> None:
        self.s = src
        self.i = pos

    def ws(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c.isspace():
                self.i += 1
            elif self.s.startswith("//", self.i):
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            elif self.s.startswith("/*", self.i):
                end = self.s.find("*/", self.i + 2)
                self.i = len(self.s) if end < 0 else end + 2
            else:
                return

    def value(self) -> Any:
        self.ws()
        if self.i >= len(self.s):
            raise _Unreadable
        c = self.s[self.i]
        if c in "\"'`":
            return self.string(c)
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        m = re.compile(r"-?\d+(?:\.\d+)?|true\b|false\b|null\b").match(self.s, self.i)
        if m:
            self.i = m.end()
            return json.loads(m.group(0))
        raise _Unreadable

    def string(self, quote: str) -> str:
        self.i += 1
        out: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\":
                nxt = self.s[self.i + 1:self.i + 2]
                if nxt == "u" and re.match(r"[0-9a-fA-F]{4}", self.s[self.i + 2:self.i + 6]):
                    out.append(chr(int(self.s[self.i + 2:self.i + 6], 16)))
                    self.i += 6
                    continue
                if nxt == "\n":  # a line continuation
                    self.i += 2
                    continue
                out.append(STRING_ESCAPES.get(nxt, nxt))
                self.i += 2
                continue
            if c == quote:
                self.i += 1
                return "".join(out)
            if quote == "`" and self.s.startswith("${", self.i):
                raise _Unreadable  # built at run time
            if c == "\n" and quote != "`":
                raise _Unreadable
            out.append(c)
            self.i += 1
        raise _Unreadable

    def key(self) -> str:
        self.ws()
        c = self.s[self.i:self.i + 1]
        if c in ("\"", "'"):
            return self.string(c)
        m = re.compile(r"[A-Za-z_$][\w$]*").match(self.s, self.i)
        if not m:
            raise _Unreadable
        self.i = m.end()
        return m.group(0)

    def obj(self) -> dict[str, Any]:
        self.i += 1
        out: dict[str, Any] = {}
        while True:
            self.ws()
            if self.s[self.i:self.i + 1] == "}":
                self.i += 1
                return out
            k = self.key()
            self.ws()
            if self.s[self.i:self.i + 1] != ":":
                raise _Unreadable  # `{cmd}` shorthand: a variable
            self.i += 1
            try:
                out[k] = self.value()
            except _Unreadable:
                self.skip_expression()  # keep the literal keys beside a computed one
            self.ws()
            if self.s[self.i:self.i + 1] == ",":
                self.i += 1
            elif self.s[self.i:self.i + 1] != "}":
                raise _Unreadable

    def arr(self) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        while True:
            self.ws()
            if self.s[self.i:self.i + 1] == "]":
                self.i += 1
                return out
            out.append(self.value())
            self.ws()
            if self.s[self.i:self.i + 1] == ",":
                self.i += 1
            elif self.s[self.i:self.i + 1] != "]":
                raise _Unreadable

    def skip_expression(self) -> None:
        """Past a non-literal value, to the `,` or `}` that ends it at this nesting depth."""
        depth = 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "\"'`":
                try:
                    self.string(c)
                except _Unreadable:
                    self.i += 1
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    return
                depth -= 1
            elif c == "," and depth == 0:
                return
            self.i += 1
        raise _Unreadable


def nested_calls(code: str) -> list[tuple[str, Any]]:
    """(tool name, literal argument or None) of each `tools.<name>(...)` call, in source order."""
    code = PRAGMA_RE.sub("", code, count=1)
    out: list[tuple[str, Any]] = []
    for m in NESTED_CALL_RE.finditer(code):
        reader = _Reader(code, m.end())
        try:
            arg = reader.value()
        except (_Unreadable, ValueError, IndexError):
            arg = None
        out.append((m.group(1), arg))
    return out
