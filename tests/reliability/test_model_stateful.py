"""A Hypothesis state machine: acquire, renew, release, break, check, claim, report and the clock
moving on, in any order. After every step the engine on the real database agrees with a small
reference model written in plain Python, straight from DESIGN.md."""

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
from fleet.models import Attempt, Run
from fleet.services import attempts as attempt_services
from fleet.services import plan as plan_services
from fleet.services import reports as report_services
from hands import services as hand_services
from hands.models import Hand
from leases import clock, engine
from leases import services as leases
from leases.models import Event, Lease, Refusal
from leases.state import lease_state

WS_NAME = "model"
RESOURCES = ["src/auth/", "migrations"]
HOLDERS = ["a", "b", "c"]
T0 = datetime(2031, 1, 1, tzinfo=UTC)
SLOT_INTERVAL = 10
SLOT_GRACE = 6


@dataclass
class ModelLease:
    fence: int = 0
    holder: str = ""
    held: bool = False
    released: bool = False  # freed by its holder (a retried release answers ok); not on break
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


@dataclass
class Model:
    now: float = 0.0
    leases: dict[str, ModelLease] = field(default_factory=dict)

    def refusal(self, resource: str, holder: str, fence: int) -> str | None:
        lease = self.leases.get(resource)
        if lease is None:
            return "not_found"
        if fence != lease.fence:
            return "stale_fence"
        if lease.holder != holder:
            return "not_holder"
        if not lease.alive(self.now):
            return "lease_lost"
        return None


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Event.objects.all().delete()
        Refusal.objects.all().delete()
        Attempt.objects.all().delete()
        Lease.objects.filter(kind="resource").delete()
        Lease.objects.filter(kind="slot").update(status="free", fence=0, holder="", deadline=None)
        clock.freeze(T0)
        self.model = Model()
        self.run: Run = Run.objects.get(title="model-run")
        self.ws = self.run.workspace_id
        self.hands = {h.name: h for h in Hand.objects.filter(workspace_id=self.ws)}
        self.attempts: dict[str, tuple[int, int]] = {}  # hand -> (attempt id, fence)
        for index in range(2):
            self.model.leases[plan_services.slot_resource(self.run.pk, index)] = ModelLease(
                grace=SLOT_GRACE, interval=SLOT_INTERVAL
            )

    # --- the clock ------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1, 3, 5, 7.5, 10, 20]))
    def advance(self, seconds: float) -> None:
        self.model.now += seconds
        clock.freeze(T0 + timedelta(seconds=self.model.now))

    # --- resource leases ------------------------------------------------------------------------

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(RESOURCES),
        ttl=st.sampled_from([1, 5, 12]),
    )
    def acquire(self, holder: str, resource: str, ttl: int) -> None:
        lease = self.model.leases.setdefault(resource, ModelLease())
        now = self.model.now
        expected: str | None = None
        if lease.held and lease.alive(now) and lease.holder != holder:
            expected = "lease_held"
        try:
            got = leases.lease_acquire(
                workspace_id=self.ws, resource=resource, holder=holder, process_id=holder, ttl_s=ttl
            )
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            assert error.fields["holder"] == lease.holder
            assert error.fields["fence"] == lease.fence
            assert error.fields["expires_in_s"] == pytest.approx(lease.deadline - now, abs=1e-3)
            return
        assert expected is None, f"acquire granted, model expected {expected}"
        if not (lease.alive(now) and lease.holder == holder):
            lease.fence += 1
        lease.holder, lease.held, lease.released = holder, True, False
        lease.deadline, lease.grace, lease.interval = now + ttl, 0.0, ttl
        assert got.fence == lease.fence

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(RESOURCES),
        stale=st.integers(-1, 1),
    )
    def renew(self, holder: str, resource: str, stale: int) -> None:
        lease = self.model.leases.get(resource, ModelLease())
        fence = max(lease.fence + stale, 0)
        expected = self.model.refusal(resource, holder, fence)
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
        assert expected is None, f"renew succeeded, model expected {expected}"
        lease.deadline = self.model.now + lease.interval
        assert got.deadline == T0 + timedelta(seconds=lease.deadline)

    @rule(
        holder=st.sampled_from(HOLDERS),
        resource=st.sampled_from(RESOURCES),
        stale=st.integers(-1, 0),
    )
    def release(self, holder: str, resource: str, stale: int) -> None:
        lease = self.model.leases.get(resource, ModelLease())
        fence = max(lease.fence + stale, 0)
        expected = self.model.refusal(resource, holder, fence)
        if expected == "lease_lost" and lease.released and not lease.held:
            expected = None  # a retried release of the same tenure answers as the first
        try:
            leases.lease_release(
                workspace_id=self.ws, resource=resource, holder=holder, fence=fence
            )
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None, f"release succeeded, model expected {expected}"
        lease.held, lease.released = False, True

    @rule(resource=st.sampled_from(RESOURCES))
    def break_lease(self, resource: str) -> None:
        lease = self.model.leases.get(resource)
        expected = None if lease is not None and lease.held else "not_found"
        try:
            leases.lease_break(workspace_id=self.ws, resource=resource, actor="boss", reason="test")
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None
        assert lease is not None
        lease.held, lease.released, lease.fence = False, False, lease.fence + 1

    @rule(resource=st.sampled_from(RESOURCES), stale=st.integers(-1, 1))
    def check(self, resource: str, stale: int) -> None:
        lease = self.model.leases.get(resource, ModelLease())
        fence = max(lease.fence + stale, 0)
        expected = self.model.refusal(resource, lease.holder, fence)
        try:
            leases.lease_check(workspace_id=self.ws, resource=resource, fence=fence)
        except GroundControlError as error:
            assert error.code == expected, (error.code, expected)
            return
        assert expected is None, f"check passed, model expected {expected}"

    # --- slots ----------------------------------------------------------------------------------

    @rule(holder=st.sampled_from(HOLDERS))
    def claim(self, holder: str) -> None:
        now = self.model.now
        slots = [plan_services.slot_resource(self.run.pk, i) for i in range(2)]
        free = [r for r in slots if not self.model.leases[r].alive(now)]
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
        lease = self.model.leases[resource]
        lease.fence += 1
        lease.holder, lease.held, lease.released, lease.deadline = (
            holder,
            True,
            False,
            now + SLOT_INTERVAL,
        )
        assert view.lease.fence == lease.fence
        self.attempts[holder] = (view.attempt.pk, lease.fence)

    @precondition(lambda self: bool(self.attempts))
    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        holder = data.draw(st.sampled_from(sorted(self.attempts)))
        attempt_id, fence = self.attempts[holder]
        resource = Attempt.objects.get(pk=attempt_id).lease.resource
        lease = self.model.leases[resource]
        expected = None if (lease.fence == fence and lease.alive(self.model.now)) else "lease_lost"
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
        lease.deadline = self.model.now + SLOT_INTERVAL

    # --- agreement ------------------------------------------------------------------------------

    @invariant()
    def database_agrees_with_model(self) -> None:
        now = T0 + timedelta(seconds=self.model.now)
        for resource, lease in self.model.leases.items():
            row = engine.read(workspace_id=self.ws, resource=resource)
            if row is None:
                assert lease.fence == 0 and not lease.held
                continue
            assert row.server_time == now
            assert row.fence == lease.fence, resource
            assert row.state == lease.state(self.model.now), (resource, row.state)
            assert lease_state(
                status=row.status, deadline=row.deadline, grace_s=row.grace_s, now=now
            ) == lease.state(self.model.now)
            if lease.held:
                assert row.holder == lease.holder


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
