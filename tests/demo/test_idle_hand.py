"""The demo's idle hand (demo/loop.py) over the real REST API of a live server: it
heartbeats, spends tokens, never reports progress, and the board shows it idle."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from dashboard import pages as dashboard
from dashboard.pages import BoardFilters
from demo import fleet as demo
from demo import loop as demo_loop
from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.models import Attempt, Report
from hands.models import HandKey

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def wait_for(condition, timeout_s: float = 20.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_the_idle_hand_heartbeats_spends_and_shows_idle_on_the_board(live_server) -> None:
    plan = demo.setup(workspace_name="demo", timings=demo.FAST)
    stopping, lines = threading.Event(), []
    hand = demo_loop.demo_idle(
        workspace_id=plan.workspace_id,
        work_package_id=plan.work_package_id,
        url=live_server.url,
        timings=demo.FAST,
        stopping=stopping,
        say=lines.append,
    )
    hand.start()
    try:
        attempt = wait_for(lambda: Attempt.objects.filter(hand__name="demo-idle").first())
        assert attempt.progress_timeout_s == 60
        # A minute without progress, as if it had passed: the rule reads the claim's time.
        Attempt.objects.filter(pk=attempt.pk).update(
            claimed_at=attempt.claimed_at - timedelta(seconds=61)
        )

        def row():  # noqa: ANN202
            board = dashboard.board(workspace_id=plan.workspace_id, filters=BoardFilters())
            return next(r for r in board.rows if r.attempt.pk == attempt.pk)

        assert wait_for(lambda: row().idle and row().state == "live")
        assert attempts_flag_idle().flagged == 1
        wait_for(lambda: any("idle (directive pause)" in line for line in lines))
        spent = wait_for(
            lambda: Report.objects.filter(attempt=attempt, cost_usd__gt=0).aggregate(
                s=Sum("cost_usd")
            )["s"]
        )
        assert spent >= Decimal("0.02")
        assert not Report.objects.filter(attempt=attempt).exclude(kind="heartbeat").exists()
    finally:
        stopping.set()
        hand.join(10)
    # Planned again, it starts clean: the old tenure broken, the old key revoked.
    again = demo_loop.demo_idle(
        workspace_id=plan.workspace_id,
        work_package_id=plan.work_package_id,
        url=live_server.url,
        timings=demo.FAST,
        stopping=stopping,
        say=lines.append,
    )
    assert not Attempt.objects.filter(hand__name="demo-idle", end=None).exists()
    assert HandKey.objects.filter(hand__name="demo-idle", revoked_at=None).count() == 1
    again.client.close()
