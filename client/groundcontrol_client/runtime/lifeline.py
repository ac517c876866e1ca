"""A wrapped command dies with its wrapper (`gctl run`, `gctl hold`), however the wrapper dies.

The command runs in a session, and so a process group, of its own: a signal to the group reaches
everything it started. Two things make its end certain when the wrapper dies, `kill -9` included:

1. On Linux, `PR_SET_PDEATHSIG` (SIGTERM): the kernel signals the command when the wrapper's
   thread that started it exits. This file, run as a script, is the exec shim that sets it
   before it execs the command (not `preexec_fn`, which runs Python between fork and exec in a
   process whose heartbeat thread may hold a lock the child then waits on forever). The shim
   checks that the wrapper is still its parent after `prctl`, since the wrapper may have died
   before the call, and reports a failed exec back on a close-on-exec pipe, so "could not start
   the command" stays an error of the wrapper's, as with a plain `Popen`.
2. Everywhere, a watchdog: this file run as a script again, in a session of its own, started
   before the command. It holds the read end of a pipe whose write end only the wrapper holds,
   so the pipe reaches EOF the moment the wrapper dies, by any means. Then the watchdog sends the
   command's group SIGTERM (and SIGCONT, for a paused one), SIGKILL after a short grace (the
   wrapper's `--kill-after`, at most `ORPHAN_GRACE_S`: with the wrapper gone nobody holds the
   lease, so a command that ignores SIGTERM must not run on for long), and removes the wrapper's
   temporary files (`gc-evidence-*`, `gc-checkpoint-*`). A wrapper that ends normally says
   `done` first (it has already stopped the group, and removes its own files), and the watchdog
   exits. Only the
   watchdog reaches the command's children (the death signal reaches the command alone), so the
   wrapper checks on it while the command runs (`Watchdog.keep`) and starts a new one for the
   same group and files if it died (an OOM kill, a stray `kill`): the cover never lapses.

Out of reach, by design: a process that leaves the group (`setsid`, `setpgid`), and a setuid
program (the kernel clears the death signal on its exec; the watchdog still signals its group).

The script runs as `python -I -S lifeline.py ...`: the standard library only, nothing of the
package, so it starts in a few milliseconds and cannot be broken by the agent's environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

SCRIPT = os.path.abspath(__file__)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
DEATH_SIGNAL = signal.SIGTERM  # the watchdog follows with SIGKILL after the grace
POLL_S = 0.05
# Once the wrapper is dead, the most the command's group gets between SIGTERM and SIGKILL.
ORPHAN_GRACE_S = 2.0


def _python() -> list[str]:
    # -I: ignore PYTHON* variables and the user's site; -S: no site-packages (stdlib only).
    return [sys.executable, "-I", "-S", SCRIPT]


def _linux() -> bool:
    return sys.platform.startswith("linux") and bool(sys.executable)


# --- the wrapper's side ----------------------------------------------------------------------


class Watchdog:
    """The wrapper's end of the watchdog: `watch(pgid)` once the command runs, `keep()` now and
    then while it runs, `done()` at a normal end. If the wrapper dies first, the watchdog stops
    the group and removes `remove`."""

    def __init__(self, *, grace_s: float, remove: Iterable[str] = ()) -> None:
        self.grace_s = float(grace_s)
        self.remove = list(remove)
        self.restarts = 0
        self._pgid: int | None = None
        self._ended = False
        self._write_end = -1
        self._start()

    def _start(self) -> None:
        read_end, write_end = os.pipe()  # both close-on-exec: no other child inherits them
        try:
            self.process = subprocess.Popen(
                [*_python(), "watch", str(read_end), repr(self.grace_s), *self.remove],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(read_end,),
                start_new_session=True,  # a Ctrl-C or hangup for the wrapper's group spares it
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._write_end = write_end
        if self._pgid is not None:
            # Into the pipe at once: a watchdog still starting reads it when it gets there.
            self._say(f"group {self._pgid}")

    def _say(self, line: str) -> None:
        if self._write_end < 0:
            return
        with contextlib.suppress(OSError):  # a watchdog gone already has nothing to hear
            os.write(self._write_end, line.encode() + b"\n")

    def announce_fd(self) -> int:
        """The pipe's write end, for the exec shim to say its group on before it runs the
        command (it closes its copy then: the wrapper's stays the only one); -1 if none."""
        return self._write_end

    def watch(self, pgid: int) -> None:
        self._pgid = pgid
        self._say(f"group {pgid}")

    def keep(self) -> bool:
        """If the watchdog died (nothing but a signal ends it before `done`), start a new one
        for the same group and files; True if it had to. Raises `OSError` if it cannot (the
        next call tries again)."""
        if self._ended or (self._write_end >= 0 and self.process.poll() is None):
            return False
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1
        self._start()
        self.restarts += 1
        return True

    def done(self, timeout: float = 5.0) -> None:
        """The wrapper ends normally: the group is already stopped; the watchdog exits."""
        if self._ended:
            return
        self._ended = True
        if self._write_end < 0:
            return
        self._say("done")
        os.close(self._write_end)
        self._write_end = -1
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def spawn(
    cmd: Sequence[str], env: dict[str, str], watchdog: Watchdog | None = None
) -> subprocess.Popen[bytes]:
    """Start `cmd` in a session of its own; on Linux through the shim that sets the death
    signal and, with a `watchdog`, tells it the command's group before the command runs (a
    wrapper killed between the command's start and its own word to the watchdog would leave
    the group unknown to it, and alive). Raises `OSError` when the command cannot be executed,
    like `Popen` does."""
    if not _linux():
        return subprocess.Popen(list(cmd), env=env, start_new_session=True)
    read_end, write_end = os.pipe()
    announce = watchdog.announce_fd() if watchdog is not None else -1
    try:
        proc = subprocess.Popen(
            [*_python(), "exec", str(write_end), str(os.getpid()), str(announce), "--", *cmd],
            env=env,
            pass_fds=(write_end,) if announce < 0 else (write_end, announce),
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    try:
        # EOF once the shim has exec'd (the pipe is close-on-exec); an errno if it could not.
        chunks = []
        while chunk := os.read(read_end, 512):
            chunks.append(chunk)
    finally:
        os.close(read_end)
    report = b"".join(chunks).decode(errors="replace")
    if report:
        proc.wait()
        number, _, message = report.partition(":")
        raise OSError(int(number) if number.isdigit() else 0, message, cmd[0])
    return proc


def group_alive(pgid: int) -> bool:
    """Whether any process is still in group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member that changed its user is still a member
    return True


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def end_group(pgid: int, grace_s: float, tick: Callable[[], object] | None = None) -> None:
    """SIGTERM (and SIGCONT) to the group, SIGKILL to what is left of it after `grace_s`;
    `tick` is called while it waits (the wrapper keeps its watchdog meanwhile)."""
    if not group_alive(pgid):
        return
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        if tick is not None:
            tick()
        time.sleep(POLL_S)
    signal_group(pgid, signal.SIGKILL)


# --- the script: the exec shim and the watchdog -------------------------------------------------


def _set_death_signal(signum: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _exec_shim(args: list[str]) -> int:
    """`exec FD PARENT ANNOUNCE -- CMD...`: tell the watchdog (on ANNOUNCE, -1 for none) this
    process's group, which CMD keeps, set the death signal, then become CMD."""
    report_fd, parent, announce, cmd = int(args[0]), int(args[1]), int(args[2]), args[4:]
    os.set_inheritable(report_fd, False)  # closed by a successful exec: EOF for the wrapper
    if announce >= 0:
        with contextlib.suppress(OSError):  # a watchdog gone: the wrapper starts a new one
            os.write(announce, f"group {os.getpgrp()}\n".encode())
        os.close(announce)  # the wrapper's end stays the only one: EOF when it dies
    with contextlib.suppress(OSError, AttributeError):
        _set_death_signal(DEATH_SIGNAL)  # without it, the watchdog alone
    if os.getppid() != parent:
        return 128 + DEATH_SIGNAL  # the wrapper died before prctl: the command never starts
    try:
        os.execvp(cmd[0], cmd)
    except OSError as error:
        os.write(report_fd, f"{error.errno}:{error.strerror}".encode())
    return 127


def _watch(args: list[str]) -> int:
    """`watch FD GRACE [PATH...]`: wait for the wrapper's end, then act as documented above."""
    fd, grace_s, paths = int(args[0]), float(args[1]), args[2:]
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    pgid, done, pending = None, False, b""
    while chunk := _read(fd):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            word, _, value = line.decode().partition(" ")
            if word == "group":
                pgid = int(value)
            elif word == "done":
                done = True
    if done:
        return 0  # the wrapper stopped the group and tidies up itself
    if pgid is not None:
        end_group(pgid, min(grace_s, ORPHAN_GRACE_S))
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return 0


def _read(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 512)
        except InterruptedError:
            continue
        except OSError:
            return b""


def main(argv: list[str]) -> int:
    if argv and argv[0] == "exec":
        return _exec_shim(argv[1:])
    if argv and argv[0] == "watch":
        return _watch(argv[1:])
    print("usage: lifeline.py exec FD PARENT -- CMD... | watch FD GRACE [PATH...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
