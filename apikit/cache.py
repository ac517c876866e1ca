"""The cache: Django's Redis cache with the costs the request path paid removed (`incr` is one
round trip, where Django's asks EXISTS, then INCRBY, on a connection of the calling thread's own,
and the Redis client objects are built once per process instead of once per call; everything
else is Django's `RedisCache`), and `advisory`, the one guard for a use of the cache that may
go without it.

Redis is never the source of truth: what a call keeps there (the rate limiter's counts) is
advisory, and an outage must cost only that, never an answer. The one use that refuses
instead is the login throttle's (dashboard/login_throttle.py): an uncounted try would be an
unthrottled one, so it answers 503.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Increment only an existing key (Django's contract: a missing key is a ValueError), atomically.
_INCR_EXISTING = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) end
return nil
"""
_INCR_SHA = hashlib.sha1(_INCR_EXISTING.encode()).hexdigest()

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


def advisory(what: str, default: R) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """For a function whose work is only the cache's and may be done without: when it fails
    (Redis refused, timing out, out of memory, or anything else the cache raises), the failure
    is logged, as `what`, and the function answers `default` (an immutable value), so no call
    and no page fails because the cache did."""

    def guard(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return func(*args, **kwargs)
            except Exception:  # noqa: BLE001 - any cache failure is survived, on purpose
                logger.warning("the cache is unavailable: %s", what, exc_info=True)
                return default

        return guarded

    return guard


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._pinned = threading.local()

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        # A redis.Redis over a connection pool is thread-safe: share one per pool.
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._client(
                connection_pool=self._get_connection_pool(write)
            )
        return client

    def incr(self, key: Any, delta: int) -> int:
        # On this thread's own connection, straight through redis-py's connection: the client's
        # command machinery (pool checkout, retries, script objects) cost three times the round
        # trip's CPU, on the rate limiter that every hand call passes (docs/performance.md).
        connection = getattr(self._pinned, "connection", None)
        if connection is None:
            connection = self._get_connection_pool(True).get_connection()
            self._pinned.connection = connection
        try:
            value = _incr(connection, key, delta)
        except RedisConnectionError:
            # A connection Redis closed while it sat idle (a restart, a client timeout, a kill)
            # fails on its first write: once more on a new one. Had the answer been lost rather
            # than the command, the count is taken twice: a limit a call stricter, never looser.
            connection.disconnect()
            try:
                value = _incr(connection, key, delta)
            except (RedisConnectionError, RedisTimeoutError):
                connection.disconnect()  # the next call connects again
                raise
        except RedisTimeoutError:
            connection.disconnect()  # the next call connects again
            raise
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return int(value)


def _incr(connection: Any, key: Any, delta: int) -> Any:
    try:
        return _run(connection, "EVALSHA", _INCR_SHA, 1, key, delta)
    except NoScriptError:  # a restarted Redis has forgotten the script
        _run(connection, "SCRIPT", "LOAD", _INCR_EXISTING)
        return _run(connection, "EVALSHA", _INCR_SHA, 1, key, delta)


def _run(connection: Any, *command: Any) -> Any:
    connection.send_command(*command)
    return connection.read_response()


class RedisCache(DjangoRedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        # Without the memcached key checks (a loop over every character, on every hand call):
        # Redis takes any key, and the rate limiter's are plain ASCII.
        return self._cache.incr(self.make_key(key, version=version), delta)
