"""Evidence an attempt leaves behind (a pull request link, a CI run), hung off fleet attempts,
graded by who observed it; and the attestations CI posts for a URL."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from fleet.models import Attempt, EvidenceGrade
from hands.models import Workspace


class AttestationResult(models.TextChoices):
    PASS = "pass"
    FAIL = "fail"


class Attestation(models.Model):
    """A key with the `attest` scope (CI) observed `url` (a commit or a pull request) with
    `result`. The latest attestation of a URL in a workspace decides whether evidence with that
    URL is graded `ci` (`evidence.services`)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2000)
    result = models.CharField(max_length=4, choices=AttestationResult.choices)
    kind = models.CharField(max_length=64, blank=True, default="")
    note = models.CharField(max_length=2000, blank=True, default="")
    # Who attested, as events name them: the hand's name and the key's prefix.
    hand = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=32)
    at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # The finish's look-up: the latest attestation of each of its URLs.
            models.Index(fields=["workspace", "url", "-id"], name="attestation_url_idx")
        ]

    def __str__(self) -> str:
        return f"{self.result}: {self.url}"


class Evidence(models.Model):
    # The attempt's, denormalised: every table carries the distribution key (docs/scale.md).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="evidence")
    kind = models.CharField(max_length=64)
    url = models.URLField(max_length=2000)
    note = models.CharField(max_length=2000, blank=True, default="")
    at = models.DateTimeField(db_default=Now())
    # What the finish said: `hand`, or `wrapper` when `gctl run` read it (the client's word).
    observed_by = models.CharField(
        max_length=8, choices=EvidenceGrade.choices, default=EvidenceGrade.HAND
    )
    # `ci` while the latest attestation of the URL passed, else `observed_by`: kept with the
    # attestation in the statement that records it, so pages read it without a join.
    grade = models.CharField(
        max_length=8, choices=EvidenceGrade.choices, default=EvidenceGrade.HAND
    )
    attestation = models.ForeignKey(
        Attestation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        verbose_name_plural = "evidence"
        indexes = [
            models.Index(fields=["attempt"], name="evidence_attempt_idx"),
            # An attestation grades the evidence with its URL (a few rows per URL).
            models.Index(fields=["url"], name="evidence_url_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.url} ({self.grade})"
