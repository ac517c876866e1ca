"""A lane's schedules, the record of their tries and its GitHub integrations, as the server
answers them (`/lanes/{slug}/schedules`, `/lanes/{slug}/github-integrations`): typed, read-only,
the full JSON kept in `raw` as every model of the client does (`groundcontrol_client.core.wire`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from groundcontrol_client.core.wire import (
    Flag,
    OrDefault,
    StrictTime,
    Text,
    Time,
    WholeNumber,
    WireModel,
)


class Schedule(WireModel, title="schedule"):
    """Each period of `cron` (UTC) makes a work package keyed `key_pattern` ({date}, {time}
    substituted) in `lane`, with `runs` (each as a run-create body). `planned`: the next
    periods, empty while the schedule is off."""

    id: WholeNumber
    lane: Text
    cron: Text
    key_pattern: Text
    title_pattern: Text
    runs: OrDefault[list[dict[str, Any]]] = []
    active: Flag
    periods_after: Time = None
    planned: OrDefault[list[StrictTime]] = []
    created_at: Time = None
    created_by: Text = ""


class ScheduleTry(WireModel, title="schedule try"):
    """What the beat job did for one period (`date_key`, e.g. 2030-01-02T06:00Z): `created`
    the package (`work_package`), found it `existing`, or `failed` (with `error`; tried again
    on the next tick)."""

    id: WholeNumber
    date_key: Text
    at: Time = None
    outcome: Text  # created | existing | failed
    error: Text | None = None
    work_package: WholeNumber | None = None


class GitHubIntegration(WireModel, title="GitHub integration"):
    """A lane's GitHub webhook: GitHub delivers to `delivery_path` on the server, signed with
    the secret. `secret` is set only in the answer that created it (never in a listing, nor in
    an Idempotency-Key replay of that answer)."""

    id: WholeNumber
    lane: Text
    repository: Text | None = None  # owner/name: only its deliveries act (None: acts on nothing)
    label: Text | None = None  # only issues with this label become packages
    active: Flag
    delivery_path: Text
    created_at: Time = None
    created_by: Text = ""
    secret: Text | None = None


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def describe_try(row: ScheduleTry) -> str:
    """e.g. "2030-01-02T06:00Z: created work package 12", "…: failed: <why>"."""
    text = f"{row.date_key}: {row.outcome}"
    if row.work_package is not None:
        text += f" work package {row.work_package}"
    if row.error:
        text += f": {row.error}"
    return text


def describe_schedule(schedule: Schedule, latest: ScheduleTry | None = None) -> str:
    """Two lines: what it makes, then its next planned periods (UTC) and its latest try."""
    runs = len(schedule.runs)
    head = (
        f"schedule {schedule.id}: {schedule.cron} (UTC) makes {schedule.key_pattern} "
        f"{schedule.title_pattern!r} with {runs} run{'' if runs == 1 else 's'}"
        + ("" if schedule.active else " (off)")
    )
    planned = ", ".join(map(_utc, schedule.planned)) if schedule.active else "none while off"
    last = describe_try(latest) if latest is not None else "none yet"
    return f"{head}\n  next (UTC): {planned}; last try: {last}"


def describe_integration(integration: GitHubIntegration) -> str:
    label = f", issues labelled {integration.label}" if integration.label else ""
    state = "" if integration.active else " (off)"
    repository = integration.repository or "no repository"
    return (
        f"GitHub integration {integration.id} ({repository}): "
        f"{integration.delivery_path}{label}{state}"
    )
