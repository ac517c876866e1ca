"""The MCP tool `file_friction`: the model tells the supervisor what got in its way, what it did
instead and the minutes it lost, linked to the refused calls it means. A model sees refusals as
sentences, not request ids, so the session remembers the request ids of the refusals its tools
answered (`RecentRefusals`) and the tool links the latest of them on request."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from groundcontrol_client.core.errors import GroundControlError
from groundcontrol_client.core.friction import describe_report
from groundcontrol_client.core.limits import LIMITS
from groundcontrol_client.mcp.parameters import MAX_TEXT, AttemptId
from groundcontrol_client.mcp.session import Session

MAX_MINUTES = int(LIMITS["friction_minutes"])
MAX_REFUSALS = int(LIMITS["friction_refusals"])


class RecentRefusals:
    """The request ids of the last refused calls this session's tools answered, newest last.
    Only refusals the server records under the workspace (not 401s, which may name none)."""

    def __init__(self, size: int = MAX_REFUSALS) -> None:
        self._ids: deque[str] = deque(maxlen=size)
        self._lock = threading.Lock()

    def saw(self, refusal: GroundControlError) -> None:
        status = refusal.status or 0
        if refusal.request_id and 400 <= status < 500 and status != 401:
            with self._lock:
                if refusal.request_id not in self._ids:
                    self._ids.append(refusal.request_id)

    def latest(self, count: int) -> list[str]:
        with self._lock:
            return list(self._ids)[-count:] if count > 0 else []


def register_friction_tool(
    tool: Callable[[Callable[..., str]], Any], session: Session, recent: RecentRefusals
) -> None:
    @tool
    def file_friction(
        what: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_TEXT,
                description=f"What got in your way (up to {MAX_TEXT} characters).",
            ),
        ],
        instead: Annotated[
            str,
            Field(max_length=MAX_TEXT, description="What you did instead (optional)."),
        ] = "",
        minutes: Annotated[
            int,
            Field(
                ge=0, le=MAX_MINUTES, strict=True, description=f"Minutes lost, 0 to {MAX_MINUTES}."
            ),
        ] = 0,
        recent_refusals: Annotated[
            int,
            Field(
                ge=0,
                le=MAX_REFUSALS,
                strict=True,
                description="Link the last N refused calls this session's tools answered "
                "(0: none). Use it when the friction is about something you were refused.",
            ),
        ] = 0,
        refusals: Annotated[
            list[str] | None,
            Field(
                max_length=MAX_REFUSALS,
                description="Request ids of refused calls to link, if you know them.",
            ),
        ] = None,
        attempt_id: AttemptId = None,
    ) -> str:
        """Report friction to your supervisor: something that cost you time (a lock held too
        long, a flaky service, a refusal you did not expect), what you did instead, and the
        minutes lost. It is filed for your attempt (the one you hold, or `attempt_id`)."""
        with session.lock:
            held = list(session.attempts)
        attempt = session.attempt(attempt_id).id if attempt_id or len(held) == 1 else None
        linked = list(dict.fromkeys([*(refusals or []), *recent.latest(recent_refusals)]))
        report = session.client.friction_file(
            what,
            instead=instead or None,
            minutes=minutes,
            attempt=attempt,
            refusals=linked[:MAX_REFUSALS],
        )
        return f"Filed friction report {describe_report(report)}. Thank you: it is seen."
