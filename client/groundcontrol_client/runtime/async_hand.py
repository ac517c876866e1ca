"""`AsyncHand`: the asyncio twin of the runtime (`runtime.Hand`), on `AsyncClient`.

    async with AsyncHand.from_env() as hand:
        async with hand.claim(run_id) as attempt:     # heartbeats from a background task
            brief = await attempt.brief()
            await attempt.checkpoint()                 # raises if lost or told to stop
            await attempt.report("halfway", percent=50)
            attempt.attach("pull_request", url)
        # finished with the attached evidence, or released with the exception as the reason

        async with hand.lease("src/auth/", ttl=60) as lease:
            await lease.check()                        # before a fenced write

The same semantics as the sync runtime, from the same pure parts (`tenure`: the give-up rule,
the attempt's view, reasons, evidence): only the waiting is asyncio's. Everything runs on the
caller's event loop; the heartbeat task lives as long as the `async with` block.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from groundcontrol_client.async_client import AsyncClient
from groundcontrol_client.core.errors import (
    Denied,
    EvidenceMissing,
    GroundControlError,
    TenureLost,
    ValidationFailed,
)
from groundcontrol_client.core.identity import process_identity
from groundcontrol_client.core.models import Attempt, Brief, Evidence, Lease, ReportResult
from groundcontrol_client.core.tenure import (
    HEARTBEAT_FRACTION,
    AttemptView,
    TenureClock,
    clip_reason,
    exception_reason,
    is_local,
    is_transient,
    lease_grace_s,
    lost_reason,
    refused_reason,
    renewal_period,
    renewal_retryable,
)

if TYPE_CHECKING:
    from groundcontrol_client.runtime.pools import AsyncPoolLease

logger = logging.getLogger("groundcontrol_client")
T = TypeVar("T")


class _AsyncKeeper:
    """Renews a tenure from a background task; the tenure's clock decides when it is lost."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        process_id: str,
        fraction: float,
        name: str,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id
        self.tenure = TenureClock(clock=clock)
        self._fraction = fraction
        self._name = name
        self._sleep = sleep or asyncio.sleep
        self._rand = random.random
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # One call on the tenure at a time: a renewal never races the finish or release.
        self._turn = asyncio.Lock()

    async def open(self) -> Self:
        raise NotImplementedError

    async def _renew(self, *, give_up_at: float, timeout: float) -> None:
        raise NotImplementedError

    async def _exit(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._exit(exc)
        finally:
            await self._stop_renewing()

    async def _start(self, *, sent_at: float, interval: float, grace: float) -> None:
        self.tenure.start(sent_at=sent_at, interval_s=interval, grace_s=grace)
        if self.tenure.waited(sent_at, self._fraction):
            # The grant waited: a renewal sent now pins the clock (see the sync runtime).
            await self._renew_once(timeout=self.client.timeout)
        self._task = asyncio.create_task(self._loop(), name=self._name)

    async def _loop(self) -> None:
        period = renewal_period(self.tenure.interval_s, self._fraction)
        delay, failures = period, 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
                return
            async with self._turn:
                if self._stop.is_set() or self.lost:
                    return
                renewed = await self._renew_once()
            if renewed:
                delay, failures = period, 0
            else:
                delay = min(period, self.tenure.backoff_s(self.client.retry, failures, self._rand))
                failures += 1

    async def _renew_once(self, *, timeout: float | None = None) -> bool:
        sent_at = self.tenure.clock()
        try:
            await self._renew(
                give_up_at=max(self.tenure.give_up_at, sent_at + (timeout or 0)),
                timeout=timeout or self.tenure.timeout_s(self.client.timeout),
            )
        except GroundControlError as error:
            if not renewal_retryable(error):
                self._mark_lost(error)
                return False
            logger.warning("%s: renewal failed (%s); retrying", self._name, error)
        except Exception:  # a bug must not end the task silently while the agent works
            logger.exception("%s: renewal crashed; retrying", self._name)
        else:
            self.tenure.accepted(sent_at)
            return True
        return False

    def _mark_lost(self, error: GroundControlError) -> None:
        self.tenure.mark_lost(error)
        self._stop.set()

    async def _stop_renewing(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()  # a renewal in flight no longer matters: the tenure has ended
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def lost(self) -> bool:
        """True once the server refused the tenure or the give-up point passed unrenewed."""
        if self.tenure.lost:
            self._stop.set()
            return True
        return False

    @property
    def lost_error(self) -> GroundControlError | None:
        return self.tenure.lost_error

    @property
    def expires_in_s(self) -> float:
        return self.tenure.expires_in_s

    @property
    def give_up_in_s(self) -> float:
        return self.tenure.give_up_in_s

    def _raise_if_lost(self) -> None:
        if self.lost:
            self.tenure.raise_if_lost()

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except TenureLost as error:
            self._mark_lost(error)
            raise

    async def _persist(self, what: str, fn: Callable[[float], Awaitable[T]]) -> tuple[float, T]:
        """As the sync runtime's: retried up to the give-up point, then the local loss."""
        failures = 0
        while True:
            sent_at = self.tenure.clock()
            try:
                self._raise_if_lost()
                return sent_at, await self._call(fn, self.tenure.timeout_s(self.client.timeout))
            except GroundControlError as error:
                if not is_transient(error):
                    raise
                self.tenure.failed(error)
                logger.warning("%s: %s failed (%s); retrying", self._name, what, error)
                await self._sleep(self.tenure.backoff_s(self.client.retry, failures, self._rand))
                failures += 1
                self.tenure.failed(error)

    async def _end(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        async with self._turn:
            result = await self._call(fn, *args, **kwargs)
            self.tenure.close()
            self._stop.set()
        await self._stop_renewing()
        return result


class AsyncClaimedAttempt(AttemptView, _AsyncKeeper):
    """One tenure on a run's slot, for asyncio: `async with hand.claim(run_id) as attempt:`."""

    def __init__(
        self,
        client: AsyncClient,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
        fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        _AsyncKeeper.__init__(
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
        self._changed = asyncio.Event()

    def _update(self, attempt: Attempt) -> None:
        changed = self._record(attempt)
        if changed:
            logger.info("attempt %s: directive is now %s", attempt.id, changed)
        self._changed.set()

    def _mark_lost(self, error: GroundControlError) -> None:
        super()._mark_lost(error)
        self._changed.set()

    async def open(self) -> Self:
        waiting: dict[str, Any] = {}
        if self.wait is not None:
            waiting["wait_s"] = self.wait
        if self.on_wait is not None:
            waiting["on_wait"] = self.on_wait
        sent_at = self.tenure.clock()
        attempt = await self.client.claim(
            self.run_id, process_id=self.process_id, slot=self.requested_slot, **waiting
        )
        self._update(attempt)
        await self._start(
            sent_at=sent_at,
            interval=attempt.lease.heartbeat_interval_s,
            grace=attempt.lease.grace_s,
        )
        return self

    async def _renew(self, *, give_up_at: float, timeout: float) -> None:
        result = await self.client.report(
            self.id,
            fence=self.fence,
            kind="heartbeat",
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        self._update(result.attempt)

    async def brief(self) -> Brief:
        return (await self._persist("brief", lambda timeout: self.client.brief(self.id)))[1]

    async def report(
        self,
        message: str,
        *,
        percent: float | None = None,
        kind: str = "progress",
        details: Mapping[str, Any] | None = None,
        **cost: Any,
    ) -> ReportResult:
        """Progress (`cost`: as Client.report); renews like a heartbeat, retried through an
        outage to the give-up point."""
        sent_at, result = await self._persist(
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

    async def checkpoint(self, *, poll_s: float = 0.5) -> None:
        """Raises if lost or told to stop; waits (heartbeats go on) while paused."""
        while True:
            self._raise_if_lost()
            if not self._must_wait():
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), poll_s)

    async def finish(
        self, evidence: Iterable[Evidence] | None = None, summary: str | None = None
    ) -> Attempt:
        self._raise_if_lost()
        body = self._finish_body(evidence, summary)

        def finish(timeout: float) -> Awaitable[Attempt]:
            return self._end(
                self.client.finish, self.id, fence=self.fence, process_id=self.process_id, **body
            )

        attempt = (await self._persist("finish", finish))[1]
        self._update(attempt)
        self.ended = "finished"
        return attempt

    async def release(self, reason: str) -> Attempt:
        attempt: Attempt = await self._end(
            self.client.release,
            self.id,
            fence=self.fence,
            process_id=self.process_id,
            reason=clip_reason(reason),
        )
        self._update(attempt)
        self.ended = "released"
        return attempt

    async def release_quietly(self, reason: str) -> bool:
        if self._quiet_release_skipped():
            return False
        try:
            await self.release(reason)
        except GroundControlError as error:
            logger.warning("attempt %s: release failed: %s", self._attempt and self.id, error)
            return False
        return True

    async def _exit(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        if exc is not None:
            await self.release_quietly(exception_reason(exc))
            return
        if self.lost:
            await self.release_quietly(lost_reason(self.lost_error))
            self._raise_if_lost()
        try:
            await self.finish()
        except (EvidenceMissing, ValidationFailed) as error:
            await self.release_quietly(refused_reason(error))
            raise


class AsyncHeldLease(_AsyncKeeper):
    """A resource lease kept alive by a background task; `fence` and `await check()`."""

    def __init__(
        self,
        client: AsyncClient,
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
        sleep: Callable[[float], Awaitable[None]] | None = None,
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
                "not acquired yet: use `async with hand.lease(resource, ttl=...) as lease:`"
            )
        return self._lease

    @property
    def fence(self) -> int:
        return self.lease.fence

    async def open(self) -> Self:
        sent_at = self.tenure.clock()
        self._lease = await self.client.lease_acquire(
            self.resource,
            ttl_s=self.ttl_s,
            process_id=self.process_id,
            wait_s=self.wait_s,
            mode=self.mode,
            **({"take_over": True} if self.take_over else {}),
            **({"ticket": self.ticket} if self.ticket is not None else {}),
        )
        await self._start(sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease))
        return self

    async def _renew(self, *, give_up_at: float, timeout: float) -> None:
        self._lease = await self.client.lease_renew(
            self.resource,
            fence=self.fence,
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )

    async def check(self) -> Lease:
        """As `HeldLease.check`: locally first (`LeaseUnconfirmed` past the renewal window,
        `LeaseLost` past the give-up point), then on the server."""
        self._raise_if_lost()
        self.tenure.raise_unless_vouched(self.resource)
        return await self._call(self.client.lease_check, self.resource, fence=self.fence)

    async def release(self) -> None:
        await self._end(
            self.client.lease_release, self.resource, fence=self.fence, process_id=self.process_id
        )
        self.released = True

    async def release_quietly(self) -> bool:
        if self.lost and is_local(self.lost_error):
            logger.warning("lease %s: not released (%s)", self.resource, self.lost_error)
            return False
        try:
            await self.release()
        except GroundControlError as error:
            logger.warning("lease %s: release failed: %s", self.resource, error)
            return False
        return True

    async def _exit(self, exc: BaseException | None) -> None:
        if self.released:
            return
        lost = self.lost
        if lost or exc is not None:
            await self.release_quietly()
        else:
            await self.release()
        if exc is None and lost:
            self._raise_if_lost()


class AsyncHand:
    """One agent identity for asyncio: an `AsyncClient` and a process identity."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        process_id: str | None = None,
        heartbeat_fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id or process_identity()
        self.heartbeat_fraction = heartbeat_fraction
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_env(cls, **client_kwargs: Any) -> AsyncHand:
        """From `GC_URL` and `GC_KEY`; `GC_PROCESS_ID` overrides the process identity."""
        return cls(
            AsyncClient.from_env(**client_kwargs), process_id=os.environ.get("GC_PROCESS_ID")
        )

    def claim(
        self,
        run_id: int,
        *,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> AsyncClaimedAttempt:
        return AsyncClaimedAttempt(
            self.client,
            run_id,
            process_id=self.process_id,
            slot=slot,
            wait=wait,
            on_wait=on_wait,
            fraction=self.heartbeat_fraction,
            clock=self._clock,
            sleep=self._sleep,
        )

    def lease(
        self,
        resource: str,
        *,
        ttl: float,
        wait: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
    ) -> AsyncHeldLease:
        """Hold `resource` (`mode="shared"` beside other shared holders) while the block runs;
        `take_over`: from another process of this hand that holds it."""
        return AsyncHeldLease(
            self.client,
            resource,
            ttl_s=ttl,
            wait_s=wait,
            mode=mode,
            take_over=take_over,
            **self._keeping(),
        )

    def lease_from_pool(
        self, pool: str, *, ttl: float = 60.0, wait: float | None = None
    ) -> AsyncPoolLease:
        """As `Hand.lease_from_pool`: `async with hand.lease_from_pool("ports") as port:`."""
        from groundcontrol_client.runtime.pools import AsyncPoolLease

        return AsyncPoolLease(self.client, pool, ttl_s=ttl, wait_s=wait, **self._keeping())

    def _keeping(self) -> dict[str, Any]:
        return {
            "process_id": self.process_id,
            "fraction": self.heartbeat_fraction,
            "clock": self._clock,
            "sleep": self._sleep,
        }

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> AsyncHand:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
