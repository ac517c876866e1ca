"""The fleet's periodic jobs: record lease transitions (the sweep) and revoke keys.

Neither decides anything a hand or a supervisor depends on (DESIGN rule 3): a lease's state is
computed from its timestamps at every call, so a lost holder is refused and its slot is open
whether or not a sweep has run. The jobs record each transition once, end lost attempts and
revoke keys. They are set-based (one statement per batch, on an index), idempotent, and safe with
several workers and two beats at once: rows are claimed with a conditional UPDATE whose
candidates are locked with `FOR UPDATE SKIP LOCKED` on PostgreSQL (SQLite has one writer at a
time), and every event is written in the transaction that claimed its row. On PostgreSQL a
sweep's batch is one statement: the claim, the lost attempts' end and every event
(`_sweep_statement`); the row-based path (`_claim_due`, `leases_settle`) is SQLite's, and
PostgreSQL's for a batch whose statement failed. `ops.jobs` records their runs and starts
webhook delivery when they wrote events.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from apikit.retries import retried
from fleet.models import Attempt, AttemptEnd
from fleet.services.attempts import attempt_mark_lost
from hands import keys
from hands import services as hand_services
from hands.models import Hand, HandKey
from leases.audit import (
    ATTEMPT_EVENT_COLUMNS,
    event,
    event_insert_sql,
    event_select_sql,
    record_events,
)
from leases.clock import now_sql, parse_timestamp, plus_seconds_sql
from leases.jobs import MAX_BATCHES, SYSTEM_ACTOR, JobResult, seconds_param, skip_locked
from leases.jobs import rows as _rows
from leases.models import Event, EventKind, Lease, LeaseKind, LeaseState
from leases.state import HELD_STATES, STEPS, next_check_sql, state_sql

logger = logging.getLogger(__name__)

LEASES = Lease._meta.db_table
KEYS = HandKey._meta.db_table
ATTEMPTS = Attempt._meta.db_table
HANDS = Hand._meta.db_table

# Why the sweep ends an attempt (`attempt_mark_lost`'s reason, and its `lost` event's).
LOST_REASON = "no heartbeat within grace"


# --- The sweep ----------------------------------------------------------------------------------


@dataclass
class Settled:
    events: int = 0  # transitions recorded (late, stalled, lost, lease_expired)
    lost: int = 0  # attempts ended as lost
    expired: int = 0  # resource leases freed


@dataclass
class SweepResult(Settled, JobResult):
    """`processed`: lease rows whose threshold had passed; `failed`: rows pushed back because
    recording them failed; `lag_s`: the longest a recorded threshold had passed before a sweep
    saw it."""

    batches: int = 0

    def add(self, settled: Settled) -> None:
        self.events += settled.events
        self.lost += settled.lost
        self.expired += settled.expired


# The states a held lease passes after live, in order, each with the fraction of the grace after
# the deadline from which it holds: the bounds of `leases.state.STEPS`, each opening the next
# state (late from the deadline, stalled from half the grace, lost from the whole grace).
PASSED: tuple[tuple[str, float], ...] = tuple(
    (str(later), fraction)
    for (_, fraction), later in zip(STEPS, (*HELD_STATES[1:], LeaseState.LOST), strict=True)
)
# A state's place on that path: live 0, late 1, stalled 2, lost 3 (anything else counts as live).
_RANK = {str(state): rank for rank, state in enumerate((LeaseState.LIVE, *(s for s, _ in PASSED)))}


@dataclass(frozen=True)
class _Due:
    """A lease row the sweep claimed: its state as last recorded and as computed now."""

    id: int
    workspace_id: int
    resource: str
    kind: str
    holder: str
    fence: int
    deadline: datetime
    grace_s: float
    old_state: str
    new_state: str
    old_check: datetime
    server_time: datetime

    def transitions(self) -> list[str]:
        """Every state passed since the last record, in order: a sweep that ran late still
        records late and stalled before lost, each once (grace 0 goes straight to lost)."""
        old, new = _RANK.get(self.old_state, 0), _RANK.get(self.new_state, 0)
        return [
            state
            for state, _ in PASSED
            if old < _RANK[state] <= new and (self.grace_s > 0 or state == LeaseState.LOST)
        ]

    def since(self, state: str) -> datetime:
        """The threshold after which the lease was in `state`."""
        fraction = dict(PASSED)[state]
        return self.deadline + timedelta(seconds=self.grace_s * fraction)


def _state_sql(now: str) -> tuple[str, str]:
    """SQL for the computed state and the next threshold of a lease (leases/state.py)."""
    return state_sql(now), next_check_sql(now)


_RETURNING = "id, workspace_id, resource, kind, holder, fence, deadline, grace_s"


def _due_row(
    values: tuple[Any, ...], old_state: str, old_check: Any, new_state: str, now: Any
) -> _Due:
    lease_id, workspace_id, resource, kind, holder, fence, deadline, grace_s = values
    return _Due(
        id=int(lease_id),
        workspace_id=int(workspace_id),
        resource=resource,
        kind=kind,
        holder=holder,
        fence=int(fence),
        deadline=parse_timestamp(deadline),  # type: ignore[arg-type]
        grace_s=float(grace_s),
        old_state=old_state,
        new_state=new_state,
        old_check=parse_timestamp(old_check),  # type: ignore[arg-type]
        server_time=parse_timestamp(now),  # type: ignore[arg-type]
    )


def _claim_parts(now: str) -> tuple[str, str]:
    """The claim's SET list and the WHERE of a due lease, at the SQL time `now`."""
    state, next_check = _state_sql(now)
    status = (
        f"CASE WHEN kind = '{LeaseKind.RESOURCE}' AND ({state}) = 'lost' THEN 'free' "
        "ELSE status END"
    )
    sets = f"noticed_state = {state}, next_check_at = {next_check}, status = {status}"
    due = f"status = 'held' AND next_check_at < {now}"  # lease_due_idx, partial on held
    return sets, due


def _claim_sql(now: str) -> tuple[str, str]:
    """PostgreSQL's claim: the candidates locked with SKIP LOCKED (the body of a CTE `due`,
    which keeps the state recorded before as `old_state` and `old_check`), and the conditional
    UPDATE, without its RETURNING, that re-checks each as locked."""
    sets, due = _claim_parts(now)
    # The candidates' "now" read once (an InitPlan), so that the index scan stops at the first
    # lease not yet due: compared with clock_timestamp() itself, which changes from row to row,
    # the condition is a filter, and a quiet tick read every held lease. The UPDATE re-checks
    # each row at its own instant.
    _, due_once = _claim_parts(f"(SELECT {now})")
    return (
        f"SELECT id AS due_id, fence AS due_fence, noticed_state AS old_state, "
        f"next_check_at AS old_check FROM {LEASES} "
        f"WHERE {due_once} ORDER BY next_check_at LIMIT %(batch)s{skip_locked()}",
        f"UPDATE {LEASES} SET {sets} FROM due WHERE id = due_id AND fence = due_fence AND {due}",
    )


def _claim_due(batch: int) -> list[_Due]:
    """Claim up to `batch` held leases whose next threshold has passed, in one statement.

    The UPDATE sets `noticed_state` to the state computed now, `next_check_at` to the next
    threshold (NULL once lost), and frees a lost resource lease. On PostgreSQL the candidates are
    locked with SKIP LOCKED in a CTE, so concurrent sweeps split the work and never claim the
    same row; the outer WHERE re-checks the row as locked, and the CTE hands back the state that
    was recorded before, so each transition is written by exactly one sweep.
    """
    now = now_sql()
    sets, due = _claim_parts(now)
    params = {"batch": batch}
    if connection.vendor == "postgresql":
        candidates, claim = _claim_sql(now)
        rows = _rows(
            f"WITH due AS MATERIALIZED ({candidates}) {claim} "
            f"RETURNING {_RETURNING}, old_state, old_check, noticed_state, {now}",
            params,
        )
        return [_due_row(row[:8], row[8], row[9], row[10], row[11]) for row in rows]
    # SQLite: the transaction took the write lock at BEGIN (IMMEDIATE), so reading the recorded
    # state first and updating second cannot interleave with another writer.
    before = {
        int(row[0]): (row[1], row[2], row[3])
        for row in _rows(
            f"SELECT id, fence, noticed_state, next_check_at FROM {LEASES} "
            f"WHERE {due} ORDER BY next_check_at LIMIT %(batch)s",
            params,
        )
    }
    if not before:
        return []
    ids = ", ".join(str(lease_id) for lease_id in before)
    rows = _rows(
        f"UPDATE {LEASES} SET {sets} WHERE id IN ({ids}) AND {due} "
        f"RETURNING {_RETURNING}, noticed_state, {now}",
        params,
    )
    claimed = []
    for row in rows:
        fence, old_state, old_check = before[int(row[0])]
        if int(fence) == int(row[5]):
            claimed.append(_due_row(row[:8], old_state, old_check, row[8], row[9]))
    return claimed


def _event(row: _Due, kind: str, attempt_id: int | None) -> Event:
    return event(
        workspace_id=row.workspace_id,
        kind=kind,
        at=row.server_time,
        actor=SYSTEM_ACTOR,
        hand=row.holder,
        attempt_id=attempt_id,
        resource=row.resource,
        fence=row.fence,
        data={
            "since": row.since(
                kind if kind != EventKind.LEASE_EXPIRED else LeaseState.LOST
            ).isoformat(),
            "deadline": row.deadline.isoformat(),
            "grace_s": row.grace_s,
        },
    )


def leases_settle(rows: list[_Due]) -> Settled:
    """Write the events of claimed rows: late and stalled as events, lost as the end of the
    attempt (`attempt_mark_lost` writes the `lost` event once), an expired resource lease as
    `lease_expired`."""
    slot_leases = [row.id for row in rows if row.kind == LeaseKind.SLOT]
    attempts = (
        {
            (lease_id, fence): attempt_id
            for attempt_id, lease_id, fence in Attempt.objects.filter(
                lease_id__in=slot_leases, end=None
            ).values_list("pk", "lease_id", "fence")
        }
        if slot_leases
        else {}
    )
    events: list[Event] = []
    lost: list[tuple[int, _Due]] = []
    result_expired = 0
    for row in rows:
        attempt_id = attempts.get((row.id, row.fence))
        for state in row.transitions():
            if state != LeaseState.LOST:
                events.append(_event(row, state, attempt_id))
            elif row.kind == LeaseKind.RESOURCE:
                events.append(_event(row, EventKind.LEASE_EXPIRED, None))
                result_expired += 1
            elif attempt_id is not None:
                lost.append((attempt_id, row))
    record_events(events)
    settled = Settled(events=len(events), expired=result_expired)
    for attempt_id, row in lost:
        if attempt_mark_lost(
            workspace_id=row.workspace_id,
            attempt_id=attempt_id,
            at=row.server_time,
            reason=LOST_REASON,
        ):
            settled.lost += 1
            settled.events += 1
    return settled


# --- The sweep in one statement per batch (PostgreSQL) -------------------------------------------


def _iso_sql(timestamp: str) -> str:
    """`datetime.isoformat()` of a UTC timestamp, in SQL: the text `_event` writes into `data`
    (microseconds only when there are any, and `+00:00`)."""
    utc = f"({timestamp} AT TIME ZONE 'UTC')"
    return (
        f"(to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') "
        f"|| CASE WHEN to_char({utc}, 'US') = '000000' THEN '' "
        f"ELSE '.' || to_char({utc}, 'US') END || '+00:00')"
    )


def _float_json_sql(value: str) -> str:
    """A double as JSON the way Python writes a float (`60.0`, not `60`)."""
    return (
        f"CAST(CASE WHEN {value} = floor({value}) AND abs({value}) < 1e15 "
        f"THEN CAST(CAST({value} AS bigint) AS text) || '.0' "
        f"ELSE CAST({value} AS text) END AS jsonb)"
    )


def _rank_sql(state: str) -> str:
    whens = " ".join(f"WHEN '{name}' THEN {rank}" for name, rank in _RANK.items() if rank)
    return f"CASE {state} {whens} ELSE 0 END"


@functools.lru_cache(maxsize=8)
def _sweep_statement(now: str) -> str:
    """Claim a batch and write everything its rows passed, in one statement (PostgreSQL).

    `claimed` is `_claim_due`'s UPDATE. `passed` is each claimed row once per state it passed
    (`PASSED`, in order; grace 0 passes only lost), with the threshold it passed. A slot's open
    attempt at the lease's fence names the slot's late and stalled events; its lost ends the
    attempt in `ended` (`attempt_mark_lost`'s UPDATE, whose `"end" IS NULL` a claim that ended
    it first fails, so only one of them writes `lost`); a resource lease's lost is its
    `lease_expired` (the claim freed it). Every event is one of `written`, in the columns of
    `leases.audit`, in the order the leases fell due and, for each, the order of its states.
    The answer is what the result counts.
    """
    passed_values = ", ".join(
        f"('{state}', {_RANK[state]}, {plus_seconds_sql('c.deadline', f'c.grace_s * {share!r}')})"
        for state, share in PASSED
    )
    transition_data = (
        f"jsonb_build_object('since', {_iso_sql('p.since')}, 'deadline', "
        f"{_iso_sql('p.deadline')}, 'grace_s', {_float_json_sql('p.grace_s')})"
    )
    lost = f"'{LeaseState.LOST.value}'"
    threshold = event_select_sql(
        workspace_id="p.workspace_id",
        kind=f"CASE WHEN p.state = {lost} THEN '{EventKind.LEASE_EXPIRED.value}' ELSE p.state END",
        at="p.server_time",
        actor=f"'{SYSTEM_ACTOR}'",
        hand="p.holder",
        attempt_id="p.attempt_id",
        resource="p.resource",
        fence="p.fence",
        data=transition_data,
    )
    ended_event = event_select_sql(
        workspace_id="e.workspace_id",
        kind=f"'{EventKind.LOST.value}'",
        at="e.server_time",
        actor=f"'{SYSTEM_ACTOR}'",
        hand="h.name",
        attempt_id="e.id",
        resource="e.resource",
        fence="e.fence",
        data="jsonb_build_object('reason', CAST(%(reason)s AS text))",
    )
    columns = ", ".join(ATTEMPT_EVENT_COLUMNS)
    written = event_insert_sql(
        f"SELECT {columns} FROM ("
        f"SELECT {threshold}, p.old_check, p.id AS lease_id, p.rank FROM passed p "
        f"WHERE p.state <> {lost} OR p.kind = '{LeaseKind.RESOURCE}' "
        f"UNION ALL SELECT {ended_event}, e.old_check, e.lease_id, e.rank FROM ended e "
        f"JOIN {HANDS} h ON h.id = e.hand_id"
        f") AS w ({columns}, old_check, lease_id, rank) ORDER BY old_check, lease_id, rank",
        ATTEMPT_EVENT_COLUMNS,
    )
    candidates, claim = _claim_sql(now)
    return (
        f"WITH due AS MATERIALIZED ({candidates}), claimed AS ({claim} "
        f"RETURNING {_RETURNING}, old_state, old_check, noticed_state AS new_state, "
        f"{now} AS server_time), "
        # A slot's open attempt at the lease's fence (one, attempt_unique_tenure), by index.
        f"passed AS (SELECT c.*, t.state, t.rank, t.since, "
        f"(SELECT a.id FROM {ATTEMPTS} a WHERE c.kind = '{LeaseKind.SLOT}' "
        f'AND a.lease_id = c.id AND a.fence = c.fence AND a."end" IS NULL) AS attempt_id '
        f"FROM claimed c CROSS JOIN LATERAL (VALUES {passed_values}) AS t (state, rank, since) "
        f"WHERE {_rank_sql('c.old_state')} < t.rank AND t.rank <= {_rank_sql('c.new_state')} "
        f"AND (c.grace_s > 0 OR t.state = {lost})), "
        f"ended AS (UPDATE {ATTEMPTS} a SET \"end\" = '{AttemptEnd.LOST.value}', "
        f"ended_at = p.server_time, end_reason = %(reason)s FROM passed p "
        f"WHERE p.state = {lost} AND p.kind = '{LeaseKind.SLOT}' AND a.id = p.attempt_id "
        f'AND a."end" IS NULL '
        f"RETURNING a.id, a.workspace_id, a.hand_id, a.fence, p.old_check, p.id AS lease_id, "
        f"p.rank, p.resource, p.server_time), "
        f"written AS ({written} RETURNING kind) "
        f"SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM written), "
        f"(SELECT count(*) FROM ended), "
        f"(SELECT count(*) FROM written WHERE kind = '{EventKind.LEASE_EXPIRED.value}'), "
        f"(SELECT EXTRACT(EPOCH FROM max(server_time - old_check)) FROM claimed)"
    )


def _sweep_batch(batch: int) -> tuple[int, Settled, float]:
    """One batch in one statement (PostgreSQL): the rows claimed, what was recorded, the lag.

    The candidates are read in the order of `lease_due_idx`, stopping at the batch. A planner
    without statistics on the leases (a new table, or a server without autovacuum) instead
    bitmap-scans every due lease and sorts them all, in every batch (measured: 100,000 due
    among 100,000 swept in 5.4 s, against 2.5 s in index order). So, for this transaction only,
    no bitmap scans (`SET LOCAL`, undone with the savepoint if the batch fails)."""
    _rows("SET LOCAL enable_bitmapscan = off", {})
    ((processed, events, lost, expired, lag),) = _rows(
        _sweep_statement(now_sql()), {"batch": batch, "reason": LOST_REASON}
    )
    return (
        int(processed),
        Settled(events=int(events), lost=int(lost), expired=int(expired)),
        float(lag or 0.0),
    )


def _push_back(row: _Due, retry_s: float) -> None:
    """Undo the claim of a row whose events could not be written, and look again later."""
    _rows(
        f"UPDATE {LEASES} SET status = 'held', noticed_state = %(old_state)s, "
        f"next_check_at = {plus_seconds_sql(now_sql(), seconds_param('retry_s'))} "
        f"WHERE id = %(id)s AND fence = %(fence)s",
        {"old_state": row.old_state, "retry_s": retry_s, "id": row.id, "fence": row.fence},
    )


def leases_sweep(*, batch: int | None = None, retry_s: float | None = None) -> SweepResult:
    """Record every late, stalled and lost transition whose threshold has passed, once.

    On PostgreSQL each batch is one statement (`_sweep_statement`): it claims the due leases,
    ends the lost attempts and writes every event, in a savepoint. If that fails, or on SQLite:

    1. Claim a batch of due leases with one conditional UPDATE (`_claim_due`).
    2. Write their events in the same transaction, the whole batch at once (`leases_settle`).
    3. If that fails, retry row by row in savepoints; a row that still fails is pushed back
       (`next_check_at` moves `retry_s` ahead) so one bad row cannot stall enforcement.

    Then commit, and go on with the next batch until none is due.
    """
    batch = batch or settings.GC_SWEEP_BATCH
    retry_s = retry_s if retry_s is not None else settings.GC_SWEEP_RETRY_S
    result = SweepResult()
    for _ in range(MAX_BATCHES):
        with transaction.atomic():
            claimed = _sweep_set_based(batch, result)
            if claimed is None:
                claimed = _sweep_row_based(batch, retry_s, result)
        if claimed < batch:
            break
    return result


def _sweep_set_based(batch: int, result: SweepResult) -> int | None:
    """A batch in one statement; None if it failed (or on SQLite), for the row-based path."""
    if connection.vendor != "postgresql":
        return None
    try:
        with transaction.atomic():
            processed, settled, lag_s = _sweep_batch(batch)
    except Exception:
        logger.warning("sweep: a batch of up to %d failed; settling row by row", batch)
        return None
    if processed:
        result.batches += 1
        result.processed += processed
        result.lag_s = max(result.lag_s, lag_s)
        result.add(settled)
    return processed


def _sweep_row_based(batch: int, retry_s: float, result: SweepResult) -> int:
    rows = _claim_due(batch)
    if not rows:
        return 0
    result.batches += 1
    result.processed += len(rows)
    result.lag_s = max(
        [result.lag_s, *((r.server_time - r.old_check).total_seconds() for r in rows)]
    )
    try:
        with transaction.atomic():
            result.add(leases_settle(rows))
    except Exception:
        logger.warning("sweep: a batch of %d failed; settling row by row", len(rows))
        for row in rows:
            try:
                with transaction.atomic():
                    result.add(leases_settle([row]))
            except Exception:
                logger.exception("sweep: lease %s (%s) pushed back", row.id, row.resource)
                _push_back(row, retry_s)
                result.failed += 1
    return len(rows)


# --- Keys ---------------------------------------------------------------------------------------


@dataclass
class KeyRevokeResult(JobResult):
    expired: int = 0
    done: int = 0
    bound: int = 0


@retried
def _revoke(condition: str, reason_sql: str, batch: int) -> int:
    """Revoke up to `batch` live keys matching `condition` (SQL on alias k), with events, and
    every key they issued (`hands.services.keys_issued_revoke`), and end every tenure taken with
    any of them (`hands.services.keys_tenures_end`)."""
    now = now_sql()
    with transaction.atomic():
        rows = _rows(
            f"UPDATE {KEYS} SET revoked_at = {now}, revoked_by = '{SYSTEM_ACTOR}', "
            f"revoke_reason = {reason_sql} "
            f"WHERE id IN (SELECT k.id FROM {KEYS} k WHERE k.revoked_at IS NULL AND {condition} "
            f"ORDER BY k.id LIMIT %(batch)s{skip_locked()}) AND revoked_at IS NULL "
            f"RETURNING prefix, hand_id, revoke_reason, {now}, id",
            {"batch": batch},
        )
        if not rows:
            return 0
        hands = {
            pk: (workspace_id, name)
            for pk, workspace_id, name in Hand.objects.filter(
                pk__in={row[1] for row in rows}
            ).values_list("pk", "workspace_id", "name")
        }
        record_events(
            [
                event(
                    workspace_id=hands[hand_id][0],
                    kind=EventKind.KEY_REVOKED,
                    at=parse_timestamp(at),
                    actor=SYSTEM_ACTOR,
                    hand=hands[hand_id][1],
                    data={"prefix": prefix, "reason": reason},
                )
                for prefix, hand_id, reason, at, _ in rows
            ]
        )
        roots = [row[4] for row in rows]
        issued = hand_services.keys_issued_revoke(
            roots=roots, actor=SYSTEM_ACTOR, at=parse_timestamp(rows[0][3])
        )
        # Every tenure taken with a key revoked here ends with it, in this transaction.
        hand_services.keys_tenures_end(key_ids=[*roots, *issued], actor=SYSTEM_ACTOR)
    return len(rows)


def keys_revoke_due(*, batch: int | None = None) -> KeyRevokeResult:
    """Revoke expired keys, revoke-when-done keys whose hand's work is over, and keys whose
    bound tenure has ended.

    A revoke-when-done key is revoked once its hand has an attempt that ended (finished,
    released or lost) after the key was issued and has no attempt still open: a hand working a
    second slot keeps its key until that one ends too. The system is the actor; the reason says
    why (`expired`, or which attempt ended and how).
    """
    batch = batch or settings.GC_SWEEP_BATCH
    result = KeyRevokeResult()
    now = now_sql()
    ended = (
        f'SELECT 1 FROM {ATTEMPTS} a WHERE a.hand_id = k.hand_id AND a."end" IS NOT NULL '
        f"AND a.ended_at >= k.created_at"
    )
    still_open = f'SELECT 1 FROM {ATTEMPTS} a WHERE a.hand_id = k.hand_id AND a."end" IS NULL'
    which = (
        f"(SELECT 'revoke when done: attempt ' || CAST(a.id AS TEXT) || ' ' || a.\"end\" "
        f'FROM {ATTEMPTS} a WHERE a.hand_id = {KEYS}.hand_id AND a."end" IS NOT NULL '
        f"ORDER BY a.ended_at DESC, a.id DESC LIMIT 1)"
    )
    jobs = [
        ("expired", keys.expired_sql("k", now), "'expired'"),
        (
            "done",
            f"k.revoke_when_done AND EXISTS ({ended}) AND NOT EXISTS ({still_open})",
            which,
        ),
        # Refused from the first call after their tenure ended (hands/keys.py); revoked here
        # for the record, so that the keys list says so.
        (
            "bound",
            f"k.bound_lease_id IS NOT NULL AND NOT {keys.bound_alive_sql('k', now)}",
            "'its bound tenure ended'",
        ),
    ]
    for name, condition, reason in jobs:
        for _ in range(MAX_BATCHES):
            count = _revoke(condition, reason, batch)
            setattr(result, name, getattr(result, name) + count)
            if count < batch:
                break
    result.processed = result.expired + result.done + result.bound
    return result
