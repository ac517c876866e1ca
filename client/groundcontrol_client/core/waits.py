"""A wait for a lease of any length (`wait_s`), as the server takes it: calls of at most its
`wait_s` limit each, every one after the first passing back the `ticket` of the last denial, so
the request keeps its place in line from call to call (the server keeps a place for the
denial's `ticket_kept_s`, more than the moment between two calls here). No I/O: the sync and the
async client drive it alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from groundcontrol_client.core.errors import LeaseHeld
from groundcontrol_client.core.limits import LIMITS


class LongWait:
    def __init__(
        self,
        wait_s: float | None,
        ticket: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.ticket = ticket
        self.total_s = max(float(wait_s or 0), 0.0)
        self.ends_at = clock() + self.total_s
        self.call_s = 0.0
        self.calls = 0

    def asked(self) -> dict[str, Any]:
        """The next call's `wait_s` and `ticket` (None: not sent): the first asks for the whole
        wait (up to the limit), each later one for what is left of it."""
        left = self.total_s if self.calls == 0 else max(self.ends_at - self.clock(), 0.0)
        self.calls += 1
        self.call_s = min(left, float(LIMITS["wait_s"]))
        return {"wait_s": self.call_s if self.total_s else None, "ticket": self.ticket}

    def again(self, denied: LeaseHeld) -> bool:
        """After `denied`: whether to ask again (time is left, and the place was kept), with
        the denial's ticket."""
        ticket = denied.get("ticket")
        if isinstance(ticket, int) and not isinstance(ticket, bool):
            self.ticket = ticket
        return self.total_s > 0 and self.ticket is not None and self.clock() < self.ends_at
