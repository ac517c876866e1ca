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


class HandoffNotNeeded(GroundControlError):
    """Nothing held stands in the way of the asker: it should acquire or claim instead."""

    code = "handoff_not_needed"
    http_status = 409


class HandoffOwnLease(GroundControlError):
    code = "handoff_own_lease"
    http_status = 409


class HandoffAnswered(GroundControlError):
    """The request already has its answer (or lapsed): it takes no other."""

    code = "handoff_answered"
    http_status = 409


class HandoffLimit(GroundControlError):
    code = "handoff_limit"
    http_status = 409
