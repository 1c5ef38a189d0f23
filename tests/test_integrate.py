"""`compactd integrate AGENT`: each agent's config merged (the user's settings kept), written
once (a second run changes nothing), refused when it cannot be parsed (exit 2, untouched), and
printed instead with --print. The real agents run what it writes in tests/integrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from worker import integrate
from worker.cli import main, startup_note
from worker.config import DEFAULT_PORT, Settings, load_settings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory as cwd, every agent's user-level dir in tmp_path."""
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    for var, sub in (("HOME", "home"), ("CODEX_HOME", "codex"), ("CLAUDE_CONFIG_DIR", "claude"),
                     ("XDG_CONFIG_HOME", "xdg"), ("PI_CODING_AGENT_DIR", "pi")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    for var in ("COMPACTD_PORT", "COMPACTD_HOST"):
        monkeypatch.delenv(var, raising=False)
    return work


def run(capsys, *argv):
    code = main(["integrate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("compactd: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]


def twice(capsys, path: Path, *argv) -> str:
    """Runs integrate twice: the second run reports and changes nothing."""
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.startswith(f"wrote: {path}"), out
    text = path.read_text()
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.startswith(f"unchanged: {path}"), out
    assert path.read_text() == text
    return text


# -- one place for the URL -----------------------------------------------------------------


def test_the_serve_url_comes_from_settings(monkeypatch):
    monkeypatch.delenv("COMPACTD_PORT", raising=False)
    monkeypatch.delenv("COMPACTD_HOST", raising=False)
    assert Settings().serve_url() == f"http://127.0.0.1:{DEFAULT_PORT}"
    assert load_settings(port=7500).serve_url() == "http://127.0.0.1:7500"
    assert load_settings(host="0.0.0.0").serve_url() == f"http://127.0.0.1:{DEFAULT_PORT}"  # reached over loopback
    assert load_settings(host="::1", port=9).serve_url() == "http://[::1]:9"


def test_the_shipped_files_name_the_default_url():
    url = load_settings(host="127.0.0.1", port=DEFAULT_PORT).serve_url()
    opencode = json.loads((REPO / "integrations/opencode/opencode.json").read_text())
    assert opencode["provider"]["compactd"]["options"]["baseURL"] == url + "/v1"
    codex = tomllib.loads((REPO / "integrations/codex/config.toml").read_text())
    assert codex["model_providers"]["compactd"]["base_url"] == url + "/v1"
    assert f'?? "{url}")' in (REPO / "integrations/pi/compactd.ts").read_text()
    assert integrate.render_pi(url) == (REPO / "integrations/pi/compactd.ts").read_text()


def test_serve_names_its_upstream_at_start_up():
    assert "--upstream" not in startup_note(load_settings())
    line = startup_note(load_settings(upstream="https://user:secret@example.com/v1"))
    assert line.endswith("--upstream https://example.com/v1") and "secret" not in line


# -- Claude Code ---------------------------------------------------------------------------


def test_claude_code_hooks_merge_into_the_users_settings(capsys, project):
    path = project / ".claude/settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"PreCompact": [{"matcher": "", "hooks": [{"type": "command", "command": "echo mine"},
                                                          {"type": "command", "command": "compactd hook claude-code"}]}],
                  "Stop": [{"hooks": [{"type": "command", "command": "echo stop"}]}]}}))
    settings = json.loads(twice(capsys, path, "claude-code"))
    command = integrate.hook_command()
    assert command.startswith(sys.executable) and command.endswith("-m worker.cli hook claude-code")
    assert settings["permissions"] == {"allow": ["Bash(ls:*)"]}
    assert settings["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": "echo stop"}]}]
    # The old PATH-dependent command is replaced in place, not duplicated.
    assert settings["hooks"]["PreCompact"] == [{"matcher": "", "hooks": [
        {"type": "command", "command": "echo mine"}, {"type": "command", "command": command, "timeout": 60}]}]
    assert settings["hooks"]["SessionStart"] == [
        {"matcher": "compact", "hooks": [{"type": "command", "command": command, "timeout": 60}]}]


def test_the_hook_command_runs_without_the_venv_on_path(capsys, project, tmp_path):
    run(capsys, "claude-code")
    command = json.loads((project / ".claude/settings.json").read_text())["hooks"]["PreCompact"][0]["hooks"][0]
    bare = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent)
    # PYTHONPATH: this checkout's worker (the venv's editable install may be another checkout's).
    done = subprocess.run(command["command"], shell=True, cwd=tmp_path, input="not json", capture_output=True,
                          text=True, timeout=60, env={"PATH": bare, "PYTHONPATH": str(REPO)})
    # The hook ran (exit 1 is its fail-open answer to bad input), not the shell's 127.
    assert (done.returncode, done.stderr) == (1, "compactd: hook: hook input on stdin is not JSON\n")


def test_global_claude_code_is_the_user_settings(capsys, project, tmp_path):
    code, out, _ = run(capsys, "claude-code", "--global")
    assert code == 0 and (tmp_path / "claude/settings.json").exists() and not (project / ".claude").exists()


# -- opencode ------------------------------------------------------------------------------


def test_opencode_merges_and_keeps_the_users_choices(capsys, project):
    path = project / "opencode.json"
    path.write_text(json.dumps({"model": "x/y", "provider": {"x": {"npm": "n"}, "compactd": {"options": {
        "apiKey": "my-key", "baseURL": "http://old"}}}, "compaction": {"auto": False}}))
    config = json.loads(twice(capsys, path, "opencode", "--port", "7500"))
    assert config["model"] == "x/y" and config["provider"]["x"] == {"npm": "n"}
    assert config["provider"]["compactd"]["options"] == {"baseURL": "http://127.0.0.1:7500/v1", "apiKey": "my-key"}
    assert config["agent"]["compaction"]["model"] == "compactd/qwen2.5-coder-1.5b"
    assert config["compaction"] == {"auto": False}  # the user's choice stays


@pytest.mark.parametrize("text, needle", [("{\"a\": ", "is not valid JSON"), ("[1, 2]", "does not hold a JSON object"),
                                          ('{"provider": []}', '"provider" is not an object')])
def test_a_config_it_cannot_merge_is_refused_untouched(capsys, project, text, needle):
    path = project / "opencode.json"
    path.write_text(text)
    code, out, err = run(capsys, "opencode")
    one_line_error(code, err, str(path), needle, "not changed")
    assert path.read_text() == text and out == ""


def test_an_unreadable_config_is_refused(capsys, project):
    (project / ".claude/settings.json").mkdir(parents=True)
    code, _, err = run(capsys, "claude-code")
    one_line_error(code, err, "is a directory")


# -- pi ------------------------------------------------------------------------------------


def test_pi_extension_lands_where_pi_discovers_it(capsys, project, tmp_path):
    path = project / ".pi/extensions/compactd.ts"
    text = twice(capsys, path, "pi", "--url", "http://127.0.0.1:9999/")
    assert 'process.env.COMPACTD_URL ?? "http://127.0.0.1:9999"' in text
    twice(capsys, path, "pi", "--port", "7433")  # an earlier copy of compactd's is updated
    run(capsys, "pi", "--global")
    assert (tmp_path / "pi/extensions/compactd.ts").exists()


def test_pi_refuses_a_foreign_file(capsys, project):
    path = project / ".pi/extensions/compactd.ts"
    path.parent.mkdir(parents=True)
    path.write_text("export default () => {};\n")
    code, _, err = run(capsys, "pi")
    one_line_error(code, err, "is not compactd's pi extension")
    assert path.read_text() == "export default () => {};\n"


# -- Codex ---------------------------------------------------------------------------------


def test_codex_new_config_is_the_shipped_one_with_the_model_keys(capsys, project, tmp_path):
    path = tmp_path / "codex/config.toml"
    text = twice(capsys, path, "codex", "--port", "7600", "--upstream-model", "qwen3", "--context-window", "32000",
                 "--env-key", "UPSTREAM_KEY")
    config = tomllib.loads(text)
    assert config["model_provider"] == "compactd"
    assert (config["model"], config["model_context_window"], config["model_auto_compact_token_limit"]) == \
        ("qwen3", 32000, 28800)
    assert config["model_providers"]["compactd"] == {
        "name": "compactd", "base_url": "http://127.0.0.1:7600/v1", "wire_api": "responses",
        "env_key": "UPSTREAM_KEY", "stream_idle_timeout_ms": 900000}


def test_codex_merges_into_an_existing_config(capsys, project, tmp_path):
    path = tmp_path / "codex/config.toml"
    path.parent.mkdir()
    path.write_text('# mine\napproval_policy = "never"\n\n[model_providers.compactd]\nrequest_max_retries = 0\n'
                    'env_key = "K"\nbase_url = "http://old/v1"\n\n[profiles.fast]\nmodel = "o4-mini"\n')
    config = tomllib.loads(twice(capsys, path, "codex", "--auto-compact-limit", "20000"))
    assert config["approval_policy"] == "never" and config["profiles"] == {"fast": {"model": "o4-mini"}}
    assert config["model_provider"] == "compactd" and config["model_auto_compact_token_limit"] == 20000
    assert config["model_providers"]["compactd"] == {  # the user's keys stay, one table
        "request_max_retries": 0, "env_key": "K", "base_url": "http://127.0.0.1:7433/v1", "wire_api": "responses",
        "name": "compactd", "stream_idle_timeout_ms": 900000}
    assert path.read_text().startswith("# mine\n") and path.read_text().count("[model_providers.compactd]") == 1


def test_codex_keeps_another_chosen_provider_and_says_so(capsys, project, tmp_path):
    path = tmp_path / "codex/config.toml"
    path.parent.mkdir()
    path.write_text('model_provider = "openrouter"\n')
    code, _, err = run(capsys, "codex")
    assert code == 0 and 'model_provider is "openrouter" (kept)' in err
    assert tomllib.loads(path.read_text())["model_provider"] == "openrouter"


@pytest.mark.parametrize("text, needle", [("model = \n", "is not valid TOML"),
                                          ('model_providers = { compactd = { name = "x" } }\n', "by hand")])
def test_codex_refuses_what_it_cannot_edit(capsys, project, tmp_path, text, needle):
    path = tmp_path / "codex/config.toml"
    path.parent.mkdir()
    path.write_text(text)
    code, _, err = run(capsys, "codex")
    one_line_error(code, err, needle, "not changed")
    assert path.read_text() == text


# -- the command ---------------------------------------------------------------------------


def test_print_writes_nothing(capsys, project):
    code, out, err = run(capsys, "opencode", "--print", "--port", "7501")
    assert code == 0 and json.loads(out)["provider"]["compactd"]["options"]["baseURL"] == "http://127.0.0.1:7501/v1"
    assert "nothing written" in err and not (project / "opencode.json").exists()


def test_the_port_comes_from_the_environment_too(capsys, project, monkeypatch):
    monkeypatch.setenv("COMPACTD_PORT", "7502")
    code, out, _ = run(capsys, "pi", "--print")
    assert '?? "http://127.0.0.1:7502"' in out


@pytest.mark.parametrize("argv, needle", [
    (["cline"], "unknown agent 'cline': use one of claude-code, opencode, pi, codex"),
    (["pi", "--url", "http://127.0.0.1:7433/v1"], "without a path"),
    (["pi", "--url", "localhost:7433"], "http:// or https://"),
    (["pi", "--port", "70000"], "--port / COMPACTD_PORT"),
    (["opencode", "--upstream-model", "m"], "Codex's"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, project, argv, needle):
    code, _, err = run(capsys, *argv)
    one_line_error(code, err, needle)
    assert not any(project.iterdir())


# -- Kilo, Qwen Code, Aider ------------------------------------------------------------------


def test_kilo_merges_like_opencode_into_kilo_json(capsys, project):
    path = project / "kilo.json"
    path.write_text(json.dumps({"model": "x/y", "provider": {"x": {"npm": "n"}}}))
    config = json.loads(twice(capsys, path, "kilo", "--port", "7500"))
    assert config["model"] == "x/y" and config["provider"]["x"] == {"npm": "n"}
    assert config["$schema"] == "https://app.kilo.ai/config.json"
    assert config["provider"]["compactd"]["options"]["baseURL"] == "http://127.0.0.1:7500/v1"
    assert config["agent"]["compaction"]["model"] == "compactd/qwen2.5-coder-1.5b"
    code, out, _ = run(capsys, "kilo", "--global")
    assert code == 0 and str(project.parent / "xdg/kilo/kilo.json") in out


def test_qwen_code_adds_its_provider_and_keeps_the_users(capsys, project):
    path = project.parent / "home/.qwen/settings.json"
    path.parent.mkdir(parents=True)
    mine = {"id": "main", "baseUrl": "http://main/v1", "envKey": "K"}
    path.write_text(json.dumps({"model": {"name": "main"}, "modelProviders": {"openai": [mine]}}))
    settings = json.loads(twice(capsys, path, "qwen-code", "--global", "--port", "7500"))
    assert settings["model"] == {"name": "main"} and settings["modelProviders"]["openai"][0] == mine
    ours = settings["modelProviders"]["openai"][1]
    assert ours["baseUrl"] == "http://127.0.0.1:7500/v1" and ours["id"] == "qwen2.5-coder-1.5b"
    assert settings["compactionModel"] == "openai:qwen2.5-coder-1.5b"
    path.write_text(json.dumps({"modelProviders": {"openai": {"not": "a list"}}}))
    one_line_error(*run(capsys, "qwen-code", "--global")[::2], "not a list")


def test_aider_adds_its_model_entry_and_keeps_the_users(capsys, project):
    import yaml

    path = project / ".aider.model.settings.yml"
    assert run(capsys, "aider")[0] == 0 and "--weak-model" in path.read_text()  # the shipped file, commented
    path.write_text("- name: openai/main\n  edit_format: diff\n")
    entries = yaml.safe_load(twice(capsys, path, "aider", "--port", "7500"))
    assert entries[0] == {"name": "openai/main", "edit_format": "diff"}
    assert entries[1]["extra_params"]["api_base"] == "http://127.0.0.1:7500/v1"
    path.write_text("- name: [unclosed\n")
    one_line_error(*run(capsys, "aider")[::2], "not valid YAML")
