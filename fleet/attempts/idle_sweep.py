"""The idle sweep (issue 22, part 3): flag newly idle attempts once, with their `idle` event and
the directive their run names, in one statement per batch.

Idle itself is computed on read (fleet/attempts/idle.py); the flag `idle_since` is what makes the
transition sticky, so the webhook fires once per idle spell: the sweep sets it only where it is
NULL and the rule holds, and a progress report clears it (fleet/attempts/reports.py), so a later
spell fires again. The candidates are locked with `FOR UPDATE SKIP LOCKED`, so sweeps
running at once split the rows, and the UPDATE's own `idle_since IS NULL`
makes a second pass over the same row write nothing. The directive never weakens: `pause` only
moves `continue`, `stop` moves anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from fleet.attempts.idle import idle_sql
from fleet.attempts.selectors import tenure_state_sql
from fleet.models import Attempt, Directive, IdleDirective, Run
from hands.models import Hand
from leases.audit import event, record_events
from leases.clock import now_sql, parse_timestamp
from leases.jobs import MAX_BATCHES, SYSTEM_ACTOR, JobResult, rows
from leases.models import EventKind, Lease

IDLE_ACTOR = "idle"  # the actor of a directive the idle sweep set


@dataclass
class IdleResult(JobResult):
    flagged: int = 0
    directives: int = 0  # of those, how many had their directive changed
    events: int = 0


def _parts(now: str) -> tuple[str, str, str]:
    """The candidates' SELECT (alias `a`), the SET list and the re-checked WHERE of the flag."""
    attempts, leases, runs, hands = (
        Attempt._meta.db_table,
        Lease._meta.db_table,
        Run._meta.db_table,
        Hand._meta.db_table,
    )
    state = tenure_state_sql(now, attempt="a", lease="l")
    due = (
        f"SELECT a.id, a.directive, l.resource, h.name FROM {attempts} a "
        f"JOIN {leases} l ON l.id = a.lease_id JOIN {hands} h ON h.id = a.hand_id "
        # attempt_idle_idx: open, with a timeout, not flagged.
        'WHERE a."end" IS NULL AND a.idle_since IS NULL AND a.progress_timeout_s IS NOT NULL '
        f"AND {idle_sql(now, attempt='a', state=state)} ORDER BY a.id LIMIT %(batch)s"
    )
    # The new directive: the run's, unless the attempt's is already as strong.
    named = f"(SELECT r.idle_directive FROM {runs} r WHERE r.id = {attempts}.run_id)"
    directive = (
        f"CASE WHEN {named} = '{IdleDirective.STOP.value}' THEN '{Directive.STOP.value}' "
        f"WHEN {named} = '{IdleDirective.PAUSE.value}' "
        f"AND {attempts}.directive = '{Directive.CONTINUE.value}' THEN '{Directive.PAUSE.value}' "
        f"ELSE {attempts}.directive END"
    )
    sets = f"idle_since = {now}, directive = {directive}"
    recheck = f'{attempts}.idle_since IS NULL AND {attempts}."end" IS NULL'
    return due, sets, recheck


_RETURNED = "id, workspace_id, fence, directive, idle_since, run_id, progress_timeout_s, "
_RETURNED += "last_progress_at"


def _flag(now: str, batch: int) -> list[tuple[Any, ...]]:
    """Flag a batch; each row: id, workspace, hand, resource, fence, the directive before and
    after, idle_since, run, timeout, last progress."""
    attempts = Attempt._meta.db_table
    due, sets, recheck = _parts(now)
    returned = ", ".join(f"{attempts}.{c.strip()}" for c in _RETURNED.split(","))
    flagged = rows(
        f"WITH due AS ({due} FOR UPDATE OF a SKIP LOCKED) "
        f"UPDATE {attempts} SET {sets} FROM due WHERE {attempts}.id = due.id AND {recheck} "
        f"RETURNING {returned}, due.directive, due.resource, due.name",
        {"batch": batch},
    )
    return [
        (i, ws, hand, resource, fence, before, after, at, run, timeout, last)
        for (i, ws, fence, after, at, run, timeout, last, before, resource, hand) in flagged
    ]


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
            flagged = _flag(now_sql(), batch)
            written = [made for row in flagged for made in _events(row)]
            record_events(written)
        result.flagged += len(flagged)
        result.processed += len(flagged)
        result.directives += sum(1 for row in flagged if row[5] != row[6])
        result.events += len(written)
        if len(flagged) < batch:
            break
    return result
