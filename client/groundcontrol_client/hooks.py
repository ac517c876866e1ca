"""`gctl hook claude-code`: leases taken where an agent writes, through Claude Code's hooks.

Claude Code runs the hook command once per event, with the event as JSON on stdin
(`session_id`, `cwd`, `hook_event_name`, and for `PreToolUse` the `tool_name` and `tool_input`).
Every call is a new process, so the session's process identity is its id: `claude-code:<id>`.

- `PreToolUse` of a file-writing tool (`Write`, `Edit`, `MultiEdit`, `NotebookEdit`): take (or,
  when the session holds it already, renew) a lease on the file, named by its path relative to
  the repository (git's top level, else the session's `cwd`). When another hand holds it, or a
  directory above it, the call is denied: the answer's `permissionDecisionReason`, which the
  model reads, is the denial sentence. A file outside the repository is not leased. Other tools
  pass untouched (no output: the session's own permission rules decide).
- While the session holds leases, a small background process renews them every third of their
  TTL (`GC_HOOK_TTL_S`, default 120 s), and the session's leases end with the session: within
  one TTL once its harness (the first process above the hook that is not a shell) is gone, or
  once no event came for `GC_HOOK_IDLE_S` (default 1800 s); a stopped harness is not gone. How:
  `groundcontrol_client.hook_session`.
- `SessionEnd` (and `Stop`, with `--release-on-stop`): release every lease the session holds,
  end its background process and forget the session.

When Ground Control cannot be reached or refuses for another reason, the write is denied with
what happened (`GC_HOOK_FAIL_OPEN=1` lets it through instead): the promise is that no two agents
write one file, and an unchecked write breaks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from groundcontrol_client.client import Client
from groundcontrol_client.errors import GroundControlError, describe
from groundcontrol_client.hook_session import (
    heard,
    process_id_of,
    release_session,
    start_keeper,
    state_dir,
)

__all__ = ["claude_code", "process_id_of", "release_session", "resource_for", "state_dir"]

# Each tool that writes a file, and the field of its input that names the file.
WRITING_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
DEFAULT_TTL_S = 120.0


def repository_root(cwd: str) -> str:
    """git's top level of `cwd`, else `cwd` itself."""
    try:
        found = subprocess.run(
            ["git", "-C", cwd, "rev-parse", "--show-toplevel"],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return cwd
    top = found.stdout.strip()
    return top if found.returncode == 0 and top else cwd


def resource_for(path: str, cwd: str) -> str | None:
    """The lease name of the file at `path` (absolute, or relative to `cwd`): its path relative
    to the repository, `/`-separated; None outside it."""
    root = os.path.realpath(repository_root(cwd))
    target = os.path.realpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    relative = os.path.relpath(target, root)
    if relative == "." or relative.startswith(".." + os.sep) or relative == "..":
        return None
    return relative.replace(os.sep, "/")


def _answer(decision: str, reason: str) -> None:
    print(
        json.dumps(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": decision,
                    "permissionDecisionReason": reason,
                }
            }
        )
    )


def claude_code(client: Client, *, release_on_stop: bool = False, stdin: Any = None) -> int:
    """One hook call: the event from stdin, the answer on stdout; always exit 0 once the event
    is read (a denial is an answer, not an error)."""
    try:
        event = json.load(stdin or sys.stdin)
        session = str(event["session_id"])
        name = str(event.get("hook_event_name", ""))
    except (ValueError, KeyError, TypeError) as error:
        print(f"gctl hook: not a Claude Code hook event: {error}", file=sys.stderr)
        return 1  # a non-blocking error: the harness goes on and shows it
    if name == "SessionEnd" or (name == "Stop" and release_on_stop):
        release_session(client, session)
        return 0
    heard(session, _ttl())
    if name == "PreToolUse":
        return _pre_tool_use(client, event, session)
    return 0


def _ttl() -> float:
    try:
        return max(float(os.environ.get("GC_HOOK_TTL_S", DEFAULT_TTL_S)), 5.0)
    except ValueError:
        return DEFAULT_TTL_S


def _pre_tool_use(client: Client, event: dict[str, Any], session: str) -> int:
    field = WRITING_TOOLS.get(str(event.get("tool_name")))
    tool_input = event.get("tool_input") or {}
    path = tool_input.get(field) if field and isinstance(tool_input, dict) else None
    if not isinstance(path, str) or not path:
        return 0
    resource = resource_for(path, str(event.get("cwd") or os.getcwd()))
    if resource is None:
        return 0
    ttl = _ttl()
    try:
        client.lease_acquire(resource, ttl_s=ttl, process_id=process_id_of(session))
    except GroundControlError as error:
        if error.code != "lease_held" and os.environ.get("GC_HOOK_FAIL_OPEN") == "1":
            return 0
        _answer("deny", f"Ground Control: {describe(error, subject=resource)}")
        return 0
    start_keeper(session, ttl)
    return 0
