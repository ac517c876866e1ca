"""The runtime around an agent: it holds the lease so the agent (the model) never has to.

    hand = Hand.from_env()
    with hand.claim(run_id) as attempt:        # heartbeats from a background thread
        ...work...; attempt.checkpoint()       # raises if lost or told to stop; waits while paused
        attempt.attach("pull_request", url)
    # finished with the attached evidence, or released with the exception as the reason

    with hand.lease("src/auth/", ttl=60) as lease:   # covers everything below src/auth/
        lease.check()                           # fenced write: is lease.fence still current?

The client keeps the tenure's clock itself, on the monotonic clock (`tenure.TenureClock`, where
the rule lives): a brief outage is ridden out with retries up to the point the server would call
the tenure lost (less a margin), and only then is it lost. It never asks the wall clock, and a
connection that failed never releases a slot. `AsyncHand` (`async_runtime`) is the asyncio twin.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from groundcontrol_client.client import Client
from groundcontrol_client.core.errors import (
    Denied,
    EvidenceMissing,
    GroundControlError,
    TenureLost,
    ValidationFailed,
)
from groundcontrol_client.core.handoffs import NoticesHandoffs
from groundcontrol_client.core.identity import process_identity
from groundcontrol_client.core.models import Attempt, Brief, Evidence, Lease, ReportResult
from groundcontrol_client.core.tenure import (
    HEARTBEAT_FRACTION,
    MAX_REASON_LENGTH,
    AttemptView,
    LeaseUnconfirmed,
    StopRequested,
    TenureClock,
    clip_reason,
    exception_reason,
    is_local,
    is_transient,
    lease_grace_s,
    local_lease_lost,
    lost_reason,
    refused_reason,
    renewal_period,
    renewal_retryable,
)

if TYPE_CHECKING:
    from groundcontrol_client.runtime.pools import PoolLease

__all__ = [
    "HEARTBEAT_FRACTION",
    "MAX_REASON_LENGTH",
    "ClaimedAttempt",
    "Hand",
    "HeldLease",
    "LeaseUnconfirmed",
    "StopRequested",
    "local_lease_lost",
]

logger = logging.getLogger("groundcontrol_client")
T = TypeVar("T")


def _sleep(seconds: float) -> None:
    time.sleep(seconds)  # looked up per call, so a test can replace time.sleep


class _Keeper(NoticesHandoffs):
    """Renews a tenure from a background thread; the tenure's clock decides when it is lost."""

    def __init__(
        self,
        client: Client,
        *,
        process_id: str,
        fraction: float,
        name: str,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id
        self.tenure = TenureClock(clock=clock)
        self._fraction = fraction
        self._name = name
        self._sleep = sleep or _sleep
        self._rand = random.random
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # One call on the tenure at a time: a renewal never races the finish or release.
        self._turn = threading.Lock()

    # Subclasses take the tenure (`open`), renew it once (raising the server's refusal, or
    # `Unavailable`), and end it when their `with` block is left (`_exit`).
    def open(self) -> Self:
        raise NotImplementedError

    def _renew(self, *, give_up_at: float, timeout: float) -> None:
        raise NotImplementedError

    def _exit(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._exit(exc)
        finally:
            # Whatever happened, nothing renews a tenure once its `with` block is left.
            self._stop_renewing()

    def _start(self, *, sent_at: float, interval: float, grace: float) -> None:
        """Start the clock at the granting request's send time, and the heartbeats."""
        self.tenure.start(sent_at=sent_at, interval_s=interval, grace_s=grace)
        if self.tenure.waited(sent_at, self._fraction):
            # A grant that waited came late in the wait: a renewal now pins the clock at once.
            self._renew_once(timeout=self.client.timeout)
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period = renewal_period(self.tenure.interval_s, self._fraction)
        delay, failures = period, 0
        while not self._stop.wait(delay):
            with self._turn:
                if self._stop.is_set() or self.lost:
                    return
                renewed = self._renew_once()
            if renewed:
                delay, failures = period, 0
            else:
                # Sooner than the period while it fails: the give-up point is what counts.
                delay = min(period, self._backoff(failures))
                failures += 1

    def _backoff(self, failures: int) -> float:
        return self.tenure.backoff_s(self.client.retry, failures, self._rand)

    def _renew_once(self, *, timeout: float | None = None) -> bool:
        sent_at = self.tenure.clock()
        try:
            self._renew(
                give_up_at=max(self.tenure.give_up_at, sent_at + (timeout or 0)),
                timeout=timeout or self.tenure.timeout_s(self.client.timeout),
            )
        except GroundControlError as error:
            if not renewal_retryable(error):
                self._mark_lost(error)
                return False
            logger.warning("%s: renewal failed (%s); retrying", self._name, error)
        except Exception:  # a bug must not kill the thread silently while the agent works
            logger.exception("%s: renewal crashed; retrying", self._name)
        else:
            self.tenure.accepted(sent_at)
            return True
        return False

    def _mark_lost(self, error: GroundControlError) -> None:
        self.tenure.mark_lost(error)
        self._stop.set()

    def _stop_renewing(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A renewal in flight finishes within the client's timeout.
            thread.join(self.client.timeout + 1)

    @property
    def lost(self) -> bool:
        """True once the server refused the tenure or the give-up point passed unrenewed."""
        if self.tenure.lost:
            self._stop.set()
            return True
        return False

    @property
    def lost_error(self) -> GroundControlError | None:
        """Why the tenure is lost: the server's refusal, or a local `LeaseLost`."""
        return self.tenure.lost_error

    @property
    def expires_in_s(self) -> float:
        """Seconds left in the current renewal window (negative once it has passed)."""
        return self.tenure.expires_in_s

    @property
    def give_up_in_s(self) -> float:
        """Seconds until the tenure is lost unless a renewal is accepted first."""
        return self.tenure.give_up_in_s

    def _raise_if_lost(self) -> None:
        if self.lost:
            self.tenure.raise_if_lost()

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call on the tenure; a refusal that ends it marks it lost before it propagates."""
        try:
            return fn(*args, **kwargs)
        except TenureLost as error:
            self._mark_lost(error)
            raise

    def _persist(self, what: str, fn: Callable[[float], T]) -> tuple[float, T]:
        """`fn(timeout)` until it is answered, retrying transient failures (backoff with jitter)
        up to the give-up point, then the local loss; the send time of the answered try."""
        failures = 0
        while True:
            sent_at = self.tenure.clock()
            try:
                self._raise_if_lost()
                return sent_at, self._call(fn, self.tenure.timeout_s(self.client.timeout))
            except GroundControlError as error:
                if not is_transient(error):
                    raise
                self.tenure.failed(error)
                logger.warning("%s: %s failed (%s); retrying", self._name, what, error)
                self._sleep(self._backoff(failures))
                failures += 1
                self.tenure.failed(error)  # the loss, from the last failure, once it is too late

    def _end(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """End the tenure with `fn` (finish or release). Renewals stop only once the server has
        accepted the end: a refused finish (evidence missing) leaves the tenure alive to retry."""
        with self._turn:
            result = self._call(fn, *args, **kwargs)
            self.tenure.close()
            self._stop.set()
        self._stop_renewing()
        return result


class ClaimedAttempt(AttemptView, _Keeper):
    """One tenure on a run's slot: claimed on `open()` (or `with`), heartbeated until it ends."""

    def __init__(
        self,
        client: Client,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
        fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        _Keeper.__init__(
            self,
            client,
            process_id=process_id,
            fraction=fraction,
            name=f"gc-run-{run_id}",
            clock=clock,
            sleep=sleep,
        )
        self._init_view(run_id, slot, wait)
        self.on_wait = on_wait
        self._changed = threading.Condition()

    def _update(self, attempt: Attempt) -> None:
        with self._changed:
            changed = self._record(attempt)
            if changed:
                logger.info("attempt %s: directive is now %s", attempt.id, changed)
            self._changed.notify_all()

    # --- life -------------------------------------------------------------------------------

    def open(self) -> Self:
        waiting: dict[str, Any] = {}
        if self.wait is not None:
            waiting["wait_s"] = self.wait
        if self.on_wait is not None:
            waiting["on_wait"] = self.on_wait
        sent_at = self.tenure.clock()
        attempt = self.client.claim(
            self.run_id, process_id=self.process_id, slot=self.requested_slot, **waiting
        )
        self._update(attempt)
        self._start(
            sent_at=sent_at,
            interval=attempt.lease.heartbeat_interval_s,
            grace=attempt.lease.grace_s,
        )
        return self

    def _renew(self, *, give_up_at: float, timeout: float) -> None:
        result = self.client.report(
            self.id,
            fence=self.fence,
            kind="heartbeat",
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        self._update(result.attempt)
        self._noticed(result.handoff_requests, self.attempt.lease.resource)

    def _mark_lost(self, error: GroundControlError) -> None:
        super()._mark_lost(error)
        with self._changed:
            self._changed.notify_all()

    # --- what the agent does ----------------------------------------------------------------

    def brief(self) -> Brief:
        """The run's brief; retried through an outage like a report."""
        return self._persist("brief", lambda timeout: self.client.brief(self.id))[1]

    def report(
        self,
        message: str,
        *,
        percent: float | None = None,
        kind: str = "progress",
        details: Mapping[str, Any] | None = None,
        **cost: Any,
    ) -> ReportResult:
        """Progress, a blocker or a note (`cost`: as Client.report); renews, riding out outages."""
        sent_at, result = self._persist(
            "report",
            lambda timeout: self.client.report(
                self.id,
                fence=self.fence,
                kind=kind,
                process_id=self.process_id,
                message=message,
                percent=percent,
                details=details,
                **cost,
                give_up_at=self.tenure.give_up_at,
                timeout=timeout,
            ),
        )
        self._update(result.attempt)
        if result.renewed:
            self.tenure.accepted(sent_at)
        return result

    def checkpoint(self, *, poll_s: float = 0.5) -> None:
        """Between steps: raises if lost or told to stop; waits while paused (heartbeats go on)."""
        while True:
            self._raise_if_lost()
            if not self._must_wait():
                return
            with self._changed:
                self._changed.wait(poll_s)

    def finish(
        self, evidence: Iterable[Evidence] | None = None, summary: str | None = None
    ) -> Attempt:
        """Finish with `evidence` (default: what was attached); heartbeats stop once it is
        (retried through an outage up to the give-up point; a retried finish acts once)."""
        self._raise_if_lost()
        body = self._finish_body(evidence, summary)

        def finish(timeout: float) -> Attempt:
            return self._end(
                self.client.finish, self.id, fence=self.fence, process_id=self.process_id, **body
            )

        attempt = self._persist("finish", finish)[1]
        self._update(attempt)
        self.ended = "finished"
        return attempt

    def release(self, reason: str) -> Attempt:
        """Give the slot back now; it is open to other hands at once."""
        attempt: Attempt = self._end(
            self.client.release,
            self.id,
            fence=self.fence,
            process_id=self.process_id,
            reason=clip_reason(reason),
        )
        self._update(attempt)
        self.ended = "released"
        return attempt

    def release_quietly(self, reason: str) -> bool:
        """Release, swallowing refusals (the tenure may already be gone); True if it released.
        A tenure given up locally is left to the server (see `AttemptView`)."""
        if self._quiet_release_skipped():
            return False
        try:
            self.release(reason)
        except GroundControlError as error:
            logger.warning("attempt %s: release failed: %s", self._attempt and self.id, error)
            return False
        return True

    def _exit(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        if exc is not None:
            self.release_quietly(exception_reason(exc))
            return
        if self.lost:
            # The work may already belong to someone else: never finish it, say so.
            self.release_quietly(lost_reason(self.lost_error))
            self._raise_if_lost()
        try:
            self.finish()
        except (EvidenceMissing, ValidationFailed) as error:
            self.release_quietly(refused_reason(error))
            raise


class HeldLease(_Keeper):
    """A resource lease kept alive while it is held; `fence` and `check()` for fenced writes."""

    def __init__(
        self,
        client: Client,
        resource: str,
        *,
        ttl_s: float,
        process_id: str,
        wait_s: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
        ticket: int | None = None,
        fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(
            client,
            process_id=process_id,
            fraction=fraction,
            name=f"gc-lease-{resource}",
            clock=clock,
            sleep=sleep,
        )
        self.resource = resource
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.mode = mode
        # Take the lease from another process of this hand that holds it (`lease_acquire`).
        self.take_over = take_over
        # A denial's place in line, to be served from (`Client.lease_acquire`).
        self.ticket = ticket
        self.released = False
        self._lease: Lease | None = None

    @property
    def lease(self) -> Lease:
        if self._lease is None:
            raise RuntimeError(
                "not acquired yet: use `with hand.lease(resource, ttl=...) as lease:`"
            )
        return self._lease

    @property
    def fence(self) -> int:
        return self.lease.fence

    def open(self) -> Self:
        sent_at = self.tenure.clock()
        asked = {"ttl_s": self.ttl_s, "wait_s": self.wait_s, "mode": self.mode}
        if self.take_over:
            asked["take_over"] = True
        if self.ticket is not None:
            asked["ticket"] = self.ticket
        self._lease = self.client.lease_acquire(self.resource, process_id=self.process_id, **asked)
        self._start(sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease))
        return self

    def _renew(self, *, give_up_at: float, timeout: float) -> None:
        self._lease = self.client.lease_renew(
            self.resource,
            fence=self.fence,
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        self._noticed(self._lease.handoff_requests, self.resource)

    def check(self) -> Lease:
        """Raise unless `fence` is still the current tenure: locally first, then on the server.
        Call it right before a write that a stale holder must not make. Locally it refuses
        (`LeaseUnconfirmed`) once the renewal window has passed without an accepted renewal,
        though the tenure is not given up until later: the client cannot vouch for the fence."""
        self._raise_if_lost()
        self.tenure.raise_unless_vouched(self.resource)
        return self._call(self.client.lease_check, self.resource, fence=self.fence)

    def release(self) -> None:
        self._end(
            self.client.lease_release, self.resource, fence=self.fence, process_id=self.process_id
        )
        self.released = True

    def release_quietly(self) -> bool:
        """Release, swallowing refusals; a lease given up locally is left to the server."""
        if self.lost and is_local(self.lost_error):
            logger.warning("lease %s: not released (%s)", self.resource, self.lost_error)
            return False
        try:
            self.release()
        except GroundControlError as error:
            logger.warning("lease %s: release failed: %s", self.resource, error)
            return False
        return True

    def _exit(self, exc: BaseException | None) -> None:
        if self.released:
            return
        lost = self.lost
        if lost or exc is not None:
            self.release_quietly()
        else:
            self.release()  # refused though the client thought it held: the caller hears why
        if exc is None and lost:
            self._raise_if_lost()


class Hand:
    """One agent identity: a client and a process identity, for claims and resource leases."""

    def __init__(
        self,
        client: Client,
        *,
        process_id: str | None = None,
        heartbeat_fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id or process_identity()
        self.heartbeat_fraction = heartbeat_fraction
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_env(cls, **client_kwargs: Any) -> Hand:
        """From `GC_URL` and `GC_KEY`; `GC_PROCESS_ID` overrides the process identity."""
        return cls(Client.from_env(**client_kwargs), process_id=os.environ.get("GC_PROCESS_ID"))

    def claim(
        self,
        run_id: int,
        *,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> ClaimedAttempt:
        """A claim on `run_id` (taken on `open()` or `with`); `wait` seconds for an open slot."""
        return ClaimedAttempt(
            self.client,
            run_id,
            slot=slot,
            wait=wait,
            on_wait=on_wait,
            **self._keeping(),
        )

    def lease(
        self,
        resource: str,
        *,
        ttl: float,
        wait: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
    ) -> HeldLease:
        """Hold `resource` (`mode="shared"` beside other shared holders) while the block runs;
        `take_over`: from another process of this hand that holds it."""
        asked = {"ttl_s": ttl, "wait_s": wait, "mode": mode, "take_over": take_over}
        return HeldLease(self.client, resource, **asked, **self._keeping())

    def lease_from_pool(
        self, pool: str, *, ttl: float = 60.0, wait: float | None = None
    ) -> PoolLease:
        """A free member of `pool`, held like `lease` (`member`, `resource`, `fence`, `check`)."""
        from groundcontrol_client.runtime.pools import PoolLease  # it builds on HeldLease

        return PoolLease(self.client, pool, ttl_s=ttl, wait_s=wait, **self._keeping())

    def _keeping(self) -> dict[str, Any]:
        """How this hand's tenures are kept: its process, heartbeat fraction and clocks."""
        return {
            "process_id": self.process_id,
            "fraction": self.heartbeat_fraction,
            "clock": self._clock,
            "sleep": self._sleep,
        }

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Hand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
