"""A friction report: what got in the way of a hand (or a supervisor), what it did instead, how
many minutes it lost, where (lane, run, attempt), and the refused calls it refers to.

The refused calls are linked by request id and copied (`FrictionRefusal`): refusals are pruned
after `GC_RETENTION_REFUSALS_DAYS` by a plain DELETE (`ops.jobs.records_prune`), which a foreign
key would block, and a report pasted into an issue tracker months later must still say which
codes it was about and when they were answered. A refusal row is never changed, so the copy
never disagrees with it while both exist.
"""

from __future__ import annotations

from django.db import models

from fleet.models import Attempt, Run
from hands.models import Lane, Workspace
from hands.scoping import InLane


class FrictionReport(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(
        Lane, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    attempt = models.ForeignKey(
        Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Who filed it: the key's hand (by name, as events name hands) and the key's prefix.
    hand = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=32, blank=True, default="")
    what = models.TextField()
    instead = models.TextField(blank=True, default="")
    minutes = models.PositiveIntegerField(default=0)
    # The database's time when it was filed (`leases.clock.db_now`).
    at = models.DateTimeField()

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-id"], name="friction_ws_idx"),
            models.Index(fields=["workspace", "lane", "-id"], name="friction_ws_lane_idx"),
            # The chart's and `since`'s range.
            models.Index(fields=["workspace", "at"], name="friction_ws_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.hand}: {self.what[:60]} ({self.minutes} min)"


class FrictionRefusal(models.Model):
    """A refused call a report refers to, as it was recorded (see the module's docstring)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    report = models.ForeignKey(FrictionReport, on_delete=models.CASCADE, related_name="refusals")
    request_id = models.CharField(max_length=128)
    # The refusal's id while it is kept; not a foreign key, since retention deletes refusals.
    refusal_id = models.BigIntegerField()
    code = models.CharField(max_length=64)
    at = models.DateTimeField()
    hand = models.CharField(max_length=200, blank=True, default="")
    method = models.CharField(max_length=10, blank=True, default="")
    path = models.CharField(max_length=1024, blank=True, default="")
    message = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "report", "request_id"],
                name="friction_refusal_unique_request",
            )
        ]
        ordering = ["report", "id"]

    def __str__(self) -> str:
        return f"{self.code} ({self.request_id})"
