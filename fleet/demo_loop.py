"""The demo fleet's pieces of the supervisor's loop (issue 22), each a self-contained function
that `fleet.demo` calls at its moment, speaking only REST through the project's client, as any
agent would.

`demo_friction`: a hand that gave up on something files a friction report saying what it hit,
what it does instead and the minutes lost, linked to the refused calls it means.
`demo_handoff`: a denied hand asks the holder for the resource; the holder declines."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import groundcontrol_client as gc

logger = logging.getLogger(__name__)

# A report links at most this many refused calls (friction.services.MAX_REFUSALS).
_MAX_LINKED = 20


def demo_friction(
    client: gc.Client,
    *,
    what: str,
    instead: str,
    waited_s: float,
    attempt_id: int | None,
    refusals: Sequence[str],
) -> gc.FrictionReport | None:
    """File the report (the latest refusals when there were many); a refused filing is logged
    and the demo goes on: the report is the demo's, not its hands' work."""
    try:
        return client.friction_file(
            what,
            instead=instead,
            minutes=max(1, round(waited_s / 60)),
            attempt=attempt_id,
            refusals=list(dict.fromkeys(refusals))[-_MAX_LINKED:],
        )
    except gc.ConnectionFailed:
        raise
    except gc.GroundControlError as refused:
        logger.warning("demo friction report refused: %s", refused)
        return None


def demo_handoff(
    asker: gc.Client,
    holder: gc.Client,
    *,
    resource: str,
    fence: int,
    holder_process: str,
    say: Callable[[str], None],
    asker_name: str = "the waiter",
    holder_name: str = "the holder",
) -> str | None:
    """A denied hand asks the holder of `resource` for it; the holder sees the request on its
    next renewal (its tenure at `fence`, renewed as `holder_process`) and declines, being
    mid-migration; the asker reads the answer. Returns the answer's status, or None when the
    step could not be shown (the tenure ended meanwhile, or a call was refused)."""
    try:
        asked = asker.ask_handoff(
            resource=resource, reason="the audit index waits on this lock; may I have it?"
        )
        say(f"{asker_name}: asked {asked.holder} for {resource} (handoff request {asked.id})")
        renewed = holder.lease_renew(resource, fence=fence, process_id=holder_process)
        for pending in renewed.handoff_requests:
            say(f"{holder_name}: {pending.sentence(resource)}")
        if any(pending.id == asked.id for pending in renewed.handoff_requests):
            holder.decline_handoff(asked.id, reason="mid-migration: ask again in a minute")
        answer = asker.handoff(asked.id)
    except gc.GroundControlError as refused:
        say(f"{asker_name}: the handoff step was refused ({refused.code}): {refused.message}")
        return None
    say(f"{asker_name}: {answer.sentence()}")
    return answer.status
