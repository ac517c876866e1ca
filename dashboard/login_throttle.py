"""Repeated failed logins are slowed, and guessing is capped.

Two layers, both in the cache (Redis in production, shared by every web worker; per process on
the embedded default):

- **Caps, counted before the password is checked.** Every try takes a place atomically
  (`cache.add` then `cache.incr`, atomic on Redis and on locmem) in three windows of
  `WINDOW_S`: its (username, address) pair's (`PAIR_LIMIT`), its username's across every
  address (`USERNAME_LIMIT`, looser: guessing one password from many addresses) and its
  address's across every username (`ADDRESS_LIMIT`). A try that finds any window full is
  refused and gives its places back, so N concurrent tries get at most the limit of password
  checks however they interleave. A window starts with its first try and is not extended by
  later ones.
- **Known addresses.** The username's window would let anyone lock a user out from everywhere
  (five addresses times ten tries filled it for 15 minutes, issue 33, item 9c). So a try from
  an address the username logged in from with its right password within `KNOWN_S` takes no
  place in it: the user's own addresses stay open whoever fills it, and answer to their pair's
  and the address's windows and waits, which only a guesser at that very address fills. An
  address is known by a success alone, so a guesser never makes one known, and many addresses
  guessing one password stay capped by the username's window.
- **A doubling wait**, per pair and per address: after `FREE_FAILURES` free failures each
  further failure doubles the wait before the next try is even checked (up to `MAX_DELAY_S`).
  It is read before the caps and written after the check, so concurrent tries can slip past it;
  the caps bound how many do.

A right password clears its pair (places and wait), gives back its own place in the
username's (if it took one) and the address's windows, and makes the address known to the
username for `KNOWN_S`; the other failures there stand, so the real user logging in does not
hand an attacker elsewhere a fresh allowance for the username.

The wait is measured on this worker's clock: it guards a password form, not a lease, and a few
seconds of skew between workers only shifts a penalty.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.core.cache import cache
from redis.exceptions import RedisError

from apikit.errors import DependencyUnavailable

P = ParamSpec("P")
R = TypeVar("R")

FREE_FAILURES = 5
FIRST_DELAY_S = 2.0
MAX_DELAY_S = 15 * 60
# How long a quiet pair or address keeps its wait; a success forgets the pair's at once.
MEMORY_S = 24 * 3600

# The caps: password checks per window of WINDOW_S.
WINDOW_S = 15 * 60
PAIR_LIMIT = 10  # one address guessing one username
USERNAME_LIMIT = 50  # one username, from every address together, but its known ones
ADDRESS_LIMIT = 50  # one address, over every username together
# How long a right password makes its address known to its username (renewed by each try from
# it, so that a record does not end between a try and its success).
KNOWN_S = 30 * 24 * 3600


def _key(kind: str, *values: str) -> str:
    digest = hashlib.sha256("\0".join(values).encode()).hexdigest()[:32]
    return f"gc:login:{kind}:{digest}"


def _normal(username: str) -> str:
    return username.strip().lower()


def _pair_key(username: str, address: str) -> str:
    return _key("pair", _normal(username), address or "unknown")


def _address_key(address: str) -> str:
    return _key("addr", address or "unknown")


def _known_key(username: str, address: str) -> str:
    return _key("known", _normal(username), address or "unknown")


def _wait_keys(*, username: str, address: str) -> list[str]:
    return [_pair_key(username, address), _address_key(address)]


def _user_window(username: str) -> str:
    return "n:" + _key("user", _normal(username))


def _windows(*, username: str, address: str, known: bool) -> list[tuple[str, int]]:
    """The windows a try takes a place in: a known address's none of the username's."""
    return [
        ("n:" + _pair_key(username, address), PAIR_LIMIT),
        *([] if known else [(_user_window(username), USERNAME_LIMIT)]),
        ("n:" + _address_key(address), ADDRESS_LIMIT),
    ]


def _known(*, username: str, address: str) -> bool:
    """The username logged in from this address within `KNOWN_S` (renewed for as long again:
    a try's success then finds it as the try did)."""
    return bool(cache.touch(_known_key(username, address), KNOWN_S))


def _take(key: str) -> int:
    """This try's place in the window at key (1 for the first), counted atomically."""
    for _ in range(3):
        if cache.add(key, 0, timeout=WINDOW_S):
            cache.add(key + ":end", time.time() + WINDOW_S, timeout=WINDOW_S)
        try:
            return cache.incr(key)
        except ValueError:  # the window ended between the add and the incr: open the next
            continue
    raise RuntimeError(f"could not count a login try at {key}")


def _give_back(key: str) -> None:
    try:
        cache.decr(key)
    except ValueError:  # the window has ended already
        pass


def _store_required(func: Callable[P, R]) -> Callable[P, R]:
    """Fail closed: with its store (Redis) out of reach a try is counted nowhere, so it is not
    checked at all; the page answers 503, as for a database outage (dashboard/outage.py)."""

    @functools.wraps(func)
    def counted(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except RedisError as error:
            raise DependencyUnavailable(
                "the login throttle's store is unreachable; nothing was checked; retry later"
            ) from error

    return counted


@_store_required
def login_attempt(*, username: str, address: str) -> float:
    """Take this try's places before its password is checked: 0 to check it, else the seconds
    until one of its full windows ends (the try is refused and has given its places back)."""
    taken: list[str] = []
    full: list[str] = []
    known = _known(username=username, address=address)
    for key, limit in _windows(username=username, address=address, known=known):
        taken.append(key)
        if _take(key) > limit:
            full.append(key)
            break
    if not full:
        return 0.0
    for key in taken:
        _give_back(key)
    end = cache.get(full[0] + ":end")
    remaining = (end - time.time()) if isinstance(end, (int, float)) else WINDOW_S
    return max(1.0, min(float(remaining), float(WINDOW_S)))


@_store_required
def login_wait_s(*, username: str, address: str) -> float:
    """Seconds before another try for this pair or from this address is checked (0: now)."""
    now = time.time()
    waits = [
        record["until"] - now
        for record in cache.get_many(_wait_keys(username=username, address=address)).values()
        if isinstance(record, dict)
    ]
    return max([0.0, *waits])


@_store_required
def login_failed(*, username: str, address: str) -> float:
    """Count a failure; return the wait it imposes on the next try."""
    now = time.time()
    keys = _wait_keys(username=username, address=address)
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


@_store_required
def login_succeeded(*, username: str, address: str) -> None:
    """A right password clears its pair, gives back its own place in the username's window (a
    try from a known address took none) and the address's (their other failures, and the
    address's wait, stand), and makes the address known to the username."""
    # Known at the try means known now: the try renewed the record. (Unknown at the try and
    # known now, after another success of this pair meanwhile, leaves one place taken: safe.)
    known = _known(username=username, address=address)
    windows = [key for key, _ in _windows(username=username, address=address, known=known)]
    pair = windows.pop(0)
    cache.delete_many([pair, pair + ":end", _pair_key(username, address)])
    for key in windows:
        _give_back(key)
    cache.set(_known_key(username, address), 1, timeout=KNOWN_S)
