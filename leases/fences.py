"""Fences, written once: a fence is an integer from 0 to `FENCE_MAX` (a PostgreSQL bigint), and a
write that carries one is applied only while it is the resource's current fence (DESIGN rule 5).

The statements carry that as `fence = %(fence)s` next to their tenure's conditions; when one
matched nothing, `stale_fence` says so in the words every caller uses.
"""

from __future__ import annotations

from apikit.errors import ValidationFailed
from leases.errors import StaleFence

FENCE_MAX = 2**63 - 1


def as_fence(value: object) -> int | None:
    """`value` if it is a fence as sent (a JSON integer, not a boolean, in range), else None."""
    if type(value) is int and 0 <= value <= FENCE_MAX:
        return value
    return None


def validate_fence(value: object) -> int:
    fence = as_fence(value)
    if fence is None:
        raise ValidationFailed(
            "fence must be a non-negative integer", fields={"fence": ["A non-negative integer."]}
        )
    return fence


def stale_fence(carried: int, current: int, what: str) -> StaleFence | None:
    """The refusal of a write carrying `carried` on `what` whose current fence is `current`."""
    if carried == current:
        return None
    return StaleFence(
        f"fence {carried} is not the current fence {current} of {what}", current_fence=current
    )
