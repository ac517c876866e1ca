"""The schedules' and integrations' JSON, and its OpenAPI schema (documentation only)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from fleet.api.inputs import RunIn
from fleet.api.presenters import work_package_json
from fleet.api.schemas import WorkPackageOut
from schedules import periods
from schedules.models import GitHubIntegration, Schedule, ScheduleTry, TryOutcome

DELIVERY_PATH = "/api/v1/integrations/github/{id}"


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.pk,
        "lane": schedule.lane.slug,
        "cron": schedule.cron,
        "key_pattern": schedule.key_pattern,
        "title_pattern": schedule.title_pattern,
        "runs": schedule.runs,
        "active": schedule.active,
        "periods_after": schedule.periods_after,
        "planned": planned_times(schedule),
        "created_at": schedule.created_at,
        "created_by": schedule.created_by,
    }


def planned_times(schedule: Schedule) -> list[Any]:
    """The next periods to be made (the first may be due and not yet made); none when off."""
    if not schedule.active:
        return []
    return periods.planned(schedule.cron, schedule.periods_after)


def try_json(row: ScheduleTry) -> dict[str, Any]:
    return {
        "id": row.pk,
        "date_key": row.date_key,
        "at": row.at,
        "outcome": row.outcome,
        "error": row.error or None,
        "work_package": row.work_package_id,
    }


def integration_json(integration: GitHubIntegration) -> dict[str, Any]:
    return {
        "id": integration.pk,
        "lane": integration.lane.slug,
        "repository": integration.repository or None,
        "label": integration.label or None,
        "active": integration.active,
        "delivery_path": DELIVERY_PATH.format(id=integration.pk),
        "created_at": integration.created_at,
        "created_by": integration.created_by,
    }


def delivery_json(answer: Any) -> dict[str, Any]:
    return {
        "delivery": answer.delivery_id,
        "event": answer.event,
        "action": answer.action or None,
        "outcome": answer.outcome,
        "work_package": (
            work_package_json(answer.work_package) if answer.work_package is not None else None
        ),
        "graded": answer.graded,
        "duplicate": answer.duplicate,
    }


class ScheduleOut(serializers.Serializer):
    id = serializers.IntegerField()
    lane = serializers.CharField()
    cron = serializers.CharField(help_text="Five fields, in UTC.")
    key_pattern = serializers.CharField()
    title_pattern = serializers.CharField()
    runs = RunIn(many=True)
    active = serializers.BooleanField()
    periods_after = serializers.DateTimeField(
        help_text="The last period made (or when the schedule began or was changed): the beat "
        "job makes the periods after it."
    )
    planned = serializers.ListField(
        child=serializers.DateTimeField(),
        help_text=f"The next {periods.PLANNED} periods (UTC); empty while the schedule is off.",
    )
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField()


class TryOut(serializers.Serializer):
    id = serializers.IntegerField()
    date_key = serializers.CharField(help_text="The period, e.g. 2030-01-02T06:00Z.")
    at = serializers.DateTimeField(help_text="The database's time when the job's run began.")
    outcome = serializers.ChoiceField(choices=TryOutcome.choices)
    error = serializers.CharField(allow_null=True)
    work_package = serializers.IntegerField(allow_null=True)


class IntegrationOut(serializers.Serializer):
    id = serializers.IntegerField()
    lane = serializers.CharField()
    repository = serializers.CharField(
        allow_null=True,
        help_text="owner/name: only its deliveries act (null: one made before repositories "
        "were required, which acts on nothing).",
    )
    label = serializers.CharField(allow_null=True)
    active = serializers.BooleanField()
    delivery_path = serializers.CharField(help_text="The webhook's payload URL on this server.")
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField()


class IssuedIntegrationOut(IntegrationOut):
    secret = serializers.CharField(
        allow_null=True,
        help_text="The webhook's secret, shown once. Null in an Idempotency-Key replay: the "
        "secret is in the first answer only.",
    )


class DeliveryOut(serializers.Serializer):
    delivery = serializers.CharField(help_text="X-GitHub-Delivery")
    event = serializers.CharField(help_text="X-GitHub-Event")
    action = serializers.CharField(allow_null=True)
    outcome = serializers.ChoiceField(
        choices=["pong", "created", "existing", "attested", "ignored"]
    )
    work_package = WorkPackageOut(allow_null=True)
    graded = serializers.IntegerField(help_text="Pieces of evidence regraded by it.")
    duplicate = serializers.BooleanField(help_text="A redelivery: the first's answer.")
