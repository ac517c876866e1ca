"""One table of boundary cases through every form of the idle rule (fleet/attempts/idle.py):
Python (as the answers compute it), SQL text (the sweep's) and the ORM filter (lists).
Timestamps are written by SQL from the engine's clock, as production writes them."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection

from fleet.api.presenters import attempt_json
from fleet.attempts import selectors as attempt_selectors
from fleet.attempts import services as attempt_services
from fleet.attempts.idle import idle_q, idle_sql, is_idle
from fleet.models import Attempt, AttemptEnd
from leases.clock import now_expression, now_sql, plus_seconds_sql
from leases.models import Lease

pytestmark = pytest.mark.django_db

# (name, timeout, seconds since the claim, seconds since the last progress or None,
#  seconds past the lease's deadline, ended, expected)
CASES = [
    ("no timeout: never idle", None, 10_000, None, -10, False, False),
    ("claimed exactly a timeout ago", 60, 60, None, -10, False, False),
    ("claimed just over a timeout ago", 60, 60.001, None, -10, False, True),
    ("progress exactly a timeout ago", 60, 500, 60, -10, False, False),
    ("progress just over a timeout ago", 60, 500, 60.001, -10, False, True),
    ("recent progress, an old claim", 60, 10_000, 1, -10, False, False),
    ("live at its deadline, past the timeout", 60, 100, None, 0, False, True),
    ("late: missing, not idle", 60, 100, None, 0.001, False, False),
    ("lost: not idle", 60, 10_000, None, 100_000, False, False),
    ("ended: not idle", 60, 100, None, -10, True, False),
]


def _attempts(make_run, owner, frozen_clock: datetime) -> dict[str, Attempt]:  # noqa: ANN001
    rows = {}
    for name, timeout, claimed, progress, late, ended, _ in CASES:
        run = make_run(slots=1, progress_timeout_s=timeout, heartbeat_interval_s=100, grace_s=60)
        view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
        attempt_id, lease_id = view.attempt.pk, view.attempt.lease_id
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Attempt._meta.db_table} SET claimed_at = "
                f"{plus_seconds_sql(now_sql(), '%s')}, last_progress_at = "
                f"CASE WHEN %s THEN {plus_seconds_sql(now_sql(), '%s')} END, "
                '"end" = %s WHERE id = %s',
                [
                    -claimed,
                    progress is not None,
                    -(progress or 0),
                    AttemptEnd.RELEASED.value if ended else None,
                    attempt_id,
                ],
            )
            cursor.execute(
                f"UPDATE {Lease._meta.db_table} SET deadline = {plus_seconds_sql(now_sql(), '%s')} "
                "WHERE id = %s",
                [-late, lease_id],
            )
        rows[name] = Attempt.objects.get(pk=attempt_id)
    return rows


def test_every_form_of_the_idle_rule_agrees_at_every_boundary(
    make_run, owner, frozen_clock: datetime
) -> None:
    rows = _attempts(make_run, owner, frozen_clock)
    ids = {attempt.pk: name for name, attempt in rows.items()}
    expected = {name: want for name, *_, want in CASES}
    # Python, as every answer computes it.
    views = attempt_selectors.attempt_views(
        list(attempt_selectors.attempts_base().filter(pk__in=ids))
    )
    by_python = {ids[v.attempt.pk]: attempt_json(v)["idle"] for v in views}
    by_function = {
        ids[v.attempt.pk]: is_idle(
            state=v.state,
            progress_timeout_s=v.attempt.progress_timeout_s,
            last_progress_at=v.attempt.last_progress_at,
            claimed_at=v.attempt.claimed_at,
            now=v.server_time,
        )
        for v in views
    }
    # SQL, as the sweep's statement.
    state = attempt_selectors.tenure_state_sql(now_sql(), attempt="a", lease="l")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT a.id, {idle_sql(now_sql(), attempt='a', state=state)} "
            f"FROM {Attempt._meta.db_table} a JOIN {Lease._meta.db_table} l ON l.id = a.lease_id",
            [],
        )
        by_sql = {ids[i]: bool(value) for i, value in cursor.fetchall()}
    # The ORM filter, as the lists use it.
    idle_ids = set(Attempt.objects.filter(idle_q(now_expression())).values_list("pk", flat=True))
    by_q = {name: attempt.pk in idle_ids for name, attempt in rows.items()}
    assert by_python == expected
    assert by_function == expected
    assert by_sql == expected
    assert by_q == expected
