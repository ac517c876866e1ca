"""Where a fence stands, written once: current, superseded (and since when) or unknown.

`standing` is the rule `leases.services.lease_check` answers by (a tenure is current while it is
held and not lost; a shared one stays current beside later shared grants), read the same way (the
rows FOR SHARE on PostgreSQL, so a grant or break in flight is waited for). `fences_verify` asks it
for each `<resource>@<fence>` a commit carried (`gctl git`, `gctl verify`), says since when each
superseded one was no longer current, and records the answer (`FenceVerification`).

A fence stops being current at the end of its tenure: its release, the instant it was lost (its
deadline plus grace), or the break or grant that took the node past it, whichever came first.
While the tenure's row still stands at the fence that is read off the row; once the node has moved
on, off the event log (`event_fence_idx`), which retention prunes: `when` is then null.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apikit.errors import ValidationFailed
from leases import engine, names, nodes
from leases.engine import LeaseSnapshot
from leases.fences import FENCE_MAX
from leases.models import Event, EventKind, FenceStatus, FenceVerification, LeaseState
from leases.names import MAX_RESOURCE_LENGTH
from leases.state import thresholds

MAX_FENCES = 500
_FENCE_DIGITS = re.compile(r"[0-9]{1,19}")
# The events that end a tenure at its own fence, and those that take the node past it.
_ENDS = (EventKind.LEASE_RELEASED, EventKind.LEASE_EXPIRED)
_PASSES = (EventKind.LEASE_ACQUIRED, EventKind.LEASE_BROKEN)
FENCE_EVENT_KINDS = (*_ENDS, *_PASSES)


@dataclass(frozen=True)
class Standing:
    """Where the tenure `fence` of a node stands. `tenure` is its row while current; `node` is
    the node's own row (None when the node was never leased)."""

    status: FenceStatus
    fence: int
    tenure: LeaseSnapshot | None
    node: LeaseSnapshot | None

    @property
    def current_fence(self) -> int | None:
        return self.node.fence if self.node is not None else None

    @property
    def moved_on(self) -> bool:
        """Superseded by a later fence (a grant or a break), not merely ended."""
        return self.node is not None and self.node.fence > self.fence


def standing(*, workspace_id: int, resource: str, fence: int) -> Standing:
    """Is `fence` a current, unlost tenure of `resource`? `unknown` when the node was never
    leased or never granted that fence."""
    tenure = nodes.read_tenure(
        workspace_id=workspace_id, resource=resource, fence=fence, settled=True
    )
    if tenure is not None and tenure.held:
        return Standing(FenceStatus.CURRENT, fence, tenure, tenure)
    node = engine.read(workspace_id=workspace_id, resource=resource, settled=True)
    if node is None or fence > node.fence or fence == 0:
        return Standing(FenceStatus.UNKNOWN, fence, tenure, node)
    return Standing(FenceStatus.SUPERSEDED, fence, tenure, node)


def parse_fence(value: object, index: int) -> tuple[str, int]:
    """`(resource, fence)` of `<resource>@<fence>`; `validation_error` naming the item."""
    problem = None
    if not isinstance(value, str) or "@" not in value:
        problem = "must be a string '<resource>@<fence>'"
    else:
        resource, _, digits = value.rpartition("@")
        name_problem = names.resource_problem(resource, field="resource")
        if name_problem is not None:
            problem = name_problem
        elif resource.strip().lower().startswith("run/"):
            problem = "names a run slot: slot fences are an attempt's, not a commit's"
        elif not _FENCE_DIGITS.fullmatch(digits) or int(digits) > FENCE_MAX:
            problem = "its fence must be a non-negative integer (after the last '@')"
        else:
            return resource, int(digits)
    shown = repr(value)[:MAX_RESOURCE_LENGTH] if isinstance(value, str) else type(value).__name__
    message = f"fences[{index}] {shown}: {problem}"
    raise ValidationFailed(message, fields={"fences": [message]})


def validate_fences(value: object) -> list[tuple[str, int]]:
    if not isinstance(value, list) or not value:
        raise ValidationFailed(
            "fences must be a non-empty list of '<resource>@<fence>'",
            fields={"fences": ["A non-empty list of '<resource>@<fence>' strings."]},
        )
    if len(value) > MAX_FENCES:
        raise ValidationFailed(
            f"fences holds {len(value)} items; at most {MAX_FENCES} in one call",
            fields={"fences": [f"At most {MAX_FENCES} items."]},
        )
    return [parse_fence(item, index) for index, item in enumerate(value)]


def _ended_at(tenure: LeaseSnapshot | None) -> tuple[datetime | None, str]:
    """When and how the tenure whose row still stands at its fence ended."""
    if tenure is None:
        return None, ""
    if tenure.state == LeaseState.FREE and tenure.released_at is not None:
        return tenure.released_at, "released"
    if tenure.deadline is not None and tenure.state == LeaseState.LOST:
        return thresholds(tenure.deadline, tenure.grace_s).lost_at, "lost"
    return None, "ended"


def _passed_at(*, workspace_id: int, node: str, fence: int) -> tuple[datetime | None, str]:
    """When the tenure `fence` of `node` stopped being current, by the event log: its release
    or loss, or else the first break or grant above it, whichever came first."""
    events = (
        Event.objects.filter(
            workspace_id=workspace_id,
            kind__in=FENCE_EVENT_KINDS,
            resource__in=[node, node + "/"],
            fence__gte=fence,
        )
        .order_by("fence", "id")
        .only("kind", "at", "fence", "data")[:8]
    )
    found: list[tuple[datetime, str]] = []
    for event in events:
        if event.fence == fence and event.kind in _ENDS:
            since = event.data.get("since") if event.kind == EventKind.LEASE_EXPIRED else None
            at = datetime.fromisoformat(since) if isinstance(since, str) else event.at
            found.append((at, "released" if event.kind == EventKind.LEASE_RELEASED else "lost"))
        elif event.fence == fence and event.kind == EventKind.LEASE_BROKEN:
            return None, "never granted"  # a break counted this fence out; no tenure took it
        elif event.fence is not None and event.fence > fence and event.kind in _PASSES:
            how = "broken" if event.kind == EventKind.LEASE_BROKEN else "taken"
            found.append((event.at, how))
            break  # the first fence above it: later ones came after
    return min(found) if found else (None, "")


def answer_of(*, workspace_id: int, resource: str, found: Standing) -> dict[str, Any]:
    """One fence's answer: its status, the node's fence now, and since when and how it stopped
    being current."""
    answer: dict[str, Any] = {
        "fence": f"{resource}@{found.fence}",
        "resource": resource,
        "fence_number": found.fence,
        "status": str(found.status),
        "current_fence": found.current_fence,
        "when": None,
        "ended": "",
    }
    if found.status == FenceStatus.CURRENT:
        assert found.tenure is not None
        answer["holder"] = found.tenure.holder
    if found.status != FenceStatus.SUPERSEDED:
        return answer
    when, how = (None, "")
    if not found.moved_on:
        when, how = _ended_at(found.tenure)
    if when is None:
        when, how = _passed_at(
            workspace_id=workspace_id, node=names.node_of(resource), fence=found.fence
        )
    if how == "never granted":
        answer.update(status=str(FenceStatus.UNKNOWN))
        return answer
    answer.update(when=when.isoformat() if when else None, ended=how or "ended")
    return answer


def fences_verify(
    *, workspace_id: int, fences: object, key_prefix: str = "", hand: str = ""
) -> list[dict[str, Any]]:
    """Each fence's standing, in the order sent (a fence sent twice is read once), recorded."""
    parsed = validate_fences(fences)
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    for resource, fence in parsed:
        if (resource, fence) not in answers:
            found = standing(workspace_id=workspace_id, resource=resource, fence=fence)
            answers[resource, fence] = answer_of(
                workspace_id=workspace_id, resource=resource, found=found
            )
    FenceVerification.objects.bulk_create(
        FenceVerification(
            workspace_id=workspace_id,
            key_prefix=key_prefix,
            hand=hand,
            resource=resource,
            fence=fence,
            status=answer["status"],
            current_fence=answer["current_fence"],
        )
        for (resource, fence), answer in answers.items()
    )
    return [answers[pair] for pair in parsed]
