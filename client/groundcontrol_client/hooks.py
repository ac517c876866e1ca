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
- While the session holds leases, a small background process (`keep`) renews them all in one
  call (`POST /leases/renew-all`) every third of their TTL, and ends by itself once the session
  holds nothing, at the first refusal (a revoked key), or when its renewals have failed for a
  whole TTL.
- `SessionEnd` (and `Stop`, with `--release-on-stop`): release every lease the session holds and
  end its background process.

When Ground Control cannot be reached or refuses for another reason, the write is denied with
what happened (`GC_HOOK_FAIL_OPEN=1` lets it through instead): the promise is that no two agents
write one file, and an unchecked write breaks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from groundcontrol_client.client import Client
from groundcontrol_client.errors import GroundControlError, describe, is_transient

# Each tool that writes a file, and the field of its input that names the file.
WRITING_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
DEFAULT_TTL_S = 120.0
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
    if name == "PreToolUse":
        return _pre_tool_use(client, event, session)
    if name == "SessionEnd" or (name == "Stop" and release_on_stop):
        release_session(client, session)
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
