"""The refusal of a finish without the evidence its run requires."""

from __future__ import annotations

from apikit.errors import GroundControlError


class EvidenceMissing(GroundControlError):
    """A finish without the evidence its run requires at the grade it requires (`missing`,
    `grades_needed`)."""

    code = "evidence_missing"
    http_status = 422


class AttestOwnEvidence(GroundControlError):
    """An attestation of a URL that evidence the attesting key's own hand submitted carries: a
    hand never grades its own work (CI attests with a key of its own hand)."""

    code = "attest_own_evidence"
    http_status = 403
