"""A claim on a run that waits is refused `run_waiting`, naming what it waits for; the last finish
of what it waits for makes it claimable at once, with no sweep; a dependency reopened makes it
wait again."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Attempt, Run
from fleet.plan import services as plan_services
from leases.models import Refusal
from tests.support.api import Api, claim, error_of, finish

pytestmark = pytest.mark.django_db


def test_a_claim_on_a_waiting_run_is_refused_naming_what_it_waits_for(
    plan: Any, api_a: Api
) -> None:
    build = plan("build")
    lint = plan("lint")
    ship = plan("ship", depends_on=[build["id"], lint["id"]])
    response = api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1"})
    error = error_of(response, 409, "run_waiting")
    assert error["waiting_for"] == [
        {"run": build["id"], "title": "build", "state": "open"},
        {"run": lint["id"], "title": "lint", "state": "open"},
    ]
    assert error["message"] == (
        f"run {ship['id']} waits for run {build['id']} 'build' (open) and run {lint['id']} "
        "'lint' (open): its slots take claims when they are done; pick other work"
    )
    assert not Attempt.objects.exists()
    refusal = Refusal.objects.get(code="run_waiting")
    assert refusal.hand == "hand-a"
    # A slot asked for by its index is refused the same way.
    named = api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1", "slot": 0})
    error_of(named, 409, "run_waiting")


def test_the_last_finish_of_a_dependency_opens_the_run_at_once(
    plan: Any, api_a: Api, api_b: Api
) -> None:
    build = plan("build", slots=2)
    ship = plan("ship", depends_on=[build["id"]])
    first = claim(api_a, Run.objects.get(pk=build["id"]))
    second = claim(api_b, Run.objects.get(pk=build["id"]), process="host-b:1")
    assert finish(api_a, first).status_code == 200
    # One slot of two done: the run is not done, and ship still waits for it.
    error = error_of(
        api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1"}), 409, "run_waiting"
    )
    assert error["waiting_for"] == [{"run": build["id"], "title": "build", "state": "open"}]
    assert api_a.get(f"/runs/{ship['id']}").json()["waiting_for"] == [build["id"]]
    assert finish(api_b, second, process="host-b:1").status_code == 200
    attempt = claim(api_a, Run.objects.get(pk=ship["id"]))
    assert attempt["run"] == ship["id"]
    shown = api_a.get(f"/runs/{ship['id']}").json()
    assert (shown["depends_on"], shown["waiting_for"]) == ([build["id"]], [])


def test_a_closed_dependency_is_not_done_and_a_reopened_one_waits_again(
    plan: Any, api_a: Api, boss: Api, workspace: Any
) -> None:
    build = plan("build", slots=1)
    ship = plan("ship", depends_on=[build["id"]], slots=2)
    boss.patch(f"/runs/{build['id']}", {"state": "closed"})
    error = error_of(
        api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1"}), 409, "run_waiting"
    )
    assert error["waiting_for"][0]["state"] == "closed"
    boss.patch(f"/runs/{build['id']}", {"state": "open"})
    done = claim(api_a, Run.objects.get(pk=build["id"]))
    assert finish(api_a, done).status_code == 200
    claim(api_a, Run.objects.get(pk=ship["id"]))
    # A supervisor reopens the dependency's slot: it is open again, and ship waits again.
    plan_services.slot_reopen(
        workspace_id=workspace.pk, run_id=build["id"], index=0, actor="boss", reason="redo"
    )
    error_of(
        api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:2"}), 409, "run_waiting"
    )


def test_a_capability_missing_is_said_before_a_wait(plan: Any, api_a: Api) -> None:
    build = plan("build")
    ship = plan("ship", depends_on=[build["id"]], capabilities=["gpu"])
    error_of(
        api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1"}),
        409,
        "capability_missing",
    )


def test_a_patch_that_drops_the_dependency_opens_the_run(plan: Any, api_a: Api, boss: Api) -> None:
    build = plan("build")
    ship = plan("ship", depends_on=[build["id"]])
    error_of(
        api_a.post(f"/runs/{ship['id']}/claim", {"process_id": "host-a:1"}), 409, "run_waiting"
    )
    assert boss.patch(f"/runs/{ship['id']}", {"depends_on": []}).status_code == 200
    claim(api_a, Run.objects.get(pk=ship["id"]))
