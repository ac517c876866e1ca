"""How many `wait_s` acquires may sleep at once: per key, per workspace and per web process.

A waiting acquire holds its web thread, and that thread's database connection, for up to 60 s
(leases/waiting.py). Unbounded, one key inside its rate limit could put every thread of every
web process to sleep, and nobody else would be answered. So before it sleeps a wait takes a
permit of each kind below; a call that cannot is refused at once with 429 `rate_limited` and
`retry_after_s` (it may try again, or acquire without `wait_s`). An acquire that is granted on
its first try needs no permit.

1. The process: at most `GC_WAITS_PER_PROCESS` of its threads (half of `GC_WEB_THREADS` unless
   set) sleep in a wait, so the other threads are always there for calls that do not wait; and
   one workspace's waits take at most half of those permits (rounded up: `share`), so one
   workspace that fills its own cap (`GC_WAITS_PER_WORKSPACE`, 16, more than a process's 6)
   never leaves another workspace's waits without a permit. Counted in memory.
2. The key and the workspace: at most `GC_WAITS_PER_KEY` and `GC_WAITS_PER_WORKSPACE` waits
   across every web process. A permit is one of N numbered session advisory locks, taken with
   `pg_try_advisory_lock` (which never blocks) on the waiting thread's own
   connection (the direct one, `DATABASE_DIRECT_URL`, when there is one: behind a transaction
   pooler a session lock would stay on a server connection the next client gets): a process
   killed while it waits loses its connections, and their permits with them, so none leaks.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from apikit import reads
from apikit.errors import RateLimited

logger = logging.getLogger(__name__)

# A refused wait may try again this much later: waits end within seconds (a release wakes them)
# or at their `wait_s`, at most a minute.
RETRY_AFTER_S = 1.0
# Each key's (and workspace's) advisory locks are a block of numbers: a cap of up to 2**16.
_BLOCK_BITS = 16
MAX_WAITS = 2**_BLOCK_BITS

# Each cap's setting and the refusal's sentence (`waits_of` is the key).
_WHOSE = {
    "process": ("GC_WAITS_PER_PROCESS", "this web process already has {n} acquires waiting"),
    "workspace_in_process": (
        "half of GC_WAITS_PER_PROCESS",
        "this workspace already has {n} acquires waiting in this web process",
    ),
    "key": ("GC_WAITS_PER_KEY", "this key already has {n} acquires waiting"),
    "workspace": ("GC_WAITS_PER_WORKSPACE", "this workspace already has {n} acquires waiting"),
}


def cap(whose: str) -> int:
    """The number of waits that may sleep at once for one `whose` (process, a workspace in the
    process, key, workspace)."""
    if whose == "workspace_in_process":
        return share(cap("process"))
    return min(int(getattr(settings, _WHOSE[whose][0])), MAX_WAITS)


def share(process_cap: int) -> int:
    """One workspace's waits in one process: half of the process's permits, rounded up, so the
    rest are always another workspace's (a cap of 1 has nothing to share)."""
    return (process_cap + 1) // 2


def refusal(whose: str) -> RateLimited:
    setting, sentence = _WHOSE[whose]
    limit = cap(whose)
    return RateLimited(
        f"{sentence.format(n=limit)} ({setting}); retry in {RETRY_AFTER_S:g}s, "
        "or acquire without wait_s",
        retry_after_s=RETRY_AFTER_S,
        waits_of=whose,
        waits_limit=limit,
    )


class _Counts:
    """Permits counted in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int], int] = {}

    def take(self, wanted: list[tuple[tuple[str, int], int]]) -> tuple[str, int] | None:
        """A permit of each `(name, limit)`, all or none: the first name that is full, else
        None (all taken). Together, so that no other thread sees a permit taken for a call
        that another cap then refuses."""
        with self._lock:
            for name, limit in wanted:
                if self._held.get(name, 0) >= limit:
                    return name
            for name, _ in wanted:
                self._held[name] = self._held.get(name, 0) + 1
            return None

    def give(self, name: tuple[str, int]) -> None:
        with self._lock:
            held = self._held.get(name, 0) - 1
            if held > 0:
                self._held[name] = held
            else:
                self._held.pop(name, None)

    def held(self, name: tuple[str, int]) -> int:
        with self._lock:
            return self._held.get(name, 0)


counts = _Counts()


@contextmanager
def _counted(workspace_id: int) -> Iterator[None]:
    """The process's permit and its workspace's share of them, both or neither. The share is
    asked first: a workspace that has its share is told so, even when the process is full too."""
    wanted = [
        (("workspace_in_process", workspace_id), cap("workspace_in_process")),
        (("process", 0), cap("process")),
    ]
    full = counts.take(wanted)
    if full is not None:
        raise refusal(full[0])
    try:
        yield
    finally:
        for name, _ in wanted:
            counts.give(name)


def lock_base(whose: str, ident: int) -> int:
    """The first of the advisory lock numbers of one key or workspace (a signed 64-bit number
    whose low bits are clear, so that base + i for i below MAX_WAITS stays in its block)."""
    digest = hashlib.blake2b(f"gc-wait:{whose}:{ident}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True) & ~(MAX_WAITS - 1)


# The first free one of N numbered locks, or NULL: the scan stops at the first lock taken, so a
# call takes at most one of each block.
_TAKE_ONE = (
    "(SELECT %s::bigint + i FROM generate_series(0, %s - 1) AS i "
    "WHERE pg_try_advisory_lock(%s::bigint + i) LIMIT 1)"
)


@contextmanager
def _advisory(key_id: int, workspace_id: int) -> Iterator[None]:
    wanted = [("key", key_id), ("workspace", workspace_id)]
    params: list[int] = []
    for whose, ident in wanted:
        base = lock_base(whose, ident)
        params += [base, cap(whose), base]
    db = connections[reads.direct_alias()]
    with db.cursor() as cursor:
        cursor.execute(f"SELECT {_TAKE_ONE}, {_TAKE_ONE}", params)
        taken = cursor.fetchone()
    try:
        for (whose, _), lock in zip(wanted, taken, strict=True):
            if lock is None:
                raise refusal(whose)
        yield
    finally:
        _unlock(db, [lock for lock in taken if lock is not None])


def _unlock(db: BaseDatabaseWrapper, locks: list[int]) -> None:
    if not locks:
        return
    try:
        with db.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(lock) FROM unnest(%s::bigint[]) AS lock", [locks]
            )
    except DatabaseError:
        # A connection that cannot unlock must not keep its permits for its next request.
        logger.warning("could not release wait permits; closing the connection", exc_info=True)
        db.close()


@contextmanager
def wait_permit(*, key_id: int, workspace_id: int) -> Iterator[None]:
    """Hold a permit to wait for the call's duration; RateLimited at once when one is full."""
    with ExitStack() as stack:
        stack.enter_context(_counted(workspace_id))
        stack.enter_context(_advisory(key_id, workspace_id))
        yield
