"""The client's two shells over the one core (`groundcontrol_client.core.calls`), in httpx's
shape: `Client` sends on `httpx.Client` and blocks, `AsyncClient` on `httpx.AsyncClient` and
awaits. Each only sends a request and waits; every call, retry and answer is the core's, so the
two send the same requests and read the same answers by construction.

    with Client.from_env() as client:
        lease = client.lease_acquire("src/auth/", ttl_s=60, process_id=me)

    async with AsyncClient.from_env() as client:
        lease = await client.lease_acquire("src/auth/", ttl_s=60, process_id=me)
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from groundcontrol_client.core.attestations import AttestationCalls
from groundcontrol_client.core.calls import Calls
from groundcontrol_client.core.people import PeopleCalls
from groundcontrol_client.core.planning import PlanCalls
from groundcontrol_client.core.pools import PoolCalls
from groundcontrol_client.core.records import RecordsCalls
from groundcontrol_client.core.sending import DEFAULT_TIMEOUT_S, RetryPolicy
from groundcontrol_client.core.steps import Send, Sleep, Steps, bound

__all__ = ["AsyncClient", "Client"]
T = TypeVar("T")


def _options(send: Send) -> dict[str, Any]:
    return {
        "json": send.json,
        "params": send.params,
        "headers": send.headers,
        "timeout": send.timeout,
    }


class Client(Calls, PlanCalls, PeopleCalls, RecordsCalls, PoolCalls, AttestationCalls):
    """One hand's connection to Ground Control. Thread-safe: the runtime's heartbeat threads
    share it with the agent's own calls."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(url, key, timeout=timeout, retry=retry, rand=rand, clock=clock)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.url, headers=self.headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bind(self, steps: Callable[..., Steps[T]]) -> Callable[..., T]:
        def run(*args: Any, **kwargs: Any) -> T:
            return self.perform(steps(self, *args, **kwargs))

        return bound(self, steps, run)

    def perform(self, steps: Steps[T]) -> T:
        """Carry out `steps`, blocking: send each request, sleep each pause, hold each lock;
        their answer."""
        try:
            outcome: Any = None
            failure: Exception | None = None
            while True:
                try:
                    step = steps.send(outcome) if failure is None else steps.throw(failure)
                except StopIteration as done:
                    return done.value
                outcome = failure = None
                if isinstance(step, Send):
                    try:
                        outcome = self._http.request(step.method, step.url, **_options(step))
                    except httpx.TransportError as error:
                        outcome = error
                elif isinstance(step, Sleep):
                    self._sleep(step.seconds)
                else:
                    try:
                        with step.lock:
                            outcome = self.perform(step.steps)
                    except Exception as error:  # raised where the step was, as a call's would
                        failure = error
        finally:
            steps.close()


class AsyncClient(Calls, PlanCalls, PeopleCalls, RecordsCalls, PoolCalls, AttestationCalls):
    """One hand's connection to Ground Control, for asyncio: every call of `Client`, awaited.
    Safe to share between the tasks of one event loop (the runtime's heartbeat tasks share it
    with the agent's own calls)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(url, key, timeout=timeout, retry=retry, rand=rand, clock=clock)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def bind(self, steps: Callable[..., Steps[T]]) -> Callable[..., Awaitable[T]]:
        async def run(*args: Any, **kwargs: Any) -> T:
            return await self.perform(steps(self, *args, **kwargs))

        return bound(self, steps, run)

    async def perform(self, steps: Steps[T]) -> T:
        """Carry out `steps`, awaiting: send each request, sleep each pause, hold each lock;
        their answer."""
        try:
            outcome: Any = None
            failure: Exception | None = None
            while True:
                try:
                    step = steps.send(outcome) if failure is None else steps.throw(failure)
                except StopIteration as done:
                    return done.value
                outcome = failure = None
                if isinstance(step, Send):
                    try:
                        outcome = await self._http.request(step.method, step.url, **_options(step))
                    except httpx.TransportError as error:
                        outcome = error
                elif isinstance(step, Sleep):
                    await self._sleep(step.seconds)
                else:
                    try:
                        async with step.lock:
                            outcome = await self.perform(step.steps)
                    except Exception as error:  # raised where the step was, as a call's would
                        failure = error
        finally:
            steps.close()
