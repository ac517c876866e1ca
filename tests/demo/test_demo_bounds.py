"""The demo's refusals and friction are bounded: a demo left running (or started again and
again) keeps at most `demo.MAX_REFUSALS` refusals and `demo.MAX_FRICTION` friction reports in
its workspace. Only its waiter is refused on purpose; once it has been refused and filed its
reports, it rests. Driven by a fast loop: the fleet on second-long timings, for many rounds of
its other hands."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import pytest

from demo import fleet as demo
from fleet.models import Attempt, AttemptEnd
from friction.models import FrictionReport
from leases.models import HandoffRequest, Refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Faster still than FAST: the waiter gives up sooner and every hand rests less. The grace is
# long: what is bounded here is the waiter's record, and with FAST's 3 s from a heartbeat to a
# lost tenure, the healthy and finishing hands (threads of this process, beside the live server)
# missed it with two CI runs on two cores, and their refused reports counted as the demo's.
QUICK = dataclasses.replace(
    demo.FAST, waiter_gives_up_after_s=1.5, rest_s=0.3, finish_after_s=0.6, grace_s=30
)


def record(workspace_id: int) -> tuple[Counter, int, int]:
    refusals = Counter(
        Refusal.objects.filter(workspace_id=workspace_id).values_list("hand", "code")
    )
    friction = FrictionReport.objects.filter(workspace_id=workspace_id).count()
    handoffs = HandoffRequest.objects.filter(workspace_id=workspace_id).count()
    return refusals, friction, handoffs


def run_fleet(plan: demo.DemoPlan, url: str, until, timeout_s: float = 60) -> list[str]:  # noqa: ANN001
    lines: list[str] = []
    fleet = demo.DemoFleet(plan, url=url, timings=QUICK, say=lines.append)
    fleet.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not until(lines):
            time.sleep(0.2)
    finally:
        fleet.stop()
    return lines


def finished() -> int:
    return Attempt.objects.filter(hand__name="demo-finisher", end=AttemptEnd.FINISHED).count()


def test_the_bound_is_small_and_named() -> None:
    assert demo.MAX_REFUSALS == demo.WAITER_TENURES * demo.WAITER_DENIALS <= 50
    assert demo.MAX_FRICTION == demo.WAITER_TENURES <= 5


def test_the_bounds_hold_over_many_rounds_and_across_restarts(live_server) -> None:
    plan = demo.setup(workspace_name="demo", timings=QUICK)
    rounds = 4 * demo.WAITER_TENURES

    def waiter_rests_after_many_rounds(lines: list[str]) -> bool:
        return finished() >= rounds and any("demo-waiter: has been refused" in s for s in lines)

    lines = run_fleet(plan, live_server.url, waiter_rests_after_many_rounds)
    assert finished() >= rounds, lines
    refusals, friction, handoffs = record(plan.workspace_id)
    # The waiter went round its full bound of friction, then rested; nothing else was refused.
    assert friction == demo.MAX_FRICTION, lines
    assert set(refusals) == {("demo-waiter", "lease_held")}, refusals
    assert sum(refusals.values()) <= demo.MAX_REFUSALS
    assert handoffs <= demo.WAITER_TENURES
    # (More only if the lock came free meanwhile, on a stalled machine: then it finished.)
    waiter_tenures = Attempt.objects.filter(hand__name="demo-waiter").count()
    assert waiter_tenures >= demo.WAITER_TENURES, lines

    # Started again (scripts/run again, the next day): it counts what the record holds, and the
    # waiter rests from the start while the others go on.
    again = demo.setup(workspace_name="demo", timings=QUICK)
    assert again.waiter_friction_left == 0
    assert again.waiter_refusals_left == demo.MAX_REFUSALS - sum(refusals.values())
    before = finished()
    lines = run_fleet(again, live_server.url, lambda _: finished() >= before + 3)
    assert finished() >= before + 3, lines
    assert any("demo-waiter: has been refused" in s for s in lines), lines
    assert record(plan.workspace_id) == (refusals, friction, handoffs)
    assert Attempt.objects.filter(hand__name="demo-waiter").count() == waiter_tenures


def test_a_waiter_with_no_refusals_left_rests_without_claiming(live_server) -> None:
    plan = dataclasses.replace(
        demo.setup(workspace_name="demo", timings=QUICK), waiter_refusals_left=0
    )
    lines = run_fleet(plan, live_server.url, lambda lines: len(lines) > 3, timeout_s=10)
    assert any("demo-waiter: has been refused" in s for s in lines), lines
    assert not Attempt.objects.filter(hand__name="demo-waiter").exists()
