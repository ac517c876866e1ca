"""The refusals of GitHub's deliveries (the schedules' own are validation errors)."""

from __future__ import annotations

from apikit.errors import GroundControlError


class SignatureInvalid(GroundControlError):
    """A delivery whose X-Hub-Signature-256 is missing or is not the HMAC of its body with the
    integration's secret (or names no active integration: the same answer, so that a caller
    without the secret learns nothing)."""

    code = "signature_invalid"
    http_status = 401
