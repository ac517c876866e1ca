"""What one `gctl mcp` session holds: its claims and resource leases (renewed in the background
by the runtime), what it lost, and the notices the model has not been told yet."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from groundcontrol_client.core.errors import GroundControlError, LeaseHeld
from groundcontrol_client.core.models import Lease
from groundcontrol_client.http import Client
from groundcontrol_client.runtime.hand import ClaimedAttempt, HeldLease

# One logger for the whole MCP server (the tools log through it too).
logger = logging.getLogger("groundcontrol_client.mcp")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class LostClaim:
    run_id: int
    attempt_id: int
    at: datetime
    why: str

    def sentence(self) -> str:
        return (
            f"your claim on run {self.run_id} (attempt {self.attempt_id}) was lost at "
            f"{_at(self.at)}; claim again only if the work is still needed."
        )


@dataclass(frozen=True)
class LostLease:
    resource: str
    at: datetime
    why: str

    def sentence(self) -> str:
        return (
            f"your lease on {self.resource} was lost at {_at(self.at)}; acquire it again only "
            "if you still need it, and check first what changed meanwhile."
        )


class WriteRefused(Exception):
    """A write's lease on `name` was refused (`error`); what the write had taken went back."""

    def __init__(self, name: str, error: GroundControlError) -> None:
        super().__init__(name, error)
        self.name = name
        self.error = error


class Session:
    """What one MCP session holds, what it lost, and the notices the model has not seen yet."""

    def __init__(self, client: Client, *, process_id: str) -> None:
        self.client = client
        self.process_id = process_id
        self.lock = threading.RLock()
        self.attempts: dict[int, ClaimedAttempt] = {}
        self.leases: dict[str, HeldLease] = {}
        self.lost_claims: dict[int, LostClaim] = {}
        self.lost_leases: dict[str, LostLease] = {}
        # A waited-for name's place in line, from its denial: the next acquire is served from it.
        self.tickets: dict[str, int] = {}
        self._directives: dict[int, str] = {}
        self._pending: list[str] = []
        # Runs with a claim in flight (how many), so a second claim waits for none of them.
        self._claiming: dict[int, int] = {}

    @contextlib.contextmanager
    def reserving(self, run_id: int, another_slot: bool) -> Iterator[None]:
        """Reserve `run_id` for one claim: refused (`LookupError`, a sentence) while this
        session holds a slot of it or is claiming one, unless `another_slot`."""
        with self.lock:
            if not another_slot:
                mine = [a for a in self.attempts.values() if a.run_id == run_id]
                if mine:
                    held = mine[0]
                    raise LookupError(
                        f"You already hold slot {held.slot} of run {run_id} (attempt "
                        f"{held.id}): work on that one. Claim another slot of the same run only "
                        "if the brief asks for it (another_slot: true)."
                    )
                if self._claiming.get(run_id):
                    raise LookupError(
                        f"This session is claiming a slot of run {run_id} already (another "
                        "call, still waiting for its answer): wait for it, then work on that "
                        "slot. Claim another slot of the same run only if the brief asks for it "
                        "(another_slot: true)."
                    )
            self._claiming[run_id] = self._claiming.get(run_id, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self._claiming[run_id] -= 1
                if not self._claiming[run_id]:
                    del self._claiming[run_id]

    def observe(self) -> None:
        """Move what was lost out of what the session holds, with the time it learned so (the
        server has ended it by then, or will before anyone else could claim it), and queue a
        notice for each loss and each changed directive."""
        now = datetime.now(UTC)
        with self.lock:
            for attempt_id, attempt in list(self.attempts.items()):
                if attempt.lost:
                    del self.attempts[attempt_id]
                    why = attempt.lost_error.message if attempt.lost_error else "lost"
                    lost = LostClaim(attempt.run_id, attempt_id, now, why)
                    self.lost_claims[attempt_id] = lost
                    self._pending.append(
                        f"NOTICE: {_cap(lost.sentence())} ({why}.) Stop working on it: "
                        "the slot may already be someone else's."
                    )
                    continue
                self._handoff_notices(attempt)
                directive = attempt.directive
                if directive != self._directives.get(attempt_id, "continue"):
                    self._directives[attempt_id] = directive
                    self._pending.append(
                        {
                            "stop": f"NOTICE: the supervisor says stop attempt {attempt_id}: "
                            "release it with a reason and stop working on it.",
                            "pause": f"NOTICE: the supervisor says pause attempt {attempt_id}: "
                            "wait (your claim is kept alive) and check `status` again later.",
                            "continue": f"NOTICE: the supervisor says continue attempt "
                            f"{attempt_id}.",
                        }.get(directive, f"NOTICE: attempt {attempt_id} directive: {directive}")
                    )
            for resource, lease in list(self.leases.items()):
                if lease.lost:
                    del self.leases[resource]
                    why = lease.lost_error.message if lease.lost_error else "lost"
                    gone = LostLease(resource, now, why)
                    self.lost_leases[resource] = gone
                    self._pending.append(
                        f"NOTICE: {_cap(gone.sentence())} ({why}.) Do not write to it any more."
                    )
                    continue
                self._handoff_notices(lease)

    def _handoff_notices(self, held: ClaimedAttempt | HeldLease) -> None:
        """Each handoff request for what the session holds, said once (call under the lock)."""
        for line in held.handoffs.take():
            self._pending.append(
                f"NOTICE: {_cap(line)}. Release it if you can spare it; else decline with a "
                "reason (decline_handoff)."
            )

    def notify(self, line: str) -> None:
        """Queue a notice for the top of the next answer (said once)."""
        with self.lock:
            self._pending.append(line)

    def notices(self) -> list[str]:
        """Lost leases and changed directives since the last answer (each said once)."""
        self.observe()
        with self.lock:
            lines, self._pending = self._pending, []
        return lines

    def attempt(self, attempt_id: int | None) -> ClaimedAttempt:
        self.observe()
        with self.lock:
            if attempt_id is not None:
                if attempt_id in self.attempts:
                    return self.attempts[attempt_id]
                if attempt_id in self.lost_claims:
                    raise LookupError(_cap(self.lost_claims[attempt_id].sentence()))
                raise LookupError(f"This session holds no attempt {attempt_id}.")
            if len(self.attempts) == 1:
                return next(iter(self.attempts.values()))
            if self.attempts:
                ids = ", ".join(map(str, self.attempts))
                raise LookupError(f"This session holds several attempts ({ids}): say which.")
            if self.lost_claims:
                latest = max(self.lost_claims.values(), key=lambda lost: lost.at)
                raise LookupError(_cap(latest.sentence()))
            raise LookupError("This session holds no claim: claim a slot first.")

    def lease(self, resource: str) -> HeldLease:
        self.observe()
        with self.lock:
            if resource in self.leases:
                return self.leases[resource]
            if resource in self.lost_leases:
                raise LookupError(_cap(self.lost_leases[resource].sentence()))
            raise LookupError(f"This session holds no lease on {resource}.")

    def hold(
        self,
        resource: str,
        *,
        ttl_s: float,
        wait_s: float | None = None,
        shared: bool = False,
        take_over: bool = False,
    ) -> tuple[HeldLease, bool]:
        """The session's lease on `resource`: the one it holds already (and False), else a new
        one, taken now and kept alive in the background until it is released or the session
        ends (and True). A denial raises, as the acquire does (`LeaseHeld`)."""
        with self.lock:
            held = self.leases.get(resource)
        if held is not None:
            return held, False
        with self.lock:
            ticket = self.tickets.pop(resource, None)
        lease = HeldLease(
            self.client,
            resource,
            ttl_s=ttl_s,
            process_id=self.process_id,
            wait_s=wait_s,
            mode="shared" if shared else None,
            take_over=take_over,
            ticket=ticket,
        )
        try:
            lease.open()
        except LeaseHeld as denied:
            kept = denied.get("ticket")
            if isinstance(kept, int):
                with self.lock:
                    self.tickets[resource] = kept  # the model asks again: from this place
            raise
        with self.lock:
            self.leases[resource] = lease
            self.lost_leases.pop(resource, None)
        return lease, True

    def take_for_write(self, names: list[str], *, ttl_s: float, keep: bool = True) -> list[Lease]:
        """The leases a write of `names` needs: a name this session holds is checked (its fence
        still current); another is leased for the session (`keep`: renewed until released or
        the session ends) or for this write alone (returned, for `release_after_write`). On a
        refusal what this call took goes back, and `WriteRefused` says which name and why.
        The write tool gates (the MCP proxy's, `hooks.frameworks.WriteGuard`) all take here."""
        taken: list[HeldLease] = []
        transient: list[Lease] = []
        name = ""
        try:
            for name in names:
                self.observe()
                with self.lock:
                    held = self.leases.get(name)
                if held is not None:
                    held.check()
                elif keep:
                    lease, new = self.hold(name, ttl_s=ttl_s)
                    if new:
                        taken.append(lease)
                else:
                    transient.append(
                        self.client.lease_acquire(name, ttl_s=ttl_s, process_id=self.process_id)
                    )
        except GroundControlError as refusal:
            # It wrote nothing: what this call took goes back.
            for lease in taken:
                with self.lock:
                    self.leases.pop(lease.resource, None)
                lease.release_quietly()
            self.release_after_write(transient)
            raise WriteRefused(name, refusal) from refusal
        return transient

    def release_after_write(self, leases: list[Lease]) -> None:
        """Give back the leases `take_for_write` took for one write alone."""
        for lease in leases:
            if lease.process_id and lease.process_id != self.process_id:
                continue  # another process of this hand holds that tenure: not ours to end
            try:
                self.client.lease_release(
                    lease.resource, fence=lease.fence, process_id=self.process_id
                )
            except GroundControlError as error:
                logger.warning("lease %s: release failed: %s", lease.resource, error)

    def close(self, reason: str = "the MCP session ended") -> None:
        """Release what the session still holds: it cannot be renewed after the session ends
        (or the work it serves was stopped: `reason`)."""
        with self.lock:
            for attempt in self.attempts.values():
                attempt.release_quietly(reason)
            for lease in self.leases.values():
                try:
                    lease.release()
                except GroundControlError as error:
                    logger.warning("lease %s: release failed: %s", lease.resource, error)
            self.attempts.clear()
            self.leases.clear()
