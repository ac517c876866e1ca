"""The plan's writes: work packages, runs and their slots (adding, reopening), and a run's
state (open, closed by a supervisor, done when its last slot is finished).

Every change that moves which slots are done takes the run's row lock first (`lock_run`), so two
last finishes cannot both miss that the run is done."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from apikit.errors import NotFound, ValidationFailed
from apikit.retries import retried
from fleet.errors import RunClosed, SlotNotDone
from fleet.models import (
    DEFAULT_GRACE_S,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_PRIORITY,
    GRADE_ORDER,
    IdleDirective,
    PlanState,
    Run,
    RunState,
    Slot,
    WorkPackage,
)
from fleet.plan import dependencies
from fleet.plan.selectors import SlotView, run_get, run_slot_counts, slot_state
from hands import capabilities as hand_capabilities
from hands.models import Lane
from leases import engine
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now
from leases.models import EventKind, LeaseKind, LeaseStatus
from leases.services import validate_choice, validate_interval, validate_name, validate_reason

MAX_SLOTS = 1000
# A brief is the Markdown a hand reads before it starts: about 8,000 words at most.
MAX_BRIEF_LENGTH = 50_000
# Kinds of evidence a run requires, each at most this long; a finish carries at most 50 items
# (`evidence.services.MAX_EVIDENCE_ITEMS`), so a run requiring more kinds could never finish.
MAX_EVIDENCE_KIND_LENGTH = 64
MAX_EVIDENCE_KINDS = 50
MAX_EXTERNAL_REF_LENGTH = 500


def slot_resource(run_id: int, index: int) -> str:
    return f"run/{run_id}/slot/{index}"


def slot_index(resource: str) -> int:
    """The index of the slot whose lease is `resource` (what `slot_resource` wrote)."""
    return int(resource.rsplit("/", 1)[1])


def work_package_create(
    *, lane: Lane, key: str, title: str, external_ref: str = ""
) -> tuple[WorkPackage, bool]:
    """Idempotent on (lane, key): a retried request returns the first package (created=False)."""
    validate_name(key, field="key")
    validate_name(title, field="title")
    if external_ref and (
        not isinstance(external_ref, str) or len(external_ref) > MAX_EXTERNAL_REF_LENGTH
    ):
        raise ValidationFailed(
            f"external_ref must be a string of at most {MAX_EXTERNAL_REF_LENGTH} characters",
            fields={"external_ref": [f"At most {MAX_EXTERNAL_REF_LENGTH} characters."]},
        )
    try:
        with transaction.atomic():
            return WorkPackage.objects.get_or_create(
                workspace_id=lane.workspace_id,
                lane=lane,
                key=key,
                defaults={
                    "title": title,
                    "external_ref": external_ref or "",
                },
            )
    except IntegrityError:
        # A concurrent request created it between our read and insert.
        return (
            WorkPackage.objects.get(workspace_id=lane.workspace_id, lane=lane, key=key),
            False,
        )


def _validate_evidence_kinds(value: object) -> list[str]:
    if value is None:
        return []
    if (
        not isinstance(value, list)
        or len(value) > MAX_EVIDENCE_KINDS
        or not all(
            isinstance(kind, str) and 0 < len(kind) <= MAX_EVIDENCE_KIND_LENGTH for kind in value
        )
    ):
        raise ValidationFailed(
            f"evidence_required must be a list of at most {MAX_EVIDENCE_KINDS} kinds, each a "
            f"string of 1 to {MAX_EVIDENCE_KIND_LENGTH} characters",
            fields={
                "evidence_required": [
                    f"At most {MAX_EVIDENCE_KINDS} strings of at most "
                    f"{MAX_EVIDENCE_KIND_LENGTH} characters."
                ]
            },
        )
    return list(dict.fromkeys(value))


def _validate_evidence_grades(value: object) -> dict[str, str]:
    """{kind: least grade}: each kind as `evidence_required` spells one, each grade a name."""
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_EVIDENCE_KINDS
        or not all(
            isinstance(kind, str) and 0 < len(kind) <= MAX_EVIDENCE_KIND_LENGTH for kind in value
        )
        or not all(isinstance(grade, str) and grade in GRADE_ORDER for grade in value.values())
    ):
        raise ValidationFailed(
            "evidence_grades maps evidence kinds to the least grade each must have, one of: "
            + ", ".join(GRADE_ORDER),
            fields={
                "evidence_grades": [
                    f"An object of at most {MAX_EVIDENCE_KINDS} kinds, each with a grade "
                    f"({', '.join(GRADE_ORDER)})."
                ]
            },
        )
    return dict(value)


@refusals_recorded
def run_create(
    *,
    work_package: WorkPackage,
    title: str,
    brief: str = "",
    slots: int = 1,
    evidence_required: list[str] | None = None,
    evidence_grades: dict[str, str] | None = None,
    heartbeat_interval_s: int | None = None,
    grace_s: int | None = None,
    capabilities: list[str] | None = None,
    progress_timeout_s: int | None = None,
    idle_directive: str = IdleDirective.NONE,
    priority: int = DEFAULT_PRIORITY,
    depends_on: list[int] | None = None,
    lane_id: int | None = None,
) -> Run:
    """A run with its slots, each a free lease row `run/<id>/slot/<n>` at fence 0. A kind
    `evidence_grades` names is required too (appended to `evidence_required`). `depends_on`:
    the runs it waits for (its slots take no claim until each is done), each one the caller
    (of lane `lane_id`, if lane-limited) can see; they exist before it, so no cycle can form."""
    validate_name(title, field="title")
    priority = dependencies.validate_priority(priority)
    waits_for = dependencies.validate_depends_on(
        depends_on, workspace_id=work_package.workspace_id, lane_id=lane_id
    )
    tags = hand_capabilities.normalise(capabilities)
    grades = _validate_evidence_grades(evidence_grades)
    required = list(dict.fromkeys([*_validate_evidence_kinds(evidence_required), *grades]))
    if len(required) > MAX_EVIDENCE_KINDS:
        raise ValidationFailed(
            f"a run requires at most {MAX_EVIDENCE_KINDS} kinds of evidence",
            fields={"evidence_grades": [f"At most {MAX_EVIDENCE_KINDS} kinds in all."]},
        )
    if not isinstance(brief, str) or len(brief) > MAX_BRIEF_LENGTH:
        raise ValidationFailed(
            f"brief must be Markdown text of at most {MAX_BRIEF_LENGTH} characters",
            fields={"brief": [f"A string of at most {MAX_BRIEF_LENGTH} characters."]},
        )
    if isinstance(slots, bool) or not isinstance(slots, int) or not (1 <= slots <= MAX_SLOTS):
        raise ValidationFailed(
            f"slots must be an integer from 1 to {MAX_SLOTS}",
            fields={"slots": [f"An integer from 1 to {MAX_SLOTS}."]},
        )
    lane = work_package.lane
    interval = validate_interval(
        heartbeat_interval_s,
        field="heartbeat_interval_s",
        default=lane.heartbeat_interval_s or DEFAULT_HEARTBEAT_INTERVAL_S,
        minimum=1,
    )
    grace = validate_interval(
        grace_s,
        field="grace_s",
        default=lane.grace_s if lane.grace_s is not None else DEFAULT_GRACE_S,
        minimum=0,
    )
    progress_timeout_s, idle_directive = validate_idle(progress_timeout_s, idle_directive)
    if work_package.state != PlanState.OPEN:
        raise RunClosed(f"work package {work_package.key!r} is closed")
    with transaction.atomic():
        run = Run.objects.create(
            workspace_id=work_package.workspace_id,
            work_package=work_package,
            title=title,
            brief=brief,
            evidence_required=required,
            evidence_grades=grades,
            heartbeat_interval_s=interval,
            grace_s=grace,
            slot_count=slots,
            capabilities=tags,
            progress_timeout_s=progress_timeout_s,
            idle_directive=idle_directive,
            priority=priority,
        )
        _create_slots(run, range(slots))
        dependencies.dependencies_write(
            workspace_id=run.workspace_id, run_id=run.pk, depends_on=waits_for
        )
    return run


# A progress timeout: from a minute (shorter would flag a hand between two tool calls) to a week.
MIN_PROGRESS_TIMEOUT_S = 60
MAX_PROGRESS_TIMEOUT_S = 7 * 86400


def validate_idle(progress_timeout_s: object, idle_directive: object) -> tuple[int | None, str]:
    """A run's idle settings (fleet/attempts/idle.py): the timeout (None: never idle) and the
    directive its idle attempts get."""
    if progress_timeout_s is not None and (
        isinstance(progress_timeout_s, bool)
        or not isinstance(progress_timeout_s, int)
        or not MIN_PROGRESS_TIMEOUT_S <= progress_timeout_s <= MAX_PROGRESS_TIMEOUT_S
    ):
        raise ValidationFailed(
            f"progress_timeout_s must be null or whole seconds from {MIN_PROGRESS_TIMEOUT_S} "
            f"to {MAX_PROGRESS_TIMEOUT_S}",
            fields={
                "progress_timeout_s": [
                    f"Null, or from {MIN_PROGRESS_TIMEOUT_S} to {MAX_PROGRESS_TIMEOUT_S}."
                ]
            },
        )
    directive = validate_choice(
        idle_directive, field="idle_directive", choices=[d.value for d in IdleDirective]
    )
    return progress_timeout_s, directive


# A field of `run_update` the change leaves as it is.
UNCHANGED: Any = ...


@refusals_recorded
@retried
def run_update(
    *,
    workspace_id: int,
    run_id: int,
    actor: str = "",
    lane_id: int | None = None,
    state: object = UNCHANGED,
    capabilities: object = UNCHANGED,
    progress_timeout_s: object = UNCHANGED,
    idle_directive: object = UNCHANGED,
    priority: object = UNCHANGED,
    depends_on: object = UNCHANGED,
) -> Run:
    """A supervisor's change of a run (`PATCH /runs/{id}`): any of its fields, all or none.
    Every field given is validated before anything is written, and everything is written in
    one transaction, so a change refused for any field (or for a cycle) writes nothing.

    - `state`: close (no more claims; its attempts go on) or reopen. `done` is the run's own
      doing (its last slot finished): a closed run whose slots are all done reopens as done,
      and a done run can be closed. Recorded as run_closed (or run_done).
    - `capabilities`: the tags a hand needs to claim its slots. Attempts already claimed go on;
      a claim running at the same moment judges by the row its own statement reads
      (`fleet.attempts.services.capability_guard`).
    - `progress_timeout_s`, `idle_directive`: the idle settings (fleet/attempts/idle.py). The
      timeout reaches the attempts claimed from now on (copied at the claim, as the heartbeat
      interval is), the directive the next idle spell of any of them.
    - `priority`: its place in the ready queue (0 first).
    - `depends_on`: replaces the runs it waits for. A change that would close a cycle is
      refused (`dependency_cycle`, naming it). The workspace's changes of dependencies take
      turns (`dependencies.lock_dependencies`, before the run's row lock), so two that would
      together close a cycle cannot both pass. A lane-limited caller (`lane_id`) replaces only
      the runs it can see: another lane's runs a workspace-wide key named stay. A claim judges
      by the rows its own statement reads (`fleet.attempts.services.dependency_guard`).

    A change of any field but `state` that changes something is recorded as one run_changed
    event (`data.changed`: each field changed, `before` and `after`); `state` as its own event."""
    run = run_get(workspace_id=workspace_id, run_id=run_id, lane_id=lane_id)
    fields: dict[str, object] = {}
    if state is not UNCHANGED:
        state = validate_choice(
            state, field="state", choices=[RunState.OPEN.value, RunState.CLOSED.value]
        )
    if capabilities is not UNCHANGED:
        fields["capabilities"] = hand_capabilities.normalise(capabilities)
    if progress_timeout_s is not UNCHANGED or idle_directive is not UNCHANGED:
        timeout, directive = validate_idle(
            None if progress_timeout_s is UNCHANGED else progress_timeout_s,
            IdleDirective.NONE if idle_directive is UNCHANGED else idle_directive,
        )
        if progress_timeout_s is not UNCHANGED:
            fields["progress_timeout_s"] = timeout
        if idle_directive is not UNCHANGED:
            fields["idle_directive"] = directive
    if priority is not UNCHANGED:
        fields["priority"] = dependencies.validate_priority(priority)
    waits_for = (
        None
        if depends_on is UNCHANGED
        else dependencies.validate_depends_on(
            depends_on, workspace_id=workspace_id, lane_id=lane_id
        )
    )
    with transaction.atomic():
        if waits_for is not None:
            dependencies.lock_dependencies(workspace_id=workspace_id)
        lock_run(workspace_id=workspace_id, run_id=run.pk)
        # What it was, read under the row lock: the event says what this change changed.
        found = Run.objects.filter(pk=run.pk).values("pk", *fields).first()
        if found is None:  # deleted (in the admin) since it was read
            raise NotFound(f"no run {run_id}")
        before: dict[str, object] = {name: found[name] for name in fields}
        if waits_for is not None:
            if lane_id is not None:
                # To a lane-limited key another lane's runs are as if they did not exist.
                unseen = dependencies.dependencies_of([run.pk], lane_id=lane_id).get(run.pk, [])
                waits_for = sorted({*waits_for, *(d.run_id for d in unseen if not d.seen)})
            dependencies.refuse_cycle(
                workspace_id=workspace_id, run_id=run.pk, depends_on=waits_for, lane_id=lane_id
            )
            before["depends_on"] = dependencies.dependencies_write(
                workspace_id=workspace_id, run_id=run.pk, depends_on=waits_for
            )
        if fields and not Run.objects.filter(workspace_id=workspace_id, pk=run.pk).update(**fields):
            raise NotFound(f"no run {run_id}")
        after = {**fields, **({} if waits_for is None else {"depends_on": waits_for})}
        # `before`/`after`, never `from`/`to`: `from` names a hand in an answer (concealing).
        changed = {
            name: {"before": before[name], "after": value}
            for name, value in after.items()
            if _differs(name, before[name], value)
        }
        if changed:
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.RUN_CHANGED,
                at=db_now(),
                actor=actor,
                data={"run": run.pk, "changed": changed},
            )
        if state is not UNCHANGED:
            _set_state(workspace_id=workspace_id, run_id=run.pk, state=str(state), actor=actor)
    run.refresh_from_db()
    return run


def _differs(field: str, before: object, after: object) -> bool:
    """Whether a field's change changes something: capabilities are a set of tags."""
    if field == "capabilities" and isinstance(before, list) and isinstance(after, list):
        return set(before) != set(after)
    return before != after


def _set_state(*, workspace_id: int, run_id: int, state: str, actor: str) -> None:
    """`run_update`'s `state`, in its transaction, under the run's row lock."""
    now = db_now()
    if state == RunState.CLOSED:
        if (
            Run.objects.filter(pk=run_id)
            .exclude(state=RunState.CLOSED)
            .update(state=RunState.CLOSED, closed_at=now)
        ):
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.RUN_CLOSED,
                at=now,
                actor=actor,
                data={"run": run_id},
            )
    elif run_slot_counts(run_id=run_id).all_done:
        # Its last slot finished while it was closed: reopened, it is done, and says so.
        if Run.objects.filter(pk=run_id, state=RunState.CLOSED).update(
            state=RunState.DONE, closed_at=now
        ):
            _record_run_done(workspace_id=workspace_id, run_id=run_id, at=now, actor=actor)
    else:
        Run.objects.filter(pk=run_id, state=RunState.CLOSED).update(
            state=RunState.OPEN, closed_at=None
        )


def run_set_idle(
    *,
    workspace_id: int,
    run_id: int,
    progress_timeout_s: object = UNCHANGED,
    idle_directive: object = UNCHANGED,
    actor: str = "",
) -> Run:
    """Change a run's idle settings (either, or both): `run_update`'s."""
    return run_update(
        workspace_id=workspace_id,
        run_id=run_id,
        actor=actor,
        progress_timeout_s=progress_timeout_s,
        idle_directive=idle_directive,
    )


def run_set_state(*, workspace_id: int, run_id: int, state: str, actor: str) -> Run:
    """Close (or reopen) a run: `run_update`'s."""
    return run_update(workspace_id=workspace_id, run_id=run_id, state=state, actor=actor)


def run_set_capabilities(
    *,
    workspace_id: int,
    run_id: int,
    capabilities: object,
    lane_id: int | None = None,
    actor: str = "",
) -> Run:
    """Replace the tags a hand needs to claim the run's slots: `run_update`'s."""
    return run_update(
        workspace_id=workspace_id,
        run_id=run_id,
        capabilities=capabilities,
        lane_id=lane_id,
        actor=actor,
    )


def lock_run(*, workspace_id: int, run_id: int) -> None:
    """Take the run's row lock for the rest of the transaction. Every path that changes which of
    a run's slots are done takes it before it touches a slot's lease, so they never deadlock.
    FOR NO KEY UPDATE: it excludes the others that take it, but not the key checks of rows that
    reference the run (a claim's new attempt checks its run FOR KEY SHARE at commit, after
    taking its slot's lease); FOR UPDATE made that claim and a finish of the same slot's lost
    tenure deadlock (the failover run found it: tests/plan/test_run_lock.py)."""
    list(
        Run.objects.select_for_update(no_key=True)
        .filter(workspace_id=workspace_id, pk=run_id)
        .values_list("pk", flat=True)
    )


def mark_run_done_if_finished(*, workspace_id: int, run_id: int, at: datetime, actor: str) -> bool:
    """An open run whose every slot is done becomes done, with its event, once. The runs that
    wait for it take claims from this transaction's commit on: the claim's statement reads the
    run's state (`fleet.plan.dependencies.waits_sql`), so nothing has to wake them."""
    unfinished = Slot.objects.filter(workspace_id=workspace_id, run_id=run_id).exclude(
        lease__status=LeaseStatus.RETIRED
    )
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
        workspace_id=workspace_id,
        kind=EventKind.RUN_DONE,
        at=at,
        actor=actor,
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
    *,
    workspace_id: int,
    run_id: int,
    index: int,
    actor: str,
    reason: str,
    lane_id: int | None = None,
) -> SlotView:
    """A supervisor reopens a done slot: claimable again, at the fence after its finished
    tenure; a done run is open again. Its finished attempt and evidence stay on record."""
    reason = validate_reason(reason, required=True)
    run = run_get(workspace_id=workspace_id, run_id=run_id, lane_id=lane_id)
    try:
        slot = Slot.objects.select_related("lease").get(run=run, index=index)
    except (Slot.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"run {run.pk} has no slot {index!r}") from None
    with transaction.atomic():
        lock_run(workspace_id=run.workspace_id, run_id=run.pk)
        lease = engine.reopen(workspace_id=run.workspace_id, lease_id=slot.lease_id)
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
    *,
    workspace_id: int,
    run_id: int,
    count: int,
    actor: str,
    reason: str,
    lane_id: int | None = None,
) -> Run:
    """A supervisor adds `count` open slots to a run that is open or done (a done run is open
    again); a closed run takes none."""
    reason = validate_reason(reason, required=True)
    if isinstance(count, bool) or not isinstance(count, int) or not (1 <= count <= MAX_SLOTS):
        raise ValidationFailed(
            f"count must be an integer from 1 to {MAX_SLOTS}",
            fields={"count": [f"An integer from 1 to {MAX_SLOTS}."]},
        )
    run = run_get(workspace_id=workspace_id, run_id=run_id, lane_id=lane_id)
    with transaction.atomic():
        lock_run(workspace_id=run.workspace_id, run_id=run.pk)
        run.refresh_from_db(fields=["state", "slot_count"])
        if run.state == RunState.CLOSED:
            raise RunClosed(
                f"run {run.pk} is closed: reopen it before adding slots", run_state=run.state
            )
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
            data={
                "run": run.pk,
                "slots": list(range(first, first + count)),
                "reason": reason,
                "run_reopened": run_reopened,
            },
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
        Slot(workspace_id=run.workspace_id, run=run, index=i, lease=lease)
        for i, lease in zip(indexes, leases, strict=True)
    )
