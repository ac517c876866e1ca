"""The history harness (tests/reliability/harness.py), bounded for CI: 32 client processes against
the production web server with several workers on PostgreSQL, on flat resources, the nodes of a
tree in both modes, a pool's members and a run's slots, frozen with SIGSTOP past their TTL, and
every promise checked over the history and the event log (tests/reliability/checkers.py). The
checkers themselves are tested on small hand-made histories that break each promise, so a
checker that cannot fail would show here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hands import services as hand_services
from tests.reliability.checkers import check
from tests.reliability.harness import Config, run_history
from tests.reliability.live import ROOT, WebServer, database_url, server_env

# 32 clients for 35 s of traffic, then the settling and the checks: under a minute in all.
CI_SECONDS = 35.0
REPORT = ROOT / "test-artifacts" / "reliability-history.json"


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
    # The fight really happened: pauses, takeovers, refused stale writes, breaks, the tree in
    # both modes, the pool's members changing hands, waiters served in line. Each at least once,
    # never a count: how many a run gets is throughput, which a loaded machine lowers (a
    # threshold here failed CI under load). The checkers above judge every one of them.
    assert report["faults"]["sigstops"] >= 1, report
    assert report["faults"]["breaks"] >= 1, report
    assert report["tenures"] >= 1 and report["overlaps_checked"] >= 1, report
    assert report["writes_applied"] >= 1 and report["writes_refused"] >= 1, report
    codes = report["refusal_codes"]
    assert codes.get("lease_held", 0) >= 1 and codes.get("no_open_slot", 0) >= 1, codes
    assert codes.get("stale_fence", 0) + codes.get("lease_lost", 0) >= 1, codes
    modes, tops = report["tenures_by_mode"], report["tenures_by_top"]
    assert modes.get("shared", 0) >= 1 and modes.get("exclusive", 0) >= 1, modes
    assert tops.get("repo", 0) >= 1 and report["pool_tenures"] >= 1, report
    assert report["shared_overlaps"] >= 1 and report["fifo_pairs"] >= 1, report


# --- The checkers on hand-made histories ---------------------------------------------------------

T0 = datetime(2031, 1, 1, tzinfo=UTC)
CONFIG = Config(clients=2, ttl_s=2.0, interval_s=2, grace_s=2)
HANDS = ["h-0", "h-1", "h-2"]


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
        mode: str = "exclusive",
        **answer: Any,
    ) -> dict[str, Any]:
        lease = {
            "resource": resource,
            "fence": fence,
            "mode": mode,
            "state": state,
            "acquired_at": at(seconds),
            "server_time": at(seconds),
            "expires_at": at(seconds + ttl),
            "expires_in_s": ttl,
            **answer,
        }
        op = {
            "c": client,
            "kind": "acquire",
            "resource": resource,
            "mode": mode,
            "outcome": "ok",
            "status": 201,
            "invoke": seconds,
            "complete": seconds,
            "body": lease,
        }
        self.ops.append(op)
        return op

    def grant(
        self,
        client: int,
        seconds: float,
        fence: int,
        resource: str,
        mode: str = "exclusive",
        ended: tuple[str, float] = ("lease_released", 1.0),
        **answer: Any,
    ) -> dict[str, Any]:
        """A grant to client `client` (hand h-<client>), its event, and its end `ended`
        (kind, seconds after the grant)."""
        hand = HANDS[client]
        self.event("lease_acquired", seconds, fence, hand=hand, resource=resource, mode=mode)
        op = self.acquire(client, seconds, fence, resource=resource, mode=mode, **answer)
        kind, after = ended
        if kind == "lease_expired":
            self.event(
                kind, seconds + after, fence, hand=hand, resource=resource, since=at(seconds + 2)
            )
        elif kind:
            self.event(kind, seconds + after, fence, hand=hand, resource=resource)
        return op

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

    def check(self, paused: dict[int, list[tuple[float, float]]] | None = None) -> list[str]:
        return self.report(paused)["anomalies"]

    def report(self, paused: dict[int, list[tuple[float, float]]] | None = None) -> dict[str, Any]:
        return check(self.ops, self.store, self.events, CONFIG, HANDS, paused)


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


# --- Trees, modes, pools and the queue ----------------------------------------------------------


def pool_grant(
    story: Story, client: int, seconds: float, fence: int, member: str, ended: float = 1.0
) -> dict[str, Any]:
    resource = f"pool/ports/{member}"
    hand = HANDS[client]
    story.event(
        "lease_acquired", seconds, fence, hand=hand, resource=resource, pool="ports", member=member
    )
    op = story.acquire(client, seconds, fence, resource=resource, pool="ports", member=member)
    op.update(kind="pool_acquire", pool="ports")
    del op["resource"], op["mode"]
    story.event("lease_released", seconds + ended, fence, hand=hand, resource=resource)
    return op


def a_tree_under_fire() -> Story:
    """Shared tenures side by side on a node and on its line, a hand's own tenures nested, a
    break of a shared node (one event per tenure, one fence), a lost tenure below a node
    recorded by the acquire above it, a pool's members, and writes under shared tenures."""
    story = Story()
    story.grant(0, 0.0, 1, "repo/src/", "shared")  # until 1.0
    story.grant(1, 0.2, 1, "repo/src/auth/login.py", "shared")  # until 1.2
    story.grant(2, 0.3, 2, "repo/src/", "shared")  # until 1.3
    story.grant(0, 0.5, 1, "repo/docs/", "exclusive")  # until 1.5
    story.grant(0, 0.6, 1, "repo/docs/guide.md", "exclusive", ended=("lease_released", 0.8))
    story.write(1, 0.5, "repo/src/")
    story.write(2, 0.6, "repo/src/")
    story.write(1, 0.7, "repo/src/")  # two shared tenures' writes may cross
    story.grant(1, 2.0, 1, "repo", "exclusive")  # until 3.0
    story.write(1, 2.5, "repo")
    # Two shared tenures of one node (spelled two ways), broken at 4.0: the node's fence 3.
    story.grant(0, 3.5, 1, "repo/src/auth/", "shared", ended=("", 0))
    story.grant(1, 3.6, 2, "repo/src/auth", "shared", ended=("", 0))
    story.event("lease_broken", 4.0, 3, hand="h-0", resource="repo/src/auth/", broken_fence=1)
    story.event("lease_broken", 4.0, 3, hand="h-1", resource="repo/src/auth", broken_fence=2)
    story.grant(2, 4.1, 4, "repo/src/auth/", "exclusive", ended=("lease_expired", 2.1))
    # Lost at 7.0 below `repo`; the acquire of `repo` at 7.1 records its end first.
    story.grant(0, 5.0, 2, "repo/docs/guide.md", "exclusive", ended=("", 0))
    story.event("lease_expired", 7.1, 2, resource="repo/docs/guide.md", since=at(7.0))
    story.grant(1, 7.1, 2, "repo", "exclusive", ended=("lease_released", 0.4))
    pool_grant(story, 0, 0.0, 1, "1")  # until 1.0
    pool_grant(story, 1, 0.1, 1, "2")
    pool_grant(story, 2, 1.5, 2, "1")
    return story


def test_it_finds_nothing_wrong_with_a_tree_under_fire() -> None:
    report = a_tree_under_fire().report()
    assert report["anomalies"] == []
    assert report["shared_overlaps"] >= 3 and report["breaks"] == 1, report


def test_it_flags_an_exclusive_tenure_overlapping_a_shared_one_below_it() -> None:
    story = a_tree_under_fire()
    story.grant(0, 0.0, 1, "lib/a/b", "shared")  # until 1.0
    story.grant(1, 0.5, 1, "lib/a/", "exclusive")
    anomalies = story.check()
    assert any(
        a.startswith("lib/a fence 1 (exclusive, h-1) granted at")
        and "while lib/a/b fence 1 (shared, h-0) on its line of the tree" in a
        for a in anomalies
    ), anomalies


def test_it_flags_an_exclusive_tenure_overlapping_a_shared_one_above_it() -> None:
    story = a_tree_under_fire()
    story.grant(1, 0.4, 1, "repo/src/web.py", "exclusive", ended=("lease_released", 0.2))
    anomalies = story.check()
    assert any(
        "repo/src/web.py fence 1 (exclusive, h-1)" in a and "repo/src fence 1 (shared, h-0)" in a
        for a in anomalies
    ), anomalies


def test_it_flags_an_exclusive_and_a_shared_tenure_of_one_node_at_once() -> None:
    story = a_tree_under_fire()
    story.grant(2, 1.0, 2, "repo/docs/", "shared", ended=("lease_released", 0.2))
    anomalies = story.check()
    assert any(
        a.startswith("repo/docs: fence 2 (shared, h-2) granted at") and "valid until" in a
        for a in anomalies
    ), anomalies


def test_it_flags_a_pool_member_held_by_two_tenures_at_once() -> None:
    story = a_tree_under_fire()
    pool_grant(story, 2, 0.8, 2, "2")  # member 2 is held by h-1 until 1.1
    anomalies = story.check()
    assert any("pool ports member 2 held by two tenures at once" in a for a in anomalies)


def test_it_flags_a_pool_grant_that_names_another_member_than_its_lease() -> None:
    story = a_tree_under_fire()
    story.ops[-1]["body"]["member"] = "3"
    anomalies = story.check()
    assert any("pool_acquire of ports answered pool ports, member 3" in a for a in anomalies)


def test_it_flags_fences_of_a_node_that_go_backwards_whatever_its_spelling() -> None:
    story = a_tree_under_fire()
    story.grant(2, 9.0, 9, "repo/docs", "shared", ended=("lease_released", 0.1))
    story.grant(1, 9.5, 8, "repo/docs/", "shared", ended=("lease_released", 0.1))
    anomalies = story.check()
    assert any("fences of repo/docs did not strictly increase" in a for a in anomalies)


def test_it_flags_a_break_that_left_a_tenure_of_its_node_standing() -> None:
    story = a_tree_under_fire()
    story.events = [e for e in story.events if e["data"].get("broken_fence") != 2]
    story.event("lease_released", 4.5, 2, hand="h-1", resource="repo/src/auth")
    anomalies = story.check()
    assert any(
        "the break of repo/src/auth" in a and "left repo/src/auth fence 2 (shared, h-1)" in a
        for a in anomalies
    ), anomalies


def test_it_flags_a_write_under_a_shared_tenure_after_its_node_was_broken() -> None:
    story = a_tree_under_fire()
    story.write(1, 4.05, "repo/src/auth/")
    anomalies = story.check()
    assert any(
        "store applied a write with fence ('repo/src/auth', 1)" in a and "fence 3 (break)" in a
        for a in anomalies
    ), anomalies


def test_it_flags_a_renewal_of_a_shared_tenure_after_its_node_was_broken() -> None:
    story = a_tree_under_fire()
    story.renew(1, 4.05, 2, resource="repo/src/auth")
    anomalies = story.check()
    assert any(
        "renew with fence 2 on repo/src/auth succeeded" in a and "fence 3 (break)" in a
        for a in anomalies
    ), anomalies


def test_it_flags_a_write_applied_after_its_tenure_was_lost_below_another_grant() -> None:
    """Lost at 7.0 and recorded by the grant of `repo` above it: no newer fence of its own
    node says so, only its tenure's end."""
    story = a_tree_under_fire()
    story.write(2, 6.9, "repo/docs/guide.md")
    assert story.check() == []
    story.write(2, 7.05, "repo/docs/guide.md")
    anomalies = story.check()
    assert any(
        "store applied a write on ('repo/docs/guide.md', 2)" in a and "outside its tenure" in a
        for a in anomalies
    ), anomalies


def test_it_flags_an_exclusive_write_applied_after_a_later_fences_write() -> None:
    story = a_tree_under_fire()
    story.grant(2, 8.0, 3, "repo", "shared", ended=("lease_released", 2))  # until 10
    story.grant(0, 8.5, 4, "repo", "shared", ended=("lease_released", 1))  # until 9.5
    story.write(4, 9.0, "repo")
    story.write(3, 9.1, "repo")
    assert story.check() == []  # two shared tenures' writes cross
    story.write(2, 7.3, "repo")  # an exclusive tenure's, after fence 4's
    anomalies = story.check()
    assert any("store applied fences out of order on repo: 2 (exclusive)" in a for a in anomalies)


def test_it_flags_a_tenure_broken_and_expired_or_broken_without_a_grant() -> None:
    story = a_tree_under_fire()
    story.event("lease_expired", 4.2, 1, hand="h-0", resource="repo/src/auth/", since=at(5.5))
    story.event("lease_broken", 9.0, 7, hand="h-2", resource="repo/docs", broken_fence=6)
    anomalies = story.check()
    assert any("tenure ('repo/src/auth', 1) ended 2 times" in a for a in anomalies)
    assert any("a break of ('repo/docs', 6) with no grant event" in a for a in anomalies)


def test_it_flags_a_second_tenure_of_a_node_beside_the_hands_own() -> None:
    """A hand's own shared tenure, and an exclusive one of the same node granted beside it (what
    the hot path once did: tests/hot_calls/test_modes.py): two tenures of one node at once."""
    story = a_tree_under_fire()
    story.grant(2, 9.0, 5, "repo/src/web.py", "shared", ended=("lease_expired", 2))
    story.grant(2, 9.5, 6, "repo/src/web.py", "exclusive", ended=("lease_released", 0.5))
    assert story.report()["anomalies"]


def waiters(paused: bool = False, second: str = "repo/src/auth/", mode: str = "shared") -> Story:
    """Three clients wait for `repo/src/` while h-0 holds it: h-1 (exclusive, joined at 1.0),
    then h-2 (`mode` on `second`, joined at 1.5); h-2 is served first, at 2.0."""
    story = Story()
    story.grant(0, 0.0, 1, "repo/src/", "exclusive", ended=("lease_released", 2.0))
    first = story.grant(1, 2.5, 3, "repo/src/", "exclusive", queued_at=at(1.0))
    later = story.grant(
        2,
        2.0,
        2 if second == "repo/src/" else 1,
        second,
        mode,
        queued_at=at(1.5),
        ended=("lease_released", 0.4),
    )
    first["invoke"], later["invoke"] = 1.0, 1.5
    story.ops.sort(key=lambda op: op["body"]["acquired_at"])
    return story


def test_it_flags_a_waiter_served_before_a_conflicting_one_that_joined_first() -> None:
    anomalies = waiters().check()
    assert any(
        a.startswith("FIFO: repo/src (exclusive) for h-1 queued at")
        and "before repo/src/auth (shared) for h-2" in a
        for a in anomalies
    ), anomalies


def test_it_lets_a_waiter_paused_while_it_waited_lose_its_place() -> None:
    assert waiters().check(paused={1: [(1.2, 1.4)]}) == []
    assert waiters().check(paused={2: [(0.0, 1.55)]}) == []
    assert waiters().check(paused={2: [(0.0, 1.0)]}) != []  # thawed before it asked


def test_it_keeps_no_order_between_requests_that_do_not_conflict() -> None:
    assert waiters(second="repo/docs/", mode="exclusive").check() == []
