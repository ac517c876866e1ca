"""Handoffs on the client's side: the requests a holder's renewal or heartbeat shows
(`PendingHandoff`), a request with its answer (`Handoff`), the sentences gctl and the MCP
server say, and `HandoffNotices`, which says each request once however many beats show it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from pydantic import Field

from groundcontrol_client.core.wire import Text, Time, WholeNumber, WireModel


class PendingHandoff(WireModel, title="handoff request"):
    """An open request on a tenure this hand holds, as its renewal or heartbeat showed it."""

    id: WholeNumber
    asker: Text = Field("", alias="from")
    resource: Text = ""
    # What the asker wants under it (absent: the resource itself).
    wanted: Text = Field(default_factory=lambda data: data.get("resource", ""))
    reason: Text = ""
    at: Time = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from": self.asker,
            "resource": self.resource,
            "wanted": self.wanted,
            "reason": self.reason,
            "at": self.at.isoformat().replace("+00:00", "Z") if self.at else None,
        }

    def sentence(self, resource: str | None = None) -> str:
        """`hand b asks for `src/auth/`: release when you can`, with the asker's reason."""
        name = self.resource or resource or "it"
        wants = f" (it wants `{self.wanted}`)" if self.wanted and self.wanted != name else ""
        why = f"{self.reason}; " if self.reason else ""
        return (
            f"hand {self.asker} asks for `{name}`{wants}: release when you can "
            f"({why}request {self.id})"
        )


class Handoff(WireModel, title="handoff request"):
    """A handoff request and its answer (`status`: open, released, declined, granted,
    withdrawn, lapsed); `message` says both in a sentence."""

    id: WholeNumber
    resource: Text = ""
    kind: Text = "resource"
    fence: WholeNumber = 0
    holder: Text = ""
    asker: Text = Field("", alias="from")
    wanted: Text = ""
    reason: Text = ""
    status: Text = ""
    ended_by: Text = ""
    answer: Text = ""
    message: Text = ""

    @property
    def answered(self) -> bool:
        return self.status != "open"

    def sentence(self) -> str:
        return self.message or f"handoff request {self.id}: {self.status}"


class HandoffNotices:
    """The requests a tenure's renewals have shown, each said once: `observe` takes a beat's
    list and returns the sentences of the requests not seen before; `take` hands the ones not
    yet said to whoever reports to the agent (the MCP session's notices). Thread-safe: the
    renewal thread observes, the agent's thread takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[int] = set()
        self._unsaid: list[str] = []
        self.open: tuple[PendingHandoff, ...] = ()

    def observe(self, requests: Iterable[PendingHandoff], resource: str | None = None) -> list[str]:
        requests = tuple(requests)
        with self._lock:
            self.open = requests
            new = [r for r in requests if r.id not in self._seen]
            self._seen.update(r.id for r in new)
            lines = [r.sentence(resource) for r in new]
            self._unsaid.extend(lines)
        return lines

    def take(self) -> list[str]:
        with self._lock:
            lines, self._unsaid = self._unsaid, []
        return lines


_NOTICES_LOCK = threading.Lock()
logger = logging.getLogger("groundcontrol_client")


class NoticesHandoffs:
    """A mixin for a held tenure (the runtime's attempt and lease): `handoffs`, its notices,
    made on first use (the renewal thread or the agent's, whichever comes first)."""

    _handoff_notices: HandoffNotices | None = None

    @property
    def handoffs(self) -> HandoffNotices:
        with _NOTICES_LOCK:
            if self._handoff_notices is None:
                self._handoff_notices = HandoffNotices()
            return self._handoff_notices

    def _noticed(self, requests: Iterable[PendingHandoff], resource: str) -> None:
        """A renewal's requests: each new one logged once (the agent reads `handoffs.take()`)."""
        for line in self.handoffs.observe(requests, resource):
            logger.warning("%s: %s", resource, line)
