"""A Hypothesis state machine: acquire (exclusive or shared, on the nodes of a small tree), renew,
release, break, check, take a pool's member, claim, report and the clock moving on, in any order.
After every step the engine on the real database agrees with a small reference model written in
plain Python, straight from DESIGN.md and issue 20.

The model keeps what the engine keeps, row by row: each node of the tree has its own row (its
fence counter, and its exclusive tenure when it has one) and one row per hand that has held it
shared (`leases.nodes`); a pool's members and a run's slots are nodes with a row each. So the
model also knows what a refusal must say: which row a fence names, and why it no longer holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from apikit.errors import GroundControlError
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, Run
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand
from leases import clock, engine, names, nodes
from leases import services as leases
from leases.models import Event, Lease, Refusal, Waiter
from leases.state import lease_state
from pools import services as pools
from pools.models import Pool

WS_NAME = "model"
# Three lines under `a` (a/b/c, a/d) and a node alone (x); `a/b/` and `a/b` are one node.
TREE = ["a", "a/b/", "a/b", "a/b/c", "a/d", "x"]
POOL, POOL_SIZE = "p", 2
MEMBERS = [f"pool/{POOL}/{n}" for n in range(1, POOL_SIZE + 1)]
NAMES = TREE + MEMBERS  # what renew, release, check and break are tried on
HOLDERS = ["a", "b", "c"]
MODES = ["exclusive", "shared"]
T0 = datetime(2031, 1, 1, tzinfo=UTC)
SLOT_INTERVAL = 10
SLOT_GRACE = 6


@dataclass
class Row:
    """One lease row: a node's own (shared_by '') or one hand's shared tenure of the node."""

    holder: str = ""
    fence: int = 0
    mode: str = "exclusive"
    held: bool = False  # status held: live, late, stalled, or lost and not yet recorded
    released: bool = False  # released by its holder (a retried release answers ok)
    deadline: float = 0.0
    grace: float = 0.0
    interval: float = 0.0

    def alive(self, now: float) -> bool:
        return self.held and now <= self.deadline + self.grace

    def state(self, now: float) -> str:
        if not self.held:
            return "free"
        if now <= self.deadline:
            return "live"
        if now <= self.deadline + self.grace / 2 and self.grace > 0:
            return "late"
        if now <= self.deadline + self.grace:
            return "stalled"
        return "lost"

    def grant(self, holder: str, fence: int, now: float, interval: float) -> None:
        self.holder, self.fence, self.held, self.released = holder, fence, True, False
        self.deadline, self.interval = now + interval, interval


@dataclass
class Node:
    row: Row | None = None  # the node's own row, once any grant made it
    shares: dict[str, Row] = field(default_factory=dict)  # holder -> its shared tenure's row

    def rows(self) -> list[Row]:
        return ([self.row] if self.row else []) + list(self.shares.values())

    def tenure(self, fence: int) -> Row | None:
        """The row of tenure `fence` (`nodes.read_tenure`: a shared row first), else None."""
        for share in self.shares.values():
            if share.fence == fence:
                return share
        return self.row if self.row is not None and self.row.fence == fence else None

    def explaining(self, fence: int) -> Row | None:
        """What explains a fenced call that matched nothing (`services.tenure_or_node`)."""
        return self.tenure(fence) or self.row

    def fence_of(self, holder: str, now: float) -> int:
        """The fence `holder` would carry: its live tenure's (shared or exclusive), else its
        last shared tenure's, else the node's."""
        share = self.shares.get(holder)
        for row in (share, self.row):
            if row is not None and row.holder == holder and row.alive(now):
                return row.fence
        if share is not None:
            return share.fence
        return self.row.fence if self.row is not None else 0


@dataclass
class Model:
    now: float = 0.0
    nodes: dict[str, Node] = field(default_factory=dict)

    def node(self, resource: str) -> Node:
        return self.nodes.setdefault(names.node_of(resource), Node())

    def line(self, resource: str) -> list[Node]:
        """The tree's nodes on the line of `resource`: itself, its ancestors, its descendants."""
        node = names.node_of(resource)
        return [self.node(n) for n in {names.node_of(t) for t in TREE} if names.overlaps(n, node)]

    def diagnose(self, resource: str, holder: str, fence: int) -> str:
        """Why a fenced call by `holder` matched no row (`services.diagnose`)."""
        row = self.node(resource).explaining(fence)
        if row is None:
            return "not_found"
        if fence != row.fence:
            return "stale_fence"
        if row.holder != holder:
            return "not_holder"
        return "lease_lost"

    def own(self, resource: str, holder: str, fence: int) -> Row | None:
        """`holder`'s row of tenure `fence`, if it is still alive (what renew and release
        match)."""
        node = self.node(resource)
        for row in node.rows():
            if row.holder == holder and row.fence == fence and row.alive(self.now):
                return row
        return None


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Event.objects.all().delete()
        Refusal.objects.all().delete()
        Attempt.objects.all().delete()
        Waiter.objects.all().delete()
        Lease.objects.filter(kind="resource").exclude(resource__in=MEMBERS).delete()
        Lease.objects.filter(kind="slot").update(status="free", fence=0, holder="", deadline=None)
        Lease.objects.filter(resource__in=MEMBERS).update(
            status="free", fence=0, holder="", deadline=None, released_at=None
        )
        clock.freeze(T0)
        self.model = Model()
        self.run: Run = Run.objects.get(title="model-run")
        self.ws = self.run.workspace_id
        self.hands = {h.name: h for h in Hand.objects.filter(workspace_id=self.ws)}
        self.attempts: dict[str, tuple[int, int]] = {}  # hand -> (attempt id, fence)
        self.slots = [plan_services.slot_resource(self.run.pk, i) for i in range(2)]
        for slot in self.slots:
            self.model.node(slot).row = Row(grace=SLOT_GRACE, interval=SLOT_INTERVAL)
        for member in MEMBERS:
            self.model.node(member).row = Row()

    # --- the clock ------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1, 3, 5, 7.5, 10, 20]))
    def advance(self, seconds: float) -> None:
        self.model.now += seconds
        clock.freeze(T0 + timedelta(seconds=self.model.now))

    # --- resource leases on the tree ------------------------------------------------------------

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(TREE),
        mode=st.sampled_from(MODES),
        ttl=st.sampled_from([1, 5, 12]),
    )
    def acquire(self, holder: str, resource: str, mode: str, ttl: int) -> None:
        """1. The holder asking again in the mode it holds renews its tenure of the node; in the
           other mode it is refused (held_in_other_mode) and its tenure stays as it was.
        2. Else every lost tenure on the line is recorded as ended (freed), granted or not.
        3. Granted if no other hand's tenure on the line conflicts: the next fence of the node.
        """
        model, now = self.model, self.model.now
        node = model.node(resource)
        mine = next((r for r in node.rows() if r.holder == holder and r.alive(now)), None)
        blockers: list[Row] = []
        if mine is None or mine.mode != mode:
            for other in model.line(resource):
                for row in other.rows():
                    if row.held and not row.alive(now):
                        row.held = False
        if mine is None:
            if mode == "shared" and node.row is None:
                node.row = Row()  # a shared grant counts its fence on the node's own row
            blockers = [
                row
                for other in model.line(resource)
                for row in other.rows()
                if row.held and row.holder != holder and "exclusive" in (mode, row.mode)
            ]
        try:
            got = leases.lease_acquire(
                workspace_id=self.ws,
                resource=resource,
                holder=holder,
                process_id=holder,
                ttl_s=ttl,
                mode=mode,
            )
        except GroundControlError as error:
            if mine is not None:
                assert (error.code, mine.mode != mode) == ("held_in_other_mode", True), error
                assert (error.fields["fence"], error.fields["mode"]) == (mine.fence, mine.mode)
                return
            assert error.code == "lease_held" and blockers, (error.code, blockers)
            soonest = min(row.deadline for row in blockers)
            first = [(r.holder, r.fence, r.mode) for r in blockers if r.deadline == soonest]
            fields = error.fields
            assert (fields["holder"], fields["fence"], fields["mode"]) in first, (fields, first)
            assert fields["others"] == len(blockers) - 1
            assert fields["expires_in_s"] == pytest.approx(soonest - now, abs=1e-3)
            return
        assert not blockers, f"acquire granted, model expected it held by {blockers}"
        if mine is not None:
            assert (got.fence, got.mode) == (mine.fence, mode), f"{mine.mode} renewed as {mode}"
            mine.deadline, mine.interval = now + ttl, ttl
            return
        if mode == "shared":
            assert node.row is not None
            node.row.fence += 1
            granted = node.shares.setdefault(holder, Row(mode="shared"))
            granted.grant(holder, node.row.fence, now, ttl)
        else:
            granted = node.row = node.row or Row()
            granted.grant(holder, granted.fence + 1, now, ttl)
        assert (got.fence, got.mode, got.holder) == (granted.fence, mode, holder)

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(NAMES),
        stale=st.integers(-1, 1),
    )
    def renew(self, holder: str, resource: str, stale: int) -> None:
        fence = max(self.model.node(resource).fence_of(holder, self.model.now) + stale, 0)
        row = self.model.own(resource, holder, fence)
        expected = None if row is not None else self.model.diagnose(resource, holder, fence)
        try:
            got = leases.lease_renew(
                workspace_id=self.ws,
                resource=resource,
                holder=holder,
                fence=fence,
                process_id=holder,
            )
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert row is not None, f"renew succeeded, model expected {expected}"
        row.deadline = self.model.now + row.interval
        assert got.deadline == T0 + timedelta(seconds=row.deadline)

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(NAMES),
        stale=st.integers(-1, 0),
    )
    def release(self, holder: str, resource: str, stale: int) -> None:
        node = self.model.node(resource)
        fence = max(node.fence_of(holder, self.model.now) + stale, 0)
        row = self.model.own(resource, holder, fence)
        expected = None if row is not None else self.model.diagnose(resource, holder, fence)
        again = node.explaining(fence)
        if (
            row is None
            and again is not None
            and (again.fence, again.holder) == (fence, holder)
            and again.released
            and not again.held
        ):
            expected = None  # a retried release of the same tenure answers as the first
        try:
            leases.lease_release(
                workspace_id=self.ws, resource=resource, holder=holder, fence=fence
            )
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None, f"release succeeded, model expected {expected}"
        if row is not None:
            row.held, row.released = False, True

    @rule(resource=st.sampled_from(NAMES))
    def break_lease(self, resource: str) -> None:
        """Every tenure of the node ends, exclusive and shared; its fence moves past them."""
        node = self.model.node(resource)
        held = [row for row in node.rows() if row.held]
        ended = sorted(row.fence for row in held)
        try:
            broken = leases.lease_break(
                workspace_id=self.ws, resource=resource, actor="boss", reason="test"
            )
        except GroundControlError as error:
            assert error.code == "not_found" and not held, (error.code, held)
            return
        assert held, "break succeeded, model expected nothing held"
        assert node.row is not None
        for row in held:
            row.held, row.released = False, False
        node.row.fence += 1
        assert broken.fence == node.row.fence
        events = Event.objects.filter(kind="lease_broken", fence=broken.fence)
        assert (
            sorted(
                e.data["broken_fence"]
                for e in events
                if names.node_of(e.resource) == names.node_of(resource)
            )
            == ended
        )

    @rule(
        holder=st.sampled_from(HOLDERS), resource=st.sampled_from(NAMES), stale=st.integers(-1, 1)
    )
    def check(self, holder: str, resource: str, stale: int) -> None:
        """Is the fence current? For a shared tenure: while its own tenure is held."""
        node = self.model.node(resource)
        fence = max(node.fence_of(holder, self.model.now) + stale, 0)
        row = node.tenure(fence)
        if row is not None and row.alive(self.model.now):
            expected = None
        elif node.row is None:
            expected = "not_found"
        elif row is None or node.row.fence > fence:
            expected = "stale_fence"
        else:
            expected = "lease_lost"
        try:
            leases.lease_check(workspace_id=self.ws, resource=resource, fence=fence)
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None, f"check passed, model expected {expected}"

    # --- the pool -------------------------------------------------------------------------------

    @rule(holder=st.sampled_from(HOLDERS), ttl=st.sampled_from([1, 5, 12]))
    def pool_acquire(self, holder: str, ttl: int) -> None:
        """The member the holder's process holds, renewed; else the lowest free member; else,
        the lost members recorded as ended, the lowest of them; else the pool is full."""
        now = self.model.now
        members = [self.model.node(m).row for m in MEMBERS]
        rows = [row for row in members if row is not None]
        mine = next((r for r in rows if r.holder == holder and r.alive(now)), None)
        free = next((r for r in rows if not r.held), None)
        if mine is None and free is None:
            for row in rows:
                if not row.alive(now):
                    row.held = False
            free = next((r for r in rows if not r.held), None)
        try:
            _, got = pools.pool_acquire(
                workspace_id=self.ws, name=POOL, holder=holder, process_id=holder, ttl_s=ttl
            )
        except GroundControlError as error:
            assert error.code == "lease_held" and mine is None and free is None, error.code
            assert len(error.fields["members"]) == POOL_SIZE
            return
        row = mine or free
        assert row is not None, "pool_acquire granted a member, the model has none free"
        assert got.resource == MEMBERS[next(i for i, r in enumerate(rows) if r is row)]
        if mine is not None:
            mine.deadline, mine.interval = now + ttl, ttl
        else:
            row.grant(holder, row.fence + 1, now, ttl)
        assert (got.fence, got.holder) == (row.fence, holder)

    # --- slots ----------------------------------------------------------------------------------

    @rule(holder=st.sampled_from(HOLDERS))
    def claim(self, holder: str) -> None:
        now = self.model.now
        free = [r for r in self.slots if not self.model.node(r).row.alive(now)]  # type: ignore[union-attr]
        try:
            view = attempt_services.attempt_claim(
                hand=self.hands[holder], run_id=self.run.pk, process_id=holder
            )
        except GroundControlError as error:
            assert error.code == "no_open_slot" and not free, (error.code, free)
            return
        assert free, "claimed a slot the model thinks is held"
        resource = free[0]
        assert view.lease.resource == resource
        row = self.model.node(resource).row
        assert row is not None
        row.grant(holder, row.fence + 1, now, SLOT_INTERVAL)
        assert view.lease.fence == row.fence
        self.attempts[holder] = (view.attempt.pk, row.fence)

    @precondition(lambda self: bool(self.attempts))
    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        holder = data.draw(st.sampled_from(sorted(self.attempts)))
        attempt_id, fence = self.attempts[holder]
        resource = Attempt.objects.get(pk=attempt_id).lease.resource
        row = self.model.node(resource).row
        assert row is not None
        expected = None if (row.fence == fence and row.alive(self.model.now)) else "lease_lost"
        try:
            renewed, view = report_services.attempt_report(
                hand=self.hands[holder],
                attempt_id=attempt_id,
                fence=fence,
                kind="heartbeat",
                process_id=holder,
            )
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None and renewed and view.state == "live"
        row.deadline = self.model.now + SLOT_INTERVAL

    # --- agreement ------------------------------------------------------------------------------

    @invariant()
    def database_agrees_with_model(self) -> None:
        now = T0 + timedelta(seconds=self.model.now)
        for name, node in self.model.nodes.items():
            row = engine.read(workspace_id=self.ws, resource=name)
            if node.row is None:
                assert row is None, name
            else:
                assert row is not None, name
                self.agree(name, row, node.row, now)
            shares = {
                lease.shared_by: lease
                for lease in nodes.tenures(workspace_id=self.ws, resource=name)
                if lease.shared_by
            }
            assert sorted(shares) == sorted(node.shares), (name, sorted(shares))
            for holder, share in node.shares.items():
                assert shares[holder].mode == "shared"
                self.agree(f"{name} shared by {holder}", shares[holder], share, now)

    def agree(self, what: str, row: engine.LeaseSnapshot, model: Row, now: datetime) -> None:
        state = model.state(self.model.now)
        assert row.server_time == now
        assert row.fence == model.fence, (what, row.fence, model.fence)
        assert row.state == state, (what, row.state, state)
        assert (
            lease_state(status=row.status, deadline=row.deadline, grace_s=row.grace_s, now=now)
            == state
        )
        if model.held:
            assert row.holder == model.holder, (what, row.holder, model.holder)


@pytest.mark.slow
@pytest.mark.django_db
def test_it_agrees_with_the_reference_model(workspace, lane) -> None:  # noqa: ANN001
    package, _ = plan_services.work_package_create(lane=lane, key="model", title="Model")
    plan_services.run_create(
        work_package=package,
        title="model-run",
        slots=2,
        heartbeat_interval_s=SLOT_INTERVAL,
        grace_s=SLOT_GRACE,
    )
    pools.pool_create(workspace=workspace, name=POOL, capacity=POOL_SIZE)
    assert Pool.objects.get(name=POOL).resources() == MEMBERS
    for name in HOLDERS:
        hand_services.hand_create(workspace=workspace, name=name)
    run_state_machine_as_test(
        LeaseMachine,
        settings=settings(
            max_examples=150,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
