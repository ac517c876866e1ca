"""Repeated failed logins are slowed: after a few free failures, each further failure for the
same username, or from the same address, doubles the wait before the next try is even checked.

Counted in the cache (Redis in production, shared by every web worker; per process on the
embedded default). The wait is measured on this worker's clock: it guards a password form, not a
lease, and a few seconds of skew between workers only shifts a penalty.
"""

from __future__ import annotations

import hashlib
import time

from django.core.cache import cache

FREE_FAILURES = 5
FIRST_DELAY_S = 2.0
MAX_DELAY_S = 15 * 60
# How long a quiet account keeps its count; a success forgets it at once.
MEMORY_S = 24 * 3600


def _keys(*, username: str, address: str) -> list[str]:
    def key(kind: str, value: str) -> str:
        return f"gc:login:{kind}:{hashlib.sha256(value.encode()).hexdigest()[:32]}"

    return [key("user", username.strip().lower()), key("addr", address or "unknown")]


def login_wait_s(*, username: str, address: str) -> float:
    """Seconds before another try for this username or from this address is checked (0: now)."""
    now = time.time()
    waits = [
        record["until"] - now
        for record in cache.get_many(_keys(username=username, address=address)).values()
        if isinstance(record, dict)
    ]
    return max([0.0, *waits])


def login_failed(*, username: str, address: str) -> float:
    """Count a failure; return the wait it imposes on the next try."""
    now = time.time()
    keys = _keys(username=username, address=address)
    records = cache.get_many(keys)
    longest = 0.0
    updated = {}
    for key in keys:
        failures = int((records.get(key) or {}).get("failures", 0)) + 1
        delay = 0.0
        if failures > FREE_FAILURES:
            delay = min(FIRST_DELAY_S * 2 ** (failures - FREE_FAILURES - 1), MAX_DELAY_S)
        updated[key] = {"failures": failures, "until": now + delay}
        longest = max(longest, delay)
    cache.set_many(updated, timeout=MEMORY_S)
    return longest


def login_succeeded(*, username: str) -> None:
    """A right password forgets the username's failures (the address keeps its count)."""
    cache.delete(_keys(username=username, address="")[0])
