"""The periodic jobs as the machines run them: each run timed and recorded in JobRun (shared by
every worker, read by /metrics), webhook delivery started when a job wrote events; retention;
and the counts /metrics reads. The jobs themselves are the apps' (`fleet.jobs`,
`webhooks.services`); Celery (`ops.tasks`) and the embedded scheduler call them through here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import connection
from django.db.models import F

from fleet import jobs as fleet_jobs
from fleet.attempts.idle_sweep import IdleResult, attempts_flag_idle
from fleet.attempts.selectors import tenure_state_sql
from fleet.jobs import KeyRevokeResult, SweepResult
from fleet.models import Attempt, Report
from harnesses.models import HookSession
from leases.clock import db_now, now_expression, now_sql, parse_timestamp, plus_seconds_sql
from leases.jobs import MAX_BATCHES, JobResult, rows, seconds_param
from leases.models import (
    AddressRefusal,
    Event,
    FenceReceipt,
    FenceVerification,
    HandoffRequest,
    KeyRecord,
    KeyTally,
    Lease,
    Refusal,
    Waiter,
)
from leases.state import state_sql
from ops.models import JobRun
from schedules import jobs as schedule_jobs
from schedules.jobs import PlanResult
from schedules.models import GitHubDelivery, ScheduleTry
from webhooks.models import WebhookDelivery
from webhooks.services import webhooks_kick, webhooks_run

P = ParamSpec("P")
R = TypeVar("R")

LEASES = Lease._meta.db_table
ATTEMPTS = Attempt._meta.db_table


# --- Job bookkeeping ----------------------------------------------------------------------------


def recorded(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Time a job and record its run in JobRun (shared by every worker, read by /metrics)."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started_at = db_now()
            started = time.monotonic()
            result = func(*args, **kwargs)
            job_run_record(
                name=name,
                started_at=started_at,
                duration_s=time.monotonic() - started,
                result=result if isinstance(result, JobResult) else None,
            )
            return result

        return wrapper

    return decorate


def job_run_record(
    *, name: str, started_at: datetime, duration_s: float, result: JobResult | None
) -> None:
    JobRun.objects.get_or_create(name=name)
    JobRun.objects.filter(name=name).update(
        runs=F("runs") + 1,
        last_started_at=started_at,
        last_finished_at=now_expression(),
        last_duration_s=duration_s,
        last_processed=result.processed if result else 0,
        last_failed=result.failed if result else 0,
        last_lag_s=result.lag_s if result else 0.0,
    )


# --- The fleet's jobs -----------------------------------------------------------------------------


@recorded("sweep_leases")
def leases_sweep(*, batch: int | None = None, retry_s: float | None = None) -> SweepResult:
    """The sweep (`fleet.jobs.leases_sweep`); the events it wrote go out to webhooks."""
    result = fleet_jobs.leases_sweep(batch=batch, retry_s=retry_s)
    if result.events:
        webhooks_kick()
    return result


@recorded("revoke_keys")
def keys_revoke_due(*, batch: int | None = None) -> KeyRevokeResult:
    """Key revocation (`fleet.jobs.keys_revoke_due`); its events go out to webhooks."""
    result = fleet_jobs.keys_revoke_due(batch=batch)
    if result.processed:
        webhooks_kick()
    return result


@recorded("plan_schedules")
def schedules_plan() -> PlanResult:
    """The schedules' due packages (`schedules.jobs.schedules_run`). A run the database's outage
    stops (before its first statement) raises, and the next tick tries again."""
    return schedule_jobs.schedules_run()


@recorded("flag_idle")
def idle_flag() -> IdleResult:
    """The idle sweep (`fleet.attempts.idle_sweep.attempts_flag_idle`); its events go out to
    webhooks."""
    result = attempts_flag_idle()
    if result.events:
        webhooks_kick()
    return result


# --- Webhooks ----------------------------------------------------------------------------------


@dataclass
class WebhooksResult(JobResult):
    dispatched: int = 0  # deliveries written for new events
    delivered: int = 0
    retrying: int = 0


@recorded("deliver_webhooks")
def webhooks_deliver() -> WebhooksResult:
    """The periodic webhook job (webhooks/services.py): dispatch new events, send what is due."""
    run = webhooks_run()
    return WebhooksResult(
        processed=run["delivered"] + run["retrying"] + run["failed"],
        failed=run["failed"],
        dispatched=run["dispatched"],
        delivered=run["delivered"],
        retrying=run["retrying"],
    )


# --- Retention ----------------------------------------------------------------------------------


@dataclass
class PruneResult(JobResult):
    deleted: dict[str, int] = field(default_factory=dict)


def _prune(table: str, column: str, age_s: float, batch: int, extra: str = "") -> int:
    """Delete rows older than `age_s` in batches (each its own short transaction, on the
    table's index on `column`)."""
    cutoff = plus_seconds_sql(now_sql(), seconds_param("age"))
    total = 0
    for _ in range(MAX_BATCHES):
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "
                f"WHERE {column} < {cutoff}{extra} ORDER BY {column} LIMIT %(batch)s)",
                {"age": -age_s, "batch": batch},
            )
            deleted = cursor.rowcount
        total += deleted
        if deleted < batch:
            break
    return total


@recorded("prune_records")
def records_prune(*, batch: int | None = None) -> PruneResult:
    """Prune reports, events, refusals (rows and counts), fence verifications and receipts,
    handoff requests, harness sessions and finished webhook deliveries past their retention."""
    batch = batch or settings.GC_RETENTION_BATCH
    day = 86_400.0
    result = PruneResult()
    result.deleted = {
        "reports": _prune(
            Report._meta.db_table, "at", settings.GC_RETENTION_REPORTS_DAYS * day, batch
        ),
        "events": _prune(
            Event._meta.db_table, "at", settings.GC_RETENTION_EVENTS_DAYS * day, batch
        ),
        "refusals": _prune(
            Refusal._meta.db_table, "at", settings.GC_RETENTION_REFUSALS_DAYS * day, batch
        ),
        # The counted refusals of calls without a workspace, by the minute they count: a row's
        # last call is within a minute of it, and `minute` (never updated) has the index.
        "address_refusals": _prune(
            AddressRefusal._meta.db_table,
            "minute",
            settings.GC_RETENTION_REFUSALS_DAYS * day,
            batch,
        ),
        # What /fences/verify answered: kept as long as the events it was read from.
        "fence_verifications": _prune(
            FenceVerification._meta.db_table, "at", settings.GC_RETENTION_EVENTS_DAYS * day, batch
        ),
        # Each key's tallies (`leases.audit.key_tally`), by the minute they count, as long as the
        # rows they count beside: refusals', and verifications' (the events').
        "key_refusal_tallies": _prune(
            KeyTally._meta.db_table,
            "minute",
            settings.GC_RETENTION_REFUSALS_DAYS * day,
            batch,
            extra=f" AND record = '{KeyRecord.REFUSAL.value}'",
        ),
        "key_verification_tallies": _prune(
            KeyTally._meta.db_table,
            "minute",
            settings.GC_RETENTION_EVENTS_DAYS * day,
            batch,
            extra=f" AND record = '{KeyRecord.VERIFICATION.value}'",
        ),
        # Handoff requests, kept as long as the events of their steps. One still open on a
        # tenure that old goes too: its lease row's count then costs that tenure's renewals a
        # read that finds nothing, until the tenure ends.
        "handoff_requests": _prune(
            HandoffRequest._meta.db_table,
            "asked_at",
            settings.GC_RETENTION_EVENTS_DAYS * day,
            batch,
        ),
        # Waiters whose processes died (a waiter that gives up or is served deletes its own), and
        # places kept for a waiter that did not come back (`queue.TICKET_KEEP_S`, less than this).
        "waiters": _prune(Waiter._meta.db_table, "expires_at", 60.0, batch),
        # The schedules' tries and GitHub's deliveries: kept as long as events. A delivery
        # redelivered after its row is gone is judged afresh (the package is still found by
        # its key).
        "schedule_tries": _prune(
            ScheduleTry._meta.db_table, "at", settings.GC_RETENTION_EVENTS_DAYS * day, batch
        ),
        "github_deliveries": _prune(
            GitHubDelivery._meta.db_table,
            "received_at",
            settings.GC_RETENTION_EVENTS_DAYS * day,
            batch,
        ),
        # Push receipts, which CI reads back for a commit: kept as long as the events.
        "fence_receipts": _prune(
            FenceReceipt._meta.db_table, "at", settings.GC_RETENTION_EVENTS_DAYS * day, batch
        ),
        # Harness sessions, by their last event (a session that comes back is made anew).
        "hook_sessions": _prune(
            HookSession._meta.db_table,
            "last_event_at",
            settings.GC_RETENTION_EVENTS_DAYS * day,
            batch,
        ),
        # A pending delivery is still being retried; only finished ones go.
        "webhook_deliveries": _prune(
            WebhookDelivery._meta.db_table,
            "created_at",
            settings.GC_RETENTION_EVENTS_DAYS * day,
            batch,
            extra=" AND status <> 'pending'",
        ),
    }
    result.processed = sum(result.deleted.values())
    return result


# --- Reads for /metrics -------------------------------------------------------------------------


@dataclass
class MetricsSnapshot:
    attempts: dict[str, int]  # by state: live, late, stalled, lost, finished, released
    leases: dict[tuple[str, str], int]  # by (kind, state)
    reports_total: int  # reports ever received (the highest id: monotonic, cheap)
    refusals: dict[str, int]  # refused calls on record, by code (rows and counted ones)
    address_refusals: dict[str, int]  # of which counted per address (no workspace), by code
    undispatched_events: int
    deliveries: dict[str, int]  # webhook deliveries on record, by status
    sweep_lag_s: float  # how long the oldest unrecorded threshold has been waiting
    jobs: list[JobRun]


def metrics_snapshot() -> MetricsSnapshot:
    """Counts for Prometheus, each state computed on the database's clock in SQL, in a handful
    of grouped queries whatever the size of the fleet."""
    now = now_sql()
    state = state_sql(now)
    params: dict[str, Any] = {}
    attempts = {
        str(name): int(count)
        for name, count in rows(
            f"SELECT {tenure_state_sql(now, attempt='a', lease='leases')}, COUNT(*) "
            f"FROM {ATTEMPTS} a "
            f'JOIN {LEASES} leases ON leases.id = a.lease_id WHERE a."end" IS NULL '
            f"GROUP BY 1",
            params,
        )
    }
    for end, count in rows(
        f'SELECT "end", COUNT(*) FROM {ATTEMPTS} WHERE "end" IS NOT NULL GROUP BY 1', params
    ):
        attempts[str(end)] = attempts.get(str(end), 0) + int(count)
    leases = {
        (str(kind), str(name)): int(count)
        for kind, name, count in rows(
            f"SELECT kind, {state}, COUNT(*) FROM {LEASES} GROUP BY 1, 2",
            params,
        )
    }
    [(reports_total,)] = rows(f"SELECT COALESCE(MAX(id), 0) FROM {Report._meta.db_table}", params)
    refusals = {
        str(code): int(count)
        for code, count in rows(
            f"SELECT code, COUNT(*) FROM {Refusal._meta.db_table} GROUP BY 1", params
        )
    }
    address_refusals = {
        str(code): int(count)
        for code, count in rows(
            f'SELECT code, SUM("count") FROM {AddressRefusal._meta.db_table} GROUP BY 1', params
        )
    }
    for code, count in address_refusals.items():
        refusals[code] = refusals.get(code, 0) + count
    # A key's refusals past its kept rows of the minute are counted in its tally, by code.
    for code, count in rows(
        f"SELECT past.key, SUM(CAST(past.value AS bigint)) FROM {KeyTally._meta.db_table} t, "
        f"jsonb_each_text(t.past_limit) past WHERE t.record = '{KeyRecord.REFUSAL.value}' "
        "GROUP BY 1",
        params,
    ):
        refusals[str(code)] = refusals.get(str(code), 0) + int(count)
    [(undispatched,)] = rows(
        f"SELECT COUNT(*) FROM {Event._meta.db_table} WHERE dispatched_at IS NULL", params
    )
    deliveries = {
        str(status): int(count)
        for status, count in rows(
            f"SELECT status, COUNT(*) FROM {WebhookDelivery._meta.db_table} GROUP BY 1", params
        )
    }
    [(oldest, server_time)] = rows(
        f"SELECT MIN(next_check_at), {now} FROM {LEASES} "
        f"WHERE status = 'held' AND next_check_at < {now}",
        params,
    )
    lag = 0.0
    if oldest is not None:
        lag = (parse_timestamp(server_time) - parse_timestamp(oldest)).total_seconds()  # type: ignore[operator]
    return MetricsSnapshot(
        attempts=attempts,
        leases=leases,
        reports_total=int(reports_total),
        refusals=refusals,
        address_refusals=address_refusals,
        undispatched_events=int(undispatched),
        deliveries=deliveries,
        sweep_lag_s=max(lag, 0.0),
        jobs=list(JobRun.objects.order_by("name")),
    )
