"""A lane's schedules, the record of their tries and its GitHub integrations, as the server
answers them (`/lanes/{slug}/schedules`, `/lanes/{slug}/github-integrations`): typed, read-only,
the full JSON kept in `raw` as every model of the client does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groundcontrol_client.errors import MalformedAnswer
from groundcontrol_client.models import _int, _parsing, _time


def _bool(data: dict[str, Any], name: str) -> bool:
    value = data[name]
    if not isinstance(value, bool):
        raise MalformedAnswer(f"{name} is {value!r}, not true or false")
    return value


def _times(value: Any) -> list[datetime]:
    if not isinstance(value, list):
        raise MalformedAnswer(f"planned is {value!r}, not a list")
    times = [_time(item) for item in value]
    if any(moment is None for moment in times):
        raise MalformedAnswer(f"planned holds {value!r}, not only times")
    return [moment for moment in times if moment is not None]


@dataclass(frozen=True)
class Schedule:
    """Each period of `cron` (UTC) makes a work package keyed `key_pattern` ({date}, {time}
    substituted) in `lane`, with `runs` (each as a run-create body). `planned`: the next
    periods, empty while the schedule is off."""

    id: int
    lane: str
    cron: str
    key_pattern: str
    title_pattern: str
    runs: list[dict[str, Any]]
    active: bool
    periods_after: datetime | None
    planned: list[datetime]
    created_at: datetime | None
    created_by: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("schedule")
    def from_wire(cls, data: dict[str, Any]) -> Schedule:
        runs = data.get("runs") or []
        if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
            raise MalformedAnswer(f"runs is {runs!r}, not a list of objects")
        return cls(
            id=_int(data, "id"),
            lane=str(data["lane"]),
            cron=str(data["cron"]),
            key_pattern=str(data["key_pattern"]),
            title_pattern=str(data["title_pattern"]),
            runs=runs,
            active=_bool(data, "active"),
            periods_after=_time(data.get("periods_after")),
            planned=_times(data.get("planned") or []),
            created_at=_time(data.get("created_at")),
            created_by=str(data.get("created_by") or ""),
            raw=data,
        )


@dataclass(frozen=True)
class ScheduleTry:
    """What the beat job did for one period (`date_key`, e.g. 2030-01-02T06:00Z): `created`
    the package (`work_package`), found it `existing`, or `failed` (with `error`; tried again
    on the next tick)."""

    id: int
    date_key: str
    at: datetime | None
    outcome: str  # created | existing | failed
    error: str | None
    work_package: int | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("schedule try")
    def from_wire(cls, data: dict[str, Any]) -> ScheduleTry:
        package = data.get("work_package")
        return cls(
            id=_int(data, "id"),
            date_key=str(data["date_key"]),
            at=_time(data.get("at")),
            outcome=str(data["outcome"]),
            error=str(data["error"]) if data.get("error") else None,
            work_package=None if package is None else _int(data, "work_package"),
            raw=data,
        )


@dataclass(frozen=True)
class GitHubIntegration:
    """A lane's GitHub webhook: GitHub delivers to `delivery_path` on the server, signed with
    the secret. `secret` is set only in the answer that created it (never in a listing, nor in
    an Idempotency-Key replay of that answer)."""

    id: int
    lane: str
    repository: str | None  # owner/name: only its deliveries act (None: one that acts on nothing)
    label: str | None  # only issues with this label become packages
    active: bool
    delivery_path: str
    created_at: datetime | None
    created_by: str
    secret: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("GitHub integration")
    def from_wire(cls, data: dict[str, Any]) -> GitHubIntegration:
        return cls(
            id=_int(data, "id"),
            lane=str(data["lane"]),
            repository=str(data["repository"]) if data.get("repository") else None,
            label=str(data["label"]) if data.get("label") else None,
            active=_bool(data, "active"),
            delivery_path=str(data["delivery_path"]),
            created_at=_time(data.get("created_at")),
            created_by=str(data.get("created_by") or ""),
            secret=str(data["secret"]) if data.get("secret") else None,
            raw=data,
        )


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
