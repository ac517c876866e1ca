"""A supervisor's plan through the Python client, each call sent by `Client` and by
`AsyncClient` against the live server: lanes, work packages, runs that wait for runs and the
ready queue, a run's changes, slots added and reopened, every attempt, a directive, a lease
broken, a run's timeline; the refusals a caller branches on; and a lane-limited key that sees
only its lane."""

from __future__ import annotations

from typing import Any

import pytest
from groundcontrol_client import (
    Denied,
    DependencyCycle,
    GroundControlError,
    LaneRecord,
    NotFound,
    RunWaiting,
    ScopeDenied,
    TimelineEntry,
    ValidationFailed,
    WorkPackage,
)

from fleet.models import Attempt as AttemptRecord
from fleet.models import Run as RunRecord
from fleet.models import RunDependency
from fleet.models import WorkPackage as PackageRecord
from hands.models import Lane as LaneModel
from leases.models import Event

pytestmark = pytest.mark.django_db(transaction=True)


def _package(planner: Any, key: str = "GC-12") -> WorkPackage:
    return planner.work_package_create("rewalk", key=key, title="Fix the login redirect")


def test_it_creates_and_lists_lanes_and_work_packages(planner: Any) -> None:
    made = planner.lane_create("ops", name="Operations", heartbeat_interval_s=30, grace_s=90)
    assert isinstance(made, LaneRecord)
    assert (made.slug, made.name, made.heartbeat_interval_s, made.grace_s) == (
        "ops",
        "Operations",
        30,
        90,
    )
    assert LaneModel.objects.get(slug="ops").heartbeat_interval_s == 30
    # A lane that exists is answered as it is: nothing is made twice.
    assert planner.lane_create("ops").id == made.id
    assert sorted(lane.slug for lane in planner.lanes()) == ["ops", "rewalk"]

    package = _package(planner)
    assert isinstance(package, WorkPackage)
    assert (package.lane, package.key, package.state) == ("rewalk", "GC-12", "open")
    assert _package(planner).id == package.id
    assert PackageRecord.objects.count() == 1
    assert [p.key for p in planner.work_packages("rewalk")] == ["GC-12"]
    assert planner.work_packages("ops") == []


def test_runs_wait_for_runs_and_the_ready_queue_follows_priority_then_age(
    planner: Any, worker: Any
) -> None:
    package = _package(planner)
    build = planner.run_create(package.id, title="Build")
    test = planner.run_create(package.id, title="Test", depends_on=[build.id], priority=1)
    lint = planner.run_create(package.id, title="Lint", priority=0)
    docs = planner.run_create(package.id, title="Docs")
    assert (build.priority, build.depends_on, build.waiting_for) == (2, [], [])
    assert (test.priority, test.depends_on, test.waiting_for) == (1, [build.id], [build.id])
    assert list(
        RunDependency.objects.filter(run_id=test.id).values_list("depends_on_id", flat=True)
    ) == [build.id]
    # Newest first.
    assert [run.title for run in planner.package_runs(package.id)] == [
        "Docs",
        "Lint",
        "Test",
        "Build",
    ]

    # `test` waits for `build`: not in the queue; `lint` first (priority 0), then the oldest.
    assert [run.id for run in planner.runs(ready=True)] == [lint.id, build.id, docs.id]
    with pytest.raises(RunWaiting) as waiting:
        worker.claim(test.id, process_id="p1")
    assert waiting.value.code == "run_waiting"
    assert [item["run"] for item in waiting.value.fields["waiting_for"]] == [build.id]

    attempt = worker.claim(build.id, process_id="p1")
    worker.finish(attempt.id, fence=attempt.fence, process_id="p1", evidence=[])
    assert planner.run(test.id).waiting_for == []
    assert [run.id for run in planner.runs(ready=True)] == [lint.id, test.id, docs.id]
    assert [run.id for run in planner.runs(ready=True, lane="docs")] == []


def test_it_changes_a_run_and_refuses_a_cycle_writing_nothing(planner: Any) -> None:
    package = _package(planner)
    first = planner.run_create(package.id, title="First")
    second = planner.run_create(package.id, title="Second", depends_on=[first.id])

    changed = planner.run_update(
        first.id,
        priority=0,
        capabilities=["python"],
        progress_timeout_s=600,
        idle_directive="pause",
    )
    assert (changed.priority, changed.capabilities) == (0, ["python"])
    assert (changed.raw["progress_timeout_s"], changed.raw["idle_directive"]) == (600, "pause")
    # Only what is given changes; a progress timeout of None is "never idle".
    never = planner.run_update(first.id, progress_timeout_s=None)
    assert (never.raw["progress_timeout_s"], never.priority) == (None, 0)

    with pytest.raises(GroundControlError) as cycle:
        planner.run_update(first.id, depends_on=[second.id])
    assert cycle.value.code == "dependency_cycle"
    assert isinstance(cycle.value, DependencyCycle)
    assert not isinstance(cycle.value, Denied)  # gctl exits 1, not 3
    assert cycle.value.fields["cycle"] == [first.id, second.id, first.id]
    assert planner.run(first.id).depends_on == []
    assert planner.run_update(second.id, depends_on=[]).depends_on == []

    closed = planner.run_close(first.id)
    assert closed.state == "closed"
    assert RunRecord.objects.get(pk=first.id).state == "closed"
    assert planner.run_reopen(first.id).state == "open"


def test_it_adds_slots_and_reopens_a_done_one(planner: Any, worker: Any) -> None:
    run = planner.run_create(_package(planner).id, title="Walk", slots=1)
    attempt = worker.claim(run.id, process_id="p1")
    worker.finish(attempt.id, fence=attempt.fence, process_id="p1", evidence=[])
    assert planner.run(run.id).state == "done"

    added = planner.slots_add(run.id, count=2, reason="two more pages")
    assert (added.state, added.slots.total, added.slots.open, added.slots.done) == (
        "open",
        3,
        2,
        1,
    )
    reopened = planner.slot_reopen(run.id, 0, reason="the redirect came back")
    assert (reopened.index, reopened.state) == (0, "open")
    kinds = set(Event.objects.values_list("kind", flat=True))
    assert {"slots_added", "slot_reopened"} <= kinds
    with pytest.raises(GroundControlError) as not_done:
        planner.slot_reopen(run.id, 1, reason="nothing to reopen")
    assert not_done.value.code == "slot_not_done"


def test_it_lists_attempts_sets_a_directive_and_breaks_a_lease(planner: Any, worker: Any) -> None:
    run = planner.run_create(_package(planner).id, title="Walk", slots=2)
    first = worker.claim(run.id, process_id="p1")
    second = worker.claim(run.id, process_id="p2")
    worker.release(second.id, fence=second.fence, process_id="p2", reason="blocked")

    listed = planner.attempts(run_id=run.id)
    assert [a.id for a in listed] == [second.id, first.id]  # newest first
    assert [a.id for a in planner.attempts(run_id=run.id, state="live")] == [first.id]
    assert [a.id for a in planner.attempts(hand="hand-a", state="released")] == [second.id]
    assert planner.attempts(lane="docs") == []

    paused = planner.set_directive(first.id, "pause")
    assert (paused.id, paused.directive) == (first.id, "pause")
    assert AttemptRecord.objects.get(pk=first.id).directive == "pause"

    lease = worker.lease_acquire("src/auth/", ttl_s=60, process_id="p1")
    broken = planner.lease_break("src/auth/", reason="its hand is gone")
    assert (broken.resource, broken.fence, broken.state) == ("src/auth/", lease.fence + 1, "free")
    # A slot's lease too: its attempt ends as lost.
    planner.lease_break(first.lease.resource, reason="stuck")
    assert planner.attempt(first.id).state == "lost"


def test_a_runs_timeline_reads_in_order_and_exports_as_json_lines(
    planner: Any, worker: Any
) -> None:
    run = planner.run_create(_package(planner).id, title="Walk")
    attempt = worker.claim(run.id, process_id="p1")
    worker.report(attempt.id, fence=attempt.fence, process_id="p1", kind="progress", message="half")
    planner.set_directive(attempt.id, "stop")

    entries = planner.run_timeline(run.id)
    assert all(isinstance(entry, TimelineEntry) for entry in entries)
    kinds = [entry.kind for entry in entries]
    assert kinds.index("claimed") < kinds.index("report") < kinds.index("directive_set")
    claimed = entries[kinds.index("claimed")]
    assert (claimed.hand, claimed.attempt, claimed.slot) == ("hand-a", attempt.id, 0)
    assert claimed.text
    assert [entry.at for entry in entries] == sorted(entry.at for entry in entries)

    exported = planner.run_timeline_export(run.id)
    assert [entry.id for entry in exported] == [entry.id for entry in entries]


def test_refusals_carry_their_codes(planner: Any, worker: Any) -> None:
    with pytest.raises(ScopeDenied):
        worker.lanes()
    with pytest.raises(ScopeDenied):
        worker.attempts()
    with pytest.raises(NotFound):
        planner.work_packages("nowhere")
    with pytest.raises(NotFound):
        planner.run_close(999_999)
    package = _package(planner)
    with pytest.raises(ValidationFailed) as unknown:
        planner.run_create(package.id, title="Walk", depends_on=[999_999])
    assert "depends_on" in unknown.value.fields["fields"]
    with pytest.raises(ValidationFailed):
        planner.run_create(package.id, title="Walk", priority=5)
    assert not RunRecord.objects.exists()


def test_a_lane_limited_key_sees_only_its_lane(
    shell: Any, planner: Any, lane_key: str, docs: LaneModel, worker: Any
) -> None:
    mine = planner.run_create(_package(planner).id, title="Mine")
    theirs_package = planner.work_package_create("docs", key="D-1", title="Docs")
    theirs = planner.run_create(theirs_package.id, title="Theirs")
    worker.claim(theirs.id, process_id="p1")

    limited = shell(lane_key)
    assert [lane.slug for lane in limited.lanes()] == ["rewalk"]
    assert [run.id for run in limited.runs(ready=True)] == [mine.id]
    assert [run.id for run in limited.runs(state=None)] == [mine.id]
    assert limited.attempts() == []
    with pytest.raises(NotFound):
        limited.run(theirs.id)
    with pytest.raises(NotFound):
        limited.work_packages("docs")
    with pytest.raises(NotFound):
        limited.run_close(theirs.id)
    with pytest.raises(NotFound):
        limited.run_timeline(theirs.id)
    # Nor can it name another lane's run as a dependency.
    with pytest.raises(ValidationFailed):
        limited.run_create(_package(limited, "GC-13").id, title="Later", depends_on=[theirs.id])
