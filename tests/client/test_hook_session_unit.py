"""The Claude Code hook's session machinery without a server (issue 30, item 2): who the harness
is, whether a process still runs, the session's state under concurrent hook calls, and how the
renewer ends (`hook_session.keep` in this process, against a stand-in transport)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from groundcontrol_client import Client, RetryPolicy, hook_session

from tests.client.conftest import wait_for

PY = sys.executable


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GC_HOOK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def child() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen([PY, "-c", "import time; time.sleep(600)"]))
        return started[-1]

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(10)


def letter(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# --- processes ---------------------------------------------------------------------------------

PRINT = "import json; from groundcontrol_client import hook_session as h; "
PRINT += "print(json.dumps(h.harness()))"
WHO = f"{PY} -c '{PRINT}'"


@pytest.mark.parametrize(
    "command",
    [
        f"{WHO}; exit $?",  # sh, then the hook
        f'bash -c "{WHO}; exit \\$?"; exit $?',  # sh, bash, then the hook
        f"env X=1 {WHO}; exit $?",  # a launcher between them
    ],
)
def test_it_finds_the_harness_past_the_shells_that_ran_the_hook(command: str) -> None:
    # This test's process stands in for the harness: it runs the hook through a shell.
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == hook_session.identity(os.getpid())
    assert hook_session.identity(os.getpid())["start"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("table", "found"),
    [
        # sh -> bash -> claude: the harness.
        ({"hook": ("sh", 20), 20: ("-bash", 30), 30: ("claude", 1), 1: ("systemd", 0)}, 30),
        # The harness died and the shell was adopted by init: the harness is gone.
        ({"hook": ("sh", 1), 1: ("systemd", 0)}, "gone"),
        ({"hook": ("dash", 1), 1: ("launchd", 0)}, "gone"),
        # In a container the harness itself may be pid 1.
        ({"hook": ("sh", 1), 1: ("node", 0)}, 1),
        # Nothing to read (a process gone meanwhile): cannot be told.
        ({"hook": ("sh", 40)}, None),
    ],
)
def test_the_walk_up_stops_at_the_first_process_that_is_not_a_shell(
    table: dict[Any, tuple[str, int]], found: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = {os.getppid() if k == "hook" else k: v for k, v in table.items()}
    monkeypatch.setattr(
        hook_session,
        "_stat",
        lambda pid: (procs[pid][0], "S", procs[pid][1], f"t{pid}") if pid in procs else None,
    )
    expected = {None: None, "gone": hook_session.GONE}.get(
        found, {"pid": found, "start": f"t{found}"}
    )
    assert hook_session.harness() == expected
    assert not hook_session.alive(hook_session.GONE)


def test_it_tells_a_dead_a_zombie_and_a_reused_pid_from_a_stopped_process(
    child: Callable[[], subprocess.Popen[bytes]],
) -> None:
    proc = child()
    wait_for(lambda: hook_session.identity(proc.pid) is not None)
    who = hook_session.identity(proc.pid)
    assert hook_session.alive(who)
    proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: letter(proc.pid) == "T")
    assert hook_session.alive(who)  # stopped is not dead
    proc.send_signal(signal.SIGCONT)
    # Another process with this pid (the pid reused): its start time differs.
    assert not hook_session.alive({"pid": proc.pid, "start": "1"})
    proc.kill()
    wait_for(lambda: letter(proc.pid) == "Z")
    assert not hook_session.alive(who)  # a zombie: dead, though not yet reaped
    proc.wait()
    assert not hook_session.alive(who)
    assert hook_session.identity(proc.pid) is None
    assert not hook_session.alive(None)


def test_without_proc_it_asks_ps_and_agrees(
    child: Callable[[], subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = child()
    wait_for(lambda: hook_session.identity(proc.pid) is not None)
    monkeypatch.setattr(hook_session, "_PROC", False)
    who = hook_session.identity(proc.pid)
    assert who is not None and who["start"] and who["pid"] == proc.pid
    assert hook_session.alive(who)
    assert not hook_session.alive({"pid": proc.pid, "start": "Thu Jan  1 00:00:00 1970"})
    proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: letter(proc.pid) == "T")
    assert hook_session.alive(who)
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()
    assert not hook_session.alive(who)
    # ps itself missing: nobody can tell, so the process counts as alive (leases stay).
    monkeypatch.setenv("PATH", "/nonexistent")
    assert hook_session.alive(hook_session.identity(os.getpid()))


# --- the session's state -------------------------------------------------------------------------


def test_parallel_hook_calls_of_one_session_start_one_renewer(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[str] = []

    def spawn(session: str, ttl: float, idle_s: float) -> dict[str, Any]:
        time.sleep(0.05)  # a slow start widens any window between the check and the record
        spawned.append(session)
        return {**hook_session.identity(os.getpid()), "token": "t"}  # type: ignore[dict-item]

    monkeypatch.setattr(hook_session, "_spawn_keeper", spawn)
    calls = [
        threading.Thread(target=hook_session.start_keeper, args=("sess-par", 60.0))
        for _ in range(12)
    ]
    for call in calls:
        call.start()
    for call in calls:
        call.join(30)
    assert spawned == ["sess-par"]
    data = json.loads((state / "sess-par.json").read_text())
    assert data["events"] == 12 and data["holds"] is True
    assert data["harness"] == hook_session.harness()


# --- the renewer ---------------------------------------------------------------------------------


class Server:
    """Answers `me`, `leases`, `leases/release` and `leases/renew-all` for one session's lease,
    or fails every call (`down`), or refuses renewals (`revoked`)."""

    def __init__(self, *, holds: bool = True, down: bool = False, revoked: bool = False) -> None:
        self.holds, self.down, self.revoked = holds, down, revoked
        self.calls: list[str] = []

    def lease(self) -> dict[str, Any]:
        return {
            "resource": "src/a.py",
            "holder": "hand-a",
            "process_id": "claude-code:sess",
            "fence": 3,
            "state": "live",
            "ttl_s": 6,
            "expires_in_s": 6,
            "server_time": "2030-01-01T12:00:00+00:00",
        }

    def handle(self, request: httpx.Request) -> httpx.Response:
        route = request.url.path.removeprefix("/api/v1/")
        self.calls.append(route)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if route == "me":
            body = {"hand": "hand-a", "workspace": "w", "scopes": [], "key_prefix": "abc"}
            return httpx.Response(200, json=body)
        if route == "leases":
            return httpx.Response(200, json=[self.lease()] if self.holds else [])
        if route == "leases/release":
            self.holds = False
            return httpx.Response(200, json={"released": True})
        if route == "leases/renew-all":
            if self.revoked:
                error = {"code": "key_revoked", "message": "revoked", "request_id": "r"}
                return httpx.Response(401, json={"error": error})
            renewed = [self.lease()] if self.holds else []
            return httpx.Response(200, json={"renewed": renewed, "not_renewed": []})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": route}})

    def client(self) -> Client:
        return Client(
            "http://gc.test",
            "gc_abc_secret",
            transport=httpx.MockTransport(self.handle),
            retry=RetryPolicy(retries=0),
        )


def session(state: Path, harness: dict[str, Any] | None, **extra: Any) -> Path:
    state.mkdir(parents=True, exist_ok=True)
    data = {"events": 1, "harness": harness, "holds": True, "keeper": {"token": "me"}, **extra}
    path = state / "sess.json"
    path.write_text(json.dumps(data))
    return path


def keep(server: Server, *, ttl: float = 6.0, idle_s: float = 600.0) -> tuple[int, float]:
    started = time.monotonic()
    with server.client() as client:
        code = hook_session.keep("sess", ttl, idle_s, "me", client=client)
    return code, time.monotonic() - started


def dead_harness(child: Callable[[], subprocess.Popen[bytes]]) -> dict[str, Any]:
    proc = child()
    wait_for(lambda: hook_session.identity(proc.pid) is not None)
    who = hook_session.identity(proc.pid)
    proc.kill()
    proc.wait()
    assert who is not None
    return who


def test_the_renewer_releases_and_forgets_the_session_when_its_harness_is_gone(
    state: Path, child: Callable[[], subprocess.Popen[bytes]]
) -> None:
    path = session(state, dead_harness(child))
    server = Server()
    code, took = keep(server)
    assert (code, server.holds, path.exists()) == (0, False, False)
    assert "leases/release" in server.calls and took < 3


def test_without_the_server_the_renewer_just_stops_and_leaves_the_ttl_to_end_it(
    state: Path, child: Callable[[], subprocess.Popen[bytes]]
) -> None:
    path = session(state, dead_harness(child))
    server = Server(down=True)
    code, took = keep(server)
    assert code == 0 and not path.exists() and took < 3
    assert "leases/renew-all" not in server.calls  # it never renewed after the harness died


def test_a_deleted_state_ends_the_renewer_after_it_releases(state: Path) -> None:
    path = session(state, hook_session.identity(os.getpid()))
    server = Server()
    with server.client() as client:
        ended: list[int] = []
        renewer = threading.Thread(
            target=lambda: ended.append(hook_session.keep("sess", 6.0, 600.0, "me", client=client))
        )
        renewer.start()
        try:
            wait_for(lambda: "leases/renew-all" in server.calls, timeout=10)  # renewing
            path.unlink()
            renewer.join(10)
        finally:
            path.unlink(missing_ok=True)
            renewer.join(10)
    assert ended == [0] and not server.holds


def test_a_quiet_session_is_released_by_the_idle_bound(state: Path) -> None:
    path = session(state, hook_session.identity(os.getpid()))  # a harness that lives on
    server = Server()
    code, took = keep(server, idle_s=1.0)
    assert (code, server.holds, path.exists()) == (0, False, False)
    assert 1.0 <= took < 4


def test_a_refused_renewal_ends_the_renewer_and_the_next_event_starts_one(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = session(state, hook_session.identity(os.getpid()))
    server = Server(revoked=True)
    code, _ = keep(server, ttl=3.0)
    data = json.loads(path.read_text())
    assert code == 1 and data["keeper"] is None and data["holds"] is False
    # Another renewer's session (its token): this one leaves it alone at once.
    session(state, hook_session.identity(os.getpid()), keeper={"token": "other"})
    server = Server()
    assert keep(server)[0] == 0 and server.calls == [] and path.exists()


def test_each_event_starts_the_idle_clock_again(state: Path) -> None:
    session(state, hook_session.identity(os.getpid()))
    server = Server()
    idle_s = 1.5
    with server.client() as client:
        ended: list[float] = []
        renewer = threading.Thread(
            target=lambda: (
                hook_session.keep("sess", 6.0, idle_s, "me", client=client),
                ended.append(time.monotonic()),
            )
        )
        renewer.start()
        try:
            until = time.monotonic() + idle_s * 3
            while time.monotonic() < until and not ended:
                last_event = time.monotonic()  # no later than the event itself
                with hook_session._session_state("sess") as current:  # what a hook event does
                    assert current is not None
                    current.data["events"] += 1
                    current.save()
                time.sleep(0.2)  # pacing the events
        finally:
            renewer.join(idle_s + 10)
    # Causal, whatever the machine's load: the end came a whole bound after the last event.
    assert ended and ended[0] >= last_event + idle_s
    assert not server.holds


def test_sessions_whose_names_differ_only_in_odd_characters_keep_two_states(state: Path) -> None:
    names = ["a/b", "a_b", "a:b", "x" * 130, "x" * 131, "../../etc"]
    paths = {hook_session._state_path(name) for name in names}
    assert len(paths) == len(names)
    assert all(path.parent == state for path in paths)
    assert hook_session._state_path("6f1c-uuid_1").name == "6f1c-uuid_1.json"
