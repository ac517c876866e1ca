"""The MCP handoff tools: `ask_handoff` (a denied agent asks the holder), `decline_handoff`
(the holder keeps its tenure and says why) and `handoff_status` (the asker reads its answers).
A request for something this session holds reaches the model once, as a notice
(`mcp_session.Session.observe`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from groundcontrol_client.core.errors import hand_called
from groundcontrol_client.mcp.parameters import MAX_RESOURCE, MAX_TEXT
from groundcontrol_client.mcp.session import Session

Reason = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TEXT, description="Why, in a sentence the other reads."),
]
HandoffId = Annotated[
    int, Field(ge=1, strict=True, description="The request's id (from the notice or the ask).")
]


def register_handoff_tools(tool: Callable[[Callable[..., str]], Any], session: Session) -> None:
    """Add the handoff tools through `tool` (build_server's: notices first, refusals as
    sentences)."""

    @tool
    def ask_handoff(
        reason: Reason,
        resource: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=MAX_RESOURCE,
                description="The resource you were denied (a path such as src/auth/).",
            ),
        ] = None,
        run_id: Annotated[
            int | None,
            Field(ge=1, strict=True, description="The run whose slot you were denied."),
        ] = None,
        slot: Annotated[
            int | None, Field(ge=0, strict=True, description="With run_id: the slot's index.")
        ] = None,
    ) -> str:
        """Denied a lease or a slot? Ask its holder to let it go, with your reason. The holder
        is told on its next renewal and may release it, decline, or ignore you; check the
        answer later with `handoff_status`. Asking again returns the same request."""
        if (resource is None) == (run_id is None or slot is None):
            raise LookupError("Name a resource, or a run_id and a slot: one of the two.")
        if resource is not None:
            handoff = session.client.ask_handoff(reason=reason, resource=resource)
        else:
            handoff = session.client.ask_handoff(reason=reason, run=run_id, slot=slot)
        return (
            f"Asked (request {handoff.id}): {hand_called(handoff.holder)} holds "
            f"`{handoff.resource}` "
            "and is told on its next renewal. Work on something else meanwhile; check "
            f"`handoff_status` for the answer."
        )

    @tool
    def decline_handoff(handoff_id: HandoffId, reason: Reason) -> str:
        """Keep a lease or slot another agent asked you for, and tell it why. To let it go
        instead, release it (`release_lease`, or `release` for a slot) when you can."""
        handoff = session.client.decline_handoff(handoff_id, reason=reason)
        return f"Declined request {handoff.id}; hand {handoff.asker} is told: {reason}"

    @tool
    def handoff_status(
        handoff_id: Annotated[
            int | None,
            Field(ge=1, strict=True, description="One request's id (default: all of yours)."),
        ] = None,
    ) -> str:
        """The answer to a request you asked (or, without an id, every request of yours that
        is open or answered, newest first)."""
        if handoff_id is not None:
            return session.client.handoff(handoff_id).sentence()
        found = session.client.handoffs()[:20]
        if not found:
            return "You have no handoff requests, asked or received."
        return "\n".join(f"- {h.id}: {h.sentence()}" for h in found)
