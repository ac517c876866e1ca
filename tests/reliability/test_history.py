"""The history harness (tests/reliability/harness.py), bounded for CI: 32 client processes against
the production web server with several workers on PostgreSQL, frozen with SIGSTOP past their
TTL, and every promise checked over the history and the event log. The checkers themselves are
tested on small hand-made histories that break each promise, so a checker that cannot fail would
show here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hands import services as hand_services
from tests.reliability.harness import Config, check, run_history
from tests.reliability.live import ROOT, WebServer, database_url, server_env

# 32 clients for 35 s of traffic, then the settling and the checks: under a minute in all.
CI_SECONDS = 35.0
REPORT = ROOT / "test-artifacts" / "reliability-history.json"


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_keeps_every_promise_for_32_clients_frozen_past_their_ttl(
    workspace, tmp_path: Path
) -> None:  # noqa: ANN001
    boss, _ = hand_services.hand_create(workspace=workspace, name="harness-boss")
    key = hand_services.key_issue(
        hand=boss, scopes=hand_services.ALL_SCOPES, actor="test"
    ).plaintext
    env = server_env(database_url(settings.DATABASES["default"]))
    with WebServer(env=env, log=tmp_path / "server.log", workers=3) as server:
        report = run_history(
            server.url, key, Config(clients=32, seconds=CI_SECONDS), tmp_path / "history"
        )
        log = server.tail()
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2))
    assert report["anomalies"] == [], json.dumps(report, indent=2) + log
    # The fight really happened: pauses, takeovers, refused stale writes, breaks.
    assert report["faults"]["sigstops"] >= 20, report
    assert report["faults"]["breaks"] >= 2, report
    assert report["tenures"] >= 60, report
    assert report["overlaps_checked"] >= 50, report
    assert report["writes_applied"] >= 15 and report["writes_refused"] >= 5, report
    codes = report["refusal_codes"]
    assert codes.get("lease_held", 0) >= 10 and codes.get("no_open_slot", 0) >= 1, codes
    assert codes.get("stale_fence", 0) + codes.get("lease_lost", 0) >= 5, codes


# --- The checkers on hand-made histories ---------------------------------------------------------

T0 = datetime(2031, 1, 1, tzinfo=UTC)
CONFIG = Config(clients=2, ttl_s=2.0, interval_s=2, grace_s=2)
HANDS = ["h-0", "h-1"]


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class Story:
    """A small history, its event log and the store's log, written as they would be recorded."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.store: list[dict[str, Any]] = []

    def event(
        self,
        kind: str,
        seconds: float,
        fence: int,
        hand: str = "h-0",
        resource: str = "r",
        **data: Any,
    ) -> None:
        self.events.append(
            {
                "id": len(self.events) + 1,
                "kind": kind,
                "at": at(seconds),
                "hand": hand,
                "resource": resource,
                "fence": fence,
                "data": data,
            }
        )

    def acquire(
        self,
        client: int,
        seconds: float,
        fence: int,
        ttl: float = 2.0,
        state: str = "live",
        resource: str = "r",
    ) -> None:
        lease = {
            "resource": resource,
            "fence": fence,
            "state": state,
            "acquired_at": at(seconds),
            "server_time": at(seconds),
            "expires_at": at(seconds + ttl),
            "expires_in_s": ttl,
        }
        self.ops.append(
            {
                "c": client,
                "kind": "acquire",
                "resource": resource,
                "outcome": "ok",
                "status": 201,
                "invoke": 0,
                "complete": 0,
                "body": lease,
            }
        )

    def renew(self, client: int, seconds: float, fence: int, resource: str = "r") -> None:
        lease = {
            "resource": resource,
            "fence": fence,
            "state": "live",
            "acquired_at": at(0),
            "server_time": at(seconds),
            "expires_at": at(seconds + 2),
            "expires_in_s": 2,
        }
        self.ops.append(
            {
                "c": client,
                "kind": "renew",
                "resource": resource,
                "fence": fence,
                "outcome": "ok",
                "status": 200,
                "invoke": 0,
                "complete": 0,
                "body": lease,
            }
        )

    def write(self, fence: int, checked: float, resource: str = "r") -> None:
        self.store.append(
            {
                "resource": resource,
                "fence": fence,
                "client": 0,
                "seq": 1,
                "applied": True,
                "checked_at": at(checked),
            }
        )

    def check(self) -> list[str]:
        return check(self.ops, self.store, self.events, CONFIG, HANDS)["anomalies"]


def two_clean_tenures() -> Story:
    story = Story()
    story.event("lease_acquired", 0, 1)
    story.acquire(0, 0, 1)
    story.renew(0, 1, 1)
    story.write(1, 1.5)
    story.event("lease_expired", 3.5, 1, since=at(3))
    story.event("lease_acquired", 3.2, 2, hand="h-1")
    story.acquire(1, 3.2, 2)
    story.event("lease_released", 4, 2, hand="h-1")
    return story


def test_it_finds_nothing_wrong_with_a_clean_history() -> None:
    assert two_clean_tenures().check() == []


def test_it_flags_a_grant_that_overlaps_the_previous_tenure() -> None:
    story = two_clean_tenures()
    story.events[2]["at"] = at(2.5)  # granted while fence 1 was renewed until 3
    story.ops[2]["body"].update(acquired_at=at(2.5), server_time=at(2.5), expires_at=at(4.5))
    assert any("granted at" in a and "valid until" in a for a in story.check())


def test_it_flags_a_renewal_after_the_lease_was_lost() -> None:
    story = two_clean_tenures()
    story.renew(0, 3.1, 1)  # deadline was 3
    assert any("lost since" in a for a in story.check())


def test_it_flags_an_applied_write_with_a_stale_fence() -> None:
    story = two_clean_tenures()
    story.write(1, 3.3)  # fence 2 was granted at 3.2
    assert any("store applied a write with fence" in a for a in story.check())


def test_it_flags_a_success_carrying_a_stale_fence() -> None:
    story = two_clean_tenures()
    story.ops.append(
        {
            "c": 0,
            "kind": "release",
            "resource": "r",
            "fence": 1,
            "outcome": "ok",
            "status": 200,
            "invoke": 0,
            "complete": 0,
            "body": {
                "released": True,
                "lease": {"resource": "r", "fence": 2, "server_time": at(3.4)},
            },
        }
    )
    assert any("succeeded at" in a and "after fence 2" in a for a in story.check())


def test_it_flags_a_grant_of_an_already_expired_lease() -> None:
    story = Story()
    story.event("lease_acquired", 0, 1)
    story.acquire(0, 0, 1, ttl=-0.5, state="lost")
    story.event("lease_expired", 1, 1, since=at(-0.5))
    assert any("not live for a full TTL" in a for a in story.check())


def test_it_flags_a_state_change_recorded_twice_or_not_at_all() -> None:
    story = two_clean_tenures()
    story.event("lease_expired", 3.6, 1, since=at(3))  # fence 1's end, twice
    story.events.pop(2)  # fence 2's grant, never
    anomalies = story.check()
    assert any("ended 2 times" in a for a in anomalies)
    assert any("no grant event" in a for a in anomalies)


def test_it_flags_fences_that_go_backwards_and_any_5xx() -> None:
    story = two_clean_tenures()
    story.event("lease_acquired", 5, 1, resource="s")
    story.event("lease_acquired", 4.5, 2, resource="s")
    story.event("lease_released", 4.6, 2, resource="s")
    story.event("lease_released", 5.1, 1, resource="s")
    story.ops.append(
        {
            "c": 0,
            "kind": "renew",
            "resource": "r",
            "fence": 1,
            "outcome": "fail",
            "status": 500,
            "code": "internal_error",
            "invoke": 0,
            "complete": 0,
        }
    )
    anomalies = story.check()
    assert any("did not strictly increase" in a for a in anomalies)
    assert any("answered 500" in a for a in anomalies)


def late_twice(renewed_between: bool) -> Story:
    """A slot's fence 1 claimed at 0 (deadline 2), late from 2; renewed at 2.5 or not; late
    again."""
    story = Story()
    story.event("claimed", 0, 1)
    story.acquire(0, 0, 1)
    story.event("late", 2.1, 1, since=at(2))
    if renewed_between:
        story.renew(0, 2.5, 1)  # late, reports in: live again until 4.5
        story.event("late", 4.6, 1, since=at(4.5))
    else:
        story.event("late", 2.2, 1, since=at(2))
    story.event("released", 4.7 if renewed_between else 2.3, 1)
    return story


def test_it_accepts_a_holder_late_again_after_it_reported_in() -> None:
    assert late_twice(renewed_between=True).check() == []


def test_it_flags_late_recorded_twice_for_one_episode() -> None:
    anomalies = late_twice(renewed_between=False).check()
    assert any("late recorded twice" in a and "no renewal between" in a for a in anomalies)
