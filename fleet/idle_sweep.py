"""The idle sweep (issue 22, part 3): flag newly idle attempts once, with their `idle` event and
the directive their run names, in one statement per batch.

Idle itself is computed on read (fleet/idle.py); the flag `idle_since` is what makes the
transition sticky, so the webhook fires once per idle spell: the sweep sets it only where it is
NULL and the rule holds, and a progress report clears it (fleet/services/reports.py), so a later
spell fires again. The candidates are locked with `FOR UPDATE SKIP LOCKED` (SQLite has one
writer), so sweeps running at once split the rows, and the UPDATE's own `idle_since IS NULL`
makes a second pass over the same row write nothing. The directive never weakens: `pause` only
moves `continue`, `stop` moves anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from fleet.idle import idle_sql
from fleet.models import Attempt, Directive, IdleDirective, Run
from fleet.selectors import tenure_state_sql
from hands.models import Hand
from leases.audit import event, record_events
from leases.clock import now_sql, parse_timestamp
from leases.jobs import MAX_BATCHES, SYSTEM_ACTOR, JobResult, rows, skip_locked
from leases.models import EventKind, Lease

IDLE_ACTOR = "idle"  # the actor of a directive the idle sweep set


@dataclass
class IdleResult(JobResult):
    flagged: int = 0
    directives: int = 0  # of those, how many had their directive changed
    events: int = 0


def _flag_sql(now: str) -> str:
    attempts, leases, runs, hands = (
        Attempt._meta.db_table,
        Lease._meta.db_table,
        Run._meta.db_table,
        Hand._meta.db_table,
    )
    state = tenure_state_sql(now, attempt="a", lease="l")
    # The new directive: the run's, unless the attempt's is already as strong.
    directive = (
        f"CASE WHEN r.idle_directive = '{IdleDirective.STOP.value}' THEN '{Directive.STOP.value}' "
        f"WHEN r.idle_directive = '{IdleDirective.PAUSE.value}' "
        f"AND due.directive = '{Directive.CONTINUE.value}' THEN '{Directive.PAUSE.value}' "
        "ELSE due.directive END"
    )
    lock = skip_locked().replace("FOR UPDATE", "FOR UPDATE OF a")
    return (
        "WITH due AS ("
        f"SELECT a.id, a.directive, a.run_id, l.resource, h.name AS hand_name FROM {attempts} a "
        f"JOIN {leases} l ON l.id = a.lease_id JOIN {hands} h ON h.id = a.hand_id "
        # attempt_idle_idx: open, with a timeout, not flagged.
        'WHERE a."end" IS NULL AND a.idle_since IS NULL AND a.progress_timeout_s IS NOT NULL '
        f"AND {idle_sql(now, attempt='a', state=state)} "
        f"ORDER BY a.id LIMIT %(batch)s{lock}) "
        f"UPDATE {attempts} SET idle_since = {now}, directive = {directive} "
        f"FROM due, {runs} r "
        f"WHERE {attempts}.id = due.id AND r.id = due.run_id AND {attempts}.idle_since IS NULL "
        f'AND {attempts}."end" IS NULL '
        f"RETURNING {attempts}.id, {attempts}.workspace_id, due.hand_name, due.resource, "
        f"{attempts}.fence, due.directive, {attempts}.directive, {attempts}.idle_since, "
        f"{attempts}.run_id, {attempts}.progress_timeout_s, {attempts}.last_progress_at"
    )


def _events(row: tuple[Any, ...]) -> list[Any]:
    (attempt_id, workspace_id, hand, resource, fence, before, after, at, run_id, timeout, last) = (
        row
    )
    at = parse_timestamp(at)
    last = parse_timestamp(last)
    common = {
        "workspace_id": workspace_id,
        "at": at,
        "hand": hand,
        "attempt_id": attempt_id,
        "resource": resource,
        "fence": fence,
    }
    made = [
        event(
            kind=EventKind.IDLE,
            actor=SYSTEM_ACTOR,
            data={
                "run": run_id,
                "progress_timeout_s": timeout,
                "last_progress_at": last.isoformat() if last else None,
                "directive": after,
            },
            **common,
        )
    ]
    if after != before:
        made.append(
            event(
                kind=EventKind.DIRECTIVE_SET,
                actor=IDLE_ACTOR,
                data={"directive": after, "reason": "idle"},
                **common,
            )
        )
    return made


def attempts_flag_idle(*, batch: int = 500) -> IdleResult:
    """Flag every attempt that has turned idle since the last sweep, batch by batch; each batch
    is one statement and its events, in one transaction."""
    result = IdleResult()
    for _ in range(MAX_BATCHES):
        with transaction.atomic():
            flagged = rows(_flag_sql(now_sql()), {"batch": batch})
            written = [made for row in flagged for made in _events(row)]
            record_events(written)
        result.flagged += len(flagged)
        result.processed += len(flagged)
        result.directives += sum(1 for row in flagged if row[5] != row[6])
        result.events += len(written)
        if len(flagged) < batch:
            break
    return result
