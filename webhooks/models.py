"""A workspace's webhooks and each event's delivery to each of them."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from hands.models import Workspace
from webhooks.targets import redact


class Webhook(models.Model):
    """A workspace's URL that receives its events of the listed kinds, signed with `secret`.

    The secret is kept in plain text because the server must compute the HMAC with it (as every
    webhook sender does); it is shown once at registration and never in listings.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    kinds = models.JSONField(default=list)
    secret = models.CharField(max_length=128)
    description = models.CharField(max_length=200, blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "fleet_webhook"  # made by fleet, before the apps were split
        indexes = [models.Index(fields=["workspace", "active"], name="webhook_ws_idx")]

    def __str__(self) -> str:
        return f"{redact(self.url)} ({', '.join(self.kinds)})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    """One event for one webhook: the exact body, every attempt and its response.

    `event_id` is not a foreign key: retention prunes events and deliveries on their own
    schedules, and the body sent (and re-sent on retry) is kept here.
    """

    # The webhook's, denormalised: every table carries the distribution key (docs/scale.md).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.BigIntegerField()
    kind = models.CharField(max_length=32)
    body = models.TextField()
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=2000, blank=True, default="")
    # One entry per attempt: {at, status_code, duration_ms, error, response}.
    log = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "fleet_webhookdelivery"  # made by fleet, before the apps were split
        constraints = [
            # Dispatching an event twice (two workers, a retried task) never makes two deliveries.
            models.UniqueConstraint(
                fields=["webhook", "event_id", "workspace"], name="delivery_unique_event"
            )
        ]
        indexes = [
            # The sender's WHERE: pending deliveries whose next attempt is due.
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_due_idx",
                condition=models.Q(status="pending"),
            ),
            models.Index(fields=["created_at"], name="delivery_created_idx"),
            models.Index(fields=["webhook", "-id"], name="delivery_webhook_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} event {self.event_id} to webhook {self.webhook_id} ({self.status})"
