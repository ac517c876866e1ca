"""A lease's state, computed from its timestamps (DESIGN "The lease"): the rule, written once.

    live     now <= deadline
    late     deadline < now <= deadline + grace/2
    stalled  deadline + grace/2 < now <= deadline + grace
    lost     now > deadline + grace      (grace 0 goes straight from live to lost)
    free     not held (released, broken, expired, or a finished slot's retired lease)

`STEPS` is that table. Each form is built from it: Python (`lease_state`, `thresholds`,
`next_threshold`) for answers and pages, SQL text (`state_sql`, `next_check_sql`, `alive_sql`,
`takeable_sql`) for the engine's and the sweep's statements, and ORM expressions
(`state_expression`, `state_q`) for lists and the board. `tests/leases/test_state_parity.py`
runs one table of boundary cases through every form.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db.models import Case, CharField, DateTimeField, F, Func, Q, Value, When
from django.db.models.lookups import GreaterThan, LessThanOrEqual

from leases.clock import plus_seconds_sql
from leases.models import LeaseState, LeaseStatus

# Each state a held lease is in until `deadline + fraction * grace`, in order; past the last, lost.
STEPS: tuple[tuple[LeaseState, float], ...] = (
    (LeaseState.LIVE, 0.0),
    (LeaseState.LATE, 0.5),
    (LeaseState.STALLED, 1.0),
)
HELD_STATES = tuple(state for state, _ in STEPS)  # held, and not lost: the tenure goes on


class Thresholds(NamedTuple):  # a tuple: built on every answer, at a fifth of a dataclass's cost
    late_at: datetime  # after this instant the holder is late
    stalled_at: datetime
    lost_at: datetime


@functools.lru_cache(maxsize=256)
def _steps(grace_s: float) -> tuple[timedelta, ...]:
    """Each step's offset from the deadline: a fleet's runs share a few graces, and every
    heartbeat's answer needs them."""
    return tuple(timedelta(seconds=grace_s * fraction) for _, fraction in STEPS)


# --- Python ---------------------------------------------------------------------------------------


def thresholds(deadline: datetime, grace_s: float) -> Thresholds:
    """The instants each step ends: late after the first, stalled after the second, lost after
    the last."""
    return Thresholds(*(deadline + step for step in _steps(grace_s)))


def lease_state(
    *, status: str, deadline: datetime | None, grace_s: float, now: datetime
) -> LeaseState:
    """The state of a lease at the database time `now` (the table above)."""
    if status != LeaseStatus.HELD or deadline is None:
        return LeaseState.FREE
    for (state, _), step in zip(STEPS, _steps(grace_s), strict=True):
        if now <= deadline + step:
            return state
    return LeaseState.LOST


def takeable(*, status: str, deadline: datetime | None, grace_s: float, now: datetime) -> bool:
    """Whether a new tenure may take the lease now: free, or held by a holder who is lost (a
    retired lease, its deadline long past, is neither)."""
    state = lease_state(status=status, deadline=deadline, grace_s=grace_s, now=now)
    return status == LeaseStatus.FREE or state == LeaseState.LOST


def next_threshold(*, deadline: datetime, grace_s: float, now: datetime) -> datetime | None:
    """The next instant at which a held lease's state changes, or None once lost."""
    for step in _steps(grace_s):
        if now <= deadline + step:
            return deadline + step
    return None


def seconds_until(instant: datetime | None, now: datetime) -> float | None:
    if instant is None:
        return None
    return round((instant - now).total_seconds(), 3)


# --- SQL text (the engine's and the jobs' statements) --------------------------------------------


def _bound_sql(deadline: str, grace: str, fraction: float) -> str:
    if fraction == 0:
        return deadline
    return plus_seconds_sql(deadline, f"{grace} * {fraction!r}")


def state_sql(
    now: str, *, status: str = "status", deadline: str = "deadline", grace: str = "grace_s"
) -> str:
    """`lease_state` as a SQL CASE over the named columns, at the SQL time `now`."""
    whens = " ".join(
        f"WHEN {now} <= {_bound_sql(deadline, grace, fraction)} THEN '{state.value}'"
        for state, fraction in STEPS
    )
    return (
        f"CASE WHEN {status} <> '{LeaseStatus.HELD.value}' OR {deadline} IS NULL "
        f"THEN '{LeaseState.FREE.value}' {whens} ELSE '{LeaseState.LOST.value}' END"
    )


def next_check_sql(now: str, *, deadline: str = "deadline", grace: str = "grace_s") -> str:
    """`next_threshold` as SQL (NULL once lost), for a held lease."""
    whens = " ".join(
        f"WHEN {now} <= {_bound_sql(deadline, grace, fraction)} "
        f"THEN {_bound_sql(deadline, grace, fraction)}"
        for _, fraction in STEPS
    )
    return f"CASE {whens} ELSE NULL END"


def lost_at_sql(*, deadline: str = "deadline", grace: str = "grace_s") -> str:
    return _bound_sql(deadline, grace, STEPS[-1][1])


def alive_sql(
    now: str, *, status: str = "status", deadline: str = "deadline", grace: str = "grace_s"
) -> str:
    """Held and not lost (live, late or stalled): the condition of every renewal and release."""
    return (
        f"({status} = '{LeaseStatus.HELD.value}' AND "
        f"{now} <= {lost_at_sql(deadline=deadline, grace=grace)})"
    )


def takeable_sql(
    now: str, *, status: str = "status", deadline: str = "deadline", grace: str = "grace_s"
) -> str:
    """`takeable` as SQL: free, or held by a lost holder."""
    return (
        f"({status} = '{LeaseStatus.FREE.value}' OR ({status} = '{LeaseStatus.HELD.value}' "
        f"AND {now} > {lost_at_sql(deadline=deadline, grace=grace)}))"
    )


# --- ORM expressions (lists, filters, the board) -------------------------------------------------


class PlusSeconds(Func):
    """`timestamp + seconds`, where both are expressions."""

    output_field = DateTimeField()
    arity = 2

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        ts_sql, ts_params = compiler.compile(self.source_expressions[0])
        s_sql, s_params = compiler.compile(self.source_expressions[1])
        return plus_seconds_sql(ts_sql, s_sql), [*ts_params, *s_params]


def _bound(prefix: str, fraction: float) -> PlusSeconds:
    return PlusSeconds(F(f"{prefix}deadline"), F(f"{prefix}grace_s") * Value(fraction))


def state_expression(now: Any, *, prefix: str = "") -> Case:
    """`lease_state` as an ORM expression at the expression `now`, for the lease at `prefix`."""
    return Case(
        When(
            ~Q(**{f"{prefix}status": LeaseStatus.HELD}) | Q(**{f"{prefix}deadline__isnull": True}),
            then=Value(LeaseState.FREE.value),
        ),
        *(
            When(LessThanOrEqual(now, _bound(prefix, fraction)), then=Value(state.value))
            for state, fraction in STEPS
        ),
        default=Value(LeaseState.LOST.value),
        output_field=CharField(),
    )


def state_q(state: str, now: Any, *, prefix: str = "") -> Q:
    """Rows whose lease (at `prefix`) is in `state` at the expression `now`."""
    held = Q(**{f"{prefix}status": LeaseStatus.HELD}) & Q(**{f"{prefix}deadline__isnull": False})
    if state == LeaseState.FREE:
        return ~held
    bounds = [_bound(prefix, fraction) for _, fraction in STEPS]
    names = [s.value for s, _ in STEPS]
    if state == LeaseState.LOST:
        return held & Q(GreaterThan(now, bounds[-1]))
    if state not in names:
        raise ValueError(state)
    i = names.index(state)
    after = Q(GreaterThan(now, bounds[i - 1])) if i else Q()
    return held & after & Q(LessThanOrEqual(now, bounds[i]))
