"""Live-server fixtures: the real API on pytest-django's live server, a plan with a short heartbeat
interval, and one key per hand, so the client, gctl and the MCP server run against the real thing.

Agents run as real subprocesses that know only GC_URL, GC_KEY and a run id."""

from __future__ import annotations

from datetime import timedelta

from fleet.models import Attempt, Report, Run
from leases.models import Lease
from tests.support.live import (  # noqa: F401 - what the client's tests take from here
    GCTL,
    GRACE_S,
    INTERVAL_S,
    ONE_SHOT,
    PR_URL,
    Fleet,
    mint,
    wait_for,
)


def attempts_of(run: Run) -> list[Attempt]:
    return list(Attempt.objects.filter(run=run).select_related("hand").order_by("id"))


def assert_heartbeats_kept_the_claim(record: Attempt, *, for_s: float) -> None:
    """A bare heartbeat is on record once a minute (`fleet.attempts.reports.HEARTBEAT_RECORD_S`):
    the first one is, with the claim's process, and the slot lease's latest renewal in the attempt's
    tenure shows that the hand kept renewing for `for_s` seconds."""
    heartbeats = Report.objects.filter(attempt=record, kind="heartbeat", renewed=True)
    assert heartbeats.count() >= 1
    assert set(heartbeats.values_list("process_id", flat=True)) == {record.process_id}
    lease = Lease.objects.get(pk=record.lease_id)
    assert lease.fence == record.fence
    assert lease.renewed_at >= lease.acquired_at + timedelta(seconds=for_s)
