"""A session's leases end with the session (issue 30, item 2): with a real process tree, a
stand-in harness (`hook_harness.py`) runs `gctl hook claude-code` through a shell against the live
server, and is then killed, stopped, or left quiet; the file's lease must follow."""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models.functions import Now

from leases.clock import db_now
from leases.models import Lease, LeaseStatus
from tests.client.conftest import GCTL, Fleet, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TTL_S = 6
HARNESS = str(Path(__file__).with_name("hook_harness.py"))


class Harness:
    """The stand-in harness: `send(event)` runs the hook for one event and returns its answer."""

    def __init__(self, gc: Fleet, state: Path, **env: str) -> None:
        self.state = state
        self.keepers: set[int] = set()
        command = f"{shlex.quote(GCTL)} hook claude-code"
        self.proc = subprocess.Popen(
            [sys.executable, HARNESS, command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=gc.env(
                gc.key_a, **{"GC_HOOK_STATE_DIR": str(state), "GC_HOOK_TTL_S": str(TTL_S), **env}
            ),
        )
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(line)

    def send(self, event: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(event) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.answers.get(timeout=60))
        assert answer["rc"] == 0, answer["stderr"]
        self.keeper()  # remembered, to be killed at the end whatever happens
        return answer

    def session_state(self) -> dict[str, Any] | None:
        """The session's state, None when there is none: the renewer removes the file when the
        session ends, which may happen between the listing and the read. Read without the
        state's lock, a write in progress may show an empty file: read it again."""
        for path in self.state.glob("*.json"):
            for _ in range(100):
                try:
                    return json.loads(path.read_text())
                except FileNotFoundError:
                    return None
                except ValueError:
                    time.sleep(0.01)
            raise AssertionError(f"{path} never held a whole state")
        return None

    def keeper(self) -> int | None:
        data = self.session_state()
        pid = ((data or {}).get("keeper") or {}).get("pid")
        if pid:
            self.keepers.add(pid)
        return pid

    def close(self) -> None:
        for signum in (signal.SIGCONT, signal.SIGKILL):
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signum)
        self.proc.wait(10)
        self.keeper()
        for pid in self.keepers:
            if is_keeper(pid):
                os.kill(pid, signal.SIGKILL)


def is_keeper(pid: int) -> bool:
    """A running renewer (not a zombie, not a later process with its pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        letter = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"groundcontrol_client.hook_session" in command and letter != "Z"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


@pytest.fixture
def harness(gc: Fleet, tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    started: list[Harness] = []

    def start(**env: str) -> Harness:
        started.append(Harness(gc, tmp_path / "state", **env))
        return started[-1]

    try:
        yield start
    finally:
        for one in started:
            one.close()


def write(session: str, repo: Path, path: str) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(repo / path), "content": "x"},
    }


def after_tool(session: str, repo: Path) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(repo / "README.md")},
        "tool_response": {},
    }


def live(resource: str) -> bool:
    """Held and inside its window, by the database's clock."""
    return Lease.objects.filter(
        resource=resource, status=LeaseStatus.HELD, deadline__gte=Now()
    ).exists()


def released(resource: str) -> bool:
    return Lease.objects.filter(resource=resource, status=LeaseStatus.FREE).exists()


def take(one: Harness, session: str, repo: Path, path: str = "src/a.py") -> Lease:
    answer = one.send(write(session, repo, path))
    assert answer["stdout"].strip() == ""  # allowed
    assert live(path)
    lease = Lease.objects.get(resource=path)
    assert lease.process_id == f"claude-code:{session}"
    return lease


def test_it_frees_the_lease_within_a_ttl_once_the_harness_is_killed(
    harness: Callable[..., Harness], repo: Path
) -> None:
    one = harness()
    take(one, "sess-kill", repo)
    keeper = one.keeper()
    assert keeper is not None and is_keeper(keeper)
    # kill -9, and left unreaped: a zombie is a dead harness too.
    one.proc.send_signal(signal.SIGKILL)
    wait_for(lambda: not live("src/a.py"), timeout=TTL_S + 5)
    assert released("src/a.py")  # released by the renewer, not merely expired
    wait_for(lambda: not is_keeper(keeper), timeout=10)
    assert one.session_state() is None  # the session is forgotten


def test_it_frees_the_lease_when_the_state_directory_was_deleted_meanwhile(
    harness: Callable[..., Harness], repo: Path
) -> None:
    one = harness()
    take(one, "sess-rm", repo)
    keeper = one.keeper()
    assert keeper is not None
    shutil.rmtree(one.state)
    one.proc.kill()
    one.proc.wait(10)  # reaped this time
    wait_for(lambda: not live("src/a.py"), timeout=TTL_S + 5)
    wait_for(lambda: not is_keeper(keeper), timeout=10)


def test_a_stopped_harness_keeps_its_lease_past_the_ttl(
    harness: Callable[..., Harness], repo: Path
) -> None:
    one = harness()
    lease = take(one, "sess-stop", repo)
    one.proc.send_signal(signal.SIGSTOP)
    stopped_at = db_now()
    # Renewed later than a whole TTL after the stop: the renewer kept the lease the whole time.
    wait_for(
        lambda: Lease.objects.get(pk=lease.pk).renewed_at > stopped_at + timedelta(seconds=TTL_S),
        timeout=TTL_S * 3,
    )
    assert Path(f"/proc/{one.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    assert live("src/a.py")
    assert Lease.objects.get(pk=lease.pk).fence == lease.fence  # never lapsed in between
    one.proc.send_signal(signal.SIGCONT)
    one.proc.kill()
    wait_for(lambda: released("src/a.py"), timeout=TTL_S + 5)


def test_a_quiet_session_ends_after_the_idle_bound_with_its_harness_alive(
    harness: Callable[..., Harness], repo: Path
) -> None:
    one = harness(GC_HOOK_IDLE_S="2")
    take(one, "sess-idle", repo)
    keeper = one.keeper()
    assert keeper is not None
    wait_for(lambda: released("src/a.py"), timeout=2 + TTL_S + 5)
    assert one.proc.poll() is None  # the harness lives on
    wait_for(lambda: not is_keeper(keeper), timeout=10)
    # Its next write takes the lease again, with a renewer of its own.
    take(one, "sess-idle", repo)
    again = one.keeper()
    assert again is not None and again != keeper and is_keeper(again)


def test_an_event_starts_the_idle_clock_again(harness: Callable[..., Harness], repo: Path) -> None:
    idle_s = 5
    one = harness(GC_HOOK_IDLE_S=str(idle_s))
    for _ in range(3):
        take(one, "sess-busy", repo)
        time.sleep(2)  # pacing: the event comes well inside the idle bound
        sent_at = db_now()
        one.send(after_tool("sess-busy", repo))
        answered_at = db_now()
        wait_for(lambda: released("src/a.py"), timeout=idle_s * 2 + TTL_S + 10)
        released_at = Lease.objects.get(resource="src/a.py").released_at
        if released_at > answered_at:  # the event was heard before the end, as intended
            # Idle counts from the event, not from the write before it.
            assert released_at >= sent_at + timedelta(seconds=idle_s)
            return
        # A machine so loaded that the event's hook outlasted the bound: that proves nothing.
        wait_for(lambda: (one.session_state() or {"events": 1})["events"] == 1)
    pytest.fail("three times the event's hook took longer than the idle bound")


def test_a_renewer_that_died_is_started_again_by_the_next_event(
    harness: Callable[..., Harness], repo: Path
) -> None:
    one = harness(GC_HOOK_TTL_S="12")  # its last renewal keeps it for 8 s at least
    lease = take(one, "sess-oom", repo)
    first = one.keeper()
    assert first is not None
    os.kill(first, signal.SIGKILL)  # an OOM kill, say
    killed_at = db_now()
    one.send(after_tool("sess-oom", repo))
    second = one.keeper()
    assert second is not None and second != first and is_keeper(second)
    # Only a renewer renews (an event that is not a write asks the server nothing).
    wait_for(lambda: Lease.objects.get(pk=lease.pk).renewed_at > killed_at, timeout=12)
    assert Lease.objects.get(pk=lease.pk).fence == lease.fence
