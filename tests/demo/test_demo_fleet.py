"""The demo fleet drives the real REST API of a live server and shows every state."""

from __future__ import annotations

import io
import time
from collections import Counter

import pytest
from django.core.management import call_command

from dashboard import pages as dashboard
from dashboard.pages import BoardFilters
from demo import fleet as demo
from evidence.models import Evidence
from fleet.models import Attempt, AttemptEnd, Run
from friction.models import FrictionReport
from hands.models import HandKey
from leases.models import Event, Refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def finished_by(hand: str) -> int:
    return Attempt.objects.filter(hand__name=hand, end=AttemptEnd.FINISHED).count()


def test_it_shows_every_state_within_seconds_on_fast_timings(live_server):
    plan = demo.setup(workspace_name="demo", timings=demo.FAST)
    lines: list[str] = []
    fleet = demo.DemoFleet(plan, url=live_server.url, timings=demo.FAST, say=lines.append)
    seen: set[str] = set()
    fleet.start()
    try:
        deadline = time.monotonic() + 30
        while seen != set(dashboard.STATES) and time.monotonic() < deadline:
            board = dashboard.board(workspace_id=plan.workspace_id, filters=BoardFilters())
            seen |= {state for state, n in board.counts.items() if n}
            time.sleep(0.1)
        # The finisher finishes again and again, each time on a new run: never twice on a slot.
        while time.monotonic() < deadline and finished_by("demo-finisher") < 2:
            time.sleep(0.1)
    finally:
        fleet.stop()
    assert seen == set(dashboard.STATES), lines
    assert finished_by("demo-finisher") >= 2, lines
    per_slot = Counter(
        Attempt.objects.filter(end=AttemptEnd.FINISHED).values_list("slot_id", flat=True)
    )
    assert per_slot and max(per_slot.values()) == 1, per_slot
    assert any("the planner planned run" in line for line in lines), lines
    assert Refusal.objects.filter(code="lease_held", hand="demo-waiter").exists()
    # The waiter that gave up filed friction, linking the denials it was answered.
    report = FrictionReport.objects.filter(hand="demo-waiter").first()
    assert report is not None, lines
    assert report.attempt_id is not None and report.lane.slug == demo.LANE_SLUG
    assert {link.code for link in report.refusals.all()} == {"lease_held"}
    # The waiter asks the lock's holder for it, and the holder declines (demo.loop).
    asked = Event.objects.filter(kind="handoff_requested", actor="demo-waiter", hand="demo-healthy")
    assert asked.exists(), lines
    assert Event.objects.filter(kind="handoff_declined", actor="demo-healthy").exists(), lines
    assert any("demo-healthy: hand demo-waiter asks for `migrations`" in line for line in lines)
    assert Evidence.objects.filter(
        kind="pull_request",
        url__startswith="https://example.com/",
        attempt__hand__name="demo-finisher",
    ).exists()


def test_setting_up_again_reuses_the_plan_and_replaces_the_keys(db):
    first = demo.setup(workspace_name="demo")
    second = demo.setup(workspace_name="demo")
    assert first.runs == second.runs and Run.objects.count() == 3
    assert set(first.keys.values()).isdisjoint(second.keys.values())
    # One key per hand, and the planner's (plan scope, for new runs when one is done).
    assert HandKey.objects.filter(revoked_at=None).count() == len(demo.HAND_NAMES) + 1
    assert HandKey.objects.get(revoked_at=None, hand__name=demo.PLANNER).scopes == ["plan"]


def test_the_command_runs_the_fleet_for_a_while_and_stops(live_server):
    out = io.StringIO()
    call_command("demo_fleet", "--url", live_server.url, "--duration", "2", "--fast", stdout=out)
    text = out.getvalue()
    assert (
        "5 hands working" in text  # the four and the idle hand (demo_loop)
        and "claimed slot" in text
        and text.rstrip().endswith("demo fleet: stopped")
    )
