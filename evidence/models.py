"""Evidence an attempt leaves behind (a pull request link, a CI run), hung off fleet attempts,
graded by who observed it; and the attestations CI posts for a URL."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from fleet.models import Attempt, EvidenceGrade
from hands.models import Hand, Lane, Workspace
from hands.scoping import InLane


class AttestationResult(models.TextChoices):
    PASS = "pass"
    FAIL = "fail"


class Attestation(models.Model):
    """CI observed `url` (a commit or a pull request) with `result` at `observed_at`: a key with
    the `attest` scope said so, or a lane's GitHub integration delivered a merge.

    The rules (`evidence.services`): attestations of a URL are ordered by `observed_at` (then
    id), never by arrival alone; one observation is one row (`attestation_observation_unique`:
    a replay inserts nothing); `lane` confines it to that lane's evidence (None: the
    workspace's); it never grades evidence of `attester`'s own attempts; and a pass backs the
    finish of one attempt at most (`backs`)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2000)
    result = models.CharField(max_length=4, choices=AttestationResult.choices)
    kind = models.CharField(max_length=64, blank=True, default="")
    note = models.CharField(max_length=2000, blank=True, default="")
    # Who attested, as events name them: the hand's name and the key's prefix.
    hand = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=32)
    # The hand whose key attested (or whose key created the integration that delivered it):
    # its own evidence is never graded by it.
    attester = models.ForeignKey(
        Hand, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The lane it grades (a lane-limited key's, an integration's); None: the whole workspace.
    lane = models.ForeignKey(
        Lane, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    # When CI observed it (a pull request's merged_at, the time the attestation carries, or
    # its arrival): the order of a URL's attestations.
    observed_at = models.DateTimeField()
    # The one attempt whose evidence this pass grades ci (set once, by a conditional UPDATE).
    backs = models.ForeignKey(
        Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The observation's identity (`evidence.services.observation_key`: a hash of its lane, URL,
    # result and observed_at): one observation, one row, so that a replayed delivery or a
    # retried POST that carries the same observation inserts nothing (ON CONFLICT DO NOTHING).
    observation = models.CharField(max_length=64)
    at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "observation"], name="attestation_observation_unique"
            )
        ]
        indexes = [
            # The finish's look-up: the attestations of each of its URLs (a few rows per URL).
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
    # `ci` while a pass that backs this attempt is the URL's latest attestation in scope for
    # it, else `observed_by`: kept with `attestation` (that pass, or the latest fail) by the
    # statement that records it, so pages read it without a join.
    grade = models.CharField(
        max_length=8, choices=EvidenceGrade.choices, default=EvidenceGrade.HAND
    )
    attestation = models.ForeignKey(
        Attestation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    LANE = "attempt__lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        verbose_name_plural = "evidence"
        indexes = [
            models.Index(fields=["attempt"], name="evidence_attempt_idx"),
            # An attestation grades the evidence with its URL (a few rows per URL).
            models.Index(fields=["url"], name="evidence_url_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.url} ({self.grade})"
