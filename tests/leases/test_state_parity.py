"""One table of boundary cases through every form of the lease-state rule (leases/state.py) and
of the tenure rule built on it (fleet.attempts.selectors.tenure_state): Python, SQL text, ORM
expression, ORM filters, and the engine's own conditions. A form that drifts from the others fails
here.

Deadlines are written as the engine writes them (SQL `now + seconds`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection

from fleet.attempts import selectors as attempt_selectors
from fleet.models import Attempt
from leases import engine, state
from leases.clock import now_expression, now_sql, parse_timestamp, plus_seconds_sql
from leases.models import Lease, LeaseState, LeaseStatus

pytestmark = pytest.mark.django_db

# (name, status, grace, seconds from the deadline to now, the expected state)
CASES = [
    ("before the deadline", "held", 60, -1, "live"),
    ("exactly at the deadline", "held", 60, 0, "live"),
    ("just past the deadline", "held", 60, 0.001, "late"),
    ("exactly at grace/2", "held", 60, 30, "late"),
    ("just past grace/2", "held", 60, 30.001, "stalled"),
    ("exactly at grace", "held", 60, 60, "stalled"),
    ("just past grace", "held", 60, 60.001, "lost"),
    ("long past grace", "held", 60, 3600, "lost"),
    ("grace 0, at the deadline", "held", 0, 0, "live"),
    ("grace 0, just past it: live to lost", "held", 0, 0.001, "lost"),
    ("an odd grace at its half", "held", 7, 3.5, "late"),
    ("released", "free", 60, -10, "free"),
    ("released, its old deadline past", "free", 60, 100, "free"),
    ("a finished slot's retired lease", "retired", 60, 100, "free"),
]
TAKEABLE = {"free": True, "lost": True}  # and a retired lease is never taken


def _lease_rows(frozen_clock: datetime, cases=CASES, prefix: str = "parity") -> dict[str, Lease]:  # noqa: ANN001
    """One lease per case, its deadline written by SQL at `now - offset`."""
    rows = {}
    for name, status, grace, offset, _ in cases:
        lease = Lease.objects.create(
            workspace_id=1, resource=f"{prefix}/{name}", status=status, grace_s=grace, fence=1
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Lease._meta.db_table} SET deadline = "
                f"{plus_seconds_sql(now_sql(), '%s')} WHERE id = %s",
                [-offset, lease.pk],
            )
        lease.refresh_from_db()
        rows[name] = lease
    return rows


def _sql_values(sql_expression: str) -> dict[int, str]:
    with connection.cursor() as cursor:
        # With parameters (none), as the engine runs its statements: `%%` becomes `%`.
        cursor.execute(f"SELECT id, {sql_expression} FROM {Lease._meta.db_table}", [])
        return {int(i): value for i, value in cursor.fetchall()}


def test_every_form_of_the_lease_state_agrees_at_every_boundary(frozen_clock) -> None:
    rows = _lease_rows(frozen_clock)
    now = frozen_clock
    by_sql = _sql_values(state.state_sql(now_sql()))
    by_orm = dict(
        Lease.objects.annotate(s=state.state_expression(now_expression())).values_list("id", "s")
    )
    by_q = {
        lease_id: name
        for name in (s.value for s in LeaseState)
        for lease_id in Lease.objects.filter(state.state_q(name, now_expression())).values_list(
            "id", flat=True
        )
    }
    alive = set(_sql_ids(state.alive_sql(now_sql())))
    takeable = set(_sql_ids(state.takeable_sql(now_sql())))
    for name, status, grace, offset, expected in CASES:
        lease = rows[name]
        deadline = parse_timestamp(lease.deadline)
        assert deadline == now - timedelta(seconds=offset), name
        python = state.lease_state(status=status, deadline=deadline, grace_s=grace, now=now)
        snapshot = engine.LeaseSnapshot.from_model(lease, now).state
        forms = {
            "python": python,
            "snapshot": snapshot,
            "sql": by_sql[lease.pk],
            "orm": by_orm[lease.pk],
            "q": by_q[lease.pk],
        }
        assert set(forms.values()) == {expected}, (name, forms)
        assert (lease.pk in alive) == (expected in state.HELD_STATES), name
        is_takeable = state.takeable(status=status, deadline=deadline, grace_s=grace, now=now)
        assert is_takeable == (status != LeaseStatus.RETIRED and TAKEABLE.get(expected, False))
        assert (lease.pk in takeable) == is_takeable, name
    # Each state's filter matched each row once: no row is in two states.
    assert len(by_q) == len(CASES)


def test_the_next_threshold_agrees_in_python_and_sql(frozen_clock) -> None:
    rows = _lease_rows(frozen_clock)
    by_sql = _sql_values(state.next_check_sql(now_sql()))
    for name, status, grace, _, _ in CASES:
        if status != "held":
            continue
        lease = rows[name]
        deadline = parse_timestamp(lease.deadline)
        python = state.next_threshold(deadline=deadline, grace_s=grace, now=frozen_clock)
        assert parse_timestamp(by_sql[lease.pk]) == python, name


def _sql_ids(condition: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {Lease._meta.db_table} WHERE {condition}", [])
        return [int(i) for (i,) in cursor.fetchall()]


# (name, the attempt's end, whether the lease moved on to the next fence, the lease case, state)
TENURES = [
    ("finished", "finished", False, "released", "finished"),
    ("released", "released", False, "released", "released"),
    ("recorded lost (sticky)", "lost", False, "before the deadline", "lost"),
    ("taken after it was lost", None, True, "before the deadline", "lost"),
    ("broken: the lease is free at the next fence", None, True, "released", "lost"),
    ("open, lease released behind its back", None, False, "released", "lost"),
    ("open, live", None, False, "exactly at the deadline", "live"),
    ("open, late", None, False, "exactly at grace/2", "late"),
    ("open, stalled", None, False, "exactly at grace", "stalled"),
    ("open, past grace, not yet swept", None, False, "just past grace", "lost"),
]


def test_every_form_of_the_tenure_state_agrees(frozen_clock, owner, make_run) -> None:
    case_of = {case[0]: case for case in CASES}
    # A lease of its own per tenure (a tenure is one fence of one lease), like its lease case.
    rows = _lease_rows(
        frozen_clock,
        [(name, *case_of[lease_case][1:]) for name, _, _, lease_case, _ in TENURES],
        prefix="tenure",
    )
    run = make_run(slots=1)
    slot = run.slots.get()
    attempts = {}
    for name, end, moved_on, _, _ in TENURES:
        lease = rows[name]
        if moved_on:
            Lease.objects.filter(pk=lease.pk).update(fence=2)
        attempts[name] = Attempt.objects.create(
            workspace_id=run.workspace_id,
            run=run,
            slot=slot,
            hand=owner,
            lane_id=run.work_package.lane_id,
            lease=lease,
            fence=1,
            process_id="p",
            claimed_at=frozen_clock,
            end=end,
        )
    now = frozen_clock
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT a.id, {attempt_selectors.tenure_state_sql(now_sql(), attempt='a', lease='l')} "
            f"FROM {Attempt._meta.db_table} a JOIN {Lease._meta.db_table} l ON l.id = a.lease_id",
            [],
        )
        by_sql = {int(i): value for i, value in cursor.fetchall()}
    by_orm = dict(
        Attempt.objects.annotate(
            s=attempt_selectors.tenure_state_expression(now_expression())
        ).values_list("id", "s")
    )
    by_q: dict[int, list[str]] = {}
    for name in attempt_selectors.ATTEMPT_STATES:
        for attempt_id in Attempt.objects.filter(
            attempt_selectors.tenure_state_q(name, now_expression())
        ).values_list("id", flat=True):
            by_q.setdefault(attempt_id, []).append(name)
    for name, *_, expected in TENURES:
        attempt = Attempt.objects.select_related("lease").get(pk=attempts[name].pk)
        python = attempt_selectors.attempt_state(
            attempt, engine.LeaseSnapshot.from_model(attempt.lease, now)
        )
        forms = {
            "python": python,
            "sql": by_sql[attempt.pk],
            "orm": by_orm[attempt.pk],
            "q": by_q[attempt.pk],
        }
        assert forms == {"python": expected, "sql": expected, "orm": expected, "q": [expected]}, (
            name
        )
