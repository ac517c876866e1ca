"""A wrapped command dies with its wrapper (issue 17, point 2): `kill -9` of `gctl run` or
`gctl hold` takes the command and everything it started in its group with it, within 3 s, and
leaves no `gc-evidence-*` file; and `gctl mcp` starts nothing that could outlive it."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from groundcontrol_client.core.identity import process_identity
from groundcontrol_client.runtime import lifeline
from mcp import Client as McpClient
from mcp import StdioServerParameters

from fleet.models import AttemptEnd
from tests.client.conftest import GCTL, PR_URL, Fleet, attempts_of, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The command: a background grandchild, a grandchild in a subshell, and the shell itself, each
# writing its pid, then waiting on them.
FAMILY = (
    "sleep 300 & echo $! >> {pids}; "
    "(sleep 300 & echo $! >> {pids}; wait) & "
    "echo $$ >> {pids}; "
    'echo "$GC_EVIDENCE_FILE" > {seen}; '
    "wait"
)


def alive(pid: int) -> bool:
    """Running, stopped or sleeping; a zombie (dead, not yet reaped by init) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


STRAYS: list[tuple[int, str]] = []


def stray(pid: int) -> None:
    STRAYS.append((pid, process_identity(pid)))


@pytest.fixture(autouse=True)
def _no_strays() -> Iterator[None]:
    """A test that fails must not leave its 300 s sleeps behind: kill what it started, each
    only if its pid still names the same process (same start time), never a reused pid."""
    yield
    for pid, identity in STRAYS:
        if alive(pid) and process_identity(pid) == identity:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    STRAYS.clear()


def read_pids(path: Path, count: int) -> list[int]:
    wait_for(lambda: path.exists() and len(path.read_text().split()) >= count, timeout=15)
    pids = [int(pid) for pid in path.read_text().split()]
    for pid in pids:
        stray(pid)
    return pids


def children_of(pid: int) -> list[int]:
    """Every descendant of `pid` (read from /proc: each thread's children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        for kid in kids:
            found += [kid, *children_of(kid)]
    return found


def start(gc: Fleet, tmp: Path, *args: str) -> subprocess.Popen[str]:
    # TMPDIR of the test's own: every gc-evidence-* file the wrapper makes lands there.
    wrapper = subprocess.Popen(
        [GCTL, *args],
        env=gc.env(TMPDIR=str(tmp)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stray(wrapper.pid)
    return wrapper


def kill_9(wrapper: subprocess.Popen[str]) -> float:
    os.kill(wrapper.pid, signal.SIGKILL)
    wrapper.wait(5)
    return time.monotonic()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    path = tmp_path / "tmp"
    path.mkdir()
    return path


def test_it_takes_the_command_and_its_grandchildren_when_gctl_run_is_killed(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    run = gc.run()
    pids, seen = tmp_path / "pids", tmp_path / "seen"
    wrapper = start(
        gc, tmp, "run", "--run", str(run.pk), "--", "sh", "-c", FAMILY.format(pids=pids, seen=seen)
    )
    family = read_pids(pids, 3)
    wait_for(lambda: seen.exists() and seen.read_text().strip())
    evidence_file = Path(seen.read_text().strip())
    assert evidence_file.parent == tmp and evidence_file.name.startswith("gc-evidence-")
    assert evidence_file.exists()
    assert all(map(alive, family))

    killed_at = kill_9(wrapper)
    wait_for(lambda: not any(map(alive, family)), timeout=3)
    assert time.monotonic() - killed_at < 3
    wait_for(lambda: not list(tmp.glob("gc-evidence-*")), timeout=3)
    # No release was possible: the slot stays held until its interval and grace run out.
    (record,) = attempts_of(run)
    assert record.end in (None, AttemptEnd.LOST)


def test_it_takes_the_command_and_its_grandchildren_when_gctl_hold_is_killed(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    pids, seen = tmp_path / "pids", tmp_path / "seen"
    wrapper = start(
        gc, tmp, "hold", "src/auth/", "--ttl", "30", "--", "sh", "-c",
        FAMILY.format(pids=pids, seen=seen),
    )  # fmt: skip
    family = read_pids(pids, 3)
    assert all(map(alive, family))
    killed_at = kill_9(wrapper)
    wait_for(lambda: not any(map(alive, family)), timeout=3)
    assert time.monotonic() - killed_at < 3


def test_it_kills_what_ignores_sigterm_after_the_grace(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    run = gc.run()
    pids = tmp_path / "pids"
    # An ignored SIGTERM stays ignored across fork and exec: the shell and its sleep both shrug
    # it off, the death signal included; only the watchdog's SIGKILL ends them.
    script = f"trap '' TERM; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    wrapper = start(
        gc, tmp, "run", "--run", str(run.pk), "--kill-after", "1", "--", "sh", "-c", script
    )
    family = read_pids(pids, 2)
    killed_at = kill_9(wrapper)
    time.sleep(0.5)
    assert all(map(alive, family))  # SIGTERM did nothing: still in the grace
    wait_for(lambda: not any(map(alive, family)), timeout=3)
    assert 1.0 <= time.monotonic() - killed_at < 3


def test_it_stops_what_the_command_left_running_when_it_exits(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    run = gc.run()
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $! >> {pids}; echo pull_request={PR_URL} >> $GC_EVIDENCE_FILE"
    wrapper = start(gc, tmp, "run", "--run", str(run.pk), "--", "sh", "-c", script)
    assert wrapper.wait(30) == 0, wrapper.communicate()[1]
    (leftover,) = read_pids(pids, 1)
    # Stopped before the attempt was finished: nothing of the command outlives the lease.
    assert not alive(leftover)
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.FINISHED
    assert not list(tmp.glob("gc-evidence-*"))


def test_it_still_reports_a_command_that_cannot_be_started(gc: Fleet, tmp: Path) -> None:
    run = gc.run()
    missing = start(gc, tmp, "run", "--run", str(run.pk), "--", str(tmp / "no-such-command"))
    assert missing.wait(30) == 127
    (record,) = attempts_of(run)
    assert record.end_reason.startswith("could not start the command: [Errno 2] ")
    assert not list(tmp.glob("gc-evidence-*"))


def test_the_shim_never_starts_a_command_whose_wrapper_is_already_gone(tmp_path: Path) -> None:
    # The race the getppid() check closes: the wrapper died before prctl ran, so the shim's
    # parent is no longer the pid it was given (here: a pid that is not its parent).
    marker = tmp_path / "ran"
    read_end, write_end = os.pipe()
    shim = subprocess.run(
        [sys.executable, "-I", "-S", lifeline.SCRIPT, "exec", str(write_end), "1", "-1", "--",
         "touch", str(marker)],
        pass_fds=(write_end,),
        timeout=10,
    )  # fmt: skip
    os.close(write_end)
    os.close(read_end)
    assert shim.returncode == 128 + signal.SIGTERM
    assert not marker.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_kernel_ends_the_command_even_when_the_watchdog_is_gone_too(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    pid_file = tmp_path / "pid"
    wrapper = start(
        gc, tmp, "hold", "lock", "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 300"
    )
    (pid,) = read_pids(pid_file, 1)
    # The shim exec'd in place: the command is the process the wrapper started, leading a
    # session and group of its own.
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid
    assert pid in children_of(wrapper.pid)
    (watchdog,) = [p for p in children_of(wrapper.pid) if b"watch" in cmdline(p)]
    os.kill(watchdog, signal.SIGKILL)
    kill_9(wrapper)
    # Only the death signal set before exec is left to end it.
    wait_for(lambda: not alive(pid), timeout=3)


def group_of(pids: Path, script: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A command in a session and group of its own, as `lifeline.spawn` starts it: a shell
    and a background sleep, each writing its pid."""
    shell = subprocess.Popen(["sh", "-c", script.format(pids=pids)], start_new_session=True)
    stray(shell.pid)
    return shell, read_pids(pids, 2)


def test_a_watchdog_that_died_is_replaced_for_the_same_group_and_files(tmp_path: Path) -> None:
    """Only the watchdog reaches the command's children: one that died (an OOM kill, a stray
    kill) is started again by `keep()`, with the group and the files to remove, so a wrapper
    that dies next still takes them with it."""
    shell, family = group_of(
        tmp_path / "pids", "sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    )
    evidence = tmp_path / "gc-evidence-1.txt"
    evidence.touch()
    watchdog = lifeline.Watchdog(grace_s=10, remove=[str(evidence)])
    watchdog.watch(shell.pid)
    assert watchdog.keep() is False  # alive: nothing to do
    first = watchdog.process
    first.kill()
    first.wait(5)
    assert watchdog.keep() is True and watchdog.restarts == 1
    stray(watchdog.process.pid)
    assert watchdog.process.pid != first.pid and watchdog.keep() is False
    # The wrapper dies: its end of the pipe closes without a `done`.
    os.close(watchdog._write_end)
    wait_for(lambda: not any(map(alive, family)), timeout=3)
    wait_for(lambda: not evidence.exists(), timeout=3)
    assert watchdog.process.wait(5) == 0
    shell.wait(5)


def test_the_watchdog_kills_a_group_that_ignores_sigterm_within_2_s_of_the_wrappers_death(
    tmp_path: Path,
) -> None:
    """With the wrapper dead nobody holds the lease: however long `--kill-after` is, the group
    gets at most `ORPHAN_GRACE_S` (2 s) between SIGTERM and SIGKILL."""
    script = "trap '' TERM; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    shell, family = group_of(tmp_path / "pids", script)
    watchdog = lifeline.Watchdog(grace_s=10, remove=[])
    stray(watchdog.process.pid)
    watchdog.watch(shell.pid)
    time.sleep(0.2)  # the watchdog has read the group
    died_at = time.monotonic()
    os.close(watchdog._write_end)
    time.sleep(0.5)
    assert all(map(alive, family))  # SIGTERM ignored: still inside the grace
    wait_for(lambda: not any(map(alive, family)), timeout=3)
    assert lifeline.ORPHAN_GRACE_S - 0.1 <= time.monotonic() - died_at < 3
    watchdog.process.wait(5)
    shell.wait(5)


def test_gctl_run_replaces_a_dead_watchdog_and_says_so(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    run = gc.run()
    pids = tmp_path / "pids"
    wrapper = start(
        gc,
        tmp,
        "run",
        "--run",
        str(run.pk),
        "--",
        "sh",
        "-c",
        FAMILY.format(pids=pids, seen=tmp_path / "seen"),
    )
    family = read_pids(pids, 3)
    (watchdog,) = [p for p in children_of(wrapper.pid) if b"watch" in cmdline(p)]
    os.kill(watchdog, signal.SIGKILL)

    def replaced() -> list[int]:
        return [p for p in children_of(wrapper.pid) if b"watch" in cmdline(p) and p != watchdog]

    wait_for(lambda: bool(replaced()), timeout=3)
    for pid in replaced():
        stray(pid)
    killed_at = kill_9(wrapper)
    # The replacement, a process just started, ends the family as the first one would: SIGTERM
    # when it hears the wrapper die, SIGKILL after at most the grace. Allowed: the grace and what
    # two loaded cores take to start it and schedule it (3 s in all failed under two CI runs).
    allowed = lifeline.ORPHAN_GRACE_S + 5
    wait_for(lambda: not any(map(alive, family)), timeout=allowed)
    assert time.monotonic() - killed_at < allowed
    assert "the watchdog died; started a new one" in wrapper.stderr.read()
    assert not list(tmp.glob("gc-evidence-*"))


def test_grandchildren_die_with_the_wrapper_even_when_its_watchdog_died_first(
    gc: Fleet, tmp_path: Path, tmp: Path
) -> None:
    """'Make its death certain when the wrapper dies by any means': only the watchdog reaches
    grandchildren (the death signal reaches the command alone), and nothing watches the
    watchdog. Once it is gone (an OOM kill, a `kill -9` of the wrong pid, a sweep of stray
    python processes) the wrapper carries on as if covered, and a later `kill -9` of the
    wrapper leaves the command's children running with no lease."""
    run = gc.run()
    pids = tmp_path / "pids"
    wrapper = start(
        gc, tmp, "run", "--run", str(run.pk), "--kill-after", "1", "--",
        "sh", "-c", FAMILY.format(pids=pids, seen=tmp_path / "seen"),
    )  # fmt: skip
    family = read_pids(pids, 3)
    (watchdog,) = [p for p in children_of(wrapper.pid) if b"watch" in cmdline(p)]
    os.kill(watchdog, signal.SIGKILL)
    time.sleep(0.5)
    killed_at = kill_9(wrapper)
    # Ended by the kernel's death signal or a replaced watchdog, whichever was there: allowed
    # the grace and what two loaded cores take to start and schedule a replacement, as above.
    allowed = lifeline.ORPHAN_GRACE_S + 5
    wait_for(lambda: not any(map(alive, family)), timeout=allowed)
    assert time.monotonic() - killed_at < allowed
    assert [pid for pid in family if alive(pid)] == []


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def test_gctl_mcp_starts_no_process_and_leaves_nothing_when_killed(gc: Fleet, tmp: Path) -> None:
    """The MCP server's background work is threads in its own process (one heartbeat thread per
    claim and lease): killed, nothing of it remains (the server ends the tenures by itself)."""
    run = gc.run()
    params = StdioServerParameters(
        command=GCTL, args=["mcp"], env={"GC_URL": gc.url, "GC_KEY": gc.key_a, "TMPDIR": str(tmp)}
    )
    seen: dict[str, object] = {}

    async def session() -> None:
        with contextlib.suppress(Exception):
            async with McpClient(params) as client:
                claimed = await client.call_tool("claim", {"run_id": run.pk})
                leased = await client.call_tool("acquire_lease", {"resource": "src/auth/"})
                seen["ok"] = not claimed.is_error and not leased.is_error
                (server,) = [p for p in children_of(os.getpid()) if b"mcp" in cmdline(p)]
                seen["server"], seen["children"] = server, children_of(server)
                os.kill(server, signal.SIGKILL)
                await anyio.sleep(0.5)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, session).result(timeout=60)
    assert seen["ok"] is True
    assert seen["children"] == []
    assert not alive(int(seen["server"]))  # type: ignore[call-overload]
    assert not list(tmp.iterdir())
    (record,) = attempts_of(run)
    assert record.end is None  # nothing could release it: the server ends it by itself


WRAPPER_KILLED_EARLY = """
import os, signal, sys
from groundcontrol_client.runtime import lifeline

# A wrapper killed the moment its command runs: before its own word to the watchdog.
pids = sys.argv[1]
watchdog = lifeline.Watchdog(grace_s=1.0)
script = f"trap '' TERM; sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
lifeline.spawn(["sh", "-c", script], dict(os.environ), watchdog)
while not (os.path.exists(pids) and len(open(pids).read().split()) >= 2):
    pass
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_wrapper_killed_before_it_names_the_group_still_leaves_no_orphan(
    tmp_path: Path,
) -> None:
    """The shim tells the watchdog the command's group before it runs the command, so no
    moment is left in which the wrapper's death orphans it (a CI run under load found one)."""
    pids = tmp_path / "pids"
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER_KILLED_EARLY, str(pids)])
    stray(wrapper.pid)
    assert wrapper.wait(30) == -signal.SIGKILL
    family = read_pids(pids, 2)
    wait_for(lambda: not any(map(alive, family)), timeout=15)
