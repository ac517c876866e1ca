"""Handoffs on the client's side: the requests a holder's renewal or heartbeat shows
(`PendingHandoff`), a request with its answer (`Handoff`), the sentences gctl and the MCP
server say, and `HandoffNotices`, which says each request once however many beats show it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groundcontrol_client.errors import MalformedAnswer


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _id(data: dict[str, Any]) -> int:
    value = data.get("id")
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedAnswer(
            "the server's answer is not a valid handoff request: its id is not an integer",
            fields={"what": "handoff request"},
        )
    return value


@dataclass(frozen=True)
class PendingHandoff:
    """An open request on a tenure this hand holds, as its renewal or heartbeat showed it."""

    id: int
    asker: str
    resource: str
    wanted: str
    reason: str
    at: datetime | None

    @classmethod
    def from_wire(cls, data: Any) -> PendingHandoff:
        if not isinstance(data, dict):
            raise MalformedAnswer(
                "the server's answer is not a valid handoff request: an object was expected",
                fields={"what": "handoff request"},
            )
        resource = str(data.get("resource") or "")
        return cls(
            id=_id(data),
            asker=str(data.get("from") or ""),
            resource=resource,
            wanted=str(data.get("wanted") or resource),
            reason=str(data.get("reason") or ""),
            at=_time(data.get("at")),
        )

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


def pending_list(data: Any) -> tuple[PendingHandoff, ...]:
    """`handoff_requests` of an answer (absent from an older server's: none)."""
    if not isinstance(data, dict):
        return ()
    items = data.get("handoff_requests")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise MalformedAnswer(
            "the server's answer is not valid: handoff_requests is not a list",
            fields={"what": "handoff requests"},
        )
    return tuple(PendingHandoff.from_wire(item) for item in items)


@dataclass(frozen=True)
class Handoff:
    """A handoff request and its answer (`status`: open, released, declined, granted,
    withdrawn, lapsed); `message` says both in a sentence."""

    id: int
    resource: str
    kind: str
    fence: int
    holder: str
    asker: str
    wanted: str
    reason: str
    status: str
    ended_by: str
    answer: str
    message: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_wire(cls, data: Any) -> Handoff:
        if not isinstance(data, dict):
            raise MalformedAnswer(
                "the server's answer is not a valid handoff request: an object was expected",
                fields={"what": "handoff request"},
            )
        return cls(
            id=_id(data),
            resource=str(data.get("resource") or ""),
            kind=str(data.get("kind") or "resource"),
            fence=int(data.get("fence") or 0),
            holder=str(data.get("holder") or ""),
            asker=str(data.get("from") or ""),
            wanted=str(data.get("wanted") or ""),
            reason=str(data.get("reason") or ""),
            status=str(data.get("status") or ""),
            ended_by=str(data.get("ended_by") or ""),
            answer=str(data.get("answer") or ""),
            message=str(data.get("message") or ""),
            raw=data,
        )

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
