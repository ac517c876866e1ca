"""The demo fleet's pieces of the supervisor's loop (issue 22), each a function of its own that
a demo hand calls over the REST API, as any agent would.

`demo_friction`: a hand that gave up on something files a friction report saying what it hit,
what it does instead and the minutes lost, linked to the refused calls it means."""

from __future__ import annotations

import logging
from collections.abc import Sequence

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
