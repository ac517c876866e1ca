"""`gctl hook claude-code`: leases taken where an agent writes, through Claude Code's hooks.

Claude Code runs the hook command once per event, with the event as JSON on stdin
(`session_id`, `cwd`, `hook_event_name`, and for `PreToolUse` the `tool_name` and `tool_input`).
Every call is a new process, so the session's process identity is its id: `claude-code:<id>`.

- `PreToolUse` of a file-writing tool (`Write`, `Edit`, `MultiEdit`, `NotebookEdit`): take (or,
  when the session holds it already, renew) a lease on the file, named from the file itself
  (`groundcontrol_client.files`: its resolved path relative to the top level of its own
  repository; the session's `cwd` only makes a relative path absolute). When another hand
  holds it, or a directory above it, the call is denied: the answer's
  `permissionDecisionReason`, which the model reads, is the denial sentence. A file in no
  repository is denied too, saying so (`GC_ALLOW_OUTSIDE_REPO=1` lets it through unleased).
  Other tools pass untouched (no output: the session's own permission rules decide).
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

Every other failure fails closed, `GC_HOOK_FAIL_OPEN` or not: stdin that is not a hook event
(not JSON, not an object, no `session_id` or `hook_event_name`), an event this hook does not
know, a `PreToolUse` without its `tool_name`, or a writing tool's without the file's path, a
file git cannot place, any error of the hook's own, and a call that has not answered within
`GC_HOOK_DEADLINE_S` (default 45 s) exit 2 with the reason on stderr: Claude Code's blocking
error (any other non-zero exit is a non-blocking one, and the write would go through). The
one exception is `Stop`, where exit 2 would keep the model working: a failure there exits 1
(shown to the user), since nothing is written at a stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from groundcontrol_client import files
from groundcontrol_client.client import Client
from groundcontrol_client.errors import GroundControlError, describe
from groundcontrol_client.hook_session import (
    heard,
    process_id_of,
    release_session,
    start_keeper,
    state_dir,
)

__all__ = ["claude_code", "process_id_of", "release_session", "state_dir"]

# Each tool that writes a file, and the field of its input that names the file.
WRITING_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
# The events the hook acts on, and Claude Code's others that it knows and leaves alone (none
# writes a file); any other name fails closed.
ACTS_ON = ("PreToolUse", "SessionEnd", "Stop")
LEFT_ALONE = frozenset(
    {
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "PermissionRequest",
        "PermissionDenied",
        "Notification",
        "SubagentStart",
        "SubagentStop",
        "PreCompact",
        "PostCompact",
        "StopFailure",
    }
)
EXIT_BLOCK = 2  # Claude Code's blocking error: the tool call does not run, stderr says why
EXIT_NOT_BLOCKING = 1  # shown to the user; the session goes on
DEFAULT_TTL_S = 120.0
DEFAULT_DEADLINE_S = 45.0


class BadEvent(Exception):
    """stdin is not a hook event this hook can act on (the sentence says what is wrong)."""


def read_event(stdin: Any) -> dict[str, Any]:
    """The event on `stdin`, a JSON object; BadEvent if not."""
    try:
        event = json.load(stdin)
    except ValueError as error:  # not JSON, or not UTF-8
        raise BadEvent(f"stdin is not JSON ({error})") from error
    if not isinstance(event, dict):
        raise BadEvent(f"stdin is JSON but not an object ({type(event).__name__})")
    return event


def text_field(event: dict[str, Any], field: str) -> str:
    """A field every event carries (`session_id`, `hook_event_name`); BadEvent if missing."""
    value = event.get(field)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"the event has no {field} (text, not empty)")
    return value


def written_path(event: dict[str, Any]) -> str | None:
    """The path a `PreToolUse` event's tool writes; None for a tool that writes no file.
    BadEvent when the event lacks what says which tool, or the writing tool's path."""
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise BadEvent("the PreToolUse event has no tool_name")
    field = WRITING_TOOLS.get(tool)
    if field is None:
        return None
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        raise BadEvent(f"the {tool} event has no tool_input object")
    path = tool_input.get(field)
    if not isinstance(path, str) or not path:
        raise BadEvent(f"the {tool} event's tool_input has no {field} (text, not empty)")
    cwd = event.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise BadEvent("the event's cwd is not text")
    if not os.path.isabs(os.path.expanduser(path)) and not cwd:
        raise BadEvent(f"{field} {path!r} is relative and the event has no cwd to resolve it")
    return path


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


@contextlib.contextmanager
def _connected(client: Client | None, env: Mapping[str, str] | None) -> Iterator[Client]:
    """`client`, else one from the environment (closed after), made only when an event needs it."""
    if client is not None:
        yield client
        return
    with Client.from_env(env) as made:
        yield made


def claude_code(
    client: Client | None = None,
    *,
    release_on_stop: bool = False,
    stdin: Any = None,
    env: Mapping[str, str] | None = None,
    deadline_s: float | None = None,
) -> int:
    """One hook call: the event from stdin, the answer on stdout, exit 0 (a denial is an
    answer, not an error). Any failure, from stdin that is no event to an error of its own,
    exits 2 with the reason on stderr (1 at `Stop`): the module's docstring says why. With
    `deadline_s` (the command's: `GC_HOOK_DEADLINE_S`), a call still running then fails too."""
    name = ""
    try:
        if deadline_s:
            _set_deadline(deadline_s)
        event = read_event(sys.stdin if stdin is None else stdin)
        name = text_field(event, "hook_event_name")
        session = text_field(event, "session_id")
        if name == "PreToolUse":
            heard(session, _ttl())
            if written_path(event) is None:
                return 0  # not a file-writing tool: the session's own rules decide
            with _connected(client, env) as connected:
                return _pre_tool_use(connected, event, session)
        if name == "SessionEnd" or (name == "Stop" and release_on_stop):
            with _connected(client, env) as connected:
                release_session(connected, session)
            return 0
        if name == "Stop" or name in LEFT_ALONE:
            heard(session, _ttl())
            return 0
        raise BadEvent(
            f"{name!r} is not a hook event it knows (it acts on {', '.join(ACTS_ON)}): "
            "check the hooks in .claude/settings.json"
        )
    except BadEvent as error:
        _cancel_deadline(deadline_s)
        return _failed(name, f"not a Claude Code hook event it can act on: {error}")
    except Exception as error:  # noqa: BLE001 - every failure must block, whatever it is
        _cancel_deadline(deadline_s)
        return _failed(name, f"{type(error).__name__}: {error}")
    finally:
        _cancel_deadline(deadline_s)


class DeadlinePassed(Exception):
    pass


def hook_deadline_s(env: Mapping[str, str] | None = None) -> float:
    """`GC_HOOK_DEADLINE_S` (default 45 s, 0 for none): a call that has not answered by then
    fails (closed), before the harness's own hook timeout ends it, whose end would not block."""
    value = (os.environ if env is None else env).get("GC_HOOK_DEADLINE_S", "")
    try:
        return max(float(value), 0.0) if value else DEFAULT_DEADLINE_S
    except ValueError:
        return DEFAULT_DEADLINE_S


def _set_deadline(seconds: float) -> None:
    def passed(*_: object) -> None:
        raise DeadlinePassed(f"no answer within {seconds:g} s (GC_HOOK_DEADLINE_S)")

    signal.signal(signal.SIGALRM, passed)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _cancel_deadline(seconds: float | None) -> None:
    if seconds:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _failed(name: str, why: str) -> int:
    """Say `why` on stderr; the exit code that blocks the call (a failure never lets a write
    through), but never one that keeps the model working after it stopped."""
    blocking = name not in ("Stop", "SubagentStop")
    then = "the tool call is blocked" if blocking else "nothing was released"
    print(f"gctl hook claude-code failed, so {then}: {why}", file=sys.stderr)
    return EXIT_BLOCK if blocking else EXIT_NOT_BLOCKING


def _ttl() -> float:
    try:
        return max(float(os.environ.get("GC_HOOK_TTL_S", DEFAULT_TTL_S)), 5.0)
    except ValueError:
        return DEFAULT_TTL_S


def _pre_tool_use(client: Client, event: dict[str, Any], session: str) -> int:
    path = written_path(event)
    if path is None:
        return 0
    # `~` as Claude Code's tools read it (a file named `~` in the cwd is not what they write).
    named = files.name_file(os.path.expanduser(path), event.get("cwd") or None)
    if named.name is None:
        if not files.outside_allowed():
            _answer("deny", f"Ground Control: {files.outside_sentence(path, named)}")
        return 0
    resource = named.name
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
