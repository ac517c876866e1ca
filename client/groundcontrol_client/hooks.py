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
- While the session holds leases, a small background process (`keep`) renews them all in one
  call (`POST /leases/renew-all`) every third of their TTL, and ends by itself once the session
  holds nothing, at the first refusal (a revoked key), or when its renewals have failed for a
  whole TTL.
- `SessionEnd` (and `Stop`, with `--release-on-stop`): release every lease the session holds and
  end its background process.

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
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from groundcontrol_client import files
from groundcontrol_client.client import Client
from groundcontrol_client.errors import GroundControlError, describe, is_transient

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
KEEPER_ROUNDS_EMPTY = 2  # rounds of holding nothing after which the background process ends


def process_id_of(session_id: str) -> str:
    return f"claude-code:{session_id}"


def state_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = env.get("GC_HOOK_STATE_DIR") or os.path.join(
        env.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"),
        "groundcontrol",
        "claude-code",
    )
    return Path(base)


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
            if written_path(event) is None:
                return 0  # not a file-writing tool: the session's own rules decide
            with _connected(client, env) as connected:
                return _pre_tool_use(connected, event, session)
        if name == "SessionEnd" or (name == "Stop" and release_on_stop):
            with _connected(client, env) as connected:
                release_session(connected, session)
            return 0
        if name == "Stop" or name in LEFT_ALONE:
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


def release_session(client: Client, session: str) -> list[str]:
    """Release every lease the session holds, and end its background process; the resources
    released."""
    stop_keeper(session)
    process_id = process_id_of(session)
    hand = client.me().hand
    released = []
    for lease in client.leases(holder=hand, decision=True):  # a replica may miss the newest
        if lease.process_id == process_id and lease.state != "free":
            try:
                client.lease_release(lease.resource, fence=lease.fence)
                released.append(lease.resource)
            except GroundControlError:
                pass  # lost or taken meanwhile: nothing of it is the session's any more
    return released


# --- The background process --------------------------------------------------------------------


def _pidfile(session: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session)[:120]
    return state_dir() / f"{safe}.pid"


def _running(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def start_keeper(session: str, ttl: float) -> None:
    """The session's background renewals, started unless they run already."""
    pidfile = _pidfile(session)
    if _running(pidfile) is not None:
        return
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    keeper = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "groundcontrol_client.hooks", "keep", session, str(ttl)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives this hook call, and the harness's signals to it
    )
    pidfile.write_text(str(keeper.pid))


def stop_keeper(session: str) -> None:
    pidfile = _pidfile(session)
    pid = _running(pidfile)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    pidfile.unlink(missing_ok=True)


def keep(session: str, ttl: float) -> int:
    """Renew the session's leases every third of `ttl` until it holds none for a while, or the
    renewals have failed for a whole `ttl` (the leases are lost by then anyway)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    process_id = process_id_of(session)
    empty = 0
    last_ok = time.monotonic()
    try:
        with Client.from_env() as client:
            while empty < KEEPER_ROUNDS_EMPTY:
                time.sleep(ttl / 3)
                try:
                    renewed = client.lease_renew_all(process_id=process_id)
                except GroundControlError as error:
                    # A refusal (a revoked key, say) ends it at once; an outage after a ttl.
                    if not is_transient(error) or time.monotonic() - last_ok > ttl:
                        return 1
                    continue
                last_ok = time.monotonic()
                empty = 0 if renewed.renewed else empty + 1
    finally:
        pidfile = _pidfile(session)
        if _running(pidfile) == os.getpid():
            pidfile.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "keep":
        sys.exit(keep(sys.argv[2], float(sys.argv[3])))
    sys.exit(2)
