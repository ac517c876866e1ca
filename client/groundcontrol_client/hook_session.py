"""The session behind `gctl hook claude-code`: its state, its renewer, and its end.

- While the session holds leases, a small background process (`keep`) renews them all in one
  call (`POST /leases/renew-all`) every third of their TTL (`GC_HOOK_TTL_S`, default 120 s, at
  least 5 s), and ends by itself once the session holds nothing, at the first refusal (a revoked
  key), or when its renewals have failed for a whole TTL.
- A session's leases end with the session, with nobody involved. The background process watches
  the harness that ran the hook: its first ancestor that is not a shell (`sh`, `bash`, `zsh`,
  ..., or a launcher such as `env`), known by its pid and its start time, so a reused pid is not
  mistaken for it. Once the harness is gone (a crash, `kill -9`, a closed terminal; a zombie is
  gone too) or no hook event came for `GC_HOOK_IDLE_S` (default 1800 s), it releases every lease
  the session holds and ends; if the server cannot be reached it just stops renewing, and the
  TTL ends them. So within one TTL of the harness's death nothing of the session is held. A
  stopped harness (SIGSTOP) is not dead: its leases stay. If the session's state file is deleted
  the background process releases and ends too. Every hook event starts the idle clock again and,
  if the session holds leases and its background process has died, starts a new one.
- The session's state is one JSON file in `GC_HOOK_STATE_DIR` (default
  `~/.local/state/groundcontrol/claude-code`), changed under its lock (`flock`): parallel hook
  calls of one session start one background process.

Run as `python -m groundcontrol_client.hook_session keep SESSION TTL IDLE TOKEN`, this is the
renewer (`keep`); a hook call starts it (`note_event`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from groundcontrol_client.client import Client, RetryPolicy
from groundcontrol_client.errors import GroundControlError, is_transient

DEFAULT_IDLE_S = 1800.0  # a session with no hook event for this long is over (GC_HOOK_IDLE_S)
KEEPER_ROUNDS_EMPTY = 2  # rounds of holding nothing after which the background process ends
POLL_S = 1.0  # how often, at most, the background process looks at the harness and the state


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


def release_session(client: Client, session: str) -> list[str]:
    """Release every lease the session holds, end its background process and forget the session;
    the resources released."""
    with _session_state(session) as state:
        if state is not None:
            _terminate(state.data.get("keeper"))
        released = _release_held(client, session)
        if state is not None:
            state.remove()
    return released


def _release_held(client: Client, session: str) -> list[str]:
    """Release what the server says the session holds (not only what this machine remembers:
    a lease taken while the state was being lost counts too); the resources released."""
    process_id = process_id_of(session)
    hand = client.me().hand
    released = []
    for lease in client.leases(holder=hand, decision=True):  # a replica may miss the newest
        if lease.process_id == process_id and lease.state != "free":
            try:
                client.lease_release(lease.resource, fence=lease.fence, process_id=process_id)
                released.append(lease.resource)
            except GroundControlError:
                pass  # lost or taken meanwhile: nothing of it is the session's any more
    return released


# --- Processes: who ran the hook, and whether it still runs ---------------------------------------

# What runs a hook command without being the harness: shells, and launchers that exit with it.
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "pdksh", "tcsh", "csh", "ash", "busybox"}
    | {"env", "nice", "nohup", "stdbuf", "timeout", "time", "uv", "uvx"}
)
# What a process's parent becomes once its parent has died: a hook whose walk up ends at one of
# these was orphaned, so its harness is gone already.
INITS = frozenset({"init", "systemd", "launchd", "tini", "dumb-init", "docker-init", "s6-svscan"})
GONE: dict[str, Any] = {"pid": 0, "start": None}  # a harness that no longer runs
_PROC = os.path.exists("/proc/self/stat")


class _Unknown:
    """A process that cannot be looked at right now (no `ps`, say): alive, for safety."""


UNKNOWN = _Unknown()


def _stat(pid: int) -> tuple[str, str, int, str] | _Unknown | None:
    """(name, state letter, parent pid, start time) of process `pid`; None if there is none.

    The start time (clock ticks since boot from /proc, else `ps`'s `lstart`) tells a process from
    a later one that got the same pid."""
    if pid <= 0:
        return None
    if _PROC:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return None
        except OSError:
            return UNKNOWN
        # The name is in parentheses and may hold spaces and parentheses itself.
        left, right = text.find("("), text.rfind(")")
        fields = text[right + 2 :].split()
        if left < 0 or len(fields) < 20:
            return UNKNOWN
        return text[left + 1 : right], fields[0], int(fields[1]), fields[19]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # another user's: it exists
    try:
        found = subprocess.run(
            ["ps", "-o", "ppid=", "-o", "stat=", "-o", "lstart=", "-o", "comm=", "-p", str(pid)],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=5,
            env={**os.environ, "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    parts = found.stdout.split()
    if found.returncode != 0 and not parts:
        return None
    if len(parts) < 8 or not parts[0].isdigit():
        return UNKNOWN
    # ppid, stat, then lstart's five words ("Wed Dec  2 19:35:03 2026"), then the command.
    name = os.path.basename(" ".join(parts[7:]))
    return name, parts[1][:1], int(parts[0]), " ".join(parts[2:7])


def identity(pid: int) -> dict[str, Any] | None:
    """`{"pid", "start"}` of a running process, None if there is none."""
    info = _stat(pid)
    if info is None:
        return None
    if isinstance(info, _Unknown):
        return {"pid": pid, "start": None}
    return {"pid": pid, "start": info[3]}


def alive(process: dict[str, Any] | None) -> bool:
    """Whether the process `identity()` described still runs: the same pid with the same start
    time, not a zombie. A stopped process (SIGSTOP) is alive."""
    if not process:
        return False
    info = _stat(int(process["pid"]))
    if isinstance(info, _Unknown):
        return True
    if info is None:
        return False
    _, letter, _, start = info
    if process.get("start") and start != process["start"]:
        return False  # the pid went to a newer process
    return letter not in ("Z", "X", "x")


def harness() -> dict[str, Any] | None:
    """The process that ran this hook: the first ancestor that is not a shell (or a launcher
    such as `env`), from this process's parent up; `GONE` if the walk ends at an init (the hook
    was orphaned: its harness died); None if it cannot be told."""
    pid = os.getppid()
    for _ in range(64):
        info = _stat(pid)
        if info is None or isinstance(info, _Unknown):
            return None
        name, _, parent, start = info
        name = name.lstrip("-")
        if name not in SHELLS or parent <= 0:
            return GONE if name in INITS else {"pid": pid, "start": start}
        pid = parent
    return None


@functools.cache
def _this_harness() -> dict[str, Any] | None:
    # Once per hook call, at its start: a harness that dies while the call waits on the server
    # must still be the one its renewer watches (the call is then orphaned, and its walk up
    # would find init instead).
    return harness()


def _terminate(process: dict[str, Any] | None) -> None:
    if process and alive(process):
        with contextlib.suppress(OSError):
            os.kill(int(process["pid"]), signal.SIGTERM)


# --- The session's state: one file per session, changed under its lock ---------------------------


def _state_path(session: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in session)[:100]
    if safe != session:  # two sessions that differ only in what was replaced keep two files
        safe += "-" + hashlib.sha256(session.encode()).hexdigest()[:16]
    return state_dir() / f"{safe}.json"


class _State:
    """A session's state, read under its file's exclusive lock: `data` is
    `{"events": n, "harness": identity, "keeper": identity + token, "holds": bool}`."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            data = {}  # a torn or foreign file: start the session's record again
        if not isinstance(data, dict) or not isinstance(data.get("events", 0), int):
            data = {}  # not ours: start the session's record again
        self.data: dict[str, Any] = data
        self.data.setdefault("events", 0)
        self.data["holds"] = self.data.get("holds") is True

    def save(self) -> None:
        body = json.dumps(self.data).encode()
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, body)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def _session_state(session: str, *, create: bool = False) -> Iterator[_State | None]:
    """The session's state under its lock, None when there is none (and `create` is false).
    Hook calls of one session may run at once (parallel tool calls), and its renewer reads and
    ends the state: every change is made under the lock, so each sees the others' whole."""
    import fcntl  # POSIX only, like the renewer itself

    path = _state_path(session)
    while True:
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Removed (the session ended) or replaced while this call waited for the lock?
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                yield _State(fd, path)
                return
        finally:
            os.close(fd)
        if not create:
            yield None
            return


# --- The hook's side: every event is news of the session -----------------------------------------


def _idle_s() -> float:
    try:
        return max(float(os.environ.get("GC_HOOK_IDLE_S", DEFAULT_IDLE_S)), 1.0)
    except ValueError:
        return DEFAULT_IDLE_S


def note_event(session: str, *, ttl: float, took: bool = False) -> None:
    """A hook event of `session`: the idle clock starts again, the harness that ran this hook
    is the one to watch, and if the session holds leases (`took`: it has just taken one) a
    renewer runs for it, a new one if the last has ended."""
    watched = _this_harness()
    with _session_state(session, create=True) as state:
        assert state is not None
        state.data["events"] = int(state.data["events"]) + 1
        state.data["harness"] = watched
        if took:
            state.data["holds"] = True
        if state.data["holds"] and not alive(state.data.get("keeper")):
            state.data["keeper"] = _spawn_keeper(session, ttl, _idle_s())
        state.save()


def heard(session: str, ttl: float) -> None:
    """Any event but the session's end, before it is acted on: `note_event`. A state directory
    that cannot be written is said on stderr; the event goes on (a write's lease is taken, and
    its renewer then fails loudly)."""
    try:
        note_event(session, ttl=ttl)
    except OSError as error:
        print(f"gctl hook: the session's state in {state_dir()}: {error}", file=sys.stderr)


def start_keeper(session: str, ttl: float) -> None:
    """The session has just taken (or renewed) a lease: its renewer runs."""
    note_event(session, took=True, ttl=ttl)


def _spawn_keeper(session: str, ttl: float, idle_s: float) -> dict[str, Any]:
    token = secrets.token_hex(8)
    keeper = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "groundcontrol_client.hook_session", "keep", session]
        + [repr(ttl), repr(idle_s), token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives this hook call, and the harness's signals to it
    )
    return {**(identity(keeper.pid) or {"pid": keeper.pid, "start": None}), "token": token}


# --- The renewer ---------------------------------------------------------------------------------


def _read_state(session: str) -> dict[str, Any] | None:
    with _session_state(session) as state:
        return None if state is None else dict(state.data)


def _ending(data: dict[str, Any], last_event: float, idle_s: float) -> str | None:
    """Why the session is over, if it is: its harness is gone, or it has been quiet too long."""
    watched = data.get("harness")
    if watched and not alive(watched):
        return "harness gone"
    if time.monotonic() - last_event > idle_s:
        return "idle"
    return None


def _end(client: Client, session: str, token: str, seen: int) -> bool:
    """Release what the session holds and forget it, unless it spoke since the renewer last
    looked (`seen` events): then it lives, and False. If the server cannot be reached, the
    leases end by their TTL instead, since nobody renews them any more."""
    with _session_state(session) as state:
        if state is not None:
            if (state.data.get("keeper") or {}).get("token") != token:
                return True  # another renewer's session now
            if state.data["events"] != seen:
                return False
        # Under the lock: a hook call of a resumed session waits, and takes its lease after this.
        try:
            _release_held(client, session)
        except GroundControlError:
            pass
        if state is not None:
            state.remove()
    return True


def _stop_renewing(session: str, token: str, seen: int | None) -> bool:
    """This renewer ends (the session holds nothing, or renewing is refused or has failed for
    a TTL): the next event with a lease starts a new one. False if the session spoke since
    `seen` (its new lease must not go unrenewed): go on."""
    with _session_state(session) as state:
        if state is None or (state.data.get("keeper") or {}).get("token") != token:
            return True
        if seen is not None and state.data["events"] != seen:
            return False
        state.data["keeper"] = None
        state.data["holds"] = False
        state.save()
    return True


def keep(
    session: str, ttl: float, idle_s: float, token: str, *, client: Client | None = None
) -> int:
    """The session's renewer (a process of its own, started by a hook call).

    1. Every `POLL_S` (at most a sixth of `ttl`) it reads the session's state. Gone (the
       directory was deleted, say): it releases what the session holds and ends. Another
       renewer's: it ends.
    2. If the session's harness is gone (dead, or its pid reused) or no hook event came for
       `idle_s`: it releases what the session holds (the server says what), forgets the
       session, and ends; without the server, it just ends, and the TTL ends the leases.
    3. At its start (a renewer started again after one died cannot know when the leases were
       last renewed) and then every third of `ttl` it renews the session's leases in one call.
       It ends after `KEEPER_ROUNDS_EMPTY` rounds holding nothing, at a refusal, or after a TTL
       of failures.
    """
    process_id = process_id_of(session)
    poll = min(POLL_S, ttl / 6)
    period = ttl / 3
    own = client is None
    client = client or Client.from_env(retry=RetryPolicy(retries=1))
    last_event = last_ok = time.monotonic()
    next_renewal = last_event  # at once: a renewer started anew does not know the last renewal
    seen: int | None = None
    empty = 0
    try:
        while True:
            data = _read_state(session)
            if data is None:
                _end(client, session, token, -1)
                return 0
            if (data.get("keeper") or {}).get("token") != token:
                return 0
            if data["events"] != seen:
                seen, last_event = int(data["events"]), time.monotonic()
            if _ending(data, last_event, idle_s) and _end(client, session, token, seen):
                return 0
            if time.monotonic() >= next_renewal:
                asked = seen
                next_renewal = time.monotonic() + period
                try:
                    renewed = client.lease_renew_all(
                        process_id=process_id,
                        give_up_at=next_renewal,
                        timeout=min(client.timeout, period),
                    )
                except GroundControlError as error:
                    # A refusal (a revoked key, say) ends it at once; an outage after a TTL.
                    if not is_transient(error):
                        _stop_renewing(session, token, None)
                        return 1
                    if time.monotonic() - last_ok > ttl:
                        if _stop_renewing(session, token, asked):
                            return 1
                        last_ok = time.monotonic()  # a new lease since: it gets its TTL
                else:
                    last_ok = time.monotonic()
                    empty = 0 if renewed.renewed else empty + 1
                    if empty >= KEEPER_ROUNDS_EMPTY:
                        if _stop_renewing(session, token, asked):
                            return 0
                        empty = 0
            time.sleep(poll)
    finally:
        if own:
            client.close()


def _main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "keep":
        # SIGTERM comes from the session's end, which has released everything already.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        return keep(argv[1], float(argv[2]), float(argv[3]), argv[4])
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
