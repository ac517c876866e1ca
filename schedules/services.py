"""A lane's schedules: their writes (create, update, delete), each validated at write time
with the rules the beat job and the run-create API use, so a schedule that is stored can make
its packages. The beat job is `schedules.jobs`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from apikit.errors import NotFound, ValidationFailed
from fleet.api.inputs import RunIn
from hands.models import Lane, Workspace
from leases.clock import db_now
from leases.services import validate_name
from schedules import periods
from schedules.models import Schedule

# What a schedule and a workspace may plan. Every period makes its package, its runs and a lease
# row per slot, on the job every workspace shares, so each is bounded where it is written (and the
# beat job switches off a stored schedule over them, `schedules.jobs`): runs in one schedule's
# template (each as POST /work-packages/<id>/runs takes one), slots in each of those runs (a run
# made by hand may have `fleet.plan.services.MAX_SLOTS`), schedules in a lane and in a workspace.
# With `periods.MIN_PERIOD_S` that bounds a workspace at 50 x 20 x 25 slots every 5 minutes.
MAX_TEMPLATE_RUNS = 20
MAX_TEMPLATE_SLOTS = 25
MAX_SCHEDULES_PER_LANE = 20
MAX_SCHEDULES_PER_WORKSPACE = 50
# A period to render templates with at write time: the longest date and time there are.
_SAMPLE = datetime(2099, 12, 31, 23, 59, tzinfo=UTC)


def validate_run_templates(value: object) -> list[dict[str, Any]]:
    """Each run as the run-create API validates its body (`fleet.api.inputs.RunIn`), stored as
    that validation leaves it; the beat job passes each to `run_create` as the API does."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TEMPLATE_RUNS:
        raise _too_many_runs()
    serializer = RunIn(data=value, many=True)
    if not serializer.is_valid():
        found = serializer.errors
        # By index: a dict of the invalid items (this DRF) or a list with one entry per item.
        by_index = found.items() if isinstance(found, dict) else enumerate(found)
        errors = {
            f"runs[{i}].{name}": [str(m) for m in messages]
            for i, item in by_index
            for name, messages in (item or {}).items()
        }
        raise ValidationFailed(
            "runs: " + ", ".join(sorted(errors)) + " invalid (each as the run-create API takes it)",
            fields=errors,
        )
    templates = [dict(item) for item in serializer.validated_data]
    validate_template_caps(templates)
    return templates


def validate_template_caps(templates: list[dict[str, Any]]) -> None:
    """What one period makes: at most MAX_TEMPLATE_RUNS runs of at most MAX_TEMPLATE_SLOTS slots
    each. The beat job judges a stored template by this rule too."""
    if len(templates) > MAX_TEMPLATE_RUNS:
        raise _too_many_runs()
    over = {
        f"runs[{i}].slots": [f"At most {MAX_TEMPLATE_SLOTS} slots in a scheduled run."]
        for i, template in enumerate(templates)
        if int(template.get("slots", 1)) > MAX_TEMPLATE_SLOTS
    }
    if over:
        raise ValidationFailed(
            f"{', '.join(over)}: a schedule's run has at most {MAX_TEMPLATE_SLOTS} slots "
            "(a run made by hand may have more)",
            fields=over,
        )


def _too_many_runs() -> ValidationFailed:
    return ValidationFailed(
        f"runs must be a list of at most {MAX_TEMPLATE_RUNS} runs",
        fields={"runs": [f"A list of at most {MAX_TEMPLATE_RUNS} run bodies."]},
    )


def period_slots(templates: list[dict[str, Any]]) -> int:
    """The slots one period of a template makes (what the beat job counts against a workspace's
    share of a run)."""
    return sum(int(template.get("slots", 1)) for template in templates)


def _lock_and_count(lane: Lane) -> None:
    """Room for one more schedule in the lane and in its workspace. The workspace's row is locked
    for the rest of the transaction first, so two creates at once (in any of its lanes) count
    one after the other and never both take the last place."""
    list(
        Workspace.objects.select_for_update(no_key=True)
        .filter(pk=lane.workspace_id)
        .values_list("pk", flat=True)
    )
    in_lane = Schedule.objects.filter(lane=lane).count()
    if in_lane >= MAX_SCHEDULES_PER_LANE:
        raise ValidationFailed(
            f"lane {lane.slug!r} has {in_lane} schedules, the most a lane may have "
            f"({MAX_SCHEDULES_PER_LANE}): delete one first",
            fields={"lane": [f"At most {MAX_SCHEDULES_PER_LANE} schedules in a lane."]},
        )
    in_workspace = Schedule.objects.filter(workspace_id=lane.workspace_id).count()
    if in_workspace >= MAX_SCHEDULES_PER_WORKSPACE:
        raise ValidationFailed(
            f"the workspace has {in_workspace} schedules, the most a workspace may have "
            f"({MAX_SCHEDULES_PER_WORKSPACE}): delete one first",
            fields={"lane": [f"At most {MAX_SCHEDULES_PER_WORKSPACE} schedules in a workspace."]},
        )


def _validate_template(*, cron: str, key_pattern: object, title_pattern: object) -> tuple[str, str]:
    key = periods.validate_pattern(key_pattern, field="key_pattern", cron=cron, key=True)
    title = periods.validate_pattern(title_pattern, field="title_pattern", cron=cron, key=False)
    # What a period renders must be a package's key and title (`work_package_create`'s rule).
    validate_name(periods.render(key, _SAMPLE), field="key_pattern")
    validate_name(periods.render(title, _SAMPLE), field="title_pattern")
    return key, title


def _validate_active(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed("active must be true or false", fields={"active": ["A boolean."]})
    return value


def schedule_create(
    *,
    lane: Lane,
    cron: object,
    key_pattern: object,
    title_pattern: object,
    runs: object = None,
    active: object = True,
    actor: str,
) -> Schedule:
    """A schedule whose first period is the first after now (the database's time)."""
    expression = periods.validate_cron(cron)
    key, title = _validate_template(
        cron=expression, key_pattern=key_pattern, title_pattern=title_pattern
    )
    templates = validate_run_templates(runs)
    switched_on = _validate_active(active)
    with transaction.atomic():
        _lock_and_count(lane)
        now = db_now()
        return Schedule.objects.create(
            workspace_id=lane.workspace_id,
            lane=lane,
            cron=expression,
            key_pattern=key,
            title_pattern=title,
            runs=templates,
            active=switched_on,
            periods_after=now,
            next_period_at=periods.next_period(expression, now),
            created_by=actor,
        )


def schedule_get(*, lane: Lane, schedule_id: int) -> Schedule:
    try:
        return Schedule.objects.select_related("lane").get(lane=lane, pk=schedule_id)
    except Schedule.DoesNotExist:
        raise NotFound(f"lane {lane.slug!r} has no schedule {schedule_id}") from None


def schedule_update(*, lane: Lane, schedule_id: int, changes: dict[str, Any]) -> Schedule:
    """Change what is given. A new expression starts from now (its first period is the first
    after now), as does a schedule switched on again: the periods it was off are not made."""
    schedule = schedule_get(lane=lane, schedule_id=schedule_id)
    cron = periods.validate_cron(changes["cron"]) if "cron" in changes else schedule.cron
    key, title = _validate_template(
        cron=cron,
        key_pattern=changes.get("key_pattern", schedule.key_pattern),
        title_pattern=changes.get("title_pattern", schedule.title_pattern),
    )
    fields: dict[str, Any] = {"cron": cron, "key_pattern": key, "title_pattern": title}
    if "runs" in changes:
        fields["runs"] = validate_run_templates(changes["runs"])
    active = _validate_active(changes["active"]) if "active" in changes else None
    if schedule.active if active is None else active:
        # It stays on or goes on: within the caps as a whole, even one written before them (the
        # beat job would switch it off again), whatever this change leaves as it was.
        periods.validate_period(cron)
        validate_template_caps(fields.get("runs", schedule.runs))
    with transaction.atomic():
        now = db_now()
        restart = {"periods_after": now, "next_period_at": periods.next_period(cron, now)}
        if active is not None:
            fields["active"] = active
        if active:
            # Switched on again: from now. One that was on already keeps its place (the
            # conditional statement tells the two apart).
            Schedule.objects.filter(pk=schedule.pk, active=False).update(**restart)
        if cron != schedule.cron:
            # The job's statement carries the expression it read, so a period of the old one
            # in flight makes nothing once this commits.
            fields.update(restart)
        if not Schedule.objects.filter(pk=schedule.pk, lane=lane).update(**fields):
            raise NotFound(f"lane {lane.slug!r} has no schedule {schedule_id}")
    return schedule_get(lane=lane, schedule_id=schedule_id)


def schedule_delete(*, lane: Lane, schedule_id: int) -> None:
    """The schedule and its record of tries; the packages it made stay."""
    if not Schedule.objects.filter(lane=lane, pk=schedule_id).delete()[0]:
        raise NotFound(f"lane {lane.slug!r} has no schedule {schedule_id}")
