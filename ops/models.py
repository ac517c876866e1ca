"""What the machines record about themselves: the last run of each periodic job."""

from __future__ import annotations

from django.db import models


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

    class Meta:
        db_table = "fleet_jobrun"  # made by fleet, before the apps were split

    def __str__(self) -> str:
        return self.name
