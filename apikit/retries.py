"""A call whose transaction PostgreSQL aborted for a conflict with another transaction is run
again, whole, a few times; never answered as a 500.

The statements that lock `leases_lease` rows take them in one order (id order, after the tree's
advisory locks: docs/design.md, "Lock order"), so two calls should never wait for each other in
a cycle. But PostgreSQL may still abort a transaction with SQLSTATE 40P01 (deadlock detected:
a lock order this code does not control, such as an index page, a foreign key's row lock, a
future statement) or 40001 (serialization failure). Either rolls the whole transaction back and
writes nothing, so the call is safe to run again from its start: `retried` does, up to
`ATTEMPTS` times with a short jittered pause (so the two parties of a cycle do not meet again
at once), and then raises `Busy` (503 `busy`, with `retry_after_s` and `Retry-After`).

Only the outermost call retries: inside an atomic block the transaction is already aborted and
only its owner can start it again, so a nested call lets the conflict through to it.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from apikit.errors import Busy

logger = logging.getLogger(__name__)

DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"
CONFLICT_SQLSTATES = frozenset({DEADLOCK_DETECTED, SERIALIZATION_FAILURE})
ATTEMPTS = 4
# The pause before try n (1-based, after the first) is drawn from [PAUSE_S, 2 * PAUSE_S] * n.
PAUSE_S = 0.02
RETRY_AFTER_S = 1.0

F = TypeVar("F", bound=Callable[..., Any])


def is_conflict(exception: BaseException | None) -> bool:
    """A transaction aborted for a deadlock or a serialization failure (Django's error wraps the
    driver's, which carries the SQLSTATE, as its __cause__)."""
    seen = exception
    for _ in range(5):
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) in CONFLICT_SQLSTATES:
            return True
        seen = seen.__cause__
    return False


def busy() -> Busy:
    return Busy(
        "the database aborted this call for a conflict with concurrent calls on every try; "
        "nothing was written; send it again",
        retry_after_s=RETRY_AFTER_S,
    )


def run_retried(call: Callable[[], Any], *, what: str = "a call") -> Any:
    """`call()`, run again while it fails for a conflict (at most ATTEMPTS tries), then `Busy`.
    Inside an atomic block it runs once: the block's owner retries."""
    if connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return call()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except DatabaseError as error:
            if not is_conflict(error):
                raise
            if attempt == ATTEMPTS:
                logger.warning("%s aborted for a conflict %d times", what, attempt, exc_info=True)
                raise busy() from error
            time.sleep(random.uniform(PAUSE_S, 2 * PAUSE_S) * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def retried(func: F) -> F:
    """Decorate a service whose transactions may meet others on the same rows (see the module)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_retried(lambda: func(*args, **kwargs), what=func.__qualname__)

    return wrapper  # type: ignore[return-value]
