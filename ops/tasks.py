"""Celery tasks: thin wrappers that call a service. Each is idempotent and safe to run on several
workers at once (the services claim their rows with conditional updates), and the beat schedule
(settings.CELERY_BEAT_SCHEDULE) enqueues them; the embedded scheduler calls them in-process."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from ops import jobs

# The task names are what queued messages and beat schedules carry: kept from when the tasks were
# the fleet app's, so a rolling deploy finds them.


@shared_task(name="fleet.sweep_leases", ignore_result=True)
def sweep_leases() -> dict[str, Any]:
    return jobs.leases_sweep().as_dict()


@shared_task(name="fleet.revoke_keys", ignore_result=True)
def revoke_keys() -> dict[str, Any]:
    return jobs.keys_revoke_due().as_dict()


@shared_task(name="fleet.flag_idle", ignore_result=True)
def flag_idle() -> dict[str, Any]:
    return jobs.idle_flag().as_dict()


@shared_task(name="fleet.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> dict[str, Any]:
    return jobs.webhooks_deliver().as_dict()


@shared_task(name="fleet.prune_records", ignore_result=True)
def prune_records() -> dict[str, Any]:
    return jobs.records_prune().as_dict()


@shared_task(name="schedules.plan", ignore_result=True)
def plan_schedules() -> dict[str, Any]:
    return jobs.schedules_plan().as_dict()
