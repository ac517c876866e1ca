"""`AsyncHand`: the runtime (`runtime.hand`) for asyncio, on `AsyncClient`.

    async with AsyncHand.from_env() as hand:
        async with hand.claim(run_id) as attempt:     # heartbeats from a background task
            brief = await attempt.brief()
            start = attempt.inherited_checkpoint       # an earlier attempt's, on this slot
            await attempt.checkpoint()                 # raises if lost or told to stop
            await attempt.report("halfway", percent=50, checkpoint={"step": 3})
            attempt.attach("pull_request", url)
        # finished with the attached evidence, or released with the exception as the reason

        async with hand.lease("src/auth/", ttl=60) as lease:
            await lease.check()                        # before a fenced write

The same steps as the sync runtime (`core.keeping`); only the waiting is asyncio's. Everything
runs on the caller's event loop; the heartbeat task lives as long as the `async with` block.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from groundcontrol_client.core.keeping import AttemptKeeping, Hands, LeaseKeeping, PoolKeeping
from groundcontrol_client.core.steps import Steps, bound
from groundcontrol_client.http import AsyncClient

__all__ = ["AsyncClaimedAttempt", "AsyncHand", "AsyncHeldLease", "AsyncPoolLease"]

T = TypeVar("T")


class Tasks:
    """A kept tenure's asyncio shell: its calls are awaited, its heartbeats run in a task."""

    client: AsyncClient
    _name: str
    _turn: asyncio.Lock
    _stop: asyncio.Event
    _task: asyncio.Task[None] | None
    _heartbeat: Callable[[], Steps[bool | None]]
    _next_heartbeat: Callable[[bool, int], tuple[float, int]]
    _leaving: Callable[[BaseException | None], Steps[None]]

    def _prepare(self) -> None:
        self._stop = asyncio.Event()
        self._task = None
        # One call on the tenure at a time: a renewal never races the finish or release.
        self._turn = asyncio.Lock()

    def bind(self, steps: Callable[..., Steps[T]]) -> Callable[..., Awaitable[T]]:
        async def run(*args: Any, **kwargs: Any) -> T:
            return await self.perform(steps(self, *args, **kwargs))

        return bound(self, steps, run)

    async def perform(self, steps: Steps[T]) -> T:
        """Run `steps` on the client; once they leave nothing to renew, the heartbeats stop."""
        try:
            return await self.client.perform(steps)
        finally:
            if self._stop.is_set():
                await self._stop_renewing()

    async def __aenter__(self) -> Self:
        return await self.perform(self.open.steps())  # type: ignore[attr-defined]

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.perform(self._leaving(exc))
        finally:
            self._stop.set()
            await self._stop_renewing()

    def _begin_renewing(self) -> None:
        self._task = asyncio.create_task(self._renewing(), name=self._name)

    async def _renewing(self) -> None:
        delay, failures = self._next_heartbeat(True, 0)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
                return
            renewed = await self.client.perform(self._heartbeat())
            if renewed is None:
                return
            delay, failures = self._next_heartbeat(renewed, failures)

    async def _stop_renewing(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()  # a renewal in flight no longer matters: the tenure has ended
            with contextlib.suppress(asyncio.CancelledError):
                await task


class AsyncClaimedAttempt(Tasks, AttemptKeeping):
    """One tenure on a run's slot, for asyncio: `async with hand.claim(run_id) as attempt:`."""

    def _prepare(self) -> None:
        super()._prepare()
        self._changes = asyncio.Event()

    def _changed(self) -> None:
        self._changes.set()

    async def checkpoint(self, *, poll_s: float = 0.5) -> None:
        """Raises if lost or told to stop; waits (heartbeats go on) while paused."""
        while True:
            self._raise_if_lost()
            if not self._must_wait():
                return
            self._changes.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changes.wait(), poll_s)


class AsyncHeldLease(Tasks, LeaseKeeping):
    """A resource lease kept alive while it is held, for asyncio."""


class AsyncPoolLease(Tasks, PoolKeeping):
    """As `PoolLease`, for asyncio: `async with hand.lease_from_pool("ports") as port:`."""


class AsyncHand(Hands):
    """One agent identity for asyncio: an `AsyncClient` and a process identity."""

    attempts = AsyncClaimedAttempt
    leases = AsyncHeldLease
    pools = AsyncPoolLease
    clients = AsyncClient

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> AsyncHand:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
