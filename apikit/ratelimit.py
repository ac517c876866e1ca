"""The per-key rate limit: a fixed one-minute window per key, counted in the cache (Redis in
production), the count taken in blocks.

A round trip to Redis on every call cost about a seventh of a renewal's CPU
(docs/performance.md). So a process reserves part of a window's count with one INCRBY and
admits the calls of that block itself: the lease idea, applied to the count. A block never
admits past the limit (it is cut at the limit when reserved), so no more calls than the limit
are ever admitted in a window, however many processes share the key; what a process reserved
and did not use only makes the others refuse a little early, at most `BLOCK_MAX - 1` calls per
process and key. The block grows only for a key whose calls come fast in this process (it
doubles when the last one was used up within `FAST_S`, and is one call again when calls are
slow), so a fleet that calls every few seconds is counted one call at a time.

The count is advisory: when the cache is down the call goes through. Redis never decides
whether a lease is valid, and an outage of it must not stop the fleet.

The same machinery counts unauthenticated calls per client address (`apikit.clients`) against
`GC_UNAUTHENTICATED_PER_MINUTE`: no key, a malformed, unknown, wrong, revoked or expired one, an
unknown path (`unauthenticated_refusal`). Only calls that turned out unauthenticated are counted,
so a valid key never pays this count's round trip and never shares its address's limit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from apikit.cache import advisory
from apikit.errors import RateLimited

WINDOW_S = 60
BLOCK_MAX = 16
FAST_S = 0.5  # a block used up faster than this: reserve twice as many next time
SLOW_S = 2.0  # a block that took longer than this: back to one call at a time


def rate_caller(prefix: str, secret_hash: str) -> str:
    """Whom a call is counted against: the key's prefix and part of its secret's hash. A caller
    who knows a prefix but not its secret (prefixes are shown to supervisors) fills a counter of
    its own, never the key's, even where the count is taken before the key is checked
    (leasing/hot.py)."""
    return f"{prefix}:{secret_hash[:16]}"


@dataclass
class _Block:
    window: int
    limit: int
    left: int  # calls admitted by the reservation and not used yet
    size: int  # what the last reservation asked for
    taken_at: float  # when it was taken (monotonic)
    spent: bool = False  # the window's count is past the limit: refuse without asking


class RateLimiter:
    """The blocks this process holds, per caller, for the current window, of one limit: the
    setting that holds it, the namespace of its counters in the cache, and what it counts (for
    the refusal's message)."""

    def __init__(
        self,
        *,
        setting: str = "GC_RATE_LIMIT_PER_MINUTE",
        namespace: str = "gc:rate",
        counted: str = "calls a minute for this key",
    ) -> None:
        self.setting = setting
        self.namespace = namespace
        self.counted = counted
        self._lock = threading.Lock()
        self._blocks: dict[str, _Block] = {}
        self._window = 0

    def forget(self) -> None:
        """Drop every block held (the next call of each caller reserves again)."""
        with self._lock:
            self._blocks.clear()

    def admit(self, caller: str) -> None:
        """Count one call of `caller`; RateLimited if it is over the limit."""
        limit = int(getattr(settings, self.setting, 0))
        if limit <= 0:
            return
        now = time.time()
        window = int(now // WINDOW_S)
        started = time.monotonic()
        with self._lock:
            if window != self._window:  # a new window: every block held is void
                self._blocks.clear()
                self._window = window
            block = self._blocks.get(caller)
            if block is not None and block.limit == limit:
                if block.spent:  # a window's count only grows: refused until it ends
                    raise self._refusal(limit, window, now)
                if block.left > 0:
                    block.left -= 1
                    return
            size = _next_size(block, limit, started)
        count = _reserve(f"{self.namespace}:{caller}:{window}", size)
        if count is None:
            return
        # The reservation is the counts (count - size, count]; only those up to the limit count.
        admitted = min(count, limit) - (count - size)
        if admitted <= 0:
            with self._lock:
                if window == self._window:
                    self._blocks[caller] = _Block(window, limit, 0, size, started, spent=True)
            raise self._refusal(limit, window, now)
        with self._lock:
            if window == self._window:
                held = self._blocks.get(caller)
                # Another thread's block, reserved meanwhile, keeps what it has left.
                left = held.left if held is not None and held.limit == limit else 0
                left = max(left, 0)
                self._blocks[caller] = _Block(window, limit, left + admitted - 1, size, started)

    def _refusal(self, limit: int, window: int, now: float) -> RateLimited:
        retry_after = round((window + 1) * WINDOW_S - now, 3)
        return RateLimited(
            f"more than {limit} {self.counted}; retry in {retry_after:.0f}s",
            retry_after_s=retry_after,
            limit_per_minute=limit,
        )


def _next_size(used: _Block | None, limit: int, now: float) -> int:
    if used is None or used.limit != limit:
        return 1
    elapsed = now - used.taken_at
    if elapsed < FAST_S:
        return min(BLOCK_MAX, used.size * 2)
    return used.size if elapsed < SLOW_S else 1


@advisory("the rate limit is not counting", default=None)
def _reserve(name: str, size: int) -> int | None:
    """The window's count after adding `size`, or None when the cache is down (the call goes
    through: the count fails open)."""
    # One round trip in the steady state; the window's first call creates the counter.
    try:
        return int(cache.incr(name, size))
    except ValueError:
        if cache.add(name, size, timeout=2 * WINDOW_S):
            return size
        return int(cache.incr(name, size))


limiter = RateLimiter()
unauthenticated_limiter = RateLimiter(
    setting="GC_UNAUTHENTICATED_PER_MINUTE",
    namespace="gc:unauth",
    counted="unauthenticated calls a minute from this address",
)


def rate_limit(caller: str) -> None:
    limiter.admit(caller)


def unauthenticated_refusal(address: str) -> RateLimited | None:
    """Count one call from `address` (`apikit.clients.client_address`) that turned out
    unauthenticated: None while the address is within its limit, else the refusal to answer
    instead (429 rate_limited with retry_after_s). Called only once the call is known to be
    unauthenticated, and before anything else is looked up for it."""
    try:
        unauthenticated_limiter.admit(address)
    except RateLimited as refusal:
        return refusal
    return None
