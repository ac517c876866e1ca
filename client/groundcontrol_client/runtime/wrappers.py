"""`gctl run` and `gctl hold`: hold a lease while a command runs, so the command never has to.

The command runs in a process group of its own, so stopping it stops everything it started, and
it dies with the wrapper however the wrapper dies (`lifeline`: the death signal on Linux and a
watchdog everywhere). What it leaves running in its group when it exits is stopped too: nothing
of it outlives the lease. The wrapper watches four things several times a second: the
command's exit, the lease (lost), the supervisor's directive (stop, pause, continue), and its
watchdog (a dead one is replaced at once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from groundcontrol_client.core.checkpoints import checkpoint_problem, checkpoint_text
from groundcontrol_client.core.errors import EvidenceMissing, GroundControlError, ValidationFailed
from groundcontrol_client.core.models import Evidence
from groundcontrol_client.runtime import lifeline
from groundcontrol_client.runtime.hand import ClaimedAttempt, HeldLease

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_DENIED = 3
EXIT_LOST = 4
EXIT_AUTH = 5
EXIT_STOPPED = 6
EXIT_CANNOT_RUN = 127  # as a shell says of a command it cannot find or execute
POLL_S = 0.1
AWAIT_CI_POLL_S = 5.0


@dataclass
class Outcome:
    """How a wrapped command ended, for the exit code and the `--json` line."""

    exit_code: int
    status: str  # finished | released | failed | lost | stopped | interrupted
    detail: dict[str, Any] = field(default_factory=dict)


class _Child:
    """The wrapped command, in its own process group, with signals forwarded to it, and a
    watchdog that ends the group (and removes `remove`) if the wrapper dies before `close()`."""

    def __init__(
        self,
        cmd: Sequence[str],
        env: dict[str, str],
        kill_after_s: float,
        remove: Sequence[str],
        log: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.kill_after_s = kill_after_s
        self.log = log or (lambda text, data: eprint(f"gctl: {text}"))
        self._watchdog_failing = False
        self.interrupted: int | None = None
        self.paused = False
        self.watchdog = lifeline.Watchdog(grace_s=kill_after_s, remove=remove)
        try:
            self.proc = lifeline.spawn(cmd, env, self.watchdog)
        except BaseException:
            self.watchdog.done()
            raise
        self.watchdog.watch(self.proc.pid)

    def _signal(self, signum: int) -> None:
        lifeline.signal_group(self.proc.pid, signum)

    def keep_watchdog(self) -> None:
        """A watchdog that died (an OOM kill, a stray `kill`) is replaced at once: only it
        reaches the command's children if the wrapper dies next."""
        try:
            if self.watchdog.keep():
                self.log(
                    "the watchdog died; started a new one (the command still dies with this "
                    "wrapper)",
                    {"watchdog": "restarted", "pid": self.watchdog.process.pid},
                )
        except OSError as error:  # tried again on the next poll; said once
            if not self._watchdog_failing:
                self.log(
                    f"the watchdog died and could not be started again yet: {error}",
                    {"watchdog": "dead", "error": str(error)},
                )
            self._watchdog_failing = True
        else:
            self._watchdog_failing = False

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[None]:
        """SIGINT and SIGTERM to the wrapper stop the command too (it has its own group, so a
        Ctrl-C at the terminal would not reach it otherwise)."""

        def forward(signum: int, frame: FrameType | None) -> None:
            self.interrupted = signum

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def pause(self, paused: bool) -> None:
        if paused != self.paused:
            self._signal(signal.SIGSTOP if paused else signal.SIGCONT)
            self.paused = paused

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after `kill_after_s`; the command's exit status."""
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)  # a paused command cannot handle SIGTERM
        deadline = time.monotonic() + self.kill_after_s
        while (returncode := self.proc.poll()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._signal(signal.SIGKILL)
                return self.proc.wait()
            self.keep_watchdog()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(min(POLL_S, remaining))
        return returncode

    def close(self) -> None:
        """The command has ended: stop what it left running in its group (SIGTERM, SIGKILL
        after `kill_after_s`), then tell the watchdog the wrapper ends normally."""
        if self.proc.poll() is None:
            self.stop()
        lifeline.end_group(self.proc.pid, self.kill_after_s, tick=self.keep_watchdog)
        self.watchdog.done()


def exit_status(returncode: int) -> int:
    """A shell's view: a command killed by signal N exited 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_status(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {-returncode} ({signal.Signals(-returncode).name})"
    return f"exit status {returncode}"


def read_evidence(path: Path) -> list[Evidence]:
    """One `kind=url` a line; blank lines and `#` comments are skipped."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [Evidence.parse(line) for line in lines if line.strip() and not line.startswith("#")]


def _watch(
    child: _Child, tenure: ClaimedAttempt | HeldLease, on_directive: Callable[[], str | None]
) -> str | None:
    """Wait for the command; stop it early if the tenure is lost, the directive says stop, or
    the wrapper is interrupted. The reason it was stopped, or None if it exited by itself."""
    while child.proc.poll() is None:
        child.keep_watchdog()
        if child.interrupted is not None:
            return "interrupted"
        if tenure.lost:
            return "lost"
        if on_directive() == "stop":
            return "stopped"
        time.sleep(POLL_S)
    return None


@contextlib.contextmanager
def _wrapper_file(
    env: dict[str, str], variable: str, prefix: str, suffix: str
) -> Iterator[tuple[Path, bool]]:
    """The file named by `variable` (GC_EVIDENCE_FILE, GC_CHECKPOINT_FILE), or a fresh temporary
    one removed afterwards (by the watchdog, if the wrapper dies first); and whether it is the
    temporary one."""
    if env.get(variable):
        yield Path(env[variable]), False
        return
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(fd)
    try:
        yield Path(name), True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


class CheckpointFile:
    """$GC_CHECKPOINT_FILE: the inherited checkpoint, written for the command before it starts
    (JSON, or empty when there is none), and the command's own, reported when it changes the
    file: on the attempt's next heartbeat (`core.keeping.CheckpointSource`), and before the
    attempt is finished or released.

    The file is read whole each time a heartbeat asks; what the command has not changed since
    it was written or last reported is not sent again. Empty is no checkpoint. A file that is
    not JSON, or over the `checkpoint_bytes` limit, or holds a NUL or a lone surrogate (the
    server would refuse the heartbeat that carried it) is said once in the log and not sent."""

    def __init__(
        self, path: Path, inherited: Any, log: Callable[[str, dict[str, Any]], None]
    ) -> None:
        self.path = path
        self.log = log
        text = "" if inherited is None else checkpoint_text(inherited) + "\n"
        path.write_text(text, encoding="utf-8")
        # The content last written or reported, the content a heartbeat is carrying, and the
        # content last found unfit (said once).
        self._known = text.encode()
        self._pending = self._known
        self._refused: bytes | None = None

    def due(self) -> Any:
        try:
            content = self.path.read_bytes()
        except OSError:
            return None  # removed or unreadable: nothing new to say
        if content == self._known or content == self._refused or not content.strip():
            return None
        problem, value = checkpoint_problem(content)
        if problem is not None:
            self._refused = content
            self.log(
                f"$GC_CHECKPOINT_FILE is not reported: {problem}",
                {"checkpoint": "refused", "reason": problem},
            )
            return None
        self._pending = content
        return value

    def reported(self, checkpoint: Any) -> None:
        self._known = self._pending


def _report_checkpoint(attempt: ClaimedAttempt, log: Callable[[str, dict[str, Any]], None]) -> None:
    """The command's last checkpoint, reported before the attempt ends, if it changed since the
    last heartbeat; a refusal is logged, never a reason not to end the attempt."""
    if attempt.lost:
        return  # nobody may report on the tenure any more
    try:
        attempt.report_due_checkpoint()
    except GroundControlError as error:
        log(
            f"the last checkpoint was not reported: {error}",
            {"checkpoint": "failed", "error": error.to_dict()},
        )


def _stop_reason(child: _Child, why: str, tenure_error: GroundControlError | None) -> str:
    if why == "interrupted":
        return f"interrupted by {signal.Signals(child.interrupted or signal.SIGTERM).name}"
    if why == "stopped":
        return "stopped by the supervisor's directive"
    return f"lease lost: {tenure_error}"


def run_claimed(
    attempt: ClaimedAttempt,
    cmd: Sequence[str],
    *,
    kill_after_s: float,
    log: Callable[[str, dict[str, Any]], None],
    wait: float | None = None,
    await_ci_s: float = 0.0,
) -> Outcome:
    """`gctl run`: run `cmd` under the attempt and end the attempt. An attempt not claimed yet
    is claimed here (and logged), waiting up to `wait` seconds for an open slot."""
    if not attempt.claimed:
        if wait is not None:
            attempt.wait = wait
        attempt.open()
        log(
            f"claimed run {attempt.run_id} slot {attempt.slot} "
            f"(attempt {attempt.id}, fence {attempt.fence})",
            {"attempt": attempt.id, "fence": attempt.fence, "slot": attempt.slot},
        )
        origin = attempt.checkpoint_from
        if attempt.inherited_checkpoint is not None and origin is not None:
            log(
                f"resuming from the checkpoint of attempt {origin.attempt} ({origin.end}) in "
                "$GC_CHECKPOINT_FILE",
                {"checkpoint_from": origin.raw},
            )
    env = dict(os.environ)
    with (
        _wrapper_file(env, "GC_EVIDENCE_FILE", "gc-evidence-", ".txt") as (
            evidence_path,
            temporary,
        ),
        _wrapper_file(env, "GC_CHECKPOINT_FILE", "gc-checkpoint-", ".json") as (
            checkpoint_path,
            checkpoint_temporary,
        ),
    ):
        env.update(
            GC_ATTEMPT=str(attempt.id),
            GC_ATTEMPT_FENCE=str(attempt.fence),
            GC_RUN=str(attempt.run_id),
            GC_SLOT=str(attempt.slot),
            GC_EVIDENCE_FILE=str(evidence_path),
            GC_CHECKPOINT_FILE=str(checkpoint_path),
        )
        # The wrapper, not the command, speaks for the claim's process identity.
        env.pop("GC_PROCESS_ID", None)
        removed = [str(evidence_path)] if temporary else []
        removed += [str(checkpoint_path)] if checkpoint_temporary else []
        try:
            attempt.checkpoints = CheckpointFile(checkpoint_path, attempt.inherited_checkpoint, log)
        except OSError as error:
            reason = f"could not write $GC_CHECKPOINT_FILE: {error}"
            attempt.release_quietly(reason)
            return Outcome(EXIT_ERROR, "released", {"reason": reason})
        try:
            child = _Child(cmd, env, kill_after_s, removed, log)
        except OSError as error:
            reason = f"could not start the command: {error}"
            attempt.release_quietly(reason)
            return Outcome(EXIT_CANNOT_RUN, "released", {"reason": reason})
        try:
            return _run_child(attempt, child, evidence_path, log, await_ci_s)
        finally:
            child.close()
            attempt.checkpoints = None


def _run_child(
    attempt: ClaimedAttempt,
    child: _Child,
    evidence_path: Path,
    log: Callable[[str, dict[str, Any]], None],
    await_ci_s: float = 0.0,
) -> Outcome:
    def directive() -> str | None:
        child.pause(attempt.directive == "pause")
        return attempt.directive

    with child.forwarding():
        why = _watch(child, attempt, directive)
        if why is not None:
            returncode = child.stop()
            child.close()
            reason = _stop_reason(child, why, attempt.lost_error)
            _report_checkpoint(attempt, log)
            released = attempt.release_quietly(reason)
            log(f"{reason}; the command was stopped", {"reason": reason, "released": released})
            code = {"lost": EXIT_LOST, "stopped": EXIT_STOPPED}.get(
                why, exit_status(-(child.interrupted or signal.SIGTERM))
            )
            return Outcome(code, why, {"reason": reason, "returncode": returncode})
    returncode = child.proc.returncode
    child.close()  # nothing it started outlives it: then the attempt ends
    _report_checkpoint(attempt, log)
    if attempt.lost:
        reason = f"lease lost: {attempt.lost_error}"
        attempt.release_quietly(reason)
        return Outcome(EXIT_LOST, "lost", {"reason": reason, "returncode": returncode})
    if returncode != 0:
        reason = f"the command failed: {describe_status(returncode)}"
        attempt.release_quietly(reason)
        return Outcome(exit_status(returncode), "released", {"reason": reason})
    try:
        evidence = read_evidence(evidence_path)
    except ValueError as error:
        attempt.release_quietly(f"unreadable evidence file: {error}")
        return Outcome(EXIT_ERROR, "released", {"reason": str(error)})
    # The wrapper saw the command exit 0 and read what it wrote: the finish says so (the
    # server takes the client's word; only an attestation makes evidence `ci`).
    attempt.observed_by = "wrapper"
    try:
        _finish_awaiting_ci(attempt, evidence, await_ci_s, log)
    except (EvidenceMissing, ValidationFailed) as error:
        attempt.release_quietly(f"finish refused: {error}")
        raise
    return Outcome(
        EXIT_OK,
        "finished",
        {"evidence": [e.to_wire() for e in evidence], "attempt": attempt.id},
    )


def _finish_awaiting_ci(
    attempt: ClaimedAttempt,
    evidence: list[Evidence],
    await_ci_s: float,
    log: Callable[[str, dict[str, Any]], None],
) -> None:
    """Finish; while the finish is refused only because CI has not attested the evidence yet,
    try again every AWAIT_CI_POLL_S for up to `await_ci_s` seconds (heartbeats go on)."""
    give_up = time.monotonic() + await_ci_s
    while True:
        try:
            attempt.finish(evidence)
            return
        except EvidenceMissing as error:
            needed = error.get("grades_needed")
            waiting = (
                isinstance(needed, dict)
                and "ci" in needed.values()
                and set(error.get("missing") or []) <= set(needed)
            )
            left = give_up - time.monotonic()
            if not waiting or left <= 0:
                raise
            log(
                f"attempt {attempt.id}: waiting up to {left:.0f} s for CI to attest: "
                f"{error.message}",
                {"status": "awaiting_ci", "error": error.to_dict()},
            )
            time.sleep(min(AWAIT_CI_POLL_S, left))


def hold_lease(
    lease: HeldLease,
    cmd: Sequence[str],
    *,
    kill_after_s: float,
    log: Callable[[str, dict[str, Any]], None],
) -> Outcome:
    """`gctl hold`: the lease is already acquired; run `cmd` while it is held. A pool's member
    is also exported as GC_MEMBER (and its pool as GC_POOL)."""
    env = dict(os.environ, GC_RESOURCE=lease.resource, GC_FENCE=str(lease.fence))
    member, pool = lease.lease.member, lease.lease.pool
    if member is not None:
        env.update(GC_MEMBER=member, GC_POOL=pool or "")
    else:  # never a member the parent held
        env.pop("GC_MEMBER", None)
        env.pop("GC_POOL", None)
    env.pop("GC_PROCESS_ID", None)
    try:
        child = _Child(cmd, env, kill_after_s, [], log)
    except OSError as error:
        lease.release()
        return Outcome(EXIT_CANNOT_RUN, "released", {"reason": f"could not start: {error}"})
    try:
        return _hold_child(lease, child, log)
    finally:
        child.close()


def _hold_child(
    lease: HeldLease, child: _Child, log: Callable[[str, dict[str, Any]], None]
) -> Outcome:
    with child.forwarding():
        why = _watch(child, lease, lambda: None)
        if why is not None:
            returncode = child.stop()
            child.close()
            reason = _stop_reason(child, why, lease.lost_error)
            lease.release_quietly()
            log(f"{reason}; the command was stopped", {"reason": reason})
            code = (
                EXIT_LOST if why == "lost" else exit_status(-(child.interrupted or signal.SIGTERM))
            )
            return Outcome(code, why, {"reason": reason, "returncode": returncode})
    returncode = child.proc.returncode
    child.close()
    lost = lease.lost
    if lost:
        lease.release_quietly()
        reason = f"lease lost: {lease.lost_error}"
        return Outcome(EXIT_LOST, "lost", {"reason": reason, "returncode": returncode})
    lease.release()  # refused though the client thought it held: the main handler says why
    status = "released" if returncode == 0 else "failed"
    return Outcome(exit_status(returncode), status, {"returncode": returncode})


def eprint(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
