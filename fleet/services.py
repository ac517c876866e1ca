"""The fleet's rules: plan (lanes, work packages, runs), hands and keys, and attempts on slots.

Every transition is one conditional statement (the lease engine's, or an `UPDATE ... WHERE` on the
attempt) plus its event, in one transaction. Every refusal is recorded by `refusals_recorded`.
"""

from __future__ import annotations

import functools
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Model, Q
from django.utils.text import slugify

from fleet import keys
from fleet.models import (
    DEFAULT_GRACE_S,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    Attempt,
    AttemptEnd,
    Directive,
    Hand,
    HandKey,
    Lane,
    Membership,
    PlanState,
    Report,
    ReportKind,
    Role,
    Run,
    RunState,
    Scope,
    Slot,
    SlotState,
    WorkPackage,
    Workspace,
)
from fleet.selectors import (
    AttemptView,
    Named,
    ReportedAttempt,
    SlotCounts,
    SlotView,
    attempt_get,
    attempt_view,
    lane_slug,
    run_get,
    run_slot_counts,
    slot_state,
)
from leases import engine
from leases import services as lease_services
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now, now_expression, now_sql, parse_timestamp
from leases.engine import LeaseSnapshot
from leases.errors import (
    KeyInvalid,
    LeaseLost,
    NoOpenSlot,
    NotFound,
    NotHolder,
    ProcessMismatch,
    RunClosed,
    ScopeDenied,
    SlotNotDone,
    SlotTaken,
    ValidationFailed,
)
from leases.fences import as_fence, stale_fence, validate_fence
from leases.models import EventKind, Lease, LeaseKind, LeaseState, LeaseStatus
from leases.services import held_error, validate_name, validate_seconds

MAX_SLOTS = 1000
MAX_INTERVAL_S = 86_400
MAX_REASON_LENGTH = 2000
KEY_PREFIX_BYTES = 6  # 12 hex characters: the lookup prefix
KEY_SECRET_BYTES = 32
LAST_USED_RESOLUTION_S = 60
ALL_SCOPES = [scope.value for scope in Scope]


def slot_resource(run_id: int, index: int) -> str:
    return f"run/{run_id}/slot/{index}"


def slot_index(resource: str) -> int:
    """The index of the slot whose lease is `resource` (what `slot_resource` wrote)."""
    return int(resource.rsplit("/", 1)[1])


def _validate_reason(value: object, *, field: str = "reason", required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise ValidationFailed(
                f"{field} is required", fields={field: ["This field is required."]}
            )
        return ""
    if not isinstance(value, str) or len(value) > MAX_REASON_LENGTH:
        raise ValidationFailed(
            f"{field} must be a string of at most {MAX_REASON_LENGTH} characters",
            fields={field: [f"At most {MAX_REASON_LENGTH} characters."]},
        )
    return value


def _validate_choice(value: object, *, field: str, choices: list[str]) -> str:
    if value not in choices:
        raise ValidationFailed(
            f"{field} must be one of {', '.join(choices)}",
            fields={field: [f"One of: {', '.join(choices)}."]},
        )
    return str(value)


# --- Workspaces and people ----------------------------------------------------------------------


def workspace_get_or_create(*, name: str) -> Workspace:
    validate_name(name, field="workspace")
    workspace, _ = Workspace.objects.get_or_create(name=name)
    return workspace


def membership_set(*, workspace: Workspace, user: Any, role: str) -> Membership:
    _validate_choice(role, field="role", choices=[r.value for r in Role])
    membership, _ = Membership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    return membership


# --- Plan ---------------------------------------------------------------------------------------


def _interval_or_default(value: object, *, field: str, default: int, minimum: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(f"{field} must be an integer", fields={field: ["An integer."]})
    return int(validate_seconds(value, field=field, minimum=minimum, maximum=MAX_INTERVAL_S))


def lane_create(
    *,
    workspace: Workspace,
    slug: str,
    name: str = "",
    heartbeat_interval_s: int | None = None,
    grace_s: int | None = None,
) -> tuple[Lane, bool]:
    """Create a lane, or return the existing one with that slug (created=False)."""
    validate_name(slug, field="slug")
    if slugify(slug) != slug:
        raise ValidationFailed(
            "slug may hold only lowercase letters, digits, hyphens and underscores",
            fields={"slug": ["Lowercase letters, digits, hyphens and underscores."]},
        )
    name = validate_name(name, field="name", required=False) or slug
    defaults = {
        "name": name,
        "heartbeat_interval_s": None
        if heartbeat_interval_s is None
        else _interval_or_default(
            heartbeat_interval_s, field="heartbeat_interval_s", default=0, minimum=1
        ),
        "grace_s": None
        if grace_s is None
        else _interval_or_default(grace_s, field="grace_s", default=0, minimum=0),
    }
    return Lane.objects.get_or_create(workspace=workspace, slug=slug, defaults=defaults)


def work_package_create(
    *, lane: Lane, key: str, title: str, external_ref: str = ""
) -> tuple[WorkPackage, bool]:
    """Idempotent on (lane, key): a retried request returns the first package (created=False)."""
    validate_name(key, field="key")
    validate_name(title, field="title")
    if external_ref and (not isinstance(external_ref, str) or len(external_ref) > 500):
        raise ValidationFailed(
            "external_ref must be at most 500 characters", fields={"external_ref": ["Too long."]}
        )
    try:
        with transaction.atomic():
            return WorkPackage.objects.get_or_create(
                lane=lane,
                key=key,
                defaults={
                    "workspace_id": lane.workspace_id,
                    "title": title,
                    "external_ref": external_ref or "",
                },
            )
    except IntegrityError:
        # A concurrent request created it between our read and insert.
        return WorkPackage.objects.get(lane=lane, key=key), False


def _validate_evidence_kinds(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(kind, str) and 0 < len(kind) <= 64 for kind in value
    ):
        raise ValidationFailed(
            "evidence_required must be a list of kinds (short strings)",
            fields={"evidence_required": ["A list of strings of at most 64 characters."]},
        )
    return list(dict.fromkeys(value))


@refusals_recorded
def run_create(
    *,
    work_package: WorkPackage,
    title: str,
    brief: str = "",
    slots: int = 1,
    evidence_required: list[str] | None = None,
    heartbeat_interval_s: int | None = None,
    grace_s: int | None = None,
) -> Run:
    """A run with its slots, each a free lease row `run/<id>/slot/<n>` at fence 0."""
    validate_name(title, field="title")
    if not isinstance(brief, str):
        raise ValidationFailed("brief must be Markdown text", fields={"brief": ["A string."]})
    if isinstance(slots, bool) or not isinstance(slots, int) or not (1 <= slots <= MAX_SLOTS):
        raise ValidationFailed(
            f"slots must be an integer from 1 to {MAX_SLOTS}",
            fields={"slots": [f"An integer from 1 to {MAX_SLOTS}."]},
        )
    lane = work_package.lane
    interval = _interval_or_default(
        heartbeat_interval_s,
        field="heartbeat_interval_s",
        default=lane.heartbeat_interval_s or DEFAULT_HEARTBEAT_INTERVAL_S,
        minimum=1,
    )
    grace = _interval_or_default(
        grace_s,
        field="grace_s",
        default=lane.grace_s if lane.grace_s is not None else DEFAULT_GRACE_S,
        minimum=0,
    )
    if work_package.state != PlanState.OPEN:
        raise RunClosed(f"work package {work_package.key!r} is closed")
    with transaction.atomic():
        run = Run.objects.create(
            workspace_id=work_package.workspace_id,
            work_package=work_package,
            title=title,
            brief=brief,
            evidence_required=_validate_evidence_kinds(evidence_required),
            heartbeat_interval_s=interval,
            grace_s=grace,
            slot_count=slots,
        )
        _create_slots(run, range(slots))
    return run


@refusals_recorded
def run_set_state(*, workspace_id: int, run_id: int, state: str, actor: str) -> Run:
    """Close (or reopen) a run. A closed run takes no claims; its attempts go on. `done` is the
    run's own doing (its last slot finished): a closed run whose slots are all done reopens as
    done, and a done run can be closed."""
    _validate_choice(state, field="state", choices=[RunState.OPEN.value, RunState.CLOSED.value])
    run = run_get(workspace_id=workspace_id, run_id=run_id)
    with transaction.atomic():
        _lock_run(run.pk)
        now = db_now()
        if state == RunState.CLOSED:
            changed = (
                Run.objects.filter(pk=run.pk)
                .exclude(state=RunState.CLOSED)
                .update(state=RunState.CLOSED, closed_at=now)
            )
            if changed:
                record_event(
                    workspace_id=workspace_id,
                    kind=EventKind.RUN_CLOSED,
                    at=now,
                    actor=actor,
                    data={"run": run.pk},
                )
        elif run_slot_counts(run_id=run.pk).all_done:
            # Its last slot finished while it was closed: reopened, it is done, and says so.
            if Run.objects.filter(pk=run.pk, state=RunState.CLOSED).update(
                state=RunState.DONE, closed_at=now
            ):
                _record_run_done(workspace_id=workspace_id, run_id=run.pk, at=now, actor=actor)
        else:
            Run.objects.filter(pk=run.pk, state=RunState.CLOSED).update(
                state=RunState.OPEN, closed_at=None
            )
    run.refresh_from_db()
    return run


# --- Hands and keys -----------------------------------------------------------------------------


def hand_create(*, workspace: Workspace, name: str, lane: Lane | None = None) -> tuple[Hand, bool]:
    validate_name(name, field="name")
    return Hand.objects.get_or_create(workspace=workspace, name=name, defaults={"lane": lane})


@dataclass(frozen=True)
class IssuedKey:
    key: HandKey
    plaintext: str  # shown once, never stored


def _validate_scopes(scopes: object) -> list[str]:
    if not isinstance(scopes, list) or not scopes or not all(s in ALL_SCOPES for s in scopes):
        raise ValidationFailed(
            f"scopes must be a non-empty list of: {', '.join(ALL_SCOPES)}",
            fields={"scopes": [f"A non-empty list of: {', '.join(ALL_SCOPES)}."]},
        )
    return list(dict.fromkeys(scopes))


@refusals_recorded
def key_issue(
    *,
    hand: Hand,
    scopes: list[str],
    actor: str,
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
) -> IssuedKey:
    """Mint a key `gc_<prefix>_<secret>` for `hand`; only the prefix and a hash are kept."""
    scopes = _validate_scopes(scopes)
    if expires_in_s is not None:
        expires_in_s = validate_seconds(
            expires_in_s, field="expires_in_s", minimum=1, maximum=366 * 86_400
        )
    if lane is not None and lane.workspace_id != hand.workspace_id:
        raise NotFound("no such lane")
    secret = secrets.token_urlsafe(KEY_SECRET_BYTES)
    with transaction.atomic():
        now = db_now()
        key = HandKey.objects.create(
            hand=hand,
            prefix=secrets.token_hex(KEY_PREFIX_BYTES),
            secret_hash=keys.hash_secret(secret),
            scopes=scopes,
            lane=lane,
            expires_at=now + timedelta(seconds=expires_in_s) if expires_in_s else None,
            revoke_when_done=revoke_when_done,
            created_by=actor,
        )
        record_event(
            workspace_id=hand.workspace_id,
            kind=EventKind.KEY_ISSUED,
            at=now,
            actor=actor,
            hand=hand.name,
            data={"prefix": key.prefix, "scopes": scopes},
        )
    return IssuedKey(key=key, plaintext=f"gc_{key.prefix}_{secret}")


@refusals_recorded
def key_revoke(
    *, workspace_id: int, prefix: str, actor: str, reason: str = "", lane_id: int | None = None
) -> HandKey:
    """Revoke now; the key's very next call is refused (nothing caches a key's validity).

    A lane-limited caller (`lane_id`) reaches only keys limited to its own lane, the only keys it
    may issue; any other key is not found, as objects outside its lane are everywhere."""
    reason = _validate_reason(reason)
    within_lane = {"lane_id": lane_id} if lane_id is not None else {}
    try:
        key = HandKey.objects.select_related("hand").get(
            prefix=prefix, hand__workspace_id=workspace_id, **within_lane
        )
    except HandKey.DoesNotExist:
        raise NotFound(f"no key {prefix!r}") from None
    with transaction.atomic():
        now = db_now()
        if HandKey.objects.filter(pk=key.pk, revoked_at=None).update(
            revoked_at=now, revoked_by=actor, revoke_reason=reason
        ):
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.KEY_REVOKED,
                at=now,
                actor=actor,
                hand=key.hand.name,
                data={"prefix": prefix, "reason": reason},
            )
    key.refresh_from_db()
    return key


# The key's row and what authentication loads with it, in this order (a lane is optional).
_KEY_MODELS: tuple[type[Model], ...] = (HandKey, Hand, Workspace, Lane)
Converter = tuple[int, Any, list[Any]]


@functools.cache
def _key_query(vendor: str) -> tuple[str, list[list[Converter]]]:
    """The key, its hand, the hand's workspace and the key's lane in one SELECT, written out once
    per database instead of compiled by the ORM on every call (that compilation was the hot
    path's largest cost), with each column's converters as the ORM would apply them. `{now}` is
    rendered per call: tests move the database clock."""
    quote = connection.ops.quote_name
    columns, converters = [], []
    for model in _KEY_MODELS:
        table = quote(model._meta.db_table)
        mine = []
        for index, field in enumerate(model._meta.concrete_fields):
            columns.append(f"{table}.{quote(field.column)}")
            column = field.get_col(model._meta.db_table)
            funcs = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if funcs:
                mine.append((index, column, funcs))
        converters.append(mine)
    key, hand, workspace, lane = (quote(m._meta.db_table) for m in _KEY_MODELS)
    sql = (
        f"SELECT {', '.join(columns)}, {{now}} FROM {key} "
        f"INNER JOIN {hand} ON {key}.{quote('hand_id')} = {hand}.{quote('id')} "
        f"INNER JOIN {workspace} ON {hand}.{quote('workspace_id')} = {workspace}.{quote('id')} "
        f"LEFT OUTER JOIN {lane} ON {key}.{quote('lane_id')} = {lane}.{quote('id')} "
        f"WHERE {key}.{quote('prefix')} = %s"
    )
    return sql, converters


def _models_of(row: tuple[Any, ...], converters: list[list[Converter]]) -> list[Model | None]:
    """One instance per model of `_KEY_MODELS` from a row (None for a left join that missed)."""
    out: list[Model | None] = []
    position = 0
    for model, mine in zip(_KEY_MODELS, converters, strict=True):
        fields = model._meta.concrete_fields
        values = list(row[position : position + len(fields)])
        position += len(fields)
        if values[0] is None:  # no primary key: the optional lane
            out.append(None)
            continue
        for index, column, funcs in mine:
            for func in funcs:
                values[index] = func(values[index], column, connection)
        out.append(model.from_db(connection.alias, [f.attname for f in fields], values))
    return out


def _key_with_hand(prefix: str) -> tuple[HandKey, datetime] | None:
    """The key with its hand, workspace and lane loaded, and the database's time (one query)."""
    sql, converters = _key_query(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql.format(now=now_sql()), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    key, hand, workspace, lane = _models_of(row[:-1], converters)
    assert isinstance(key, HandKey) and isinstance(hand, Hand)
    hand.workspace = workspace
    key.hand = hand
    key.lane = lane
    now = parse_timestamp(row[-1])
    assert now is not None
    return key, now


def key_authenticate(raw: str) -> HandKey:
    """The key behind a bearer token, checked for revocation and expiry on every call.

    One query (the key, its hand, and the database's time) plus, at most once a minute per key,
    one conditional write of `last_used_at`.
    """
    token = keys.parse_token(raw)
    if token is None:
        raise KeyInvalid("the key is missing or malformed")
    prefix, secret = token
    found = _key_with_hand(prefix)
    key, now = found if found else (None, None)
    # Compare even when no key matched, so timing does not tell whether a prefix exists.
    expected = key.secret_hash if key else keys.hash_secret("")
    if not hmac.compare_digest(expected, keys.hash_secret(secret)) or key is None or now is None:
        raise KeyInvalid("unknown key")
    refusal = keys.key_refusal(
        prefix=prefix, revoked_at=key.revoked_at, expires_at=key.expires_at, scopes=key.scopes,
        now=now,
    )
    if refusal is not None:
        raise refusal
    key_mark_used(key.pk, key.last_used_at, now)
    return key


def key_mark_used(key_id: int, last_used_at: datetime | None, now: datetime) -> None:
    """Stamp a key's `last_used_at` with `now` if it is a minute old: at most one write a minute
    per key, conditional, so callers that find it stale at once write it once."""
    stale = now - timedelta(seconds=LAST_USED_RESOLUTION_S)
    if last_used_at is None or last_used_at < stale:
        HandKey.objects.filter(pk=key_id).filter(
            Q(last_used_at=None) | Q(last_used_at__lt=stale)
        ).update(last_used_at=now)


def key_require_scope(key: HandKey, scope: str) -> None:
    refusal = keys.scope_refusal(key.scopes, scope)
    if refusal is not None:
        raise refusal


# --- Attempts -----------------------------------------------------------------------------------


@refusals_recorded
def attempt_claim(
    *,
    hand: Hand,
    run_id: int,
    process_id: str,
    slot: int | None = None,
    lane_id: int | None = None,
) -> AttemptView:
    """Take an open slot (the lowest, or `slot`) of the run: a new tenure of its lease.

    A slot whose holder is lost is open at once; no background job has to notice first.
    """
    validate_name(process_id, field="process_id")
    run = run_get(workspace_id=hand.workspace_id, run_id=run_id, lane_id=lane_id)
    _refuse_closed_run(run)
    slots = list(Slot.objects.filter(run=run).order_by("index").values_list("index", "lease_id"))
    if slot is not None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not (0 <= slot < len(slots)):
            raise ValidationFailed(
                f"slot must be an index from 0 to {len(slots) - 1}",
                fields={"slot": [f"An index from 0 to {len(slots) - 1}."]},
            )
        candidates = [slots[slot][1]]
    else:
        candidates = [lease_id for _, lease_id in slots]
    with transaction.atomic():
        lease = engine.take_first_free(
            workspace_id=hand.workspace_id,
            lease_ids=candidates,
            holder=hand.name,
            process_id=process_id,
            interval_s=run.heartbeat_interval_s,
            grace_s=run.grace_s,
        )
        if lease is not None:
            taken = Slot.objects.get(lease_id=lease.id)
            # The tenure this claim replaced (if its holder was lost) ends now, recorded once.
            for previous in Attempt.objects.filter(slot=taken, end=None).values_list(
                "pk", flat=True
            ):
                attempt_mark_lost(
                    attempt_id=previous, at=lease.server_time, reason="slot reclaimed"
                )
            attempt = Attempt.objects.create(
                workspace_id=hand.workspace_id,
                run=run,
                slot=taken,
                hand=hand,
                lane_id=run.work_package.lane_id,
                lease_id=lease.id,
                fence=lease.fence,
                process_id=process_id,
                claimed_at=lease.server_time,
            )
            record_event(
                workspace_id=hand.workspace_id,
                kind=EventKind.CLAIMED,
                at=lease.server_time,
                actor=hand.name,
                hand=hand.name,
                attempt_id=attempt.pk,
                resource=lease.resource,
                fence=lease.fence,
                data={"run": run.pk, "slot": taken.index, "process_id": process_id},
            )
            return AttemptView(
                attempt_get(workspace_id=hand.workspace_id, attempt_id=attempt.pk), lease
            )
    if slot is not None:
        current = engine.read(workspace_id=hand.workspace_id, resource=slot_resource(run.pk, slot))
        assert current is not None
        if current.status == LeaseStatus.RETIRED:
            raise SlotTaken(
                f"slot {slot} of run {run.pk} is done: its work was finished; "
                "claim another slot, or ask a supervisor to reopen it",
                state=SlotState.DONE,
                resource=current.resource,
                fence=current.fence,
            )
        raise held_error(current, SlotTaken)
    counts = run_slot_counts(run_id=run.pk)
    if counts.all_done:  # the last slot was finished while this claim looked
        run.state = RunState.DONE
        _refuse_closed_run(run)
    raise NoOpenSlot(
        _no_open_slot_message(run.pk, counts),
        slots=counts.total,
        held=counts.held,
        done=counts.done,
        next_expires_in_s=counts.next_expires_in_s,
    )


def _refuse_closed_run(run: Run) -> None:
    """run_closed, saying why, for a run that takes no claims."""
    if run.state == RunState.DONE:
        raise RunClosed(
            f"run {run.pk} is done: every slot was finished; there is nothing left to claim",
            run_state=RunState.DONE,
        )
    if run.state != RunState.OPEN:
        raise RunClosed(f"run {run.pk} is closed: it takes no claims", run_state=run.state)
    if run.work_package.state != PlanState.OPEN:
        raise RunClosed(
            f"run {run.pk} takes no claims: its work package {run.work_package.key!r} is closed",
            run_state=run.state,
        )


def _no_open_slot_message(run_id: int, counts: SlotCounts) -> str:
    held = f"{counts.held} held"
    if counts.next_expires_in_s is not None:
        held += (
            f" (the soonest holder's current renewal window ends in "
            f"{counts.next_expires_in_s:.0f} s; a slot opens only if its holder releases it or "
            "stops renewing past its grace)"
        )
    done = f", {counts.done} done" if counts.done else ""
    return f"run {run_id} has no open slot: {held}{done}; wait, or pick other work"


def attempt_mark_lost(*, attempt_id: int, at: datetime, reason: str) -> bool:
    """End a tenure as lost and record it, once: only the caller whose update matched writes
    the event, however many sweeps and claims race here."""
    attempt = Attempt.objects.select_related("hand", "lease").get(pk=attempt_id)
    if not Attempt.objects.filter(pk=attempt_id, end=None).update(
        end=AttemptEnd.LOST, ended_at=at, end_reason=reason
    ):
        return False
    record_event(
        workspace_id=attempt.workspace_id,
        kind=EventKind.LOST,
        at=at,
        actor="system",
        hand=attempt.hand.name,
        attempt_id=attempt.pk,
        resource=attempt.lease.resource,
        fence=attempt.fence,
        data={"reason": reason},
    )
    return True


def _attempt_for_hand(
    *, hand: Hand, attempt_id: int, fence: object, lane_id: int | None
) -> Attempt:
    """The caller's own attempt, at the fence it carries (checks shared by every hand call)."""
    attempt = attempt_get(workspace_id=hand.workspace_id, attempt_id=attempt_id, lane_id=lane_id)
    if attempt.hand_id != hand.pk:
        raise NotHolder(f"attempt {attempt.pk} belongs to another hand")
    stale = stale_fence(validate_fence(fence), attempt.fence, f"attempt {attempt.pk}")
    if stale is not None:
        # The lease's fence now, which a caller needs to see how far it fell behind.
        stale.fields["current_fence"] = attempt.lease.fence
        raise stale
    return attempt


def _tenure_error(
    attempt: Attempt, lease: LeaseSnapshot | None, process_id: str | None
) -> Exception:
    """Why a fenced statement on the attempt's slot lease matched no row."""
    if (
        lease is None
        or lease.fence != attempt.fence
        or lease.state in (LeaseState.FREE, LeaseState.LOST)
    ):
        return LeaseLost(
            f"attempt {attempt.pk} has lost its slot lease",
            current_fence=lease.fence if lease else None,
        )
    if process_id is not None and process_id != lease.process_id:
        return ProcessMismatch(
            f"attempt {attempt.pk} is held by process {lease.process_id!r}, not {process_id!r}",
            process_id=lease.process_id,
        )
    return LeaseLost(f"attempt {attempt.pk} is no longer valid")


def _refuse_ended(attempt: Attempt) -> None:
    if attempt.end:
        raise LeaseLost(f"attempt {attempt.pk} has ended ({attempt.end})", end=attempt.end)


# A bare heartbeat (kind heartbeat, no message, percent or details) is a renewal of the slot lease.
# It is kept on record, as a report row and the attempt's last_report_at, at most once a minute
# per attempt, like a key's last_used_at: the timeline still shows that the hand was alive
# without a row per beat, and a heartbeat writes what a resource renewal writes (one row) almost
# always. The lease's renewed_at is the exact time of the latest one
# (`fleet.selectors.last_report_at`).
HEARTBEAT_RECORD_S = 60


def is_bare_heartbeat(
    kind: str, message: str, percent: float | None, details: dict[str, Any] | None
) -> bool:
    return kind == ReportKind.HEARTBEAT and not message and percent is None and not details


@dataclass(frozen=True)
class ReportCaller:
    """Who sends a renewing report, as SQL: `hand`, the caller's hand id; `joined`, tables to
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
    (fleet/hot.py), joined in the same UPDATE.

    Its row is the lease's columns and the statement's time (`engine.COLUMNS`, server_time), the
    attempt's, the attempt's lane (its id: `fleet.selectors.lane_slug` names it), whether the
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
        # The caller's hand decides whose the attempt is: a hand belongs to one workspace, so
        # its id names the workspace too, and the hot path's key check reads no hand row for it.
        f"WHERE mine.id = %(attempt_id)s AND mine.hand_id = {caller.hand} "
        f"AND mine.fence = %(fence)s AND mine.{quote('end')} IS NULL {caller.where}"
        # The caller's own attempt names the lease and the fence of its tenure, which imply the
        # holder (a fence is granted once), so the lease is found by primary key alone. Naming
        # the holder too let the planner, its statistics behind a hand that had just taken
        # thousands of leases, read every lease of the hand through lease_holder_idx instead.
        # The key is a value, not the join's: joined, a plan made on small tables read every
        # lease and kept doing so as the table grew. It is `lease_id` when the caller knows
        # the attempt's lease (which never changes; the hot path remembers it), else a
        # sub-select, which reads the attempt a second time; the join checks it either way.
        f"AND {lease_table}.id = COALESCE(%(lease_id)s, (SELECT lease_id FROM {attempt_table} "
        "WHERE id = %(attempt_id)s)) "
        f"AND mine.lease_id = {lease_table}.id AND {lease_table}.fence = mine.fence "
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
        "(attempt_id, kind, at, process_id, renewed, message, percent, details) "
        "SELECT attempt_id, %(kind)s, server_time, %(process_id)s, true, %(message)s, "
        "%(percent)s, CAST(%(details)s AS jsonb) FROM renewed), "
        # The attempt as the statement leaves it.
        f"stamped AS (UPDATE {attempt_table} SET last_report_at = renewed.server_time{percent} "
        f"FROM renewed WHERE {attempt_table}.id = renewed.attempt_id "
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
) -> dict[str, Any]:
    """The parameters of a renewing report (`report_statement`); `lease_id`: the attempt's
    lease, if known."""
    return {
        "attempt_id": attempt_id,
        "lease_id": lease_id,
        "fence": fence,
        "process_id": process_id,
        "kind": kind,
        "message": message,
        "percent": percent,
        "details": json.dumps(details) if details else "{}",
    }


@functools.cache
def _attempt_attnames() -> list[str]:
    return [f.attname for f in Attempt._meta.concrete_fields]


def _report_layout() -> tuple[int, int]:
    """Where the attempt's columns start in a renewing report's row, and how many there are."""
    return len(engine.COLUMNS) + 1, len(_attempt_attnames())


def report_view(row: tuple[Any, ...], hand: Hand | None = None) -> AttemptView:
    """The attempt and its lease from a row of the renewing report (and its hand: the lease's
    holder, if not given). The tenure's interval and grace are the lease's, the slot's index is
    in the lease's name (fleet.api.attempt_json)."""
    width, count = _report_layout()
    lease = engine.snapshot(row[:width])
    attempt = ReportedAttempt(
        **dict(zip(_attempt_attnames(), row[width : width + count], strict=True)),
        hand=Named(name=hand.name if hand else lease.holder),
        slot=Named(index=slot_index(lease.resource)),
        lane=Named(slug=lane_slug(row[width + count])),
    )
    return AttemptView(attempt, lease)


def report_record_due(row: tuple[Any, ...]) -> bool:
    """Whether a bare heartbeat's row says its once-a-minute record is due."""
    width, count = _report_layout()
    return bool(row[width + count + 1])


# What an answer shows of a renewing report (`answer_only`), in this order, followed by the
# attempt's lane (fleet.api.report_row_json). What the statement's own conditions fix is left
# out, as the caller knows it: the attempt's id and fence, the lease's fence (the attempt's),
# its status (held) and the attempt's end (none).
REPORT_ANSWER_LEASE = (
    "resource",
    "holder",
    "interval_s",
    "grace_s",
    "acquired_at",
    "renewed_at",
    "deadline",
    "server_time",
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
)


def heartbeat_record(*, attempt_id: int, fence: int, at: datetime, process_id: str) -> bool:
    """The once-a-minute record of a bare heartbeat (PostgreSQL): the attempt's stamp and the
    report row, at the renewal's time `at`, in one statement; whether it was written. The stamp
    is conditional, so of heartbeats that found the record due at once only one writes it."""
    attempt_table = Attempt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH stamped AS (UPDATE {attempt_table} SET last_report_at = %(at)s "
            "WHERE id = %(attempt_id)s AND fence = %(fence)s "
            f"AND {connection.ops.quote_name('end')} IS NULL "
            "AND (last_report_at IS NULL OR last_report_at <= "
            f"%(at)s - interval '{HEARTBEAT_RECORD_S} seconds') RETURNING id) "
            f"INSERT INTO {Report._meta.db_table} "
            "(attempt_id, kind, at, process_id, renewed, message, percent, details) "
            "SELECT id, %(kind)s, %(at)s, %(process_id)s, true, '', NULL, '{}' FROM stamped",
            {
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
    )
    params["hand_id"] = hand.pk
    if lane_id is not None:
        params["lane_id"] = lane_id
    # The template is built once; the engine renders its clock into it on every call.
    statement = report_statement(
        with_percent=percent is not None,
        bare=is_bare_heartbeat(kind, message, percent, details),
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
            attempt_id=view.attempt.pk, fence=view.attempt.fence, at=at, process_id=process_id
        ):
            view.attempt.last_report_at = at
    return view


@refusals_recorded
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
) -> tuple[bool, AttemptView]:
    """Record a report; with the claim's process identity it also renews the lease.

    Without a process identity the report is recorded but renews nothing (so a helper script
    cannot keep a stuck hand's lease alive); with another identity it is refused (rule 6).
    """
    _validate_choice(kind, field="kind", choices=[k.value for k in ReportKind])
    if process_id is not None:
        validate_name(process_id, field="process_id")
    message = _validate_reason(message, field="message")
    if percent is not None and (
        isinstance(percent, bool)
        or not isinstance(percent, int | float)
        or not (0 <= percent <= 100)
    ):
        raise ValidationFailed(
            "percent must be from 0 to 100", fields={"percent": ["From 0 to 100."]}
        )
    if details is not None and not isinstance(details, dict):
        raise ValidationFailed("details must be an object", fields={"details": ["An object."]})
    if process_id is not None and connection.vendor == "postgresql":
        done = _report_renewing(
            hand=hand,
            attempt_id=attempt_id,
            fence=fence,
            kind=kind,
            process_id=process_id,
            message=message,
            percent=percent,
            details=details,
            lane_id=lane_id,
        )
        if done is not None:
            return True, done
    # Below, step by step, the path that explains a refusal (and SQLite's and a report that
    # renews nothing): the checks again, each with its own error.
    attempt = _attempt_for_hand(hand=hand, attempt_id=attempt_id, fence=fence, lane_id=lane_id)
    _refuse_ended(attempt)
    resource = attempt.lease.resource
    with transaction.atomic():
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
            raise _tenure_error(
                attempt, engine.read(workspace_id=hand.workspace_id, resource=resource), process_id
            )
        recorded = attempt.last_report_at
        if not (renewed and is_bare_heartbeat(kind, message, percent, details)) or (
            recorded is None
            or recorded <= lease.server_time - timedelta(seconds=HEARTBEAT_RECORD_S)
        ):
            Report.objects.create(
                attempt=attempt,
                kind=kind,
                at=lease.server_time,
                process_id=process_id or "",
                renewed=renewed,
                message=message,
                percent=percent,
                details=details or {},
            )
            updates: dict[str, Any] = {"last_report_at": lease.server_time}
            if percent is not None:
                updates["progress_percent"] = percent
            Attempt.objects.filter(pk=attempt.pk).update(**updates)
            for name, value in updates.items():
                setattr(attempt, name, value)
    return renewed, AttemptView(attempt, lease)


@refusals_recorded
def attempt_set_directive(
    *, workspace_id: int, attempt_id: int, directive: str, actor: str
) -> AttemptView:
    """Continue, pause or stop: it reaches the hand in its next heartbeat's answer (rule 7)."""
    _validate_choice(directive, field="directive", choices=[d.value for d in Directive])
    attempt = attempt_get(workspace_id=workspace_id, attempt_id=attempt_id)
    _refuse_ended(attempt)
    with transaction.atomic():
        now = db_now()
        if (
            Attempt.objects.filter(pk=attempt.pk, end=None)
            .exclude(directive=directive)
            .update(directive=directive)
        ):
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.DIRECTIVE_SET,
                at=now,
                actor=actor,
                hand=attempt.hand.name,
                attempt_id=attempt.pk,
                resource=attempt.lease.resource,
                fence=attempt.fence,
                data={"directive": directive},
            )
    return attempt_view(attempt_get(workspace_id=workspace_id, attempt_id=attempt_id))


def attempt_end(
    *,
    hand: Hand,
    attempt: Attempt,
    process_id: str,
    end: str,
    reason: str = "",
    summary: str = "",
) -> AttemptView:
    """Release the slot lease and end the attempt as finished or released, with its event.

    Runs inside the caller's transaction (finish adds its evidence in the same one). A finish
    retires the slot (done, never handed out again) and, if it was the run's last open slot,
    makes the run done in the same transaction.
    """
    finished = end == AttemptEnd.FINISHED
    if finished:
        # Finishes of one run take turns from here to the commit, so the last of two
        # concurrent ones sees the other's slot done and marks the run (no write skew).
        _lock_run(attempt.run_id)
    lease = engine.release(
        workspace_id=hand.workspace_id,
        resource=attempt.lease.resource,
        holder=hand.name,
        fence=attempt.fence,
        process_id=process_id,
        retire=finished,
    )
    if lease is None:
        raise _tenure_error(
            attempt,
            engine.read(workspace_id=hand.workspace_id, resource=attempt.lease.resource),
            process_id,
        )
    updated = Attempt.objects.filter(pk=attempt.pk, end=None).update(
        end=end, ended_at=lease.server_time, end_reason=reason, summary=summary
    )
    if not updated:  # pragma: no cover - the lease statement above already decided the race
        raise LeaseLost(f"attempt {attempt.pk} has ended")
    record_event(
        workspace_id=hand.workspace_id,
        kind=end,
        at=lease.server_time,
        actor=hand.name,
        hand=hand.name,
        attempt_id=attempt.pk,
        resource=lease.resource,
        fence=attempt.fence,
        data={"reason": reason} if reason else {},
    )
    if finished:
        _mark_run_done_if_finished(
            workspace_id=hand.workspace_id, run_id=attempt.run_id, at=lease.server_time,
            actor=hand.name,
        )
    attempt.refresh_from_db()
    return AttemptView(attempt, lease)


def _lock_run(run_id: int) -> None:
    """Take the run's row lock for the rest of the transaction (no-op on SQLite, which has
    one writer at a time). Every path that changes which of a run's slots are done takes it
    before it touches a slot's lease, so they never deadlock."""
    list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk", flat=True))


def _mark_run_done_if_finished(*, workspace_id: int, run_id: int, at: datetime, actor: str) -> bool:
    """An open run whose every slot is done becomes done, with its event, once."""
    unfinished = Slot.objects.filter(run_id=run_id).exclude(lease__status=LeaseStatus.RETIRED)
    if unfinished.exists():
        return False
    if not Run.objects.filter(pk=run_id, state=RunState.OPEN).update(
        state=RunState.DONE, closed_at=at
    ):
        return False
    _record_run_done(workspace_id=workspace_id, run_id=run_id, at=at, actor=actor)
    return True


def _record_run_done(*, workspace_id: int, run_id: int, at: datetime, actor: str) -> None:
    record_event(
        workspace_id=workspace_id, kind=EventKind.RUN_DONE, at=at, actor=actor,
        data={"run": run_id},
    )


def _reopen_done_run(run_id: int) -> bool:
    """A done run with a slot to claim again is open (a supervisor reopened or added slots)."""
    return bool(
        Run.objects.filter(pk=run_id, state=RunState.DONE).update(
            state=RunState.OPEN, closed_at=None
        )
    )


@refusals_recorded
def slot_reopen(
    *, workspace_id: int, run_id: int, index: int, actor: str, reason: str,
    lane_id: int | None = None,
) -> SlotView:
    """A supervisor reopens a done slot: claimable again, at the fence after its finished
    tenure; a done run is open again. Its finished attempt and evidence stay on record."""
    reason = _validate_reason(reason, required=True)
    run = run_get(workspace_id=workspace_id, run_id=run_id, lane_id=lane_id)
    try:
        slot = Slot.objects.select_related("lease").get(run=run, index=index)
    except (Slot.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"run {run.pk} has no slot {index!r}") from None
    with transaction.atomic():
        _lock_run(run.pk)
        lease = engine.reopen(lease_id=slot.lease_id)
        if lease is None:
            current = engine.read(workspace_id=workspace_id, resource=slot.lease.resource)
            assert current is not None
            raise SlotNotDone(
                f"slot {index} of run {run.pk} is {slot_state(current)}, not done: "
                "only a finished slot can be reopened",
                state=slot_state(current),
            )
        run_reopened = _reopen_done_run(run.pk)
        record_event(
            workspace_id=workspace_id,
            kind=EventKind.SLOT_REOPENED,
            at=lease.server_time,
            actor=actor,
            resource=lease.resource,
            fence=lease.fence,
            data={"run": run.pk, "slot": index, "reason": reason, "run_reopened": run_reopened},
        )
    return SlotView(slot, lease)


@refusals_recorded
def run_add_slots(
    *, workspace_id: int, run_id: int, count: int, actor: str, reason: str,
    lane_id: int | None = None,
) -> Run:
    """A supervisor adds `count` open slots to a run that is open or done (a done run is open
    again); a closed run takes none."""
    reason = _validate_reason(reason, required=True)
    if isinstance(count, bool) or not isinstance(count, int) or not (1 <= count <= MAX_SLOTS):
        raise ValidationFailed(
            f"count must be an integer from 1 to {MAX_SLOTS}",
            fields={"count": [f"An integer from 1 to {MAX_SLOTS}."]},
        )
    run = run_get(workspace_id=workspace_id, run_id=run_id, lane_id=lane_id)
    with transaction.atomic():
        _lock_run(run.pk)
        run.refresh_from_db(fields=["state", "slot_count"])
        if run.state == RunState.CLOSED:
            raise RunClosed(f"run {run.pk} is closed: reopen it before adding slots",
                            run_state=run.state)
        first = Slot.objects.filter(run=run).count()
        if first + count > MAX_SLOTS:
            raise ValidationFailed(
                f"a run has at most {MAX_SLOTS} slots ({first} now)",
                fields={"count": [f"At most {MAX_SLOTS - first} more."]},
            )
        _create_slots(run, range(first, first + count))
        Run.objects.filter(pk=run.pk).update(slot_count=first + count)
        now = db_now()
        run_reopened = _reopen_done_run(run.pk)
        record_event(
            workspace_id=workspace_id,
            kind=EventKind.SLOTS_ADDED,
            at=now,
            actor=actor,
            data={"run": run.pk, "slots": list(range(first, first + count)), "reason": reason,
                  "run_reopened": run_reopened},
        )
    run.refresh_from_db()
    return run


def _create_slots(run: Run, indexes: range) -> None:
    """Slots `indexes` of `run`, each with a free lease row `run/<id>/slot/<n>` at fence 0."""
    leases = [
        engine.create_free(
            workspace_id=run.workspace_id, resource=slot_resource(run.pk, i), kind=LeaseKind.SLOT
        )
        for i in indexes
    ]
    Slot.objects.bulk_create(
        Slot(run=run, index=i, lease=lease) for i, lease in zip(indexes, leases, strict=True)
    )


def attempt_for_ending(
    *, hand: Hand, attempt_id: int, fence: int, process_id: str, end: str, lane_id: int | None
) -> tuple[Attempt, bool]:
    """The attempt a finish or release acts on; (attempt, True) when this exact end was already
    recorded for it, so a retried call answers as the first did instead of acting twice."""
    validate_name(process_id, field="process_id")
    attempt = _attempt_for_hand(hand=hand, attempt_id=attempt_id, fence=fence, lane_id=lane_id)
    if attempt.end == end and attempt.process_id == process_id:
        return attempt, True
    _refuse_ended(attempt)
    return attempt, False


@refusals_recorded
def attempt_release(
    *,
    hand: Hand,
    attempt_id: int,
    fence: int,
    process_id: str,
    reason: str,
    lane_id: int | None = None,
) -> AttemptView:
    """Give the slot back with a reason; it is open again at once."""
    reason = _validate_reason(reason, required=True)
    attempt, done = attempt_for_ending(
        hand=hand,
        attempt_id=attempt_id,
        fence=fence,
        process_id=process_id,
        end=AttemptEnd.RELEASED,
        lane_id=lane_id,
    )
    if done:
        return attempt_view(attempt)
    with transaction.atomic():
        return attempt_end(
            hand=hand,
            attempt=attempt,
            process_id=process_id,
            end=AttemptEnd.RELEASED,
            reason=reason,
        )


@refusals_recorded
def lease_break(*, workspace_id: int, resource: str, actor: str, reason: str) -> LeaseSnapshot:
    """Break any lease; a broken slot lease ends its attempt as lost in the same transaction."""
    reason = _validate_reason(reason, required=True)
    with transaction.atomic():
        lease = lease_services.lease_break(
            workspace_id=workspace_id, resource=resource, actor=actor, reason=reason
        )
        if lease.kind == LeaseKind.SLOT:
            for attempt_id in Attempt.objects.filter(
                lease_id=lease.id, fence=lease.fence - 1, end=None
            ).values_list("pk", flat=True):
                attempt_mark_lost(
                    attempt_id=attempt_id, at=lease.server_time, reason=f"broken: {reason}"
                )
    return lease


def default_hand_name(username: str) -> str:
    return f"{slugify(username) or 'admin'}-supervisor"


def bootstrap(
    *, workspace_name: str, username: str, password: str, new_key: bool = False
) -> dict[str, Any]:
    """Idempotently: a workspace, an admin member, and a supervisor hand with every scope.

    A key is minted when the supervisor hand has no live key (or `new_key`); it is returned once.
    """
    user_model = get_user_model()
    with transaction.atomic():
        workspace = workspace_get_or_create(name=workspace_name)
        user, created = user_model.objects.get_or_create(username=username)
        if created or not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        membership_set(workspace=workspace, user=user, role=Role.ADMIN)
        hand, _ = hand_create(workspace=workspace, name=default_hand_name(username))
        if not hand.is_supervisor:
            Hand.objects.filter(pk=hand.pk).update(is_supervisor=True)
        has_live_key = (
            HandKey.objects.filter(hand=hand).filter(keys.usable_q(now_expression()))
            .exists()
        )
        issued = None
        if new_key or not has_live_key:
            issued = key_issue(hand=hand, scopes=ALL_SCOPES, actor=username)
    return {
        "workspace": workspace.name,
        "workspace_id": workspace.pk,
        "username": user.get_username(),
        "supervisor_hand": hand.name,
        "supervisor_key": issued.plaintext if issued else None,
        "supervisor_key_prefix": issued.key.prefix if issued else None,
    }


@refusals_recorded
def key_issue_by(
    *,
    issuer: HandKey,
    hand: Hand,
    scopes: list[str],
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
) -> IssuedKey:
    """`key_issue` on behalf of a key: it may grant only scopes it holds, and a lane-limited
    issuer only keys limited to its own lane (no minting one's way out of a limit)."""
    for scope in _validate_scopes(scopes):
        key_require_scope(issuer, scope)
    if issuer.lane_id is not None and (lane is None or lane.pk != issuer.lane_id):
        raise ScopeDenied(
            "a lane-limited key can issue only keys limited to its own lane",
            required_scope=Scope.HANDS.value,
            lane=issuer.lane.slug if issuer.lane else None,
        )
    return key_issue.__wrapped__(  # type: ignore[attr-defined]  # recorded once, here
        hand=hand,
        scopes=scopes,
        actor=issuer.hand.name,
        expires_in_s=expires_in_s,
        lane=lane,
        revoke_when_done=revoke_when_done,
    )
