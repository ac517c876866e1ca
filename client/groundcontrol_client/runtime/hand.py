"""The runtime around an agent: it holds the lease so the agent (the model) never has to.

    hand = Hand.from_env()
    with hand.claim(run_id) as attempt:        # heartbeats from a background thread
        start = attempt.inherited_checkpoint   # where an earlier attempt on the slot left off
        ...work...; attempt.checkpoint()       # raises if lost or told to stop; waits while paused
        attempt.report("step 3 done", checkpoint={"step": 3})   # where this one stands
        attempt.attach("pull_request", url)
    # finished with the attached evidence, or released with the exception as the reason

    with hand.lease("src/auth/", ttl=60) as lease:   # covers everything below src/auth/
        lease.check()                           # fenced write: is lease.fence still current?

    with hand.lease_from_pool("ports", ttl=60) as port:   # the first free member
        serve(int(port.member))

The client keeps the tenure's clock itself, on the monotonic clock (`core.tenure.TenureClock`,
where the rule lives): a brief outage is ridden out with retries up to the point the server would
call the tenure lost (less a margin), and only then is it lost. It never asks the wall clock, and
a connection that failed never releases a slot. What a tenure does is written once, as steps
(`core.keeping`); this is its blocking shell (threads), `async_hand` its asyncio one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from groundcontrol_client.core.keeping import AttemptKeeping, Hands, LeaseKeeping, PoolKeeping
from groundcontrol_client.core.steps import Steps, bound
from groundcontrol_client.core.tenure import (
    HEARTBEAT_FRACTION,
    MAX_REASON_LENGTH,
    LeaseUnconfirmed,
    StopRequested,
    local_lease_lost,
)
from groundcontrol_client.http import Client

__all__ = [
    "HEARTBEAT_FRACTION",
    "MAX_REASON_LENGTH",
    "ClaimedAttempt",
    "Hand",
    "HeldLease",
    "LeaseUnconfirmed",
    "PoolLease",
    "StopRequested",
    "local_lease_lost",
]

T = TypeVar("T")


class Threads:
    """A kept tenure's blocking shell: its calls block, its heartbeats run in a thread."""

    client: Client
    tenure: Any
    _name: str
    _turn: threading.Lock
    _stop: threading.Event
    _thread: threading.Thread | None
    _heartbeat: Callable[[], Steps[bool | None]]
    _next_heartbeat: Callable[[bool, int], tuple[float, int]]
    _leaving: Callable[[BaseException | None], Steps[None]]

    def _prepare(self) -> None:
        self._stop = threading.Event()
        self._thread = None
        # One call on the tenure at a time: a renewal never races the finish or release.
        self._turn = threading.Lock()

    def bind(self, steps: Callable[..., Steps[T]]) -> Callable[..., T]:
        def run(*args: Any, **kwargs: Any) -> T:
            return self.perform(steps(self, *args, **kwargs))

        return bound(self, steps, run)

    def perform(self, steps: Steps[T]) -> T:
        """Run `steps` on the client; once they leave nothing to renew, the heartbeats stop."""
        try:
            return self.client.perform(steps)
        finally:
            if self._stop.is_set():
                self._stop_renewing()

    def __enter__(self) -> Self:
        return self.perform(self.open.steps())  # type: ignore[attr-defined]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.perform(self._leaving(exc))
        finally:
            # Whatever happened, nothing renews a tenure once its `with` block is left.
            self._stop.set()
            self._stop_renewing()

    def _begin_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renewing, name=self._name, daemon=True)
        self._thread.start()

    def _renewing(self) -> None:
        delay, failures = self._next_heartbeat(True, 0)
        while not self._stop.wait(delay):
            renewed = self.client.perform(self._heartbeat())
            if renewed is None:
                return
            delay, failures = self._next_heartbeat(renewed, failures)

    def _stop_renewing(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A renewal in flight finishes within the client's timeout.
            thread.join(self.client.timeout + 1)


class ClaimedAttempt(Threads, AttemptKeeping):
    """One tenure on a run's slot: claimed on `open()` (or `with`), heartbeated until it ends."""

    def _prepare(self) -> None:
        super()._prepare()
        self._changes = threading.Condition()

    def _changed(self) -> None:
        with self._changes:
            self._changes.notify_all()

    def checkpoint(self, *, poll_s: float = 0.5) -> None:
        """Between steps: raises if lost or told to stop; waits while paused (heartbeats go on)."""
        while True:
            self._raise_if_lost()
            if not self._must_wait():
                return
            with self._changes:
                self._changes.wait(poll_s)


class HeldLease(Threads, LeaseKeeping):
    """A resource lease kept alive while it is held; `fence` and `check()` for fenced writes."""


class PoolLease(Threads, PoolKeeping):
    """One member of a pool held like a resource lease: `hand.lease_from_pool("ports")`."""


class Hand(Hands):
    """One agent identity: a client and a process identity, for claims and resource leases."""

    attempts = ClaimedAttempt
    leases = HeldLease
    pools = PoolLease
    clients = Client

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Hand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
