"""Friction reports: what got in the way, what the filer did instead, the minutes it cost, and
the refused calls it refers to, by request id (`POST /friction`, `GET /friction`).

    client.friction_file("the migrations lock was held all morning", instead="wrote the docs",
                         minutes=25, refusals=[error.request_id])

A hand files for its own lane and attempts; a supervisor (scope `supervise`) for any lane, lists
them, and exports them (`GET /friction/export`): the newest that match as one document to save or
paste into an issue tracker, a Markdown table with the total or the JSON list, as the server
wrote it:

    Path("friction.md").write_text(client.friction_export("md", lane="rewalk"))

`Client` and `AsyncClient` both have these calls (`FrictionCalls`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from groundcontrol_client.core.sending import Sending
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.wire import OrDefault, Text, Time, WholeNumber, WireModel


class LinkedRefusal(WireModel, title="friction report's refusal"):
    """A refused call a report refers to, as it was recorded: its code and time."""

    request_id: Text = ""
    code: Text = ""
    at: Time = None
    method: Text = ""
    path: Text = ""
    message: Text = ""


class FrictionReport(WireModel, title="friction report"):
    id: WholeNumber
    at: Time = None
    lane: Text | None = None
    run: WholeNumber | None = None
    attempt: WholeNumber | None = None
    hand: Text = ""
    what: Text = ""
    instead: Text = ""
    minutes: WholeNumber = 0
    refusals: OrDefault[list[LinkedRefusal]] = []


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


# An export's formats, as the server names them (`?format=`), and the media type each is.
EXPORT_MEDIA_TYPES = {"markdown": "text/markdown", "json": "application/json"}
# The names a caller may give: the server's, and `md` (a Markdown file's extension).
_EXPORT_NAMES = {"md": "markdown", "markdown": "markdown", "json": "json"}


def export_format(fmt: str) -> str:
    """The server's name for an export's format (`md` or `markdown`, `json`); a ValueError for
    any other, before anything is sent."""
    try:
        return _EXPORT_NAMES[fmt.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"an export is md (Markdown) or json, not {fmt!r}") from None


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


class FrictionCalls(Sending):
    """The friction calls, as steps (`core.steps`); `Client` and `AsyncClient` have them."""

    @call
    def friction_file(self, what: str, **fields: Any) -> Steps[FrictionReport]:
        """File a report (`friction_body`'s fields); each request id in `refusals` must be a
        refused call of yours (a supervisor's: any of the workspace's)."""
        body = friction_body(what, **fields)
        data = yield from self._request("POST", "friction", json=body)
        return FrictionReport.from_wire(data)

    @call
    def friction_reports(
        self, *, lane: str | None = None, since: str | None = None
    ) -> Steps[list[FrictionReport]]:
        """Every report (scope `supervise`), newest first; `since` an ISO time."""
        items = yield from self._list("friction", _filters(lane, since))
        return [FrictionReport.from_wire(r) for r in items]

    @call
    def friction_export(
        self, fmt: str, *, lane: str | None = None, since: str | None = None
    ) -> Steps[str]:
        """The newest reports that match (as many as the server exports: docs/api.md), as one
        document, exactly as the server wrote it: `"md"` (or `"markdown"`) a Markdown table and
        the total, `"json"` the JSON list (scope `supervise`; a lane-limited key: its lane's).
        `since` an ISO time. `friction_reports` reads them as objects, page by page."""
        name = export_format(fmt)
        params = {"format": name, **_filters(lane, since)}
        response = yield from self._send(
            "GET", "friction/export", params=params, headers={"Accept": EXPORT_MEDIA_TYPES[name]}
        )
        return response.text
