"""The rate limiter's blocks (apikit/ratelimit.py): never more than the limit admitted in a
window, however many processes share a key; one count per call while calls are slow; few round
trips while they are fast."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from django.test import override_settings

from apikit import ratelimit
from apikit.errors import RateLimited


class Clock:
    """Wall and monotonic time that move only when told to."""

    def __init__(self) -> None:
        self.now = 1_000_000 * 60.0 + 1  # a second into a window

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(ratelimit, "time", fake)
    return fake


class Spy:
    """Counts the round trips the limiter makes to the cache."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips = 0
        real = ratelimit._reserve

        def reserve(name: str, size: int) -> int | None:
            self.trips += 1
            return real(name, size)

        monkeypatch.setattr(ratelimit, "_reserve", reserve)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


@pytest.fixture
def caller() -> Iterator[str]:
    yield f"test-{uuid.uuid4().hex}"


def admitted(limiter: ratelimit.RateLimiter, caller: str, calls: int) -> int:
    count = 0
    for _ in range(calls):
        try:
            limiter.admit(caller)
            count += 1
        except RateLimited:
            pass
    return count


@override_settings(GC_RATE_LIMIT_PER_MINUTE=50)
def test_fast_calls_are_admitted_up_to_the_limit_in_few_round_trips(
    clock: Clock, spy: Spy, caller: str
) -> None:
    limiter = ratelimit.RateLimiter()
    assert admitted(limiter, caller, 50) == 50
    with pytest.raises(RateLimited) as refused:
        limiter.admit(caller)
    assert refused.value.fields["limit_per_minute"] == 50
    assert 0 < refused.value.fields["retry_after_s"] <= 60
    # Blocks of 1, 2, 4, 8, 16, 16, then what is left: far fewer trips than calls.
    assert spy.trips <= 8
    trips = spy.trips
    assert admitted(limiter, caller, 20) == 0
    assert spy.trips == trips  # a spent window is refused without asking Redis again


@override_settings(GC_RATE_LIMIT_PER_MINUTE=5)
def test_slow_calls_are_counted_one_at_a_time(clock: Clock, spy: Spy, caller: str) -> None:
    limiter = ratelimit.RateLimiter()
    for call in range(5):
        limiter.admit(caller)
        assert spy.trips == call + 1
        clock.now += ratelimit.SLOW_S + 0.1
    with pytest.raises(RateLimited):
        limiter.admit(caller)


@override_settings(GC_RATE_LIMIT_PER_MINUTE=30)
def test_many_processes_never_admit_more_than_the_limit(clock: Clock, caller: str) -> None:
    """Eight limiters (one per process) sharing the cache, each hammered by four threads: the
    limit holds across all of them, and reservations left unused cost at most BLOCK_MAX - 1 calls
    per process."""
    limiters = [ratelimit.RateLimiter() for _ in range(8)]
    counts: list[int] = []
    lock = threading.Lock()

    def hammer(limiter: ratelimit.RateLimiter) -> None:
        count = admitted(limiter, caller, 40)
        with lock:
            counts.append(count)

    threads = [
        threading.Thread(target=hammer, args=(limiter,)) for limiter in limiters for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(counts)
    assert total <= 30
    assert total >= 30 - len(limiters) * (ratelimit.BLOCK_MAX - 1)


@override_settings(GC_RATE_LIMIT_PER_MINUTE=3)
def test_a_new_window_starts_a_new_count(clock: Clock, caller: str) -> None:
    limiter = ratelimit.RateLimiter()
    assert admitted(limiter, caller, 5) == 3
    clock.now += ratelimit.WINDOW_S
    assert admitted(limiter, caller, 5) == 3


def test_a_new_limit_voids_the_blocks_held(clock: Clock, caller: str) -> None:
    limiter = ratelimit.RateLimiter()
    with override_settings(GC_RATE_LIMIT_PER_MINUTE=100):
        assert admitted(limiter, caller, 10) == 10  # holds a block with calls left in it
    with override_settings(GC_RATE_LIMIT_PER_MINUTE=12):
        # The window's count is what was reserved under the old limit (at least 10).
        assert admitted(limiter, caller, 10) <= 2


@override_settings(GC_RATE_LIMIT_PER_MINUTE=0)
def test_no_limit_counts_nothing(clock: Clock, spy: Spy, caller: str) -> None:
    assert admitted(ratelimit.RateLimiter(), caller, 10) == 10
    assert spy.trips == 0
