"""Many threads, each with its own PostgreSQL connection, fight over a few resources and over the
slots of one run, pausing longer than their TTL at random. Every operation is recorded with the
database's time it ran at; a checker over that history then asserts the lease's promises:

1. no two holders' validity ever overlapped (by the database's clock);
2. fences only increase, per resource, in the order tenures were granted;
3. no operation carrying a stale fence succeeded, and no renewal succeeded after its tenure was
   lost (its deadline, plus grace for slots, had passed).
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.models import Run
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand
from leases import services as leases

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 16
DURATION_S = 8.0
RESOURCES = ["src/auth/", "migrations", "dev-server"]
TTL_S = 1  # the contract's smallest ttl_s
# Run intervals are whole seconds (the API's bounds); resource TTLs may be fractions.
SLOT_INTERVAL_S = 1
SLOT_GRACE_S = 1


@dataclass(frozen=True)
class Op:
    thread: int
    kind: str  # grant | renew | release | check | report | finish
    resource: str
    fence: int
    ok: bool
    at: datetime | None = None  # the database's time of the statement (successes only)
    deadline: datetime | None = None  # the tenure's deadline after the operation
    grace_s: float = 0.0
    code: str = ""


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self.crashes: list[BaseException] = []

    def add(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)


def pause(rng: random.Random, ttl: float) -> None:
    # One pause in four outlasts the lease, so tenures are lost and taken over under load.
    time.sleep(
        rng.uniform(ttl * 1.05, ttl * 1.5) if rng.random() < 0.3 else rng.uniform(0, ttl / 3)
    )


def resource_worker(index: int, workspace_id: int, history: History, stop_at: float) -> None:
    rng = random.Random(index)
    holder = f"hand-{index}"
    process = f"host:{index}"
    while time.monotonic() < stop_at:
        resource = rng.choice(RESOURCES)
        try:
            lease = leases.lease_acquire(
                workspace_id=workspace_id,
                resource=resource,
                holder=holder,
                process_id=process,
                ttl_s=TTL_S,
            )
        except GroundControlError as error:
            history.add(Op(index, "grant", resource, -1, False, code=error.code))
            time.sleep(rng.uniform(0, 0.05))
            continue
        history.add(
            Op(index, "grant", resource, lease.fence, True, lease.server_time, lease.deadline)
        )
        fence = lease.fence
        for _ in range(rng.randint(0, 3)):
            pause(rng, TTL_S)
            action = rng.choice(["renew", "check"])
            try:
                if action == "renew":
                    lease = leases.lease_renew(
                        workspace_id=workspace_id,
                        resource=resource,
                        holder=holder,
                        fence=fence,
                        process_id=process,
                    )
                else:
                    lease = leases.lease_check(
                        workspace_id=workspace_id, resource=resource, fence=fence
                    )
            except GroundControlError as error:
                history.add(Op(index, action, resource, fence, False, code=error.code))
                break
            history.add(Op(index, action, resource, fence, True, lease.server_time, lease.deadline))
        else:
            try:
                lease = leases.lease_release(
                    workspace_id=workspace_id, resource=resource, holder=holder, fence=fence
                )
                history.add(
                    Op(
                        index,
                        "release",
                        resource,
                        fence,
                        True,
                        lease.released_at,
                        lease.released_at,
                    )
                )
            except GroundControlError as error:
                history.add(Op(index, "release", resource, fence, False, code=error.code))


def slot_worker(index: int, hand: Hand, run: Run, history: History, stop_at: float) -> None:
    rng = random.Random(1000 + index)
    process = f"host:{index}"
    while time.monotonic() < stop_at:
        try:
            view = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=process)
        except GroundControlError as error:
            history.add(Op(index, "grant", "slot", -1, False, code=error.code))
            time.sleep(rng.uniform(0, 0.05))
            continue
        resource, fence = view.lease.resource, view.lease.fence
        history.add(
            Op(
                index,
                "grant",
                resource,
                fence,
                True,
                view.lease.server_time,
                view.lease.deadline,
                SLOT_GRACE_S,
            )
        )
        alive = True
        for _ in range(rng.randint(0, 3)):
            pause(rng, SLOT_INTERVAL_S + SLOT_GRACE_S)
            try:
                _, view = report_services.attempt_report(
                    hand=hand,
                    attempt_id=view.attempt.pk,
                    fence=fence,
                    kind="heartbeat",
                    process_id=process,
                )
            except GroundControlError as error:
                history.add(Op(index, "report", resource, fence, False, code=error.code))
                alive = False
                break
            history.add(
                Op(
                    index,
                    "report",
                    resource,
                    fence,
                    True,
                    view.lease.server_time,
                    view.lease.deadline,
                    SLOT_GRACE_S,
                )
            )
        if not alive:
            continue
        if rng.random() < 0.75:  # most tenures give the slot back; a finish makes it done
            try:
                given = attempt_services.attempt_release(
                    hand=hand,
                    attempt_id=view.attempt.pk,
                    fence=fence,
                    process_id=process,
                    reason="next",
                )
                history.add(
                    Op(
                        index,
                        "release",
                        resource,
                        fence,
                        True,
                        given.lease.server_time,
                        given.lease.server_time,
                    )
                )
            except GroundControlError as error:
                history.add(Op(index, "release", resource, fence, False, code=error.code))
            continue
        try:
            done = attempt_finish(
                hand=hand,
                attempt_id=view.attempt.pk,
                fence=fence,
                process_id=process,
                evidence=[{"kind": "pull_request", "url": f"https://example.com/pr/{index}"}],
            )
            history.add(
                Op(
                    index,
                    "release",
                    resource,
                    fence,
                    True,
                    done.lease.server_time,
                    done.lease.server_time,
                    code="finished",
                )
            )
        except GroundControlError as error:
            history.add(Op(index, "finish", resource, fence, False, code=error.code))


def run_threads(targets: list[threading.Thread], history: History) -> None:
    for thread in targets:
        thread.start()
    for thread in targets:
        thread.join(timeout=DURATION_S + 30)
        assert not thread.is_alive(), "a worker hung"
    assert not history.crashes, history.crashes


def guarded(history: History, func, *args) -> threading.Thread:  # noqa: ANN001
    def body() -> None:
        try:
            func(*args)
        except BaseException as crash:  # noqa: BLE001 - any crash fails the test
            history.crashes.append(crash)
        finally:
            connection.close()  # each thread had its own connection

    return threading.Thread(target=body)


def check_history(history: History) -> dict[str, int]:
    """Assert the promises over the recorded history; return counts for the test's message."""
    by_tenure: dict[tuple[str, int], list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.ok:
            by_tenure[(op.resource, op.fence)].append(op)

    # Each tenure's validity: from its grant to its last deadline (plus grace for slots), or to
    # its release. Successful operations must fall inside it; renewals only while not lost.
    validity: dict[str, list[tuple[int, datetime, datetime]]] = defaultdict(list)
    for (resource, fence), ops in by_tenure.items():
        ops.sort(key=lambda op: op.at)
        grants = [op for op in ops if op.kind == "grant"]
        assert grants, f"operations on {resource} fence {fence} without a grant"
        start = grants[0].at
        lost_at = grants[0].deadline + timedelta(seconds=grants[0].grace_s)
        end = lost_at
        for op in ops[1:]:
            assert op.at <= lost_at, (
                f"{op.kind} on {resource} fence {fence} at {op.at} after lost {lost_at}"
            )
            if op.kind == "release":
                end = op.at
                break
            if op.kind in ("grant", "renew", "report"):
                lost_at = op.deadline + timedelta(seconds=op.grace_s)
                end = lost_at
        validity[resource].append((fence, start, end))

    tenures = 0
    for resource, spans in validity.items():
        spans.sort(key=lambda span: span[1])
        fences = [fence for fence, _, _ in spans]
        assert fences == sorted(fences) and len(set(fences)) == len(fences), (
            f"fences on {resource} did not strictly increase in grant order: {fences}"
        )
        for (f1, _, end1), (f2, start2, _) in zip(spans, spans[1:], strict=False):
            assert end1 <= start2, (
                f"{resource}: fence {f2} granted at {start2} "
                f"while fence {f1} was valid until {end1}"
            )
        tenures += len(spans)

    # A finished slot is done for good: no tenure of it is granted after its finish.
    for op in history.ops:
        if op.ok and op.code == "finished":
            later = [f for f, _, _ in validity[op.resource] if f > op.fence]
            assert not later, f"{op.resource} finished at fence {op.fence}, then granted {later}"

    # A stale fence never succeeds: no success at time t carries a fence older than one granted
    # at or before t.
    for op in history.ops:
        if op.ok and op.kind != "grant":
            newer = [s for f, s, _ in validity[op.resource] if f > op.fence and s <= op.at]
            assert not newer, f"{op.kind} with stale fence {op.fence} on {op.resource} succeeded"
    return {
        "operations": len(history.ops),
        "tenures": tenures,
        "refused": sum(not op.ok for op in history.ops),
    }


def test_it_keeps_every_promise_under_contention(workspace, lane) -> None:  # noqa: ANN001
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(
        work_package=package,
        title="race",
        # Enough that finished (done) slots leave some to fight over for the whole run.
        slots=12,
        heartbeat_interval_s=SLOT_INTERVAL_S,
        grace_s=SLOT_GRACE_S,
        evidence_required=["pull_request"],
    )
    hands = [
        hand_services.hand_create(workspace=workspace, name=f"slot-hand-{i}")[0]
        for i in range(THREADS // 2)
    ]

    history = History()
    stop_at = time.monotonic() + DURATION_S
    threads = [
        guarded(history, resource_worker, i, workspace.pk, history, stop_at)
        for i in range(THREADS // 2)
    ]
    threads += [
        guarded(history, slot_worker, i, hands[i], run, history, stop_at)
        for i in range(THREADS // 2)
    ]
    run_threads(threads, history)

    counts = check_history(history)
    assert counts["tenures"] > 20, counts  # the fight really happened
    assert counts["refused"] > 10, counts
    assert any(op.code == "lease_held" for op in history.ops)
    assert any(op.code in ("lease_lost", "stale_fence") for op in history.ops), counts
