"""One `Settings` for every `compactd serve` flag and every COMPACTD_* variable.

Each setting is defined once, here: its type, its bounds or choices, its default, its help
text. The CLI builds its flags from these fields (`--help` shows the default and the
variable), environment values are validated like flags are, and a bad value is one line
on stderr and exit 2 (`SettingsError`), never a traceback. A flag wins over its variable.
"""

from __future__ import annotations

import argparse
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "COMPACTD_"
DEFAULT_HOST = "127.0.0.1"
# Not the default of any local-model tool: ollama 11434, LM Studio 1234, llama-server and
# mlx_lm.server 8080, vLLM and llama-cpp-python 8000, Jupyter 8888, Gradio 7860, Open WebUI 3000.
DEFAULT_PORT = 7433
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # a long transcript with tool outputs fits; a runaway upload does not
# 32 MiB at 1 MiB/s with room to spare; a client that stalls mid-upload gets a 408, not a held task.
DEFAULT_BODY_TIMEOUT_S = 60.0
# Request line and headers are a few hundred bytes: a connection that has not sent them by
# then is idle or a slowloris, and is closed (uvicorn alone waits forever).
DEFAULT_HEADER_TIMEOUT_S = 15.0

# A leaf: compactd's defaults live here and the service reads them from here, so `compactd
# --version`, the CLI's parser and the fail-open Claude Code hook never load the service.
DEFAULT_CONTEXT_LIMIT = 32_768  # same default as `compactd compact`
DEFAULT_PRE_THRESHOLD = 0.60  # share of usable at which rolling summaries start
MAX_QUEUE_DEPTH = 16  # waiting jobs per lane; one more gets a 429, never an unbounded wait


def default_db_path(data_dir: str | Path | None = None) -> Path:
    """In `data_dir`, else COMPACTD_DATA_DIR (tests, read-only homes), else the per-user data dir."""
    import os

    override = data_dir or os.environ.get("COMPACTD_DATA_DIR")
    if override:
        d = Path(override).expanduser()
    else:
        from platformdirs import user_data_dir

        d = Path(user_data_dir("compactd"))
    return d / "compactd.sqlite3"


Engine = Literal["auto", "llama", "mlx", "openai"]
Tokenizer = Literal["auto", "engine", "tokenizers"]
LogLevel = Literal["critical", "error", "warning", "info", "debug"]
AgentWait = Literal["instant", "model"]


class SettingsError(ValueError):
    """A setting out of its type, bounds or choices: one line for the user, exit 2."""


class Settings(BaseSettings):
    """Every field is also COMPACTD_<FIELD> (case-insensitive); init arguments and flags win."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore",
                                      validate_default=True)

    host: str = Field(DEFAULT_HOST, description="bind address (loopback by default; any other needs --api-key)")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="TCP port")
    model: str | None = Field(None, description="bundled model name (see `compactd models`), a .gguf file or an "
                                                 "MLX model dir")
    engine: Engine = Field("auto", description="openai: a running OpenAI-compatible engine at --engine-url "
                                               "(llama-server...)")
    engine_url: str | None = Field(None, description="the remote engine's base URL (--engine openai)")
    ctx: int | None = Field(None, ge=1, description="engine context size (default 8192)")
    threads: int | None = Field(None, ge=1, description="inference threads (default: every core; fewer decode faster on busy cores)")
    tokenizer: Tokenizer = Field("auto", description="count with the engine itself or the `tokenizers` rebuild "
                                                     "of its vocabulary (same ids)")
    db: str | None = Field(None, description="SQLite store (default: compactd.sqlite3 in the data dir)")
    data_dir: Path | None = Field(None, description="where the default store lives (default: the user data dir)")
    api_key: SecretStr | None = Field(None, description="require Authorization: Bearer KEY")
    context_limit: int = Field(DEFAULT_CONTEXT_LIMIT, ge=1, le=1_000_000_000,
                               description="the agent model's context window when a session names none")
    pre_threshold: float = Field(DEFAULT_PRE_THRESHOLD, gt=0, lt=1,
                                 description="share of usable tokens at which rolling summaries start")
    queue_size: int = Field(MAX_QUEUE_DEPTH, ge=1, description="waiting jobs per lane before 429")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024, description="largest request body (413 above)")
    body_timeout: float = Field(DEFAULT_BODY_TIMEOUT_S, gt=0,
                                description="seconds a client has to send a request body (408 after)")
    header_timeout: float = Field(DEFAULT_HEADER_TIMEOUT_S, gt=0,
                                  description="seconds a connection has to send its request line and headers")
    upstream: str | None = Field(None, description="Responses API base URL (e.g. https://api.openai.com/v1) that "
                                                    "/v1/responses forwards every non-compaction request to")
    gemini_upstream: str | None = Field(None, description="Gemini API base URL (what GOOGLE_GEMINI_BASE_URL would "
                                                           "be, e.g. https://generativelanguage.googleapis.com) that "
                                                           "/v1beta/ forwards every request but Gemini CLI's "
                                                           "compaction to")
    rolling: bool = Field(True, description="background rolling summaries")
    agent_wait: AgentWait = Field("instant", description="how an agent's compaction request (chat completions, "
                                                         "Codex's /v1/responses, Gemini's /v1beta) waits: instant answers with the "
                                                         "deterministic checkpoint and refines the narrative in the "
                                                         "background; model waits for the model's narrative")
    log_level: LogLevel = Field("info", description="server log level")

    @field_validator("ctx", "threads", mode="before")
    @classmethod
    def _zero_is_unset(cls, value: Any) -> Any:
        return None if value in (0, "0", "") else value  # COMPACTD_CTX=0 meant "the default"

    @field_validator("api_key", "model", "engine_url", "db", "data_dir", "upstream", "gemini_upstream",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # an empty COMPACTD_API_KEY is no key

    @field_validator("upstream", "gemini_upstream")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    def serve_url(self) -> str:
        """The URL an agent on this machine reaches `compactd serve` at (no path): the one
        place the integrations' port and address come from. A wildcard bind is reached over
        loopback."""
        host = {"": DEFAULT_HOST, "0.0.0.0": DEFAULT_HOST, "::": "::1"}.get(self.host, self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 literal
        return f"http://{host}:{self.port}"

    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def store_path(self) -> str | Path:
        """--db, else compactd.sqlite3 in --data-dir (else in the user data dir)."""
        return self.db or default_db_path(self.data_dir)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def describe_error(exc: ValidationError) -> str:
    """The first problem of a ValidationError as one line naming the flag and the variable
    (never echoing a secret)."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else "?"
    got = "" if field == "api_key" or "input" not in err else f" (got {err['input']!r})"
    where = f"{flag_name(field)} / {env_name(field)}" if field in Settings.model_fields else field
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"invalid {where}: {err['msg']}{got}{more}"


def load_settings(**values: Any) -> Settings:
    """Settings from the environment, `values` overriding it; SettingsError when invalid."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise SettingsError(describe_error(exc)) from None


def add_setting(parser: argparse.ArgumentParser, defaults: Settings, field: str, *,
                choices: tuple[str, ...] | None = None, **kwargs: Any) -> None:
    """A flag for one Settings field: its default from `defaults` (so from the environment),
    its help from the field, with the variable and the default shown. A secret's default is
    never shown."""
    info = Settings.model_fields[field]
    default = getattr(defaults, field)
    shown = "(set)" if isinstance(default, SecretStr) else default
    if isinstance(default, SecretStr):
        default = default.get_secret_value()
    base = info.annotation
    if type(None) in typing.get_args(base):  # X | None: the X
        base = next(a for a in typing.get_args(base) if a is not type(None))
    if typing.get_origin(base) is Literal:
        choices = choices or typing.get_args(base)
    elif base in (int, float):
        kwargs.setdefault("type", base)
    shown_default = "" if shown is None else f"; default: {shown}"
    help_text = f"{info.description or field} [env {env_name(field)}{shown_default}]"
    parser.add_argument(flag_name(field), default=default, choices=choices, help=help_text.replace("%", "%%"),
                        **kwargs)
