"""The fleet: tenants, the plan (lanes, work packages, runs, slots), hands and their keys, and
attempts with their reports. Attempts stand on `leases.Lease`; nothing here is imported by it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from leases.models import Lease

DEFAULT_HEARTBEAT_INTERVAL_S = 3600
DEFAULT_GRACE_S = 1800


class Role(models.TextChoices):
    ADMIN = "admin"
    SUPERVISOR = "supervisor"
    VIEWER = "viewer"


class Workspace(models.Model):
    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class Lane(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="lanes")
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=200)
    heartbeat_interval_s = models.PositiveIntegerField(null=True, blank=True)
    grace_s = models.PositiveIntegerField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "slug"], name="lane_unique_slug")
        ]

    def __str__(self) -> str:
        return self.slug


class PlanState(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class RunState(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"  # by a supervisor: takes no claims; its attempts go on
    DONE = "done"  # every slot finished, set by the last finish itself


class WorkPackage(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="work_packages")
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=200)
    external_ref = models.CharField(max_length=500, blank=True, default="")
    state = models.CharField(max_length=8, choices=PlanState.choices, default=PlanState.OPEN)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Creating a work package is idempotent on its key: a retry never makes a second.
            models.UniqueConstraint(fields=["lane", "key"], name="work_package_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.lane.slug}/{self.key}"


class Run(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    work_package = models.ForeignKey(WorkPackage, on_delete=models.CASCADE, related_name="runs")
    title = models.CharField(max_length=200)
    brief = models.TextField(blank=True, default="")
    evidence_required = models.JSONField(default=list, blank=True)
    heartbeat_interval_s = models.PositiveIntegerField(default=DEFAULT_HEARTBEAT_INTERVAL_S)
    grace_s = models.PositiveIntegerField(default=DEFAULT_GRACE_S)
    slot_count = models.PositiveIntegerField(default=1)
    state = models.CharField(max_length=8, choices=RunState.choices, default=RunState.OPEN)
    created_at = models.DateTimeField(db_default=Now())
    closed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.title


class SlotState(models.TextChoices):
    """open -> held -> done (finished), or back to open (released, lost, broken). Read from the
    slot's lease (`fleet.selectors.slot_state`): done is its retired status, held a tenure that
    is not lost."""

    OPEN = "open"
    HELD = "held"
    DONE = "done"


class Slot(models.Model):
    """A place in a run that one hand at a time holds, through the lease on `run/<id>/slot/<n>`."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="slots")
    index = models.PositiveIntegerField()
    lease = models.OneToOneField(Lease, on_delete=models.PROTECT, related_name="slot")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="slot_unique_index")]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"run {self.run_id} slot {self.index}"


class Hand(models.Model):
    """One agent identity. Its name is its holder identity on leases."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="hands")
    name = models.CharField(max_length=200)
    lane = models.ForeignKey(
        Lane, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    is_supervisor = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="hand_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    WORK = "work"
    LEASES = "leases"
    PLAN = "plan"
    HANDS = "hands"
    SUPERVISE = "supervise"


class HandKey(models.Model):
    """A hand's key: `gc_<prefix>_<secret>`. Only the prefix and a hash of the secret are kept."""

    hand = models.ForeignKey(Hand, on_delete=models.CASCADE, related_name="keys")
    prefix = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=128)
    scopes = models.JSONField(default=list)
    lane = models.ForeignKey(
        Lane, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoke_when_done = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True, default="")
    revoke_reason = models.CharField(max_length=2000, blank=True, default="")
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The revoking job's WHERE: live keys past their expiry. The predicate names
            # expires_at too, so that the key check's `revoked_at IS NULL` alone does not imply
            # it: a plan cached while the table was small read every live key per call through
            # this index instead of finding the one by its prefix (docs/performance.md).
            models.Index(
                fields=["expires_at"],
                name="key_expiry_idx",
                condition=models.Q(revoked_at=None, expires_at__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"gc_{self.prefix}_…"


class Directive(models.TextChoices):
    CONTINUE = "continue"
    PAUSE = "pause"
    STOP = "stop"


class AttemptEnd(models.TextChoices):
    FINISHED = "finished"
    RELEASED = "released"
    LOST = "lost"


class Attempt(models.Model):
    """One hand's tenure on one slot: the slot lease at `fence`, plus the work record."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    slot = models.ForeignKey(Slot, on_delete=models.CASCADE, related_name="attempts")
    hand = models.ForeignKey(Hand, on_delete=models.CASCADE, related_name="attempts")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="+")
    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    process_id = models.CharField(max_length=200)
    directive = models.CharField(
        max_length=8, choices=Directive.choices, default=Directive.CONTINUE
    )
    claimed_at = models.DateTimeField()
    last_report_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # NULL while the tenure runs: "end IS NULL" is the open-attempt filter every index serves.
    end = models.CharField(  # noqa: DJ001
        max_length=8, choices=AttemptEnd.choices, null=True, blank=True
    )
    end_reason = models.CharField(max_length=2000, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    progress_percent = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            # A tenure is one fence of one slot's lease.
            models.UniqueConstraint(fields=["lease", "fence"], name="attempt_unique_tenure")
        ]
        indexes = [
            models.Index(fields=["workspace", "end", "lane"], name="attempt_open_idx"),
            models.Index(fields=["hand", "-id"], name="attempt_hand_idx"),
            models.Index(fields=["run", "slot"], name="attempt_run_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.pk} ({self.hand_id} on {self.slot_id})"


class ReportKind(models.TextChoices):
    HEARTBEAT = "heartbeat"
    PROGRESS = "progress"
    BLOCKER = "blocker"
    NOTE = "note"


class Report(models.Model):
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="reports")
    kind = models.CharField(max_length=16, choices=ReportKind.choices)
    at = models.DateTimeField(db_default=Now())
    process_id = models.CharField(max_length=200, blank=True, default="")
    renewed = models.BooleanField(default=False)
    message = models.TextField(blank=True, default="")
    percent = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["attempt", "-id"], name="report_attempt_idx"),
            models.Index(fields=["at"], name="report_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on attempt {self.attempt_id}"


class IdempotencyRecord(models.Model):
    """The first answer to a creating POST, replayed for a retry with the same key and body."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    key_prefix = models.CharField(max_length=32)
    idempotency_key = models.CharField(max_length=200)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=1024)
    body_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "key_prefix", "idempotency_key"], name="idempotency_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.method} {self.path})"


# --- Webhooks and periodic jobs (fleet/webhooks.py, fleet/jobs.py) ----------------------------


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
        indexes = [models.Index(fields=["workspace", "active"], name="webhook_ws_idx")]

    def __str__(self) -> str:
        return f"{self.url} ({', '.join(self.kinds)})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    """One event for one webhook: the exact body, every attempt and its response.

    `event_id` is not a foreign key: retention prunes events and deliveries on their own
    schedules, and the body sent (and re-sent on retry) is kept here.
    """

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
        constraints = [
            # Dispatching an event twice (two workers, a retried task) never makes two deliveries.
            models.UniqueConstraint(fields=["webhook", "event_id"], name="delivery_unique_event")
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


class JobRun(models.Model):
    """The last run of each periodic job, shared by every worker and read by /metrics."""

    name = models.CharField(max_length=64, unique=True)
    runs = models.BigIntegerField(default=0)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_duration_s = models.FloatField(default=0)
    last_processed = models.BigIntegerField(default=0)
    last_failed = models.BigIntegerField(default=0)
    # For the sweep: how long past its threshold the oldest transition it recorded was.
    last_lag_s = models.FloatField(default=0)

    def __str__(self) -> str:
        return self.name
