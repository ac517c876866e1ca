"""Evidence an attempt leaves behind (a pull request link, a CI run), hung off fleet attempts."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from fleet.models import Attempt


class Evidence(models.Model):
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="evidence")
    kind = models.CharField(max_length=64)
    url = models.URLField(max_length=2000)
    note = models.CharField(max_length=2000, blank=True, default="")
    at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "evidence"
        indexes = [models.Index(fields=["attempt"], name="evidence_attempt_idx")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.url}"
