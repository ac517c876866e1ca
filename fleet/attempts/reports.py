"""Reports and heartbeats: the fleet's most frequent call. A report renews the slot lease at the
attempt's fence and records what the hand said, in one statement (`report_statement`, also run
prepared by the hot view); a bare heartbeat is recorded at most once a minute."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from apikit.errors import ValidationFailed
from apikit.retries import retried
from fleet.attempts.checkpoints import checkpoint_param, checkpoint_refusal, unstorable_text
from fleet.attempts.selectors import AttemptView, Named, ReportedAttempt
from fleet.attempts.services import attempt_for_hand, refuse_ended, tenure_error
from fleet.costs.budgets import budgets_enforce, budgets_lock
from fleet.costs.spend import COST_PLACES, MAX_COST_USD, MAX_TOKENS
from fleet.models import Attempt, Report, ReportKind
from fleet.plan.services import slot_index
from hands.models import Hand
from hands.selectors import lane_slug
from leases import engine
from leases.audit import refusals_recorded
from leases.fences import as_fence
from leases.models import Lease
from leases.services import validate_choice, validate_name, validate_reason

# A bare heartbeat (kind heartbeat, no message, percent or details) is a renewal of the slot lease.
# It is kept on record, as a report row and the attempt's last_report_at, at most once a minute
# per attempt, like a key's last_used_at: the timeline still shows that the hand was alive
# without a row per beat, and a heartbeat writes what a resource renewal writes (one row) almost
# always. The lease's renewed_at is the exact time of the latest one
# (`fleet.attempts.selectors.last_report_at`).
HEARTBEAT_RECORD_S = 60


def is_bare_heartbeat(
    kind: str,
    message: str,
    percent: float | None,
    details: dict[str, Any] | None,
    checkpoint: object = None,
) -> bool:
    """A heartbeat that says nothing. Every other report is progress (fleet/attempts/idle.py): a
    note counts, as a hand that writes one is doing something a person can read, and so does a
    checkpoint (where the work stands); a cost does not (a hand can spend tokens going round in
    circles), and a costed heartbeat is recorded at once, though still no progress."""
    return (
        kind == ReportKind.HEARTBEAT
        and not message
        and percent is None
        and not details
        and checkpoint is None
    )


def cost_refusal(
    tokens_in: object, tokens_out: object, cost_usd: object
) -> ValidationFailed | None:
    """Why a report's cost is refused (tokens: whole numbers from 0 to MAX_TOKENS; cost: a
    Decimal from 0 to MAX_COST_USD with at most 6 places), or None."""
    for name, value in (("tokens_in", tokens_in), ("tokens_out", tokens_out)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS
        ):
            return ValidationFailed(
                f"{name} must be a whole number from 0 to {MAX_TOKENS}",
                fields={name: [f"An integer from 0 to {MAX_TOKENS}."]},
            )
    if cost_usd is not None and (
        not isinstance(cost_usd, Decimal)
        or not cost_usd.is_finite()
        or not Decimal(0) <= cost_usd <= MAX_COST_USD
        or int(cost_usd.as_tuple().exponent) < -COST_PLACES
    ):
        return ValidationFailed(
            f"cost_usd must be an amount from 0 to {MAX_COST_USD} with at most {COST_PLACES} "
            "decimal places",
            fields={"cost_usd": [f"From 0 to {MAX_COST_USD}, at most {COST_PLACES} places."]},
        )
    return None


@dataclass(frozen=True)
class ReportCaller:
    """Who sends a renewing report, as SQL: `hand`, the caller's hand id (whose workspace every
    caller names as the parameter `workspace_id`); `joined`, tables to
    join before the attempt `mine` (each followed by ", "); `where`, conditions on them and on
    `mine` (each starting with AND); `columns`, (expression, name) pairs added to the row."""

    hand: str
    joined: str = ""
    where: str = ""
    columns: tuple[tuple[str, str], ...] = ()


@functools.cache
def _report_template(
    with_percent: bool, bare: bool, answer_only: bool, caller: ReportCaller
) -> str:
    """PostgreSQL: a renewing report as one statement. One UPDATE renews the slot lease, joined
    with the caller's open attempt at its fence, with the engine's own conditions (rendered per
    call); it matches nothing (and writes nothing) unless every check of the step-by-step path
    would pass.

    A bare heartbeat is that UPDATE alone: it writes only the renewal, and its row's last column
    says whether the once-a-minute record is due, which `heartbeat_record` then writes
    (data-modifying CTEs that write nothing still cost a third of the statement: every index of
    their tables is opened and locked). Any other report also inserts the report and stamps the
    attempt, in CTEs after the renewal.

    The caller (`ReportCaller`) is a set of slots: parameters here, or the hot view's key check
    (leasing/hot.py), joined in the same UPDATE.

    Its row is the lease's columns and the statement's time (`engine.COLUMNS`, server_time), the
    attempt's, the attempt's lane (its id: `hands.selectors.lane_slug` names it), whether the
    record is due and the caller's columns; or, `answer_only`, just what the answer shows
    (`REPORT_ANSWER_LEASE`, `REPORT_ANSWER_ATTEMPT`), then the lane, the flag and the caller's."""
    quote = connection.ops.quote_name
    lease_table, attempt_table = Lease._meta.db_table, Attempt._meta.db_table
    columns = {f.attname: quote(f.column) for f in Attempt._meta.concrete_fields}
    # The answer needs nothing of the run, the slot or the lane beyond the renewed lease and
    # the attempt: the tenure's interval and grace are the lease's, the slot's index is in its
    # resource name, the lane's slug is the lane id's for good. Nothing is read in a CTE of its
    # own: PostgreSQL does not fold a CTE that calls clock_timestamp() into the statement, and
    # each such read cost a tenth of the heartbeat (docs/performance.md).
    renew = (
        # next_check_at stays behind, as in engine.renew (RENEWAL_NOTE there).
        "UPDATE {table} SET renewed_at = {now}, deadline = {renew_deadline}, "
        "noticed_state = 'live' "
        f"FROM {caller.joined}{attempt_table} mine "
        # The caller's hand decides whose the attempt is. The caller's workspace (the hand's)
        # is named as a value too, so the statement reaches one workspace's rows (docs/scale.md).
        f"WHERE mine.id = %(attempt_id)s AND mine.workspace_id = %(workspace_id)s "
        f"AND mine.hand_id = {caller.hand} "
        f"AND mine.fence = %(fence)s AND mine.{quote('end')} IS NULL {caller.where}"
        # The caller's own attempt names the lease and the fence of its tenure, which imply the
        # holder (a fence is granted once), so the lease is found by primary key alone. Naming
        # the holder too let the planner, its statistics behind a hand that had just taken
        # thousands of leases, read every lease of the hand through lease_holder_idx instead.
        # The key is a value, not the join's: joined, a plan made on small tables read every
        # lease and kept doing so as the table grew. It is `lease_id` when the caller knows
        # the attempt's lease (which never changes; the hot path remembers it), else a
        # sub-select, which reads the attempt a second time; the join checks it either way.
        f"AND {lease_table}.id = COALESCE(%(lease_id)s, (SELECT known.lease_id FROM "
        f"{attempt_table} known WHERE known.id = %(attempt_id)s "
        "AND known.workspace_id = %(workspace_id)s)) "
        f"AND mine.lease_id = {lease_table}.id AND {lease_table}.fence = mine.fence "
        # The lease in the attempt's workspace: co-located with it (docs/scale.md).
        f"AND {lease_table}.workspace_id = mine.workspace_id "
        f"AND {lease_table}.process_id = %(process_id)s AND {{alive}} "
    )
    lease_columns = [f"{lease_table}.{c}" for c in engine.COLUMNS] + ["{now}"]
    lease_names = [*engine.COLUMNS, "server_time"]
    if bare:
        # The attempt as read: nothing in this statement writes it.
        due = (
            "(mine.last_report_at IS NULL OR mine.last_report_at <= "
            f"{{now}} - interval '{HEARTBEAT_RECORD_S} seconds')"
        )
        if answer_only:
            selected = [
                *(lease_columns[lease_names.index(name)] for name in REPORT_ANSWER_LEASE),
                *(f"mine.{columns[name]}" for name in REPORT_ANSWER_ATTEMPT),
            ]
        else:
            selected = [*lease_columns, *(f"mine.{name}" for name in columns.values())]
        selected += ["mine.lane_id", due, *(expression for expression, _ in caller.columns)]
        return f"{renew}RETURNING {', '.join(selected)}"
    percent = ", progress_percent = %(percent)s" if with_percent else ""
    returned = [
        *(f"{column} AS {name}" for column, name in zip(lease_columns, lease_names, strict=True)),
        "mine.id AS attempt_id",
        *(f"{expression} AS {name}" for expression, name in caller.columns),
    ]
    if answer_only:
        selected = [
            *(f"renewed.{name}" for name in REPORT_ANSWER_LEASE),
            *(f"stamped.{columns[name]}" for name in REPORT_ANSWER_ATTEMPT),
        ]
    else:
        selected = [
            *(f"renewed.{name}" for name in lease_names),
            *(f"stamped.{name}" for name in columns.values()),
        ]
    selected += ["stamped.lane_id", "false", *(f"renewed.{name}" for _, name in caller.columns)]
    return (
        f"WITH renewed AS ({renew}RETURNING {', '.join(returned)}), "
        f"report AS (INSERT INTO {Report._meta.db_table} "
        "(workspace_id, attempt_id, kind, at, process_id, renewed, message, percent, details, "
        "checkpoint) "
        "SELECT workspace_id, attempt_id, %(kind)s, server_time, %(process_id)s, true, "
        "%(message)s, %(percent)s, CAST(%(details)s AS jsonb), CAST(%(checkpoint)s AS text) "
        "FROM renewed), "
        # The attempt as the statement leaves it.
        # Not a bare heartbeat: progress (fleet/attempts/idle.py), which ends an idle spell.
        f"stamped AS (UPDATE {attempt_table} SET last_report_at = renewed.server_time, "
        f"last_progress_at = renewed.server_time, idle_since = NULL{percent} "
        f"FROM renewed WHERE {attempt_table}.id = renewed.attempt_id "
        f"AND {attempt_table}.workspace_id = %(workspace_id)s "
        f"RETURNING {attempt_table}.*) "
        f"SELECT {', '.join(selected)} FROM renewed, stamped"
    )


def report_statement(
    *, with_percent: bool, bare: bool, caller: ReportCaller, answer_only: bool = False
) -> str:
    """The renewing report for `caller`'s slots (`_report_template` says what its row holds),
    with the engine's clock and conditions rendered into it."""
    return engine.render(_report_template(with_percent, bare, answer_only, caller))


# The caller as parameters: the hand (`hand_id`), and the lane of a lane-limited key (`lane_id`).
_PARAMETER_REPORTER = ReportCaller(hand="%(hand_id)s")


_PARAMETER_REPORTER_IN_LANE = ReportCaller(
    hand="%(hand_id)s", where="AND mine.lane_id = %(lane_id)s "
)


def report_params(
    *,
    attempt_id: int,
    fence: int,
    kind: str,
    process_id: str,
    message: str,
    percent: float | None,
    details: dict[str, Any] | None,
    lease_id: int | None = None,
    checkpoint: object = None,
) -> dict[str, Any]:
    """The parameters of a renewing report (`report_statement`); `lease_id`: the attempt's
    lease, if known; `checkpoint`: None for none."""
    return {
        "attempt_id": attempt_id,
        "lease_id": lease_id,
        "fence": fence,
        "process_id": process_id,
        "kind": kind,
        "message": message,
        "percent": percent,
        "details": json.dumps(details) if details else "{}",
        "checkpoint": checkpoint_param(checkpoint),
    }


# A report's details are kept with it (90 days by default): an object of at most this much JSON.
MAX_DETAILS_BYTES = 16_384


def details_refusal(details: object) -> ValidationFailed | None:
    """Why a report's `details` are refused (not an object, a NUL or a lone surrogate in a key
    or a string, or over MAX_DETAILS_BYTES as JSON), or None."""
    if details is None:
        return None
    if not isinstance(details, dict):
        return ValidationFailed("details must be an object", fields={"details": ["An object."]})
    unstorable = unstorable_text(details)
    if unstorable is not None:
        # PostgreSQL's jsonb refuses both anywhere in a document (a 500 otherwise).
        return ValidationFailed(
            f"details hold {unstorable}, which no report may hold",
            fields={"details": [f"No {unstorable.removeprefix('a ')}s."]},
        )
    if len(json.dumps(details).encode()) > MAX_DETAILS_BYTES:
        return ValidationFailed(
            f"details must be at most {MAX_DETAILS_BYTES} bytes of JSON",
            fields={"details": [f"At most {MAX_DETAILS_BYTES} bytes of JSON."]},
            limit_bytes=MAX_DETAILS_BYTES,
        )
    return None


@functools.cache
def _attempt_attnames() -> list[str]:
    return [f.attname for f in Attempt._meta.concrete_fields]


def _report_layout() -> tuple[int, int]:
    """Where the attempt's columns start in a renewing report's row, and how many there are."""
    return len(engine.COLUMNS) + 1, len(_attempt_attnames())


def report_view(row: tuple[Any, ...], hand: Hand | None = None) -> AttemptView:
    """The attempt and its lease from a row of the renewing report (and its hand: the lease's
    holder, if not given). The tenure's interval and grace are the lease's, the slot's index is
    in the lease's name (fleet.api.presenters.attempt_json)."""
    width, count = _report_layout()
    lease = engine.snapshot(row[:width])
    attempt = ReportedAttempt(
        **dict(zip(_attempt_attnames(), row[width : width + count], strict=True)),
        hand=Named(name=hand.name if hand else lease.holder),
        slot=Named(index=slot_index(lease.resource)),
        lane=Named(slug=lane_slug(workspace_id=lease.workspace_id, lane_id=row[width + count])),
    )
    return AttemptView(attempt, lease)


def report_record_due(row: tuple[Any, ...]) -> bool:
    """Whether a bare heartbeat's row says its once-a-minute record is due."""
    width, count = _report_layout()
    return bool(row[width + count + 1])


# What an answer shows of a renewing report (`answer_only`), in this order, followed by the
# attempt's lane (fleet.api.presenters.report_row_json). What the statement's own conditions fix
# is left out, as the caller knows it: the attempt's id and fence, the lease's fence (the
# attempt's), its status (held) and the attempt's end (none).
REPORT_ANSWER_LEASE = (
    "resource",
    "holder",
    "interval_s",
    "grace_s",
    "acquired_at",
    "renewed_at",
    "deadline",
    "server_time",
    # The tenure's open handoff requests (read only when not 0: `leases.handoffs.pending`).
    "handoff_open",
)


REPORT_ANSWER_ATTEMPT = (
    "run_id",
    "process_id",
    "directive",
    "claimed_at",
    "last_report_at",
    "ended_at",
    "end_reason",
    "summary",
    "progress_percent",
    "progress_timeout_s",
    "last_progress_at",
    "idle_since",
    "budget_notice",
    "budget_until",
)


def heartbeat_record(
    *, workspace_id: int, attempt_id: int, fence: int, at: datetime, process_id: str
) -> bool:
    """The once-a-minute record of a bare heartbeat (PostgreSQL): the attempt's stamp and the
    report row, at the renewal's time `at`, in one statement; whether it was written. The stamp
    is conditional, so of heartbeats that found the record due at once only one writes it."""
    attempt_table = Attempt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH stamped AS (UPDATE {attempt_table} SET last_report_at = %(at)s "
            f"WHERE {attempt_table}.workspace_id = %(workspace_id)s AND id = %(attempt_id)s "
            "AND fence = %(fence)s "
            f"AND {connection.ops.quote_name('end')} IS NULL "
            "AND (last_report_at IS NULL OR last_report_at <= "
            f"%(at)s - interval '{HEARTBEAT_RECORD_S} seconds') RETURNING id, workspace_id) "
            f"INSERT INTO {Report._meta.db_table} "
            "(workspace_id, attempt_id, kind, at, process_id, renewed, message, percent, details) "
            "SELECT workspace_id, id, %(kind)s, %(at)s, %(process_id)s, true, '', NULL, '{}' "
            "FROM stamped",
            {
                "workspace_id": workspace_id,
                "at": at,
                "attempt_id": attempt_id,
                "fence": fence,
                "kind": ReportKind.HEARTBEAT.value,
                "process_id": process_id,
            },
        )
        return bool(cursor.rowcount)


def _report_renewing(
    *,
    hand: Hand,
    attempt_id: int,
    fence: object,
    kind: str,
    process_id: str,
    message: str,
    percent: float | None,
    details: dict[str, Any] | None,
    lane_id: int | None,
    checkpoint: object = None,
) -> AttemptView | None:
    """A renewing report in one round trip, or None: then the step-by-step path decides."""
    if as_fence(fence) is None:
        return None
    params = report_params(
        attempt_id=attempt_id,
        fence=fence,
        kind=kind,
        process_id=process_id,
        message=message,
        percent=percent,
        details=details,
        checkpoint=checkpoint,
    )
    params["hand_id"], params["workspace_id"] = hand.pk, hand.workspace_id
    if lane_id is not None:
        params["lane_id"] = lane_id
    # The template is built once; the engine renders its clock into it on every call.
    statement = report_statement(
        with_percent=percent is not None,
        bare=is_bare_heartbeat(kind, message, percent, details, checkpoint),
        caller=_PARAMETER_REPORTER if lane_id is None else _PARAMETER_REPORTER_IN_LANE,
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        return None
    view = report_view(row, hand)
    if report_record_due(row):
        at = view.lease.server_time
        if heartbeat_record(
            workspace_id=hand.workspace_id,
            attempt_id=view.attempt.pk,
            fence=view.attempt.fence,
            at=at,
            process_id=process_id,
        ):
            view.attempt.last_report_at = at
    return view


def validate_report(
    *,
    kind: str,
    process_id: str | None,
    message: str,
    percent: float | None,
    details: dict[str, Any] | None,
    tokens_in: int | None,
    tokens_out: int | None,
    cost_usd: Decimal | None,
    checkpoint: object = None,
) -> str:
    """A report's values, checked as every way of reporting checks them; its message as kept."""
    validate_choice(kind, field="kind", choices=[k.value for k in ReportKind])
    if process_id is not None:
        validate_name(process_id, field="process_id")
    message = validate_reason(message, field="message")
    if percent is not None and (
        isinstance(percent, bool)
        or not isinstance(percent, int | float)
        or not (0 <= percent <= 100)
    ):
        raise ValidationFailed(
            "percent must be from 0 to 100", fields={"percent": ["From 0 to 100."]}
        )
    refusal = (
        details_refusal(details)
        or checkpoint_refusal(checkpoint)
        or cost_refusal(tokens_in, tokens_out, cost_usd)
    )
    if refusal is not None:
        raise refusal
    return message


@refusals_recorded
@retried
def attempt_report(
    *,
    hand: Hand,
    attempt_id: int,
    fence: int,
    kind: str,
    process_id: str | None = None,
    message: str = "",
    percent: float | None = None,
    details: dict[str, Any] | None = None,
    lane_id: int | None = None,
    tokens_in: int | None = None,
    tokens_out: int | None = None,
    cost_usd: Decimal | None = None,
    checkpoint: object = None,
    statement_missed: bool = False,
    missed_lease_id: int | None = None,
) -> tuple[bool, AttemptView]:
    """Record a report; with the claim's process identity it also renews the lease.

    Without a process identity the report is recorded but renews nothing (so a helper script
    cannot keep a stuck hand's lease alive); with another identity it is refused (rule 6).
    A report with a cost (tokens, cost_usd) also judges the lane's budgets, in its transaction
    (fleet/costs/budgets.py): it takes the step-by-step path, so a heartbeat without one
    costs what it did.

    `checkpoint` (None: none) is kept with the report, in the statement that writes it
    (`fleet.attempts.checkpoints`).

    A renewing report without a cost is one statement (`_report_renewing`); when it matches
    nothing the report is refused, said from the attempt and its lease as they stand, never by
    renewing again step by step (a renewal that missed never matches later: an attempt once
    ended, superseded or another process's stays so). `statement_missed`: the hot call ran that
    statement already, with its key check, and it matched nothing; if it named a lease
    (`missed_lease_id`) other than the attempt's (its memory gone wrong), it proved nothing, and
    the statement runs.
    """
    message = validate_report(
        kind=kind,
        process_id=process_id,
        message=message,
        percent=percent,
        details=details,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost_usd=cost_usd,
        checkpoint=checkpoint,
    )
    costed = bool(tokens_in or tokens_out or cost_usd)
    # A report renews when it carries the claim's process identity and no cost.
    renewing = None if costed else process_id

    def renewed_in_one_statement(process_id: str) -> AttemptView | None:
        return _report_renewing(
            hand=hand,
            attempt_id=attempt_id,
            fence=fence,
            kind=kind,
            process_id=process_id,
            message=message,
            percent=percent,
            details=details,
            lane_id=lane_id,
            checkpoint=checkpoint,
        )

    if renewing is not None and not statement_missed:
        done = renewed_in_one_statement(renewing)
        if done is not None:
            return True, done
    # The caller's attempt at its fence, each check with its own error: why a renewing report
    # was refused, or the attempt a costed report (or one that renews nothing) is about.
    attempt = attempt_for_hand(hand=hand, attempt_id=attempt_id, fence=fence, lane_id=lane_id)
    refuse_ended(attempt)
    resource = attempt.lease.resource
    if renewing is not None and statement_missed:
        if missed_lease_id is not None and missed_lease_id != attempt.lease_id:
            done = renewed_in_one_statement(renewing)
            if done is not None:
                return True, done
    if renewing is not None:
        raise tenure_error(
            attempt, engine.read(workspace_id=hand.workspace_id, resource=resource), process_id
        )
    with transaction.atomic():
        if costed:
            # Before the lease and the attempt: a report that reaches a budget updates every open
            # attempt of the lane, so a costed report holding its own attempt while it waited
            # for the budget would deadlock with it.
            budgets_lock(workspace_id=attempt.workspace_id, lane_id=attempt.lane_id)
        if process_id is not None:
            lease = engine.renew(
                workspace_id=hand.workspace_id,
                resource=resource,
                holder=hand.name,
                fence=attempt.fence,
                process_id=process_id,
            )
            renewed = lease is not None
        else:
            lease = engine.read(workspace_id=hand.workspace_id, resource=resource)
            renewed = False
            if lease is not None and (lease.fence != attempt.fence or not lease.held):
                lease = None
        if lease is None:
            raise tenure_error(
                attempt, engine.read(workspace_id=hand.workspace_id, resource=resource), process_id
            )
        recorded = attempt.last_report_at
        progress = not is_bare_heartbeat(kind, message, percent, details, checkpoint)
        if (
            costed
            or progress
            or not renewed
            or recorded is None
            or recorded <= lease.server_time - timedelta(seconds=HEARTBEAT_RECORD_S)
        ):
            Report.objects.create(
                workspace_id=attempt.workspace_id,
                attempt=attempt,
                kind=kind,
                at=lease.server_time,
                process_id=process_id or "",
                renewed=renewed,
                message=message,
                percent=percent,
                details=details or {},
                checkpoint=checkpoint_param(checkpoint),
                tokens_in=tokens_in or 0,
                tokens_out=tokens_out or 0,
                cost_usd=cost_usd or Decimal(0),
            )
            updates: dict[str, Any] = {"last_report_at": lease.server_time}
            if percent is not None:
                updates["progress_percent"] = percent
            if progress:
                # Progress ends an idle spell (fleet/attempts/idle.py), as the renewing statement
                # does.
                updates |= {"last_progress_at": lease.server_time, "idle_since": None}
            Attempt.objects.filter(pk=attempt.pk).update(**updates)
            for name, value in updates.items():
                setattr(attempt, name, value)
        if costed and budgets_enforce(
            workspace_id=hand.workspace_id,
            lane_id=attempt.lane_id,
            at=lease.server_time,
            actor=hand.name,
            attempt_id=attempt.pk,
        ):
            attempt.refresh_from_db(fields=["directive", "budget_notice", "budget_until"])
    return renewed, AttemptView(attempt, lease)
