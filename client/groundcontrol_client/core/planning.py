"""A supervisor's plan (a `plan` key; reads also with `supervise`): lanes, work packages, runs
(changed, closed, reopened, their slots added and reopened, their timeline), and the
supervisor's hand on the fleet (a `supervise` key): every attempt, a directive, a lease broken.
`Client` and `AsyncClient` have them all:

    lane = client.lane_create("rewalk", name="Rewalk")
    package = client.work_package_create("rewalk", key="GC-12", title="Fix the login redirect")
    build = client.run_create(package.id, title="Build")
    test = client.run_create(package.id, title="Test", depends_on=[build.id], priority=1)
    client.runs(ready=True)              # the ready queue: `build` only, until it is done
    client.set_directive(41, "pause")
    client.lease_break("src/auth/", reason="its hand is gone")
    for entry in client.run_timeline(test.id): print(entry.text)

Listing a run, creating one and the runs list (`runs`, `run`, `run_create`) are `core.calls`'s.
The creating calls that the server makes idempotent (a lane, a work package) send an
`Idempotency-Key` (a new one per call unless given), so they are retried like any other call:
a retry whose first answer was lost gets that answer and creates nothing. Adding slots, reopening
one and breaking a lease act again if sent again: they are never resent after an answer was lost
(`ConnectionFailed`: look before acting again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from groundcontrol_client.core.errors import MalformedAnswer
from groundcontrol_client.core.models import Attempt, Lease, Run, Slot
from groundcontrol_client.core.plans import LaneRecord, TimelineEntry, WorkPackage
from groundcontrol_client.core.sending import Sending, drop_none
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.supervisor import idempotency_headers, lane_path

# `run_update`'s "leave it as it is" for a field whose null means something (no progress
# timeout: never idle).
UNCHANGED: Any = type("Unchanged", (), {"__repr__": lambda self: "UNCHANGED"})()
DIRECTIVES = ("continue", "pause", "stop")
JSONL = "application/jsonl"


def timeline_lines(text: str) -> list[TimelineEntry]:
    """A timeline exported as JSON Lines (one entry an object a line), read."""
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise MalformedAnswer(
                f"the server's timeline export is not JSON Lines: line {number} is not JSON",
                fields={"what": "timeline export"},
            ) from None
        entries.append(TimelineEntry.from_wire(item))
    return entries


class PlanCalls(Sending):
    """A supervisor's plan and hand, as steps (`core.steps`); `Client` and `AsyncClient` have
    them."""

    # --- lanes and work packages ----------------------------------------------------------------

    @call
    def lanes(self) -> Steps[list[LaneRecord]]:
        """The workspace's lanes (a lane-limited key: its own)."""
        items = yield from self._list("lanes")
        return [LaneRecord.from_wire(item) for item in items]

    @call
    def lane_create(
        self,
        slug: str,
        *,
        name: str | None = None,
        heartbeat_interval_s: int | None = None,
        grace_s: int | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[LaneRecord]:
        """A lane (a slug: letters, digits, `-`, `_`), with the heartbeat interval and grace its
        runs take unless they say otherwise (unset: the server's). A lane that exists is
        answered as it is."""
        body = drop_none(
            {
                "slug": slug,
                "name": name,
                "heartbeat_interval_s": heartbeat_interval_s,
                "grace_s": grace_s,
            }
        )
        data = yield from self._request(
            "POST", "lanes", json=body, headers=idempotency_headers(idempotency_key)
        )
        return LaneRecord.from_wire(data)

    @call
    def work_packages(self, lane: str) -> Steps[list[WorkPackage]]:
        """A lane's work packages."""
        items = yield from self._list(lane_path(lane, "work-packages"))
        return [WorkPackage.from_wire(item) for item in items]

    @call
    def work_package_create(
        self,
        lane: str,
        *,
        key: str,
        title: str,
        external_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[WorkPackage]:
        """A work package in `lane`, unique by `key` there: creating one whose key exists
        answers that one (created nothing)."""
        body = drop_none({"key": key, "title": title, "external_ref": external_ref})
        data = yield from self._request(
            "POST",
            lane_path(lane, "work-packages"),
            json=body,
            headers=idempotency_headers(idempotency_key),
        )
        return WorkPackage.from_wire(data)

    @call
    def package_runs(self, work_package_id: int) -> Steps[list[Run]]:
        """A work package's runs, newest first (each with its slot count, not how the slots
        stand: `runs` says that)."""
        items = yield from self._list(f"work-packages/{int(work_package_id)}/runs")
        return [Run.from_wire(item) for item in items]

    # --- runs -----------------------------------------------------------------------------------

    @call
    def run_update(
        self,
        run_id: int,
        *,
        state: str | None = None,
        capabilities: Iterable[str] | None = None,
        progress_timeout_s: int | None = UNCHANGED,
        idle_directive: str | None = None,
        priority: int | None = None,
        depends_on: Iterable[int] | None = None,
    ) -> Steps[Run]:
        """Change what is given (None: unchanged): `state` open or closed, the `capabilities` a
        hand needs to claim (replaced), its `progress_timeout_s` (None: never idle; unchanged
        unless given) and `idle_directive` (none, pause, stop), its `priority` (0 first) and
        the runs it `depends_on` (replaced; a change that would close a cycle is refused
        `dependency_cycle`, nothing written). Safe to repeat."""
        body: dict[str, Any] = drop_none(
            {
                "state": state,
                "capabilities": list(capabilities) if capabilities is not None else None,
                "idle_directive": idle_directive,
                "priority": priority,
                "depends_on": [int(run) for run in depends_on] if depends_on is not None else None,
            }
        )
        if progress_timeout_s is not UNCHANGED:
            body["progress_timeout_s"] = progress_timeout_s
        data = yield from self._request("PATCH", f"runs/{int(run_id)}", json=body)
        return Run.from_wire(data)

    @call
    def run_close(self, run_id: int) -> Steps[Run]:
        """The run takes no more claims; the attempts under way go on."""
        return (yield from self.run_update.steps(run_id, state="closed"))

    @call
    def run_reopen(self, run_id: int) -> Steps[Run]:
        """The run takes claims again (one whose slots are all done reopens as done: add or
        reopen a slot to work on it again)."""
        return (yield from self.run_update.steps(run_id, state="open"))

    @call
    def run_timeline(self, run_id: int) -> Steps[list[TimelineEntry]]:
        """Everything that happened under the run, oldest first: claims, reports, directives,
        leases its hands took and released, fences verified, attestations, friction, refusals
        (a `plan` or `supervise` key; a lane-limited key: its lane's runs)."""
        items = yield from self._list(f"runs/{int(run_id)}/timeline")
        return [TimelineEntry.from_wire(item) for item in items]

    @call
    def run_timeline_export(self, run_id: int) -> Steps[list[TimelineEntry]]:
        """The whole timeline in one answer (`?format=jsonl`, JSON Lines: not paginated, as far
        back as the server keeps records); each entry's `raw` is its line."""
        response = yield from self._send(
            "GET",
            f"runs/{int(run_id)}/timeline",
            params={"format": "jsonl"},
            headers={"Accept": f"{JSONL}, application/json;q=0.5"},
        )
        return timeline_lines(response.text)

    # --- slots ----------------------------------------------------------------------------------

    @call
    def slots_add(self, run_id: int, *, count: int, reason: str) -> Steps[Run]:
        """Add `count` open slots to a run that is open or done (a done run is open again);
        the run, counted. Never resent: a second add would add as many again."""
        data = yield from self._request(
            "POST",
            f"runs/{int(run_id)}/slots",
            json={"count": int(count), "reason": reason},
            idempotent=False,
        )
        return Run.from_wire(data)

    @call
    def slot_reopen(self, run_id: int, index: int, *, reason: str) -> Steps[Slot]:
        """Reopen a done slot (`slot_not_done` otherwise): claimable again at its next fence;
        the finished attempt and its evidence stay on record."""
        data = yield from self._request(
            "POST",
            f"runs/{int(run_id)}/slots/{int(index)}/reopen",
            json={"reason": reason},
            idempotent=False,
        )
        return Slot.from_wire(data)

    # --- the supervisor's hand (scope `supervise`) ----------------------------------------------

    @call
    def attempts(
        self,
        *,
        state: str | None = None,
        lane: str | None = None,
        hand: str | None = None,
        run_id: int | None = None,
        idle: bool | None = None,
    ) -> Steps[list[Attempt]]:
        """Every attempt of the workspace (a lane-limited key: its lane's), newest first;
        `state` live, late, stalled, lost, finished or released; `idle` only idle (or not)."""
        params = drop_none(
            {
                "state": state,
                "lane": lane,
                "hand": hand,
                "run": None if run_id is None else int(run_id),
                "idle": None if idle is None else ("true" if idle else "false"),
            }
        )
        items = yield from self._list("attempts", params)
        return [Attempt.from_wire(item) for item in items]

    @call
    def set_directive(self, attempt_id: int, directive: str) -> Steps[Attempt]:
        """Tell an attempt to `continue`, `pause` or `stop`: its hand reads it in its next
        report's answer (`gctl run` suspends its command on pause, ends it on stop). Safe to
        repeat."""
        data = yield from self._request(
            "POST", f"attempts/{int(attempt_id)}/directive", json={"directive": directive}
        )
        return Attempt.from_wire(data)

    @call
    def lease_break(self, resource: str, *, reason: str) -> Steps[Lease]:
        """Free `resource` now (any name a lease holds, a slot's `run/12/slot/0` too: its attempt
        ends as lost): every tenure of the node ends and its fence moves past them, so the old
        holder's later writes are stale. The freed lease. Never resent."""
        data = yield from self._request(
            "POST",
            "leases/break",
            json={"resource": resource, "reason": reason},
            idempotent=False,
        )
        return Lease.from_wire(data)
