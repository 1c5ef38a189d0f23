"""`compactd integrate AGENT`: set an agent up to compact through `compactd serve`.

Each agent's config is written from the shipped file in integrations/ (the documented
defaults), with the serve URL from `Settings.serve_url()` and, for Claude Code's hooks, an
absolute command (this install's interpreter), so nothing depends on PATH or on the working
directory. An existing config is merged, never clobbered: the user's other settings, hooks,
providers and tables are kept, compactd's own entries are updated in place (a second run
changes nothing), and a file that cannot be read or parsed is refused, never overwritten.

| agent | project (default) | --global |
|---|---|---|
| claude-code | .claude/settings.json | $CLAUDE_CONFIG_DIR or ~/.claude, settings.json |
| opencode | opencode.json | $XDG_CONFIG_HOME or ~/.config, opencode/opencode.json |
| pi | .pi/extensions/compactd.ts | $PI_CODING_AGENT_DIR or ~/.pi/agent, extensions/compactd.ts |
| codex | $CODEX_HOME or ~/.codex, config.toml (Codex reads providers from there only) | the same |
| kilo | kilo.json | $XDG_CONFIG_HOME or ~/.config, kilo/kilo.json |
| qwen-code | .qwen/settings.json | ~/.qwen/settings.json |
| aider | .aider.model.settings.yml | ~/.aider.model.settings.yml |
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

AGENTS = ("claude-code", "opencode", "pi", "codex", "kilo", "qwen-code", "aider")
INTEGRATIONS = Path(__file__).resolve().parents[1] / "integrations"
SHIPPED = {"claude-code": "claude-code/settings.json", "opencode": "opencode/opencode.json",
           "pi": "pi/compactd.ts", "codex": "codex/config.toml", "kilo": "kilo/kilo.json",
           "qwen-code": "qwen-code/settings.json", "aider": "aider/.aider.model.settings.yml"}
# The command the shipped Claude Code settings name (compactd on PATH); integrate writes an absolute one.
SHIPPED_HOOK_COMMAND = "compactd hook claude-code"
# What marks a Claude Code hook as compactd's, whatever command an earlier integrate wrote.
OUR_HOOK = re.compile(r"(compactd|worker\.cli)\S*\s+hook\s+claude-code\b")
PI_MARKER = "pi extension: pi's compaction summary comes from compactd."
PI_DEFAULT = re.compile(r'(process\.env\.COMPACTD_URL \?\? )"[^"\n]*"')
PI_DOC_DEFAULT = re.compile(r"(COMPACTD_URL \(default )[^)\s]*(\))")
CODEX_PROVIDER = "compactd"
# Codex's own default for the models it knows: compact at 90 % of the window.
AUTO_COMPACT_SHARE = 0.9


class IntegrateError(ValueError):
    """One line for the user (exit 2); nothing was written."""


@dataclass(frozen=True)
class CodexOptions:
    model: str | None = None  # Codex's `model`: the upstream's model name
    context_window: int | None = None  # `model_context_window`
    auto_compact_limit: int | None = None  # `model_auto_compact_token_limit` (default 90 % of the window)
    env_key: str | None = None  # the variable with the upstream's key (default OPENAI_API_KEY)


@dataclass(frozen=True)
class Plan:
    """What integrate would write: `text` to `path` (unchanged when it is already there)."""

    agent: str
    path: Path
    text: str
    changed: bool
    notes: list[str] = field(default_factory=list)


# -- inputs ------------------------------------------------------------------------------


def check_url(url: str) -> str:
    """compactd's base URL (scheme, host, port; no path), without a trailing slash."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise IntegrateError(f"--url must be an http:// or https:// URL (got {url!r})")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise IntegrateError(f"--url is compactd's address without a path, e.g. http://127.0.0.1:7433 (got {url!r})")
    return f"{parts.scheme}://{parts.netloc}"


def hook_command() -> str:
    """`compactd hook claude-code` as this install runs it, from any directory and any PATH:
    this interpreter (the venv's, not resolved past its symlink) with `-m worker.cli`; `-P`
    (Python 3.11+) keeps the project directory the hook runs in off sys.path."""
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return shlex.join([sys.executable, *safe, "-m", "worker.cli", "hook", "claude-code"])


def shipped(agent: str) -> str:
    path = INTEGRATIONS / SHIPPED[agent]
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise IntegrateError(f"{path} is missing: run integrate from compactd's clone (`make demo` installs it "
                             f"there)") from None


def _home(env: Mapping[str, str], var: str, *default: str) -> Path:
    value = env.get(var)
    return Path(value).expanduser() if value else Path(env.get("HOME") or Path.home()).joinpath(*default)


def target(agent: str, project: Path, global_: bool, env: Mapping[str, str] = os.environ) -> Path:
    if agent == "codex":
        return _home(env, "CODEX_HOME", ".codex") / "config.toml"
    if not global_:
        return project / {"claude-code": ".claude/settings.json", "opencode": "opencode.json",
                          "pi": ".pi/extensions/compactd.ts", "kilo": "kilo.json", "qwen-code": ".qwen/settings.json",
                          "aider": ".aider.model.settings.yml"}[agent]
    if agent == "kilo":
        return _home(env, "XDG_CONFIG_HOME", ".config") / "kilo" / "kilo.json"
    if agent == "qwen-code":
        return Path(env.get("HOME") or Path.home()) / ".qwen" / "settings.json"
    if agent == "aider":
        return Path(env.get("HOME") or Path.home()) / ".aider.model.settings.yml"
    if agent == "claude-code":
        return _home(env, "CLAUDE_CONFIG_DIR", ".claude") / "settings.json"
    if agent == "opencode":
        return _home(env, "XDG_CONFIG_HOME", ".config") / "opencode" / "opencode.json"
    return _home(env, "PI_CODING_AGENT_DIR", ".pi", "agent") / "extensions" / "compactd.ts"


def _read(path: Path) -> str | None:
    """The file's text, None when there is none; IntegrateError when it cannot be read."""
    if not path.exists():
        return None
    if path.is_dir():
        raise IntegrateError(f"{path} is a directory: not changed")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise IntegrateError(f"{path} is not UTF-8 text: not changed") from None
    except OSError as exc:
        raise IntegrateError(f"cannot read {path}: {exc.strerror}: not changed") from None


def _read_json(path: Path) -> tuple[dict[str, Any], str | None]:
    text = _read(path)
    if text is None or not text.strip():
        return {}, text
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IntegrateError(f"{path} is not valid JSON ({exc}): not changed; fix it, or merge by hand") from None
    if not isinstance(data, dict):
        raise IntegrateError(f"{path} does not hold a JSON object: not changed")
    return data, text


def _object(parent: dict[str, Any], key: str, path: Path, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise IntegrateError(f"{path}: {where} is not an object: not changed")
    return value


def _json_plan(agent: str, path: Path, old: dict[str, Any], new: dict[str, Any], text: str | None) -> Plan:
    if text is not None and new == old:
        return Plan(agent, path, text, changed=False)
    return Plan(agent, path, json.dumps(new, indent=2, ensure_ascii=False) + "\n", changed=True)


# -- Claude Code ---------------------------------------------------------------------------


def plan_claude_code(path: Path) -> Plan:
    """The shipped hooks, with the absolute command, merged into `hooks`: in each event the
    group with compactd's matcher holds compactd's hook once (an earlier one is updated in
    place); compactd's hooks elsewhere in that event go; every other hook stays."""
    ours = json.loads(shipped("claude-code"))["hooks"]
    command = hook_command()
    old, text = _read_json(path)
    data = copy.deepcopy(old)
    hooks = _object(data, "hooks", path, '"hooks"')
    for event, wanted_groups in ours.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise IntegrateError(f"{path}: hooks.{event} is not a list of hook groups: not changed")
        for wanted in wanted_groups:
            hook = {**wanted["hooks"][0], "command": command}
            _place_hook(groups, wanted["matcher"], hook, path, event)
    return _json_plan("claude-code", path, old, data, text)


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and isinstance(hook.get("command"), str) and bool(OUR_HOOK.search(hook["command"]))


def _place_hook(groups: list[dict[str, Any]], matcher: str, hook: dict[str, Any], path: Path, event: str) -> None:
    home = next((g for g in groups if g.get("matcher", "") == matcher), None)
    if home is None:
        home = {"matcher": matcher, "hooks": []}
        groups.append(home)
    for group in groups:
        entries = group.setdefault("hooks", [])
        if not isinstance(entries, list):
            raise IntegrateError(f"{path}: a hooks.{event} group's \"hooks\" is not a list: not changed")
        keep = [h for h in entries if not _is_ours(h)]
        if group is home:
            at = next((i for i, h in enumerate(entries) if _is_ours(h)), len(entries))
            keep.insert(sum(1 for h in entries[:at] if not _is_ours(h)), hook)
        group["hooks"] = keep
    groups[:] = [g for g in groups if g["hooks"] or g is home]


# -- opencode ------------------------------------------------------------------------------


def plan_opencode(path: Path, url: str, agent: str = "opencode") -> Plan:
    """provider.compactd (the shipped block, baseURL from `url`; an apiKey already there is
    kept) and agent.compaction.model set; `$schema` and compaction.auto added when absent.
    Everything else stays. Kilo (an opencode fork) reads the same keys from kilo.json."""
    ours = json.loads(shipped(agent))
    ours["provider"]["compactd"]["options"]["baseURL"] = url + "/v1"
    old, text = _read_json(path)
    data = copy.deepcopy(old)
    data.setdefault("$schema", ours["$schema"])
    providers = _object(data, "provider", path, '"provider"')
    mine = providers.get("compactd") if isinstance(providers.get("compactd"), dict) else {}
    block = _deep_merge(mine, ours["provider"]["compactd"])
    key = (mine.get("options") or {}).get("apiKey") if isinstance(mine.get("options"), dict) else None
    if key:
        block["options"]["apiKey"] = key  # compactd serve --api-key: the user's key stays
    providers["compactd"] = block
    agents = _object(data, "agent", path, '"agent"')
    _object(agents, "compaction", path, '"agent.compaction"').update(ours["agent"]["compaction"])
    compaction = _object(data, "compaction", path, '"compaction"')
    for k, v in ours["compaction"].items():
        compaction.setdefault(k, v)
    return _json_plan(agent, path, old, data, text)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


# -- Qwen Code -----------------------------------------------------------------------------


def plan_qwen_code(path: Path, url: str) -> Plan:
    """compactd's entry in modelProviders.openai (matched by its id, baseUrl from `url`; the
    user's other providers and entries stay) and compactionModel pointing at it."""
    ours = json.loads(shipped("qwen-code"))
    entry = copy.deepcopy(ours["modelProviders"]["openai"][0])
    entry["baseUrl"] = url + "/v1"
    old, text = _read_json(path)
    data = copy.deepcopy(old)
    providers = _object(data, "modelProviders", path, '"modelProviders"')
    openai = providers.setdefault("openai", [])
    if not isinstance(openai, list):
        raise IntegrateError(f'{path}: "modelProviders.openai" is not a list: not changed')
    mine = next((i for i, e in enumerate(openai) if isinstance(e, dict) and e.get("id") == entry["id"]), None)
    if mine is None:
        openai.append(entry)
    else:
        openai[mine] = _deep_merge(openai[mine], entry)
    data["compactionModel"] = ours["compactionModel"]
    return _json_plan("qwen-code", path, old, data, text)


# -- Aider ---------------------------------------------------------------------------------


def plan_aider(path: Path, url: str) -> Plan:
    """compactd's model entry in .aider.model.settings.yml (matched by name, api_base from
    `url`); the user's other model entries stay. Aider names its weak model on the command line
    or in .aider.conf.yml (`weak-model:`), which stays the user's."""
    import yaml

    shipped_text = shipped("aider")
    ours = yaml.safe_load(shipped_text)[0]
    ours["extra_params"]["api_base"] = url + "/v1"
    text = _read(path)
    try:
        old = yaml.safe_load(text) if text and text.strip() else []
    except yaml.YAMLError as exc:
        raise IntegrateError(f"{path} is not valid YAML ({str(exc).splitlines()[0]}): not changed") from None
    if not isinstance(old, list):
        raise IntegrateError(f"{path} does not hold a YAML list of model settings: not changed")
    data = copy.deepcopy(old)
    mine = next((i for i, e in enumerate(data) if isinstance(e, dict) and e.get("name") == ours["name"]), None)
    if mine is None:
        data.append(ours)
    else:
        data[mine] = _deep_merge(data[mine], ours)
    if text is not None and data == old:
        return Plan("aider", path, text, changed=False)
    if not old:  # a new file: the shipped one, with its comment
        return Plan("aider", path, shipped_text.replace("http://127.0.0.1:7433/v1", url + "/v1"), changed=True)
    return Plan("aider", path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True), changed=True)


# -- pi ------------------------------------------------------------------------------------


def render_pi(url: str) -> str:
    """The shipped extension with `url` as its default (COMPACTD_URL still overrides it)."""
    text = shipped("pi")
    if len(PI_DEFAULT.findall(text)) != 1:
        raise IntegrateError(f"{INTEGRATIONS / SHIPPED['pi']}: its COMPACTD_URL default is not where integrate "
                             f"expects it")
    text = PI_DEFAULT.sub(lambda m: m.group(1) + json.dumps(url), text)
    return PI_DOC_DEFAULT.sub(lambda m: m.group(1) + url + m.group(2), text)


def plan_pi(path: Path, url: str) -> Plan:
    """The extension where pi discovers it; an earlier copy of compactd's is updated, any
    other file of that name refused."""
    text = render_pi(url)
    old = _read(path)
    if old is not None and old != text and PI_MARKER not in old:
        raise IntegrateError(f"{path} exists and is not compactd's pi extension: not changed")
    return Plan("pi", path, text, changed=old != text)


# -- Codex ---------------------------------------------------------------------------------


def _toml_load(text: str, path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise IntegrateError("integrate codex reads TOML: it needs Python 3.11+ (or `pip install tomli`)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise IntegrateError(f"{path} is not valid TOML ({exc}): not changed; fix it, or merge by hand") from None


_HEADER = re.compile(r"^\s*\[")
_OUR_TABLE = re.compile(r'^\s*\[\s*model_providers\s*\.\s*("compactd"|\'compactd\'|compactd)\s*\]\s*(#.*)?$')


def _toml_value(value: str | int) -> str:
    return str(value) if isinstance(value, int) else json.dumps(value)  # a JSON string is a TOML basic string


def _key_line(lines: list[str], start: int, end: int, key: str) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    return next((i for i in range(start, end) if pattern.match(lines[i])), None)


def _set_keys(lines: list[str], start: int, end: int, values: dict[str, str | int], insert_at: int) -> None:
    """Each key=value in lines[start:end]: its line replaced where it is there (a trailing
    comment kept), else inserted at `insert_at` (in order)."""
    added = []
    for key, value in values.items():
        at = _key_line(lines, start, end, key)
        if at is None:
            added.append(f"{key} = {_toml_value(value)}")
            continue
        comment = re.search(r"\s+#[^\"']*$", lines[at])
        lines[at] = f"{key} = {_toml_value(value)}" + (comment.group(0) if comment else "")
    lines[insert_at:insert_at] = added


def plan_codex(path: Path, url: str, opts: CodexOptions) -> Plan:
    """The [model_providers.compactd] table (base_url from `url`, wire_api, and the shipped
    name, env_key and stream_idle_timeout_ms where absent; the user's other keys in it stay),
    `model_provider = "compactd"` when no provider is chosen, and the model keys given."""
    ours = _toml_load(shipped("codex"), INTEGRATIONS / SHIPPED["codex"])
    provider = dict(ours["model_providers"][CODEX_PROVIDER], base_url=url + "/v1")
    old = _read(path)
    # A new config is the shipped one (its comments say what each key is for), then merged.
    text = old if old and old.strip() else _set_line(shipped("codex"), "base_url", provider["base_url"])
    data = _toml_load(text, path)
    notes = []
    lines = text.splitlines()
    first_header = next((i for i, ln in enumerate(lines) if _HEADER.match(ln)), len(lines))

    table: dict[str, str | int] = {"base_url": provider["base_url"], "wire_api": provider["wire_api"]}
    existing = (data.get("model_providers") or {}).get(CODEX_PROVIDER)
    if opts.env_key:
        table["env_key"] = opts.env_key
    for k in ("name", "env_key", "stream_idle_timeout_ms"):
        if k not in table and (not isinstance(existing, dict) or k not in existing):
            table[k] = provider[k]
    top: dict[str, str | int] = {}
    chosen = data.get("model_provider")
    if chosen is None:
        top["model_provider"] = CODEX_PROVIDER
    elif chosen != CODEX_PROVIDER:
        notes.append(f'{path}: model_provider is "{chosen}" (kept): Codex goes through compactd once it is '
                     f'"{CODEX_PROVIDER}"')
    window = opts.context_window
    limit = opts.auto_compact_limit or (int(window * AUTO_COMPACT_SHARE) if window else None)
    for key, value in (("model", opts.model), ("model_context_window", window),
                       ("model_auto_compact_token_limit", limit)):
        if value is not None:
            top[key] = value

    wanted = dict(table)
    if existing is None:
        block = [f"[model_providers.{CODEX_PROVIDER}]"]
        shipped_lines = shipped("codex").splitlines()
        start = next(i for i, ln in enumerate(shipped_lines) if _OUR_TABLE.match(ln)) + 1
        for ln in shipped_lines[start:]:  # the shipped table, its comments included
            key = ln.split("=", 1)[0].strip()
            if key in table:
                comment = re.search(r"\s+#.*$", ln)
                block.append(f"{key} = {_toml_value(table.pop(key))}" + (comment.group(0) if comment else ""))
        block += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
        if lines and lines[-1].strip():
            lines.append("")
        lines += block
    else:
        start = next((i for i, ln in enumerate(lines) if _OUR_TABLE.match(ln)), None)
        if start is None or not isinstance(existing, dict):
            raise IntegrateError(f"{path}: model_providers.{CODEX_PROVIDER} is not written as a "
                                 f"[model_providers.{CODEX_PROVIDER}] table: not changed; edit it by hand")
        end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        _set_keys(lines, start + 1, end, table, end)
    _set_keys(lines, 0, first_header, top, _top_insert_at(lines, first_header))

    new = "\n".join(lines) + "\n"
    unsafe = IntegrateError(f"{path}: could not merge compactd's provider safely: not changed; edit it by hand")
    try:
        result = _toml_load(new, path)  # what Codex will read: checked before anything is written
    except IntegrateError:
        raise unsafe from None
    got = result.get("model_providers", {}).get(CODEX_PROVIDER, {})
    if any(got.get(k) != v for k, v in wanted.items()) or any(result.get(k) != v for k, v in top.items()):
        raise unsafe
    if old is not None and _toml_load(old, path) == result:
        return Plan("codex", path, old, changed=False, notes=notes)
    if result.get("model") and result.get("model_provider") == CODEX_PROVIDER \
            and "model_auto_compact_token_limit" not in result:
        notes.append(f"{path}: no model_auto_compact_token_limit: Codex knows when to compact only for OpenAI's "
                     f"models; for {result['model']!r} from another upstream pass --context-window")
    return Plan("codex", path, new, changed=True, notes=notes)


def _set_line(text: str, key: str, value: str | int) -> str:
    lines = text.splitlines()
    _set_keys(lines, 0, len(lines), {key: value}, len(lines))
    return "\n".join(lines) + "\n"


def _top_insert_at(lines: list[str], first_header: int) -> int:
    """Where new top-level keys go: after the last top-level key line, else after the file's
    leading comments."""
    keys = [i for i in range(first_header) if re.match(r"^\s*[A-Za-z0-9_\"'.-]+\s*=", lines[i])]
    if keys:
        return keys[-1] + 1
    at = 0
    while at < first_header and lines[at].lstrip().startswith("#"):
        at += 1
    return at


# -- the command ---------------------------------------------------------------------------


def plan(agent: str, url: str, *, project: Path, global_: bool = False, codex: CodexOptions | None = None,
         env: Mapping[str, str] = os.environ) -> Plan:
    if agent not in AGENTS:
        raise IntegrateError(f"unknown agent {agent!r}: use one of {', '.join(AGENTS)}")
    url = check_url(url)
    path = target(agent, project, global_, env)
    if agent == "claude-code":
        return plan_claude_code(path)
    if agent == "opencode":
        return plan_opencode(path, url)
    if agent == "pi":
        return plan_pi(path, url)
    if agent == "kilo":
        return plan_opencode(path, url, "kilo")
    if agent == "qwen-code":
        return plan_qwen_code(path, url)
    if agent == "aider":
        return plan_aider(path, url)
    return plan_codex(path, url, codex or CodexOptions())


def write(p: Plan) -> None:
    """The plan's text to its path, atomically (a rename), its directory created."""
    try:
        p.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.path.with_name(f".{p.path.name}.compactd-tmp")
        tmp.write_text(p.text, encoding="utf-8")
        if p.path.exists():
            os.chmod(tmp, p.path.stat().st_mode & 0o7777)
        os.replace(tmp, p.path)
    except OSError as exc:
        raise IntegrateError(f"cannot write {p.path}: {exc.strerror}") from None


WHAT = {
    "claude-code": "PreCompact and SessionStart(compact) hooks running {command}",
    "opencode": "provider compactd at {url}/v1 as opencode's compaction model",
    "pi": "pi extension handing pi's compaction to {url}",
    "codex": "model provider compactd at {url}/v1; run `compactd serve --upstream URL`",
    "kilo": "provider compactd at {url}/v1 as Kilo's compaction model",
    "qwen-code": "model provider compactd at {url}/v1 as Qwen Code's compactionModel (set COMPACTD_API_KEY)",
    "aider": "model openai/qwen2.5-coder-1.5b at {url}/v1: run aider with --weak-model openai/qwen2.5-coder-1.5b",
}


def describe(p: Plan, url: str) -> str:
    what = WHAT[p.agent].format(command=hook_command(), url=check_url(url))
    return f"{'wrote' if p.changed else 'unchanged'}: {p.path}: {what}"
