"""`PATCH /runs/{id}` is one change (`fleet.plan.services.run_update`): every field is validated
before anything is written, and everything is written in one transaction. Refused for any of its
fields, or for a cycle, it writes none of them: not the runs it would wait for, not its
priority, capabilities, idle settings or state, and no event. Before, each field was applied in
a transaction of its own, and a 400 for a bad capability left `depends_on` and `priority`
written."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import RunDependency
from leases.models import Event
from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db

EVERYTHING_ELSE = {
    "priority": 0,
    "capabilities": ["gpu"],
    "progress_timeout_s": 600,
    "idle_directive": "stop",
    "state": "closed",
}


def _unchanged(boss: Api, run: dict[str, Any]) -> None:
    after = boss.get(f"/runs/{run['id']}").json()
    for field in ("depends_on", "waiting_for", "priority", "capabilities", "state"):
        assert after[field] == run[field], (field, after[field], run[field])
    assert not RunDependency.objects.filter(run_id=run["id"]).exists()
    assert not Event.objects.filter(kind__in=["run_closed", "run_changed"]).exists()


def test_a_patch_refused_for_a_bad_capability_changes_neither_dependencies_nor_priority(
    boss: Api, plan: Any
) -> None:
    build, ship = plan("build"), plan("ship")
    response = boss.patch(
        f"/runs/{ship['id']}",
        {"depends_on": [build["id"]], "priority": 0, "capabilities": ["not a tag!"]},
    )
    error_of(response, 400, "validation_error")
    after = boss.get(f"/runs/{ship['id']}").json()
    assert after["depends_on"] == [], "a refused PATCH wrote depends_on"
    assert after["priority"] == 2, "a refused PATCH wrote priority"
    assert not RunDependency.objects.filter(run_id=ship["id"]).exists()
    # And the run still takes claims (it waits for nothing).
    assert after["waiting_for"] == []


@pytest.mark.parametrize(
    "bad",
    [
        {"capabilities": ["not a tag!"]},
        {"priority": 9},
        {"progress_timeout_s": 5},
        {"depends_on": [10**9]},
    ],
    ids=["capabilities", "priority", "progress_timeout_s", "depends_on"],
)
def test_a_patch_refused_for_any_field_writes_none_of_the_others(
    boss: Api, plan: Any, bad: dict[str, Any]
) -> None:
    build, ship = plan("build"), plan("ship")
    body = {"depends_on": [build["id"]], **EVERYTHING_ELSE, **bad}
    error_of(boss.patch(f"/runs/{ship['id']}", body), 400, "validation_error")
    _unchanged(boss, ship)


def test_a_patch_refused_for_a_cycle_writes_none_of_its_other_fields(boss: Api, plan: Any) -> None:
    build = plan("build")
    ship = plan("ship", depends_on=[build["id"]])
    error = error_of(
        boss.patch(f"/runs/{build['id']}", {"depends_on": [ship["id"]], **EVERYTHING_ELSE}),
        409,
        "dependency_cycle",
    )
    assert error["cycle"] == [build["id"], ship["id"], build["id"]]
    _unchanged(boss, build)


def test_a_patch_that_passes_writes_every_field_and_records_the_close_once(
    boss: Api, plan: Any
) -> None:
    build, ship = plan("build"), plan("ship")
    response = boss.patch(f"/runs/{ship['id']}", {"depends_on": [build["id"]], **EVERYTHING_ELSE})
    assert response.status_code == 200, response.content
    after = response.json()
    assert after["depends_on"] == after["waiting_for"] == [build["id"]]
    assert (after["priority"], after["capabilities"], after["state"]) == (0, ["gpu"], "closed")
    assert boss.get(f"/runs/{ship['id']}").json() == after
    assert Event.objects.filter(kind="run_closed", data__run=ship["id"]).count() == 1
