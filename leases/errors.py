"""The lease engine's refusals, with the contract's codes (the shared ones are `apikit.errors`)."""

from __future__ import annotations

from apikit.errors import GroundControlError


class NotHolder(GroundControlError):
    """The call names a tenure the calling hand does not hold."""

    code = "not_holder"
    http_status = 403


class LeaseHeld(GroundControlError):
    """Someone else holds the resource, or a tenure on its line of the tree (`holder`, `fence`,
    `expires_in_s`)."""

    code = "lease_held"
    http_status = 409


class LeaseLost(GroundControlError):
    """The tenure is over (expired, broken, released or taken over): its holder's work stops
    counting."""

    code = "lease_lost"
    http_status = 409


class HeldInOtherMode(GroundControlError):
    """The caller's process holds the resource already, in the other mode (`mode`, `fence`): a
    tenure keeps the mode it was granted in, so an acquire in the other mode neither renews it
    nor grants a second one. Release that tenure (its `fence`), then acquire in the mode wanted;
    or acquire in the mode held, which renews it."""

    code = "held_in_other_mode"
    http_status = 409


class ProcessMismatch(GroundControlError):
    """Another process of the hand holds the tenure (`process_id`): only that process's calls
    count."""

    code = "process_mismatch"
    http_status = 409


class StaleFence(GroundControlError):
    """The fence is not the resource's current one (`current_fence`): a newer tenure exists."""

    code = "stale_fence"
    http_status = 409


class HandoffNotNeeded(GroundControlError):
    """Nothing held stands in the way of the asker: it should acquire or claim instead."""

    code = "handoff_not_needed"
    http_status = 409


class HandoffOwnLease(GroundControlError):
    """A handoff request for something the asker's own hand holds: nobody else stands in the
    way."""

    code = "handoff_own_lease"
    http_status = 409


class HandoffAnswered(GroundControlError):
    """The request already has its answer (or lapsed): it takes no other."""

    code = "handoff_answered"
    http_status = 409


class HandoffLimit(GroundControlError):
    """The asker has as many open handoff requests as it may: wait for an answer before asking
    again."""

    code = "handoff_limit"
    http_status = 409
