"""Failover under load (tests/ha/failover.py), bounded for CI: the history harness's 32 clients
with SIGSTOP pauses and breaks against the production web server on scripts/ha's Patroni
cluster, the primary SIGKILLed once and the synchronous standby promoted; then zero
acknowledged grants lost, zero overlapping tenures, zero stale-fence writes applied, fences
never going back, no lease treated as expired before the deadline last promised to its holder,
and no 5xx but the switch's 503s. Skipped, with the reason, where the cluster cannot run
(not root and Patroni or etcd missing, or its ports taken). GC_HA_LONG=1 runs the long one of
docs/scale.md instead (several failovers, minutes).

The checkers' new parts are tested first, on small hand-made histories (the harness's own
Story, tests/reliability/test_history.py), so a check that cannot fail would show here."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

from tests.ha.cluster import Cluster, Missing, why_not
from tests.ha.failover import SETTLE_S, Switch, ha_checker, run_failover
from tests.reliability.checkers import check
from tests.reliability.deadlines import Epoch
from tests.reliability.harness import Config
from tests.reliability.live import ROOT
from tests.reliability.test_history import CONFIG, HANDS, T0, Story, at

# 32 clients for 70 s of traffic, the primary killed 20 s in; with the bring-up, the migration,
# the settling and the checks, about 2.5 minutes on a quiet 2-core machine.
CI_SECONDS = 70.0
LONG = os.environ.get("GC_HA_LONG", "") not in ("", "0")
REPORT = ROOT / "test-artifacts" / ("failover-long.json" if LONG else "failover.json")
# The histories, the server's log and the report stay here for a look after a failure.
WORKDIR = ROOT / "test-artifacts" / ("failover-long" if LONG else "failover")


@pytest.mark.slow
def test_it_keeps_every_promise_through_a_failover_under_load() -> None:
    reason = why_not()
    if reason:
        pytest.skip(f"no Patroni cluster here: {reason}")
    cluster = Cluster(Path(tempfile.gettempdir()) / f"gc-ha-test-{os.getpid()}")
    try:
        try:
            cluster.up()
        except Missing as missing:
            pytest.skip(f"no Patroni cluster here: {missing}")
        if LONG:
            seconds, failovers, every = 420.0, 5, 75.0
        else:
            seconds, failovers, every = CI_SECONDS, 1, 0.0
        # Slots enough that the run stays open through the switch (each round may finish one;
        # 1000 is the API's bound).
        report = run_failover(
            cluster,
            Config(clients=32, seconds=seconds, slots=min(1000, int(seconds * 4))),
            WORKDIR,
            first_s=20,
            every_s=every,
            failovers=failovers,
        )
    finally:
        log = cluster.tail()
        cluster.down()
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2, default=str))
    text = json.dumps(report, indent=2, default=str)
    failover = report["failover"]
    assert report["anomalies"] == [], text + log
    # The switch happened, Patroni promoted, and calls came back on the new primary.
    assert len(failover["switches"]) == failovers, text + log
    for switch in failover["switches"]:
        assert switch["new"] not in (None, switch["old"]) and switch["recovered_at"], text
    assert all(s is not None and s < 60 for s in failover["switch_s"]), text
    # Every promotion was a new epoch that moved the held leases by about the outage.
    assert len(failover["epochs"]) == failovers, text
    for epoch, switch_s in zip(failover["epochs"], failover["switch_s"], strict=True):
        assert 0 < epoch["shift_s"] < switch_s + 5, text
    # Some calls met the outage and were answered 503, none 500.
    assert failover["answered_503_during_switches"] >= 1, text
    assert failover["answered_5xx_otherwise"] == 0 and failover["server_500s"] == 0, text
    assert failover["acknowledged_grants_lost"] == 0 and failover["acknowledged_grants"] >= 1
    # The fight went on around it, and the promises were looked at: each at least once, never a
    # count (how many a run gets is throughput, which a loaded machine lowers; the checkers judge
    # every one of them).
    assert report["faults"]["sigstops"] >= 1 and report["faults"]["breaks"] >= 1, text
    assert report["tenures"] >= 1 and report["overlaps_checked"] >= 1, text
    assert report["writes_applied"] >= 1 and report["writes_refused"] >= 1, text
    assert report["promises"] >= 1 and report["expiries_after_promise"] >= 1, text


# --- The promise checker on hand-made histories ------------------------------------------------


def promised_until_3() -> Story:
    """h-0 holds `r` from 0, renewed at 1 until 3."""
    story = Story()
    story.event("lease_acquired", 0, 1)
    story.acquire(0, 0, 1)
    story.renew(0, 1, 1)
    return story


def test_it_accepts_an_expiry_at_the_promised_deadline() -> None:
    story = promised_until_3()
    story.event("lease_expired", 3.2, 1, since=at(3))
    report = story.report()
    assert report["anomalies"] == [] and report["expiries_after_promise"] == 1


def test_it_flags_an_expiry_before_the_promised_deadline() -> None:
    story = promised_until_3()
    story.event("lease_expired", 2.5, 1, since=at(2.0))  # the grant's deadline, not the renewal's
    anomalies = story.check()
    assert any(
        a.startswith("lease_expired of ('r', 1)") and "before the deadline promised" in a
        for a in anomalies
    ), anomalies


def lost_refusal(seconds: float) -> dict:
    return {
        "c": 0,
        "kind": "renew",
        "resource": "r",
        "fence": 1,
        "outcome": "fail",
        "status": 409,
        "code": "lease_lost",
        "invoke": (T0 + timedelta(seconds=seconds - 0.01)).timestamp(),
        "complete": (T0 + timedelta(seconds=seconds)).timestamp(),
    }


def test_it_flags_a_holder_refused_lease_lost_before_its_deadline() -> None:
    story = promised_until_3()
    story.event("lease_expired", 3.5, 1, since=at(3))
    story.ops.append(lost_refusal(2.9))
    anomalies = story.check()
    assert any("refused lease_lost at" in a for a in anomalies), anomalies
    story.ops[-1] = lost_refusal(3.05)
    assert story.check() == []


def test_it_flags_late_recorded_before_the_deadline_of_a_slot() -> None:
    story = Story()
    story.event("claimed", 0, 1)
    story.acquire(0, 0, 1)  # deadline 2
    story.event("late", 1.9, 1, since=at(1.5))
    story.event("released", 2.5, 1)
    anomalies = story.check()
    assert any("late recorded for ('r', 1) since" in a for a in anomalies), anomalies


def test_a_takeover_at_the_reported_end_of_a_grant_is_no_overlap() -> None:
    """A slot claimed by a statement that read the clock for its deadline 12 ms before the
    stamp its event carries (the long failover run met one): the next claim, right after the
    reported deadline plus grace, is on time, though before the event's time plus a TTL."""
    story = Story()
    story.event("claimed", 0.012, 1)
    story.acquire(0, 0.012, 1, ttl=1.988)  # deadline 2.0, lost after 4.0
    story.event("lost", 4.005, 1)
    story.event("claimed", 4.005, 2, hand="h-1")
    story.acquire(1, 4.005, 2)
    story.event("released", 4.5, 2, hand="h-1")
    assert story.check() == []
    story.ops[-1]["body"].update(acquired_at=at(3.9), server_time=at(3.9), expires_at=at(5.9))
    story.events[-2]["at"] = at(3.9)  # before the reported end: an overlap
    assert any("granted at" in a and "valid until" in a for a in story.check())


# --- Across a failover: the epoch moves the promises ---------------------------------------------

# The old primary's last promise at 1.5; the new primary recorded its epoch at 12, moving every
# held lease by 10.5 s.
EPOCH = Epoch(T0 + timedelta(seconds=1.5), T0 + timedelta(seconds=12), timedelta(seconds=10.5))


def across_the_failover() -> Story:
    """Renewed at 1 until 3, then (after the outage) renewed again at 13, within 3 + 10.5."""
    story = promised_until_3()
    story.renew(0, 13, 1)  # until 15
    story.event("lease_expired", 15.5, 1, since=at(15))
    return story


def test_it_accepts_a_renewal_within_the_deadline_the_epoch_moved() -> None:
    story = across_the_failover()
    assert (
        check(story.ops, story.store, story.events, CONFIG, HANDS, epochs=[EPOCH])["anomalies"]
        == []
    )
    # Without the epoch that renewal came after the lease was lost.
    assert any("lost since" in a for a in story.check())


def test_it_flags_an_expiry_after_the_failover_before_the_moved_deadline() -> None:
    story = promised_until_3()
    story.event("lease_expired", 12.5, 1, since=at(3))  # the new primary did not move it
    anomalies = check(story.ops, story.store, story.events, CONFIG, HANDS, epochs=[EPOCH])[
        "anomalies"
    ]
    assert any("before the deadline promised to its holder" in a for a in anomalies), anomalies
    assert story.check() == []  # by the old promise alone it was on time


def test_it_flags_a_grant_to_another_before_the_moved_deadline() -> None:
    story = promised_until_3()
    story.event("lease_expired", 12.2, 1, since=at(3))
    story.event("lease_acquired", 12.2, 2, hand="h-1")
    story.acquire(1, 12.2, 2)
    anomalies = check(story.ops, story.store, story.events, CONFIG, HANDS, epochs=[EPOCH])[
        "anomalies"
    ]
    assert any("granted at" in a and "valid until" in a for a in anomalies), anomalies


def test_a_lease_lost_before_the_last_promise_is_not_moved() -> None:
    """Lost at 1.2, before the old primary's last promise (1.5): the epoch keeps it lost, and a
    renewal after the failover would be a lost lease's."""
    story = Story()
    story.event("lease_acquired", 0, 1)
    story.acquire(0, 0, 1, ttl=1.2)
    story.renew(0, 13, 1)
    anomalies = check(story.ops, story.store, story.events, CONFIG, HANDS, epochs=[EPOCH])[
        "anomalies"
    ]
    assert any("lost since" in a for a in anomalies), anomalies


# --- The switch's 503s -----------------------------------------------------------------------


def answered(seconds: float, status: int, code: str, kind: str = "renew") -> dict:
    return {
        "c": 0,
        "kind": kind,
        "resource": "r",
        "fence": 1,
        "outcome": "fail",
        "status": status,
        "code": code,
        "invoke": (T0 + timedelta(seconds=seconds)).timestamp(),
        "complete": (T0 + timedelta(seconds=seconds + 0.01)).timestamp(),
    }


def test_it_takes_503s_during_the_switch_for_unknown_outcomes_and_flags_the_rest() -> None:
    story = across_the_failover()
    for op in story.ops:  # the clients' clock: recovered at 13
        op["invoke"] = op["complete"] = (T0 + timedelta(seconds=float(op["invoke"]))).timestamp()
    story.ops[-1]["invoke"] = story.ops[-1]["complete"] = (T0 + timedelta(seconds=13)).timestamp()
    killed = (T0 + timedelta(seconds=2)).timestamp()
    switch = Switch(old=1, killing_at=killed - 0.1, killed_at=killed)
    story.ops += [
        answered(5, 503, "dependency_unavailable"),
        answered(13 + SETTLE_S - 1, 503, "dependency_unavailable"),
    ]
    checker = ha_checker([switch], lambda: [EPOCH])
    report = checker(story.ops, story.store, story.events, CONFIG, HANDS, {})
    assert report["anomalies"] == [], report
    assert report["failover"]["answered_503_during_switches"] == 2
    assert report["failover"]["switch_s"] == [11.0]
    story.ops += [
        answered(13 + SETTLE_S + 1, 503, "dependency_unavailable"),
        answered(6, 500, "internal_error"),
    ]
    report = ha_checker([switch], lambda: [EPOCH])(
        story.ops, story.store, story.events, CONFIG, HANDS, {}
    )
    assert sum("answered 503" in a for a in report["anomalies"]) == 1, report["anomalies"]
    assert sum("answered 500" in a for a in report["anomalies"]) == 1, report["anomalies"]
