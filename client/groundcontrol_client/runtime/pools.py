"""A member of a pool held like a resource lease: `hand.lease_from_pool("ports")`.

    with hand.lease_from_pool("ports", ttl=60) as port:   # the first free member
        serve(int(port.member))                           # renewed in the background
        port.check()                                      # fenced write: still this tenure?

The pool grants a concrete member (`member`) whose tenure is a lease of its own
(`resource`, `pool/<pool>/<member>`, with its `fence`); from then on it is renewed, checked
and released exactly as `HeldLease` does for a resource. `AsyncPoolLease` is the asyncio twin.
"""

from __future__ import annotations

from typing import Any, Self

from groundcontrol_client.async_client import AsyncClient
from groundcontrol_client.client import Client
from groundcontrol_client.core.tenure import lease_grace_s
from groundcontrol_client.runtime.async_hand import AsyncHeldLease
from groundcontrol_client.runtime.hand import HeldLease


def _placeholder(pool: str) -> str:
    """The lease's name until a member is granted (the pool's node)."""
    return f"pool/{pool}/"


class PoolLease(HeldLease):
    """One member of `pool`, taken on `open()` (or `with`) and kept alive while it is held."""

    def __init__(self, client: Client, pool: str, **options: Any) -> None:
        super().__init__(client, _placeholder(pool), **options)
        self.pool = pool

    @property
    def member(self) -> str:
        """The member granted (`8001`, `test_3`)."""
        return self.lease.member or self.lease.resource.rsplit("/", 1)[-1]

    def open(self) -> Self:
        sent_at = self.tenure.clock()
        self._lease = self.client.lease_from_pool(
            self.pool, ttl_s=self.ttl_s, process_id=self.process_id, wait_s=self.wait_s
        )
        # From here on it is the member's own lease: renewed, checked and released by name.
        self.resource = self._lease.resource
        self._name = f"gc-lease-{self.resource}"
        self._start(sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease))
        return self


class AsyncPoolLease(AsyncHeldLease):
    """As `PoolLease`, for asyncio: `async with hand.lease_from_pool("ports") as port:`."""

    def __init__(self, client: AsyncClient, pool: str, **options: Any) -> None:
        super().__init__(client, _placeholder(pool), **options)
        self.pool = pool

    @property
    def member(self) -> str:
        return self.lease.member or self.lease.resource.rsplit("/", 1)[-1]

    async def open(self) -> Self:
        sent_at = self.tenure.clock()
        self._lease = await self.client.lease_from_pool(
            self.pool, ttl_s=self.ttl_s, process_id=self.process_id, wait_s=self.wait_s
        )
        self.resource = self._lease.resource
        self._name = f"gc-lease-{self.resource}"
        await self._start(sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease))
        return self


__all__ = ["AsyncPoolLease", "PoolLease"]
