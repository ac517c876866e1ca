"""Friction reports: what got in the way, what the filer did instead, the minutes it cost, and
the refused calls it refers to, by request id (`POST /friction`, `GET /friction`).

    client.friction_file("the migrations lock was held all morning", instead="wrote the docs",
                         minutes=25, refusals=[error.request_id])

A hand files for its own lane and attempts; a supervisor (scope `supervise`) for any lane, and
lists them. `Client` and `AsyncClient` both have these calls (`FrictionCalls`,
`AsyncFrictionCalls`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groundcontrol_client.models import _int, _parsing, _time


@dataclass(frozen=True)
class LinkedRefusal:
    """A refused call a report refers to, as it was recorded: its code and time."""

    request_id: str
    code: str
    at: datetime | None
    method: str
    path: str
    message: str

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> LinkedRefusal:
        return cls(
            request_id=str(data.get("request_id") or ""),
            code=str(data.get("code") or ""),
            at=_time(data.get("at")),
            method=str(data.get("method") or ""),
            path=str(data.get("path") or ""),
            message=str(data.get("message") or ""),
        )


@dataclass(frozen=True)
class FrictionReport:
    id: int
    at: datetime | None
    lane: str | None
    run: int | None
    attempt: int | None
    hand: str
    what: str
    instead: str
    minutes: int
    refusals: list[LinkedRefusal]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("friction report")
    def from_wire(cls, data: dict[str, Any]) -> FrictionReport:
        return cls(
            id=_int(data, "id"),
            at=_time(data.get("at")),
            lane=str(data["lane"]) if data.get("lane") else None,
            run=data.get("run") if isinstance(data.get("run"), int) else None,
            attempt=data.get("attempt") if isinstance(data.get("attempt"), int) else None,
            hand=str(data.get("hand") or ""),
            what=str(data.get("what") or ""),
            instead=str(data.get("instead") or ""),
            minutes=int(data.get("minutes") or 0),
            refusals=[LinkedRefusal.from_wire(item) for item in data.get("refusals") or []],
            raw=data,
        )


def friction_body(
    what: str,
    *,
    instead: str | None = None,
    minutes: int | None = None,
    lane: str | None = None,
    run: int | None = None,
    attempt: int | None = None,
    refusals: Iterable[str] = (),
) -> dict[str, Any]:
    body: dict[str, Any] = {"what": what, "refusals": list(refusals)}
    for name, value in (
        ("instead", instead),
        ("minutes", minutes),
        ("lane", lane),
        ("run", run),
        ("attempt", attempt),
    ):
        if value is not None:
            body[name] = value
    return body


def _filters(lane: str | None, since: str | None) -> Mapping[str, Any]:
    return {"lane": lane, "since": since}


def describe_report(report: FrictionReport) -> str:
    """One line: "#4 rewalk, 25 min: the lock was held (lease_held at 10:02:11)"."""
    where = report.lane or "no lane"
    linked = ", ".join(
        f"{link.code} at {link.at:%H:%M:%S}" if link.at else link.code for link in report.refusals
    )
    return (
        f"#{report.id} {where}, {report.minutes} min: {report.what}"
        + (f" (instead: {report.instead})" if report.instead else "")
        + (f" [{linked}]" if linked else "")
    )


class FrictionCalls:
    """`Client`'s friction calls (it supplies `request` and `_list`)."""

    def request(self, method: str, path: str, **options: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _list(self, path: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        raise NotImplementedError  # pragma: no cover

    def friction_file(self, what: str, **fields: Any) -> FrictionReport:
        """File a report (`friction_body`'s fields); each request id in `refusals` must be a
        refused call of yours (a supervisor's: any of the workspace's)."""
        body = friction_body(what, **fields)
        return FrictionReport.from_wire(self.request("POST", "friction", json=body))

    def friction_reports(
        self, *, lane: str | None = None, since: str | None = None
    ) -> list[FrictionReport]:
        """Every report (scope `supervise`), newest first; `since` an ISO time."""
        return [FrictionReport.from_wire(r) for r in self._list("friction", _filters(lane, since))]


class AsyncFrictionCalls:
    """`AsyncClient`'s friction calls."""

    async def request(self, method: str, path: str, **options: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    async def _list(
        self, path: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    async def friction_file(self, what: str, **fields: Any) -> FrictionReport:
        body = friction_body(what, **fields)
        return FrictionReport.from_wire(await self.request("POST", "friction", json=body))

    async def friction_reports(
        self, *, lane: str | None = None, since: str | None = None
    ) -> list[FrictionReport]:
        rows = await self._list("friction", _filters(lane, since))
        return [FrictionReport.from_wire(r) for r in rows]
