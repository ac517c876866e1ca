"""The refusal of a finish without the evidence its run requires."""

from __future__ import annotations

from apikit.errors import GroundControlError


class EvidenceMissing(GroundControlError):
    code = "evidence_missing"
    http_status = 422
