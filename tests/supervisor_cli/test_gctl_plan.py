"""A supervisor's plan through gctl against the live server: each command's sentence and its
`--json` (the server's JSON), the bare `gctl runs` and `gctl slots RUN` listing as before, and
the exit codes of a refusal: 5 for a key without the scope, 1 for not_found, validation_error
and dependency_cycle, 3 for a claim on a run that waits."""

from __future__ import annotations

import json
from typing import Any

import pytest
from groundcontrol_client import Client

from fleet.models import Attempt, Run
from hands.models import Hand, Lane
from leases.models import Lease
from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DENIED, EXIT_AUTH = 0, 1, 2, 3, 5


@pytest.fixture
def plan(gc: Fleet, planner_key: str) -> Any:
    """gctl with the planner's key; `--json` answers parsed."""

    def gctl(*args: str, key: str | None = None) -> Any:
        return gc.gctl(*args, key=key or planner_key)

    return gctl


def parsed(done: Any) -> Any:
    assert done.returncode == EXIT_OK, done.stderr
    return json.loads(done.stdout)


def said(done: Any) -> str:
    assert done.returncode == EXIT_OK, done.stderr
    return done.stdout.rstrip("\n")


def test_it_makes_lanes_and_packages_and_says_so(plan: Any) -> None:
    assert said(plan("lanes", "create", "ops", "--name", "Operations", "--heartbeat", "30")) == (
        "lane ops (Operations): heartbeat every 30 s, grace (the server's default)"
    )
    lanes = parsed(plan("lanes", "--json"))
    assert sorted(lane["slug"] for lane in lanes) == ["ops", "rewalk"]
    assert "lane rewalk (Rewalk): heartbeat every" in said(plan("lanes", "list"))

    made = plan("packages", "create", "rewalk", "--key", "GC-12", "--title", "Fix the login")
    package = json.loads(plan("--json", "packages", "list", "rewalk").stdout)[0]
    assert (
        said(made) == f"work package {package['id']} GC-12 'Fix the login' in lane rewalk is open"
    )
    assert package["key"] == "GC-12"
    assert said(plan("packages", "list", "ops")) == "lane ops has no work packages"


def test_runs_that_wait_and_the_ready_queue(plan: Any, gc: Fleet) -> None:
    plan("packages", "create", "rewalk", "--key", "GC-12", "--title", "Fix the login")
    package = parsed(plan("packages", "list", "rewalk", "--json"))[0]["id"]
    build = parsed(
        plan("runs", "create", str(package), "--title", "Build", "--slots", "3", "--json")
    )
    created = plan(
        "runs",
        "create",
        str(package),
        "--title",
        "Test",
        "--depends-on",
        str(build["id"]),
        "--priority",
        "1",
    )
    test = Run.objects.get(title="Test")
    assert said(created) == (
        f"created run {test.pk} 'Test' is open: 1 slot, waits for run {build['id']} 'Build' "
        f"(open); priority 1; lane rewalk, package GC-12"
    )
    assert list(test.depends_on.values_list("pk", flat=True)) == [build["id"]]

    shown = said(plan("runs", "show", str(test.pk))).splitlines()
    assert shown[0] == (
        f"run {test.pk} 'Test' is open: 1 of 1 slot open, waits for run {build['id']} 'Build' "
        f"(open); priority 1; lane rewalk, package GC-12"
    )
    assert shown[1].startswith("evidence: none; heartbeat every ")
    assert shown[2] == "slot 0: open"
    assert parsed(plan("runs", "show", str(test.pk), "--json"))["waiting_for"] == [build["id"]]

    ready = said(plan("runs", "--ready")).splitlines()
    assert len(ready) == 1 and ready[0].startswith(f"1. run {build['id']}: Build (lane rewalk")
    assert [run["id"] for run in parsed(plan("runs", "ready", "--json"))] == [build["id"]]
    # The bare list is as before: every open run, newest first, the one that waits says so.
    listed = said(plan("runs")).splitlines()
    assert listed[0].startswith(f"run {test.pk}: Test (lane rewalk, work package GC-12): 1 of 1")
    assert f"; waits for run {build['id']};" in listed[0]

    # A claim on it is denied (3), naming what it waits for.
    claim = gc.gctl("claim", str(test.pk))
    assert claim.returncode == EXIT_DENIED, claim.stderr
    assert "(run_waiting)" in claim.stderr and "Build" in claim.stderr

    # A run it waits for that is closed: the sentence says what would end the wait.
    plan("runs", "close", str(build["id"]))
    assert said(plan("runs", "show", str(test.pk))).splitlines()[0] == (
        f"run {test.pk} 'Test' is open: 1 of 1 slot open, waits for run {build['id']} 'Build' "
        f"(closed); it waits until run {build['id']} is reopened or dropped from its depends_on; "
        "priority 1; lane rewalk, package GC-12"
    )
    plan("runs", "reopen", str(build["id"]))

    # A change that would close a cycle: an error (1), the sentence names the cycle.
    cycle = plan("runs", "update", str(build["id"]), "--depends-on", str(test.pk))
    assert cycle.returncode == EXIT_ERROR
    assert f"run {build['id']} -> run {test.pk} -> run {build['id']}" in cycle.stderr
    assert "(dependency_cycle)" in cycle.stderr
    updated = plan("runs", "update", str(test.pk), "--no-depends-on", "--priority", "0")
    assert said(updated) == (
        f"updated run {test.pk} 'Test' is open: 1 of 1 slot open; priority 0; lane rewalk, "
        "package GC-12"
    )


def test_it_closes_reopens_and_changes_a_runs_rules(plan: Any, make_run: Any) -> None:
    run = make_run(title="Walk", slots=2)
    closed = said(plan("runs", "close", str(run.pk))).splitlines()
    assert closed == [
        f"closed run {run.pk} 'Walk' is closed: 2 of 2 slots open; priority 2; lane rewalk, "
        f"package {run.work_package.key}",
        "it takes no more claims; the attempts under way go on",
    ]
    assert parsed(plan("runs", "reopen", str(run.pk), "--json"))["state"] == "open"
    body = parsed(
        plan(
            "runs",
            "update",
            str(run.pk),
            "--capability",
            "python",
            "--progress-timeout",
            "600",
            "--idle-directive",
            "pause",
            "--json",
        )
    )
    assert (body["capabilities"], body["progress_timeout_s"], body["idle_directive"]) == (
        ["python"],
        600,
        "pause",
    )
    assert "idle after 600 s without progress, then pause" in said(
        plan("runs", "show", str(run.pk))
    )
    cleared = parsed(plan("runs", "update", str(run.pk), "--never-idle", "--json"))
    assert cleared["progress_timeout_s"] is None
    nothing = plan("runs", "update", str(run.pk))
    assert nothing.returncode == EXIT_USAGE and "nothing to change" in nothing.stderr


def test_slots_list_as_before_and_are_added_and_reopened(
    plan: Any, gc: Fleet, make_run: Any
) -> None:
    run = make_run(title="Walk", slots=1, heartbeat_interval_s=30, grace_s=30)
    assert said(gc.gctl("slots", str(run.pk))) == "slot 0: open"
    worker = Client(gc.url, gc.key_a)
    attempt = worker.claim(run.pk, process_id="p1")
    worker.finish(attempt.id, fence=attempt.fence, process_id="p1", evidence=[])
    worker.close()

    added = plan("slots", "add", str(run.pk), "--count", "2", "--reason", "two more pages")
    assert said(added) == (
        f"added 2 slots to run {run.pk}: run {run.pk} 'Walk' is open: 2 of 3 slots open "
        f"(1 done); priority 2; lane rewalk, package {run.work_package.key}"
    )
    reopened = plan("slots", "reopen", str(run.pk), "0", "--reason", "it came back", "--json")
    assert parsed(reopened)["state"] == "open"
    assert said(gc.gctl("slots", str(run.pk), "--all")).splitlines()[0].startswith("slot 0: open")
    again = plan("slots", "reopen", str(run.pk), "1", "--reason", "again")
    assert again.returncode == EXIT_ERROR and "(slot_not_done)" in again.stderr
    assert plan("slots", "add", str(run.pk), "--reason", "r").returncode == EXIT_USAGE


def test_attempts_a_directive_and_a_break(plan: Any, gc: Fleet, make_run: Any) -> None:
    run = make_run(title="Walk", slots=1, heartbeat_interval_s=30, grace_s=30)
    worker = Client(gc.url, gc.key_a)
    attempt = worker.claim(run.pk, process_id="host:1")
    lease = worker.lease_acquire("src/auth/", ttl_s=60, process_id="host:1")
    worker.close()

    listed = said(plan("attempts", "--run", str(run.pk))).splitlines()
    assert len(listed) == 1
    assert listed[0].startswith(
        f"attempt {attempt.id} of run {run.pk} slot 0: hand hand-a (process host:1) at fence "
        f"{attempt.fence}, live, directive continue, its current window ends in "
    )
    assert [a["id"] for a in parsed(plan("attempts", "list", "--state", "live", "--json"))] == [
        attempt.id
    ]
    assert said(plan("attempts", "--state", "lost")) == "no attempts match"

    told = said(plan("attempts", "directive", str(attempt.id), "pause"))
    assert told.startswith(
        f"told attempt {attempt.id} to pause (its hand hears it in its next report's answer): "
        f"attempt {attempt.id} of run {run.pk} slot 0"
    )
    assert Attempt.objects.get(pk=attempt.id).directive == "pause"
    assert parsed(plan("attempts", "show", str(attempt.id), "--json"))["directive"] == "pause"

    broke = plan("break", "src/auth/", "--reason", "its hand is gone")
    assert said(broke) == (
        f"broke src/auth/: it is free at fence {lease.fence + 1}; the holder's writes with an "
        "older fence are stale from now on"
    )
    assert Lease.objects.get(resource="src/auth/").fence == lease.fence + 1


def test_a_runs_timeline_in_sentences_json_and_json_lines(
    plan: Any, gc: Fleet, make_run: Any
) -> None:
    run = make_run(title="Walk", slots=1, heartbeat_interval_s=30, grace_s=30)
    worker = Client(gc.url, gc.key_a)
    attempt = worker.claim(run.pk, process_id="host:1")
    worker.report(attempt.id, fence=attempt.fence, process_id="host:1", kind="progress")
    worker.close()

    lines = said(plan("runs", "timeline", str(run.pk))).splitlines()
    assert any(" claimed: " in line for line in lines)
    assert all(line[:4].isdigit() and " UTC  " in line for line in lines)
    entries = parsed(plan("runs", "timeline", str(run.pk), "--json"))
    assert [entry["kind"] for entry in entries][0] == "claimed"
    exported = plan("runs", "timeline", str(run.pk), "--jsonl")
    rows = [json.loads(line) for line in said(exported).splitlines()]
    assert [row["id"] for row in rows] == [entry["id"] for entry in entries]


def test_refusals_exit_with_their_codes(plan: Any, gc: Fleet, make_run: Any) -> None:
    run = make_run(title="Walk")
    # A key with work and leases only: scope_denied, exit 5, the sentence on stderr.
    for args in (
        ("lanes",),
        ("attempts",),
        ("runs", "close", str(run.pk)),
        ("break", "src/", "--reason", "r"),
    ):
        denied = gc.gctl(*args)
        assert denied.returncode == EXIT_AUTH, (args, denied.stderr)
        assert denied.stderr.endswith("(scope_denied)\n") and not denied.stdout
    gone = plan("runs", "show", "999999")
    assert gone.returncode == EXIT_ERROR and "(not_found)" in gone.stderr
    as_json = plan("--json", "runs", "close", "999999")
    assert as_json.returncode == EXIT_ERROR
    assert json.loads(as_json.stdout)["error"]["code"] == "not_found"
    bad = plan("runs", "create", str(run.work_package_id), "--title", "X", "--depends-on", "999999")
    assert bad.returncode == EXIT_ERROR
    assert "depends_on" in bad.stderr and "(validation_error)" in bad.stderr
    assert plan("runs", "create", "1", "--title", "X", "--priority", "7").returncode == EXIT_USAGE


def test_a_lane_limited_key_sees_only_its_lane(
    gc: Fleet, lane_key: str, owner: Hand, docs: Lane, make_run: Any
) -> None:
    mine = make_run(title="Mine")
    from fleet.plan import services as plan_services

    package, _ = plan_services.work_package_create(lane=docs, key="D-1", title="Docs")
    theirs = plan_services.run_create(work_package=package, title="Theirs", slots=1)

    assert [lane["slug"] for lane in parsed(gc.gctl("lanes", "--json", key=lane_key))] == ["rewalk"]
    assert [run["id"] for run in parsed(gc.gctl("runs", "--ready", "--json", key=lane_key))] == [
        mine.pk
    ]
    hidden = gc.gctl("runs", "show", str(theirs.pk), key=lane_key)
    assert hidden.returncode == EXIT_ERROR and "(not_found)" in hidden.stderr
    hidden = gc.gctl("runs", "timeline", str(theirs.pk), key=lane_key)
    assert hidden.returncode == EXIT_ERROR and "(not_found)" in hidden.stderr
