"""A claim races the last finish of the run it waits for, each on its own PostgreSQL connection:
the claim's one statement reads the dependency as of its own start, so a claim whose statement
starts before the finish commits is refused `run_waiting`, one that starts after may be granted,
and none is ever granted while the dependency is not done. Then many connections claim a run the
moment it is released: exactly one holder per slot (the lease races' history checker)."""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, Run, RunState
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import engine
from tests.leases.test_lease_races import History, Op, check_history

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

EVIDENCE = [{"kind": "pull_request", "url": "https://github.com/acme/app/pull/1"}]


def _runs(lane: Any, *, slots: int = 1) -> tuple[Run, Run]:
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    build = plan_services.run_create(work_package=package, title="build", slots=1)
    ship = plan_services.run_create(
        work_package=package, title="ship", slots=slots, depends_on=[build.pk]
    )
    return build, ship


def _finish(hand: Any, build: Run) -> Any:
    attempt = attempt_services.attempt_claim(hand=hand, run_id=build.pk, process_id="build:1")
    return lambda: attempt_finish(
        hand=hand,
        attempt_id=attempt.attempt.pk,
        fence=attempt.lease.fence,
        process_id="build:1",
        evidence=EVIDENCE,
    )


def test_a_claim_whose_statement_starts_before_the_finish_commits_is_refused(
    monkeypatch: pytest.MonkeyPatch, lane: Any, owner: Any, teammate: Any
) -> None:
    build, ship = _runs(lane)
    finish = _finish(teammate, build)
    marked, commit = threading.Event(), threading.Event()
    real = attempt_services.mark_run_done_if_finished

    def held_open(**kwargs: Any) -> bool:
        done = real(**kwargs)
        marked.set()  # the run is done in the finish's transaction, not yet committed
        assert commit.wait(10)
        return done

    monkeypatch.setattr(attempt_services, "mark_run_done_if_finished", held_open)
    outcome: dict[str, Any] = {}

    def finishing() -> None:
        try:
            outcome["finished"] = finish()
        finally:
            connection.close()

    thread = threading.Thread(target=finishing)
    thread.start()
    assert marked.wait(10)
    with pytest.raises(GroundControlError) as refused:
        attempt_services.attempt_claim(hand=owner, run_id=ship.pk, process_id="ship:1")
    assert refused.value.code == "run_waiting"
    assert refused.value.fields["waiting_for"] == [
        {"run": build.pk, "title": "build", "state": RunState.OPEN}
    ]
    commit.set()
    thread.join(10)
    assert "finished" in outcome
    # Committed: the next claim's statement reads it done.
    view = attempt_services.attempt_claim(hand=owner, run_id=ship.pk, process_id="ship:1")
    assert view.attempt.run_id == ship.pk


def test_a_claim_on_its_way_when_the_finish_commits_is_granted(
    monkeypatch: pytest.MonkeyPatch, lane: Any, owner: Any, teammate: Any
) -> None:
    build, ship = _runs(lane)
    finish = _finish(teammate, build)
    reached, go = threading.Event(), threading.Event()
    real = engine.take_first_free
    outcome: dict[str, Any] = {}

    def paused(**kwargs: Any) -> Any:
        reached.set()
        assert go.wait(10)
        return real(**kwargs)

    monkeypatch.setattr(engine, "take_first_free", paused)

    def claiming() -> None:
        try:
            outcome["view"] = attempt_services.attempt_claim(
                hand=owner, run_id=ship.pk, process_id="ship:1"
            )
        except GroundControlError as error:
            outcome["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=claiming)
    thread.start()
    assert reached.wait(10)  # checked in, its statement not yet run
    monkeypatch.setattr(engine, "take_first_free", real)
    finish()  # commits on this test's connection
    go.set()
    thread.join(10)
    assert "error" not in outcome, outcome
    assert Attempt.objects.filter(run=ship, hand=owner).count() == 1


def test_no_claim_is_granted_before_the_dependency_is_done(
    lane: Any, owner: Any, teammate: Any, workspace: Any
) -> None:
    """Claimers hammer the waiting run while the dependency's last slot finishes: every grant's
    statement ran after the finish (its time is at or after the dependency's `closed_at`, the
    finish's own statement time, which precedes its commit), and some were refused before."""
    build, ship = _runs(lane, slots=6)
    finish = _finish(teammate, build)
    hands = [
        hand_services.hand_create(workspace=workspace, name=f"claimer-{i}")[0] for i in range(6)
    ]
    granted: list[datetime] = []
    refused: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + 6
    crashes: list[BaseException] = []

    def claimer(index: int) -> None:
        rng = random.Random(index)
        try:
            while time.monotonic() < stop_at:
                try:
                    view = attempt_services.attempt_claim(
                        hand=hands[index], run_id=ship.pk, process_id=f"ship:{index}"
                    )
                except GroundControlError as error:
                    with lock:
                        refused.append(error.code)
                    time.sleep(rng.uniform(0, 0.01))
                    continue
                with lock:
                    granted.append(view.lease.server_time)
                return
        except BaseException as crash:  # noqa: BLE001 - any crash fails the test
            crashes.append(crash)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # let the claimers be refused for a while
    finish()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a claimer hung"
    assert not crashes, crashes
    build.refresh_from_db()
    assert build.state == RunState.DONE and build.closed_at is not None
    assert "run_waiting" in refused
    assert set(refused) <= {"run_waiting", "no_open_slot"}, set(refused)
    assert len(granted) == 6
    assert all(at >= build.closed_at for at in granted), (build.closed_at, sorted(granted))


def test_many_connections_claiming_a_released_run_hold_one_slot_each(
    lane: Any, teammate: Any, workspace: Any
) -> None:
    slots, claimers = 4, 12
    build, ship = _runs(lane, slots=slots)
    finish = _finish(teammate, build)
    hands = [
        hand_services.hand_create(workspace=workspace, name=f"claimer-{i}")[0]
        for i in range(claimers)
    ]
    history = History()
    barrier = threading.Barrier(claimers + 1)
    stop_at = time.monotonic() + 8

    def claimer(index: int) -> None:
        try:
            barrier.wait(10)
            while time.monotonic() < stop_at:
                try:
                    view = attempt_services.attempt_claim(
                        hand=hands[index], run_id=ship.pk, process_id=f"ship:{index}"
                    )
                except GroundControlError as error:
                    history.add(Op(index, "grant", "slot", -1, False, code=error.code))
                    if error.code == "no_open_slot":
                        return  # every slot held: nothing left to fight over
                    time.sleep(0.005)
                    continue
                history.add(
                    Op(
                        index,
                        "grant",
                        view.lease.resource,
                        view.lease.fence,
                        True,
                        view.lease.server_time,
                        view.lease.deadline,
                        float(ship.grace_s),
                    )
                )
                return
        except BaseException as crash:  # noqa: BLE001 - any crash fails the test
            history.crashes.append(crash)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    barrier.wait(10)
    finish()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a claimer hung"
    assert not history.crashes, history.crashes
    counts = check_history(history)
    held = [op for op in history.ops if op.ok]
    assert sorted(op.resource for op in held) == [
        f"run/{ship.pk}/slot/{i}" for i in range(slots)
    ], counts
    assert Attempt.objects.filter(run=ship).count() == slots
    assert {op.code for op in history.ops if not op.ok} <= {"run_waiting", "no_open_slot"}
