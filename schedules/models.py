"""A lane's schedules and the record of each try, and its GitHub integrations with the
deliveries they received."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from fleet.models import WorkPackage
from hands.models import Hand, Lane, Workspace


class Schedule(models.Model):
    """Each period of `cron` (UTC) makes one work package in `lane` from the template: its key
    and title with the period's `{date}` (and `{time}`) substituted, and its runs (each as the
    run-create API takes one). `periods_after` is the last period made (or when the schedule
    began): the beat job makes the periods after it, up to now; `next_period_at` is the first of
    them, kept with it in the same statement so that the job finds due schedules on an index."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=100)
    key_pattern = models.CharField(max_length=200)
    title_pattern = models.CharField(max_length=200)
    runs = models.JSONField(default=list, blank=True)
    active = models.BooleanField(default=True)
    periods_after = models.DateTimeField()
    next_period_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [
            # The beat job's WHERE: active schedules whose next period has come.
            models.Index(
                fields=["next_period_at"],
                name="schedule_due_idx",
                condition=models.Q(active=True),
            ),
            models.Index(fields=["lane", "id"], name="schedule_lane_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.lane_id}: {self.cron} -> {self.key_pattern}"


class TryOutcome(models.TextChoices):
    CREATED = "created"  # the period's package and its runs were made
    EXISTING = "existing"  # a package with the period's key was there already: nothing made
    FAILED = "failed"  # nothing made; the period is tried again on the next tick


class ScheduleTry(models.Model):
    """One try of one period: what the beat job did, when (the database's time at the start of
    the job's run), and why it failed."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="tries")
    date_key = models.CharField(max_length=32)
    at = models.DateTimeField()
    outcome = models.CharField(max_length=8, choices=TryOutcome.choices)
    error = models.CharField(max_length=2000, blank=True, default="")
    work_package = models.ForeignKey(
        WorkPackage, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [
            models.Index(fields=["schedule", "-id"], name="schedule_try_idx"),
            models.Index(fields=["at"], name="schedule_try_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.date_key}: {self.outcome}"


class GitHubIntegration(models.Model):
    """A lane's GitHub webhook: deliveries signed with `secret` (kept in plain text because the
    server must compute the HMAC with it; shown once at creation, never in listings). Opened
    issues of `repository` become the lane's work packages (only those with `label`, when one is
    set); its merged pull requests are attested for the lane's evidence that names them, never
    for the evidence of `created_by_hand` (whose key holds the secret)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="github_integrations")
    # `owner/name`: deliveries of any other repository act on nothing. Empty only on an
    # integration made before it was required, which therefore acts on nothing.
    repository = models.CharField(max_length=140, default="")
    secret = models.CharField(max_length=128)
    label = models.CharField(max_length=100, blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True, default="")
    # The hand whose key created it (None: the dashboard, the admin).
    created_by_hand = models.ForeignKey(
        Hand, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["lane", "id"], name="github_lane_idx")]

    def __str__(self) -> str:
        return f"GitHub integration {self.pk} of lane {self.lane_id}"


class GitHubDelivery(models.Model):
    """One delivery received (X-GitHub-Delivery): a redelivery answers as the first did."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    integration = models.ForeignKey(
        GitHubIntegration, on_delete=models.CASCADE, related_name="deliveries"
    )
    delivery_id = models.CharField(max_length=64)
    event = models.CharField(max_length=64)
    action = models.CharField(max_length=64, blank=True, default="")
    outcome = models.CharField(max_length=16)
    work_package = models.ForeignKey(
        WorkPackage, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    graded = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "integration", "delivery_id"],
                name="github_delivery_unique",
            )
        ]
        indexes = [models.Index(fields=["received_at"], name="github_delivery_at_idx")]

    def __str__(self) -> str:
        return f"{self.event}.{self.action} {self.delivery_id}"
