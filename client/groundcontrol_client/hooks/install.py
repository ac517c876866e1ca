"""`gctl hook install HARNESS`: the harness's hook configuration, written into a project.

Each harness keeps its hooks in a file of its own (`CONFIGS`). What is there is kept: a JSON
configuration is read, Ground Control's entries are added to each event's list (replacing the
ones an earlier install wrote, found by their command, so installing again changes nothing),
and everything else in the file stays as it was; a file that is not JSON is left alone and the
install refused. Cline's hooks are executables named for their event: a user's own one is kept
beside ours (`<event>.user`) and runs first, and its refusal stands.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundcontrol_client.hooks.command import HARNESSES

PLUGIN = Path(__file__).with_name("opencode-plugin.js")


class InstallError(Exception):
    """The configuration could not be written (the sentence says why); nothing was changed."""


def _command(gctl: str, harness: str, *extra: str) -> str:
    return " ".join([gctl, "hook", harness, *extra])


def _ours(entry: Any, marker: str) -> bool:
    return marker in json.dumps(entry)


def _merge(config: dict[str, Any], where: list[str], event: str, entry: Any, marker: str) -> None:
    """Put `entry` in the list at `config[where...][event]`, instead of an earlier one of ours."""
    into = config
    for key in where:
        into = into.setdefault(key, {})
        if not isinstance(into, dict):
            raise InstallError(f"{'.'.join(where)} is not an object")
    listed = into.setdefault(event, [])
    if not isinstance(listed, list):
        raise InstallError(f"{'.'.join([*where, event])} is not a list")
    kept = [item for item in listed if not _ours(item, marker)]
    into[event] = [*kept, entry]


def _json_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        loaded = json.loads(path.read_text() or "{}")
    except ValueError as error:
        raise InstallError(f"{path} is not JSON ({error}); fix it, then install again") from error
    if not isinstance(loaded, dict):
        raise InstallError(f"{path} is JSON but not an object")
    return loaded


def _write_json(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".groundcontrol-tmp")
    temporary.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(temporary, path)


def _claude_code(project: Path, gctl: str, url: str | None) -> list[Path]:
    """Command hooks (every event; a write's is resolved on this disk), or with `url` Claude
    Code's own HTTP hooks for the writes (the key from $GC_KEY; a failure blocks) beside the
    command hooks that register the repository and judge shell commands."""
    path = project / ".claude" / "settings.json"
    config = _json_file(path)
    marker = _command(gctl, "claude-code")
    command = {"type": "command", "command": marker}
    writes = "Write|Edit|MultiEdit|NotebookEdit"
    if url:
        hook = {
            "type": "http",
            "url": url.rstrip("/").removesuffix("/api/v1") + "/api/v1/hooks/claude-code",
            "headers": {
                "Authorization": "Bearer $GC_KEY",
                "X-GC-Repository": "$CLAUDE_PROJECT_DIR",
            },
            "allowedEnvVars": ["GC_KEY", "CLAUDE_PROJECT_DIR"],
            "onFailure": "block",
            "timeout": 30,
        }
        _merge(
            config,
            ["hooks"],
            "PreToolUse",
            {"matcher": writes, "hooks": [hook]},
            "/hooks/claude-code",
        )
        _merge(config, ["hooks"], "PreToolUse", {"matcher": "Bash", "hooks": [command]}, marker)
    else:
        pre = {"matcher": f"{writes}|Bash", "hooks": [command]}
        _merge(config, ["hooks"], "PreToolUse", pre, marker)
    for event, matcher in (("PostToolUse", "Bash"), ("PostToolUseFailure", "Bash")):
        _merge(config, ["hooks"], event, {"matcher": matcher, "hooks": [command]}, marker)
    for event in ("SessionStart", "UserPromptSubmit", "SessionEnd"):
        _merge(config, ["hooks"], event, {"hooks": [command]}, marker)
    _write_json(path, config)
    return [path]


def _grouped(
    config: dict[str, Any],
    marker: str,
    hook: dict[str, Any],
    events: tuple[tuple[str, str | None], ...],
) -> None:
    """Claude Code's grouping, which Codex and Gemini CLI took up: each event a list of
    `{matcher?, hooks: [...]}`, ours one of them."""
    for event, matcher in events:
        entry: dict[str, Any] = {"hooks": [hook]}
        if matcher:
            entry = {"matcher": matcher, **entry}
        _merge(config, ["hooks"], event, entry, marker)


def _codex(project: Path, gctl: str, url: str | None) -> list[Path]:
    path = project / ".codex" / "hooks.json"
    config = _json_file(path)
    marker = _command(gctl, "codex")
    hook = {"type": "command", "command": marker, "timeout": 60}
    events = (
        ("SessionStart", None),
        ("UserPromptSubmit", None),
        ("PreToolUse", "^(Bash|apply_patch)$"),
        ("PostToolUse", "^Bash$"),
        ("Stop", None),
        ("SessionEnd", None),
    )
    _grouped(config, marker, hook, events)
    _write_json(path, config)
    return [path]


def _gemini(project: Path, gctl: str, url: str | None) -> list[Path]:
    path = project / ".gemini" / "settings.json"
    config = _json_file(path)
    marker = _command(gctl, "gemini")
    hook = {"name": "ground-control", "type": "command", "command": marker, "timeout": 60000}
    events = (
        ("BeforeTool", "^(write_file|replace|run_shell_command)$"),
        ("AfterTool", "^run_shell_command$"),
        ("SessionStart", None),
        ("SessionEnd", None),
    )
    _grouped(config, marker, hook, events)
    _write_json(path, config)
    return [path]


def _cursor(project: Path, gctl: str, url: str | None) -> list[Path]:
    path = project / ".cursor" / "hooks.json"
    config = _json_file(path)
    config.setdefault("version", 1)
    marker = _command(gctl, "cursor")
    for event, extra in (
        ("sessionStart", {}),
        ("sessionEnd", {}),
        (
            "preToolUse",
            {
                "matcher": "Write|Delete|StrReplace|Edit|MultiEdit|ApplyPatch|Shell",
                "failClosed": True,
                "timeout": 60,
            },
        ),
        ("postToolUse", {"matcher": "Shell"}),
        ("afterFileEdit", {}),
    ):
        _merge(config, ["hooks"], event, {"command": marker, **extra}, marker)
    _write_json(path, config)
    return [path]


def _copilot(project: Path, gctl: str, url: str | None) -> list[Path]:
    path = project / ".github" / "hooks" / "ground-control.json"
    config = _json_file(path)
    config.setdefault("version", 1)
    marker = _command(gctl, "copilot")
    shells = "bash|powershell|write_bash|write_powershell"
    for event, matcher in (
        ("sessionStart", None),
        ("preToolUse", f"create|edit|{shells}"),
        ("postToolUse", shells),
        ("postToolUseFailure", None),
        ("sessionEnd", None),
    ):
        entry: dict[str, Any] = {"type": "command", "command": marker, "timeoutSec": 30}
        if matcher:
            entry["matcher"] = matcher
        _merge(config, ["hooks"], event, entry, marker)
    _write_json(path, config)
    return [path]


CLINE_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "TaskStart",
    "TaskResume",
    "TaskComplete",
    "TaskCancel",
)
CLINE_MARK = "# Ground Control (gctl hook install cline)"


def _cline_script(gctl: str, event: str) -> str:
    refused = (
        '{"cancel":true,"errorMessage":"Ground Control: gctl is missing, so this tool call is '
        'refused"}'
        if event == "PreToolUse"
        else '{"cancel":false}'
    )
    return f"""#!/bin/sh
{CLINE_MARK}
# A hook of the project's own, kept beside this one, runs first; its refusal stands.
here=$(dirname "$0")
event=$(cat)
if [ -x "$here/{event}.user" ]; then
  said=$(printf '%s' "$event" | "$here/{event}.user")
  case "$said" in *'"cancel":true'*|*'"cancel": true'*) printf '%s\\n' "$said"; exit 0;; esac
fi
if command -v {gctl} >/dev/null 2>&1; then
  printf '%s' "$event" | exec {gctl} hook cline
fi
echo '{refused}'
"""


def _cline(project: Path, gctl: str, url: str | None) -> list[Path]:
    folder = project / ".clinerules" / "hooks"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for event in CLINE_EVENTS:
        path = folder / event
        if path.exists() and CLINE_MARK not in path.read_text(errors="replace"):
            kept = folder / f"{event}.user"
            if kept.exists():
                raise InstallError(
                    f"{path} and {kept} both exist: keep one of them, then install again"
                )
            os.replace(path, kept)
        path.write_text(_cline_script(gctl, event))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(path)
    return written


def _opencode(project: Path, gctl: str, url: str | None) -> list[Path]:
    path = project / ".opencode" / "plugins" / "groundcontrol.js"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PLUGIN, path)
    return [path]


CONFIGS: dict[str, Callable[[Path, str, str | None], list[Path]]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini": _gemini,
    "cursor": _cursor,
    "copilot": _copilot,
    "cline": _cline,
    "opencode": _opencode,
}
assert set(CONFIGS) == set(HARNESSES)


def install(
    harness: str, project: Path, *, gctl: str = "gctl", url: str | None = None
) -> list[Path]:
    """Write `harness`'s hooks into `project`; the files written."""
    if not project.is_dir():
        raise InstallError(f"{project} is not a directory")
    if url and harness != "claude-code":
        raise InstallError("--http is for Claude Code, whose hooks can post to a URL")
    return CONFIGS[harness](project, gctl, url)
