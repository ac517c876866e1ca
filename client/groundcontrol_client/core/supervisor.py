"""A supervisor's calls (a `plan` key; reads also with `supervise`): a lane's schedules, the
record of their tries, and its GitHub integrations. `Client` and `AsyncClient` have them all:

    client.schedule_create("rewalk", cron="0 6 * * *", key_pattern="daily-{date}",
                           title_pattern="Rewalk of {date}", runs=[{"title": "Walk"}])
    issued = client.github_integration_create("rewalk", repository="acme/app", label="agent")
    issued.secret   # shown in this answer only: set it as the GitHub webhook's secret

The creating calls send an `Idempotency-Key` (a new one per call unless given), so they are
retried like any other call: a retry whose first answer was lost gets that answer and creates
nothing. A GitHub integration's replayed answer carries no secret (the server never stores it
for a replay): `secret` is then None, and the way on is to delete that integration and create
another.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from groundcontrol_client.core.schedules import GitHubIntegration, Schedule, ScheduleTry
from groundcontrol_client.core.sending import Sending
from groundcontrol_client.core.steps import Steps, call

IDEMPOTENCY_HEADER = "Idempotency-Key"


def lane_path(lane: str, *rest: object) -> str:
    """`lanes/<slug>/...`, the slug quoted as one path segment."""
    return "/".join([f"lanes/{quote(lane, safe='')}", *(str(part) for part in rest)])


def idempotency_headers(key: str | None) -> dict[str, str]:
    """The header a creating call is sent with: `key`, else a new one for this call (kept
    across its retries, so a retry whose first answer was lost creates nothing twice)."""
    return {IDEMPOTENCY_HEADER: key or f"gc-{uuid.uuid4().hex}"}


class SupervisorCalls(Sending):
    """A supervisor's calls, as steps (`core.steps`); `Client` and `AsyncClient` have them."""

    # --- schedules ------------------------------------------------------------------------------

    @call
    def schedules(self, lane: str) -> Steps[list[Schedule]]:
        """The lane's schedules, newest first, each with its next planned periods (UTC)."""
        items = yield from self._list(lane_path(lane, "schedules"))
        return [Schedule.from_wire(item) for item in items]

    @call
    def schedule(self, lane: str, schedule_id: int) -> Steps[Schedule]:
        data = yield from self._request("GET", lane_path(lane, "schedules", schedule_id))
        return Schedule.from_wire(data)

    @call
    def schedule_create(
        self,
        lane: str,
        *,
        cron: str,
        key_pattern: str,
        title_pattern: str,
        runs: Iterable[Mapping[str, Any]] = (),
        active: bool = True,
        idempotency_key: str | None = None,
    ) -> Steps[Schedule]:
        """A schedule: each period of `cron` (five fields, UTC) makes a work package keyed
        `key_pattern` ({date}, and {time} for more than one period a day) with `runs`, each a
        run-create body (`run_plan(...)` makes one). Its first period is the first after now."""
        body = {
            "cron": cron,
            "key_pattern": key_pattern,
            "title_pattern": title_pattern,
            "runs": [dict(run) for run in runs],
            "active": active,
        }
        answer = yield from self._request(
            "POST",
            lane_path(lane, "schedules"),
            json=body,
            headers=idempotency_headers(idempotency_key),
        )
        return Schedule.from_wire(answer)

    @call
    def schedule_update(
        self,
        lane: str,
        schedule_id: int,
        *,
        cron: str | None = None,
        key_pattern: str | None = None,
        title_pattern: str | None = None,
        runs: Iterable[Mapping[str, Any]] | None = None,
        active: bool | None = None,
    ) -> Steps[Schedule]:
        """Change what is given (None: unchanged). A new `cron`, or `active=True` on a schedule
        that was off, starts from now: the periods it missed are not made. Safe to repeat."""
        body: dict[str, Any] = {
            name: value
            for name, value in (
                ("cron", cron),
                ("key_pattern", key_pattern),
                ("title_pattern", title_pattern),
                ("active", active),
            )
            if value is not None
        }
        if runs is not None:
            body["runs"] = [dict(run) for run in runs]
        answer = yield from self._request(
            "PATCH", lane_path(lane, "schedules", int(schedule_id)), json=body
        )
        return Schedule.from_wire(answer)

    @call
    def schedule_delete(self, lane: str, schedule_id: int) -> Steps[None]:
        """The schedule and its tries; the work packages it made stay."""
        yield from self._request("DELETE", lane_path(lane, "schedules", int(schedule_id)))

    @call
    def schedule_tries(self, lane: str, schedule_id: int) -> Steps[list[ScheduleTry]]:
        """What the beat job did for each period of the schedule, newest first."""
        path = lane_path(lane, "schedules", int(schedule_id), "tries")
        items = yield from self._list(path)
        return [ScheduleTry.from_wire(item) for item in items]

    @call
    def schedule_latest_try(self, lane: str, schedule_id: int) -> Steps[ScheduleTry | None]:
        """The newest try only (one page of one), or None before the first period."""
        path = lane_path(lane, "schedules", int(schedule_id), "tries")
        page = (yield from self._request("GET", path, params={"limit": 1})) or []
        return ScheduleTry.from_wire(page[0]) if page else None

    # --- GitHub integrations --------------------------------------------------------------------

    @call
    def github_integrations(self, lane: str) -> Steps[list[GitHubIntegration]]:
        """The lane's GitHub integrations, newest first (without their secrets)."""
        path = lane_path(lane, "github-integrations")
        items = yield from self._list(path)
        return [GitHubIntegration.from_wire(item) for item in items]

    @call
    def github_integration_create(
        self,
        lane: str,
        *,
        repository: str,
        label: str | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[GitHubIntegration]:
        """An integration of `repository` (`owner/name`: only its deliveries act), made with a
        key holding `attest` (its secret attests CI's grade): its `secret` (this answer only)
        goes into the repository's GitHub webhook with the server's URL + `delivery_path` as
        the payload URL. With `label`, only issues that carry it become the lane's work
        packages."""
        answer = yield from self._request(
            "POST",
            lane_path(lane, "github-integrations"),
            json={"repository": repository, "label": label},
            headers=idempotency_headers(idempotency_key),
        )
        return GitHubIntegration.from_wire(answer)

    @call
    def github_integration_delete(self, lane: str, integration_id: int) -> Steps[None]:
        """GitHub's deliveries to it are refused from now on (signature_invalid)."""
        yield from self._request(
            "DELETE", lane_path(lane, "github-integrations", int(integration_id))
        )
