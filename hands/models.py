"""Who works where: workspaces and their members, lanes (a workspace's partitions, which limit
hands and keys), hands (agent identities) and their keys, and the replay record of creating
calls. A lane is here, not with the plan, because a key's lane limit is part of who may do what."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from hands.scoping import InLane


class Role(models.TextChoices):
    ADMIN = "admin"
    SUPERVISOR = "supervisor"
    VIEWER = "viewer"


class Workspace(models.Model):
    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "fleet_workspace"  # made by fleet, before the apps were split

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        db_table = "fleet_membership"  # made by fleet, before the apps were split
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

    LANE = "pk"  # `hands.scoping.InLane`: a lane-limited caller sees its own lane only
    objects = InLane.as_manager()

    class Meta:
        db_table = "fleet_lane"  # made by fleet, before the apps were split
        constraints = [
            models.UniqueConstraint(fields=["workspace", "slug"], name="lane_unique_slug")
        ]

    def __str__(self) -> str:
        return self.slug


class Hand(models.Model):
    """One agent identity. Its name is its holder identity on leases."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="hands")
    name = models.CharField(max_length=200)
    lane = models.ForeignKey(
        Lane, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    is_supervisor = models.BooleanField(default=False)
    # What it can do (`hands.capabilities`): a claim of a run that needs a tag it lacks is
    # refused (capability_missing). Set at creation or by a supervisor.
    capabilities = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        db_table = "fleet_hand"  # made by fleet, before the apps were split
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
    # Ask whether fences a commit carried are still current (`POST /fences/verify`): CI's key.
    VERIFY = "verify"
    # Say that CI observed a commit or pull request URL pass or fail (`POST /attestations`),
    # which grades the evidence carrying it `ci`: CI's key, never a hand's.
    ATTEST = "attest"


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
    # The key that minted this one (None: bootstrap, the dashboard, the admin). A key never
    # outranks or outlives its issuer, and revoking a key revokes the keys it issued.
    issued_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="issued"
    )
    # A key bound to one tenure: usable only while the lease `bound_lease` is held and alive
    # at fence `bound_fence` (hands/keys.py), so its very next call after that tenure ends is
    # refused, whatever job has or has not run.
    bound_lease = models.ForeignKey(
        "leases.Lease", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    bound_fence = models.BigIntegerField(null=True, blank=True)

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        db_table = "fleet_handkey"  # made by fleet, before the apps were split
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
        db_table = "fleet_idempotencyrecord"  # made by fleet, before the apps were split
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "key_prefix", "idempotency_key"], name="idempotency_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.method} {self.path})"
