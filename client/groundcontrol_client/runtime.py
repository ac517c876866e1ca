"""The runtime around an agent: it holds the lease so the agent (the model) never has to.

    hand = Hand.from_env()
    with hand.claim(run_id) as attempt:        # heartbeats from a background thread
        ...work...; attempt.checkpoint()       # raises if lost or told to stop; waits while paused
        attempt.attach("pull_request", url)
    # finished with the attached evidence, or released with the exception as the reason

    with hand.lease("src/auth/", ttl=60) as lease:
        lease.check()                           # fenced write: is lease.fence still current?

The client keeps its own conservative deadline: the send time of the last accepted renewal plus
the interval, on the monotonic clock. It never asks the wall clock and never waits for the server
to say so: once that deadline passes without an accepted renewal, the tenure reads as lost, even
if the server cannot be reached (the server, which allows a grace on top, may still think it
live; the client errs on the side of stopping).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from groundcontrol_client.client import Client
from groundcontrol_client.errors import (
    Denied,
    EvidenceMissing,
    GroundControlError,
    LeaseLost,
    ServerError,
    TenureLost,
    Unavailable,
    ValidationFailed,
)
from groundcontrol_client.identity import process_identity
from groundcontrol_client.models import Attempt, Brief, Evidence, Lease, ReportResult

logger = logging.getLogger("groundcontrol_client")

# Renew three times per interval: two renewals in a row can fail and the tenure still holds.
HEARTBEAT_FRACTION = 1 / 3
MAX_REASON_LENGTH = 2000


class StopRequested(Exception):
    """The supervisor's directive for this attempt is `stop`."""


def local_lease_lost(reason: str) -> LeaseLost:
    """A `LeaseLost` the client concluded on its own (no answer from the server)."""
    return LeaseLost(reason, fields={"local": True})


class _Keeper:
    """Renews a tenure from a background thread and keeps the conservative deadline.

    Lost is sticky: once the deadline has passed or the server has refused a renewal, the keeper
    stops renewing, and a renewal accepted after that does not bring the tenure back.
    """

    def __init__(self, client: Client, *, process_id: str, fraction: float, name: str) -> None:
        self.client = client
        self.process_id = process_id
        self._fraction = fraction
        self._name = name
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._lost_error: GroundControlError | None = None
        self._interval = 0.0
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        # One call on the tenure at a time: a renewal never races the finish or release.
        self._turn = threading.Lock()
        # Ended on purpose (finished, released): the deadline no longer matters.
        self._closed = False

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

    def _start(self, *, sent_at: float, interval: float) -> None:
        self._interval = interval
        self._deadline = sent_at + interval
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period = max(self._interval * self._fraction, 0.01)
        while not self._stop.wait(period):
            with self._turn:
                if self._stop.is_set() or self.lost:
                    return
                self._renew_once()

    def _renew_once(self) -> None:
        sent_at = time.monotonic()
        remaining = max(self._deadline - sent_at, 0.05)
        try:
            self._renew(give_up_at=self._deadline, timeout=min(self.client.timeout, remaining))
        except (Unavailable, ServerError) as error:
            # Try again at the next tick; the deadline decides when it is too late.
            logger.warning("%s: renewal failed (%s); retrying", self._name, error)
        except GroundControlError as error:
            self._mark_lost(error)
        except Exception:  # a bug must not kill the thread silently while the agent works
            logger.exception("%s: renewal crashed; retrying", self._name)
        else:
            self._accepted(sent_at)

    def _accepted(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` was accepted: the deadline moves to `sent_at` + interval."""
        with self._lock:
            if not self._lost.is_set():
                self._deadline = max(self._deadline, sent_at + self._interval)

    def _mark_lost(self, error: GroundControlError) -> None:
        with self._lock:
            if self._lost_error is None:
                self._lost_error = error
            self._lost.set()
        self._stop.set()

    def _stop_renewing(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A renewal in flight finishes within the client's timeout.
            thread.join(self.client.timeout + 1)

    @property
    def lost(self) -> bool:
        """True once the server refused a renewal or the client deadline passed unrenewed."""
        if self._lost.is_set():
            return True
        if self._thread is not None and not self._closed and time.monotonic() > self._deadline:
            self._mark_lost(
                local_lease_lost(
                    f"no renewal was accepted within the {self._interval:g} s interval "
                    "(client deadline passed)"
                )
            )
            return True
        return False

    @property
    def lost_error(self) -> GroundControlError | None:
        """Why the tenure is lost: the server's refusal, or a local `LeaseLost`."""
        return self._lost_error if self.lost else None

    @property
    def expires_in_s(self) -> float:
        """Seconds left on the client's conservative deadline (negative once past)."""
        return self._deadline - time.monotonic()

    def _raise_if_lost(self) -> None:
        if self.lost:
            assert self._lost_error is not None
            raise self._lost_error

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A call on the tenure; a refusal that ends it marks it lost before it propagates."""
        try:
            return fn(*args, **kwargs)
        except TenureLost as error:
            self._mark_lost(error)
            raise

    def _end(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """End the tenure with `fn` (finish or release). Renewals stop only once the server has
        accepted the end: a refused finish (evidence missing) leaves the tenure alive to retry."""
        with self._turn:
            result = self._call(fn, *args, **kwargs)
            self._closed = True
            self._stop.set()
        self._stop_renewing()
        return result


class ClaimedAttempt(_Keeper):
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
    ) -> None:
        super().__init__(client, process_id=process_id, fraction=fraction, name=f"gc-run-{run_id}")
        self.run_id = run_id
        self.requested_slot = slot
        # Seconds to wait for an open slot (the client polls); `on_wait` hears each new denial.
        self.wait = wait
        self.on_wait = on_wait
        self.evidence: list[Evidence] = []
        self.summary: str | None = None
        self.ended: str | None = None  # finished | released, once this runtime ended it
        self._attempt: Attempt | None = None
        self._changed = threading.Condition()

    # --- state ------------------------------------------------------------------------------

    @property
    def attempt(self) -> Attempt:
        """The attempt as the server last described it."""
        if self._attempt is None:
            raise RuntimeError("not claimed yet: use `with hand.claim(run_id) as attempt:`")
        return self._attempt

    @property
    def id(self) -> int:
        return self.attempt.id

    @property
    def fence(self) -> int:
        return self.attempt.fence

    @property
    def slot(self) -> int:
        return self.attempt.slot

    @property
    def directive(self) -> str:
        """continue | pause | stop, as of the last heartbeat's answer."""
        return self.attempt.directive

    def _update(self, attempt: Attempt) -> None:
        with self._changed:
            previous = self._attempt.directive if self._attempt else None
            self._attempt = attempt
            if previous is not None and previous != attempt.directive:
                logger.info("attempt %s: directive is now %s", attempt.id, attempt.directive)
            self._changed.notify_all()

    # --- life -------------------------------------------------------------------------------

    @property
    def claimed(self) -> bool:
        return self._attempt is not None

    def open(self) -> Self:
        waiting: dict[str, Any] = {}
        if self.wait is not None:
            waiting["wait_s"] = self.wait
        if self.on_wait is not None:
            waiting["on_wait"] = self.on_wait
        sent_at = time.monotonic()
        attempt = self.client.claim(
            self.run_id, process_id=self.process_id, slot=self.requested_slot, **waiting
        )
        self._update(attempt)
        self._start(sent_at=sent_at, interval=attempt.lease.heartbeat_interval_s)
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

    def _mark_lost(self, error: GroundControlError) -> None:
        super()._mark_lost(error)
        with self._changed:
            self._changed.notify_all()

    # --- what the agent does ----------------------------------------------------------------

    def brief(self) -> Brief:
        return self._call(self.client.brief, self.id)

    def attach(self, kind: str, url: str, note: str = "") -> None:
        """Evidence to finish with when the `with` block ends without an exception."""
        self.evidence.append(Evidence(kind=kind, url=url, note=note))

    def report(
        self,
        message: str,
        *,
        percent: float | None = None,
        kind: str = "progress",
        details: Mapping[str, Any] | None = None,
    ) -> ReportResult:
        """Progress (or a blocker, or a note); it renews the lease like a heartbeat."""
        self._raise_if_lost()
        sent_at = time.monotonic()
        result: ReportResult = self._call(
            self.client.report,
            self.id,
            fence=self.fence,
            kind=kind,
            process_id=self.process_id,
            message=message,
            percent=percent,
            details=details,
        )
        self._update(result.attempt)
        if result.renewed:
            self._accepted(sent_at)
        return result

    def checkpoint(self, *, poll_s: float = 0.5) -> None:
        """Call between steps: raises if the lease is lost or the directive is stop, and waits
        (heartbeats go on) while the directive is pause."""
        while True:
            self._raise_if_lost()
            if self.directive == "stop":
                raise StopRequested(f"attempt {self.id}: the supervisor asked to stop")
            if self.directive != "pause":
                return
            with self._changed:
                self._changed.wait(poll_s)

    def finish(
        self, evidence: Iterable[Evidence] | None = None, summary: str | None = None
    ) -> Attempt:
        """Finish with `evidence` (default: what was attached); heartbeats stop once it is."""
        self._raise_if_lost()
        items = list(evidence) if evidence is not None else list(self.evidence)
        attempt: Attempt = self._end(
            self.client.finish,
            self.id,
            fence=self.fence,
            process_id=self.process_id,
            evidence=items,
            summary=summary if summary is not None else self.summary,
        )
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
            reason=reason[:MAX_REASON_LENGTH] or "released",
        )
        self._update(attempt)
        self.ended = "released"
        return attempt

    def release_quietly(self, reason: str) -> bool:
        """Release, swallowing refusals (the tenure may already be gone); True if it released."""
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
            self.release_quietly(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return
        if self.lost:
            # The work may already belong to someone else: never finish it, say so.
            self.release_quietly(f"lease lost: {self._lost_error}")
            self._raise_if_lost()
        try:
            self.finish()
        except (EvidenceMissing, ValidationFailed) as error:
            self.release_quietly(f"finish refused: {error}")
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
        fraction: float = HEARTBEAT_FRACTION,
    ) -> None:
        super().__init__(
            client, process_id=process_id, fraction=fraction, name=f"gc-lease-{resource}"
        )
        self.resource = resource
        self.ttl_s = ttl_s
        self.wait_s = wait_s
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
        sent_at = time.monotonic()
        self._lease = self.client.lease_acquire(
            self.resource, ttl_s=self.ttl_s, process_id=self.process_id, wait_s=self.wait_s
        )
        self._start(sent_at=sent_at, interval=self.ttl_s)
        return self

    def _renew(self, *, give_up_at: float, timeout: float) -> None:
        self._lease = self.client.lease_renew(
            self.resource,
            fence=self.fence,
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )

    def check(self) -> Lease:
        """Raise unless `fence` is still the current tenure: locally first (the client deadline),
        then on the server. Call it right before a write that a stale holder must not make."""
        self._raise_if_lost()
        return self._call(self.client.lease_check, self.resource, fence=self.fence)

    def release(self) -> None:
        self._end(self.client.lease_release, self.resource, fence=self.fence)
        self.released = True

    def _exit(self, exc: BaseException | None) -> None:
        if self.released:
            return
        lost = self.lost
        try:
            self.release()
        except GroundControlError as error:
            if exc is None and not lost:
                raise
            logger.warning("lease %s: release failed: %s", self.resource, error)
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
    ) -> None:
        self.client = client
        self.process_id = process_id or process_identity()
        self.heartbeat_fraction = heartbeat_fraction

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
            process_id=self.process_id,
            slot=slot,
            wait=wait,
            on_wait=on_wait,
            fraction=self.heartbeat_fraction,
        )

    def lease(self, resource: str, *, ttl: float, wait: float | None = None) -> HeldLease:
        return HeldLease(
            self.client,
            resource,
            ttl_s=ttl,
            process_id=self.process_id,
            wait_s=wait,
            fraction=self.heartbeat_fraction,
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Hand:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
