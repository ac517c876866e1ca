"""The handoff calls (a mixin of `core.calls.Calls`): ask the holder of what refused you, read
the answer, decline a request for your own tenure, withdraw yours, and, for supervisors, grant."""

from __future__ import annotations

from typing import Any

from groundcontrol_client.core.handoffs import Handoff
from groundcontrol_client.core.models import Lease
from groundcontrol_client.core.sending import Sending
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.wire import WireModel


class Granted(WireModel, title="handoff grant"):
    """A supervisor's grant: the request, answered, and the lease as the break left it."""

    handoff: Handoff
    lease: Lease


class HandoffCalls(Sending):
    """The handoff calls, as steps (`core.steps`); `Client` and `AsyncClient` have them."""

    @call
    def ask_handoff(
        self,
        *,
        reason: str,
        resource: str | None = None,
        run: int | None = None,
        slot: int | None = None,
        mode: str | None = None,
    ) -> Steps[Handoff]:
        """Ask the holder of `resource` (or of slot `slot` of run `run`) to let it go. Asking
        again for the same tenure answers the open request: a retry never asks twice."""
        body: dict[str, Any] = {"reason": reason}
        if resource is not None:
            body["resource"] = resource
            if mode is not None:
                body["mode"] = mode
        if run is not None or slot is not None:
            body.update(run=run, slot=slot)
        data = yield from self._request("POST", "leases/handoff", json=body)
        return Handoff.from_wire(data)

    @call
    def handoff(self, handoff_id: int) -> Steps[Handoff]:
        """One request and its answer (for its asker, its holder or a supervisor)."""
        data = yield from self._request("GET", f"leases/handoff/{int(handoff_id)}")
        return Handoff.from_wire(data)

    @call
    def handoffs(
        self, *, role: str | None = None, status: str | None = None
    ) -> Steps[list[Handoff]]:
        """This hand's requests, newest first: asked and received (`role`: asked, received, or,
        for a supervisor, workspace); `status` as stored (an open one may read lapsed)."""
        params = {k: v for k, v in {"role": role, "status": status}.items() if v}
        items = yield from self._list("leases/handoffs", params)
        return [Handoff.from_wire(item) for item in items]

    @call
    def decline_handoff(self, handoff_id: int, *, reason: str) -> Steps[Handoff]:
        """Keep the tenure and say why (only its current holder)."""
        data = yield from self._request(
            "POST",
            f"leases/handoff/{int(handoff_id)}/decline",
            json={"reason": reason},
            idempotent=False,
        )
        return Handoff.from_wire(data)

    @call
    def withdraw_handoff(self, handoff_id: int) -> Steps[Handoff]:
        data = yield from self._request(
            "POST", f"leases/handoff/{int(handoff_id)}/withdraw", json={}, idempotent=False
        )
        return Handoff.from_wire(data)

    @call
    def grant_handoff(self, handoff_id: int, *, reason: str) -> Steps[tuple[Handoff, Lease]]:
        """A supervisor breaks the lease for the request (scope supervise)."""
        data = yield from self._request(
            "POST",
            f"leases/handoff/{int(handoff_id)}/grant",
            json={"reason": reason},
            idempotent=False,
        )
        granted = Granted.from_wire(data)
        return granted.handoff, granted.lease
