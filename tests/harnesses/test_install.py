"""`gctl hook install HARNESS` writes the harness's hooks into a project and keeps what is there:
the user's own hooks stay, installing twice changes nothing, a file that is not JSON is left
alone, and a Cline hook of the project's own still runs, first."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.live import GCTL

CONFIG = {
    "claude-code": ".claude/settings.json",
    "codex": ".codex/hooks.json",
    "gemini": ".gemini/settings.json",
    "cursor": ".cursor/hooks.json",
    "copilot": ".github/hooks/ground-control.json",
}


def install(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    return subprocess.run(
        [GCTL, "hook", "install", *args, "--project", str(project)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def commands_in(config: object) -> list[str]:
    """Every command a configuration runs, wherever its format puts it."""
    found: list[str] = []
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "command" and isinstance(value, str):
                found.append(value)
            found += commands_in(value)
    elif isinstance(config, list):
        for item in config:
            found += commands_in(item)
    return found


@pytest.mark.parametrize("harness", sorted(CONFIG))
def test_it_adds_its_hooks_beside_the_users_and_twice_is_once(tmp_path: Path, harness: str) -> None:
    path = tmp_path / CONFIG[harness]
    path.parent.mkdir(parents=True)
    mine = {"hooks": {"SessionStart": [{"command": "./mine.sh", "type": "command"}]}, "keep": 1}
    path.write_text(json.dumps(mine))
    done = install(tmp_path, harness)
    assert done.returncode == 0, done.stderr
    first = json.loads(path.read_text())
    assert first["keep"] == 1
    commands = commands_in(first)
    assert "./mine.sh" in commands
    assert f"gctl hook {harness}" in commands
    assert install(tmp_path, harness).returncode == 0
    assert json.loads(path.read_text()) == first  # again: the same file


def test_a_configuration_that_is_not_json_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{ not json")
    done = install(tmp_path, "claude-code")
    assert done.returncode == 2
    assert "is not JSON" in done.stderr
    assert path.read_text() == "{ not json"


def test_claude_codes_http_hooks_post_writes_and_block_on_failure(tmp_path: Path) -> None:
    done = install(tmp_path, "claude-code", "--http", GC_URL="https://gc.example.com/api/v1")
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    [http] = [h for e in config["hooks"]["PreToolUse"] for h in e["hooks"] if h["type"] == "http"]
    assert http["url"] == "https://gc.example.com/api/v1/hooks/claude-code"
    assert http["headers"]["Authorization"] == "Bearer $GC_KEY"
    assert set(http["allowedEnvVars"]) == {"GC_KEY", "CLAUDE_PROJECT_DIR"}
    assert http["onFailure"] == "block"
    # The session's start (registration) and shell commands still run the command.
    assert config["hooks"]["SessionStart"][0]["hooks"][0]["command"] == "gctl hook claude-code"


def test_clines_hooks_are_executables_and_the_projects_own_runs_first(tmp_path: Path) -> None:
    hooks = tmp_path / ".clinerules" / "hooks"
    hooks.mkdir(parents=True)
    own = hooks / "PreToolUse"
    own.write_text('#!/bin/sh\necho \'{"cancel":true,"errorMessage":"the project says no"}\'\n')
    own.chmod(0o755)
    assert install(tmp_path, "cline", "--gctl", str(tmp_path / "no-gctl")).returncode == 0
    assert (hooks / "PreToolUse.user").exists()
    assert install(tmp_path, "cline").returncode == 0  # again: the project's stays kept
    for event in ("PreToolUse", "PostToolUse", "TaskStart", "TaskComplete", "TaskCancel"):
        assert os.access(hooks / event, os.X_OK), event
    said = subprocess.run(
        [str(hooks / "PreToolUse")], input="{}", capture_output=True, text=True, timeout=30
    )
    assert json.loads(said.stdout) == {"cancel": True, "errorMessage": "the project says no"}


def test_opencode_gets_the_plugin_file(tmp_path: Path) -> None:
    assert install(tmp_path, "opencode").returncode == 0
    plugin = tmp_path / ".opencode" / "plugins" / "groundcontrol.js"
    assert "export const GroundControl" in plugin.read_text()
