"""The lease engine's refusals, with the contract's codes (the shared ones are `apikit.errors`)."""

from __future__ import annotations

from apikit.errors import GroundControlError


class NotHolder(GroundControlError):
    code = "not_holder"
    http_status = 403


class LeaseHeld(GroundControlError):
    code = "lease_held"
    http_status = 409


class LeaseLost(GroundControlError):
    code = "lease_lost"
    http_status = 409


class ProcessMismatch(GroundControlError):
    code = "process_mismatch"
    http_status = 409


class StaleFence(GroundControlError):
    code = "stale_fence"
    http_status = 409
