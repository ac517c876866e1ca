"""The pages: a supervisor plans a run that waits (a viewer cannot), a refused plan is shown
again with its error and writes nothing, the run page shows both sides of a wait, and the board's
waiting list follows its lane filter at a fixed number of queries."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Run
from fleet.plan import services as plan_services
from hands import services as hand_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def release(lane: Any) -> Any:
    package, _ = plan_services.work_package_create(lane=lane, key="release", title="Release")
    return package


def test_a_supervisor_plans_a_run_that_waits(supervisor_client: Any, release: Any) -> None:
    build = plan_services.run_create(work_package=release, title="build")
    form = supervisor_client.get(f"/work-packages/{release.pk}/runs/new/")
    assert form.status_code == 200 and f'value="{build.pk}"' in form.content.decode()
    response = supervisor_client.post(
        f"/work-packages/{release.pk}/runs/new/",
        {"title": "ship", "slots": "1", "priority": "1", "depends_on": [str(build.pk)]},
    )
    ship = Run.objects.get(title="ship")
    assert response.status_code == 302 and response["Location"] == f"/runs/{ship.pk}/"
    assert ship.priority == 1
    assert list(ship.depends_on.values_list("pk", flat=True)) == [build.pk]


def test_a_refused_plan_is_shown_again_and_writes_nothing(
    supervisor_client: Any, release: Any
) -> None:
    for other_runs, said in (("12x", "ASCII digits"), ("987654", "No run 987654.")):
        response = supervisor_client.post(
            f"/work-packages/{release.pk}/runs/new/",
            {"title": "ship", "slots": "1", "priority": "2", "other_runs": other_runs},
        )
        assert response.status_code == 200
        assert said in response.context["form"].errors["other_runs"][0]
    assert not Run.objects.exists()


def test_a_viewer_cannot_plan_a_run(viewer_client: Any, release: Any) -> None:
    response = viewer_client.post(
        f"/work-packages/{release.pk}/runs/new/", {"title": "x", "slots": "1", "priority": "2"}
    )
    assert response.status_code == 403
    assert "New run" not in viewer_client.get(f"/work-packages/{release.pk}/").content.decode()
    assert not Run.objects.exists()


def test_the_run_page_shows_what_it_waits_for_and_who_waits_for_it(
    workspace_admin_client: Any, release: Any
) -> None:
    build = plan_services.run_create(work_package=release, title="build")
    ship = plan_services.run_create(work_package=release, title="ship", depends_on=[build.pk])
    shipped = workspace_admin_client.get(f"/runs/{ship.pk}/").content.decode()
    assert f'<li data-run="{build.pk}"><a href="/runs/{build.pk}/">build</a>' in shipped
    assert "Its slots take no claim until 1 run is done." in shipped
    built = workspace_admin_client.get(f"/runs/{build.pk}/").content.decode()
    assert f'<li data-run="{ship.pk}"><a href="/runs/{ship.pk}/">ship</a>' in built
    assert "Nothing: its slots take claims whenever it is open." in built


def test_the_boards_waiting_list_follows_the_lane_at_a_fixed_cost(
    workspace_admin_client: Any, release: Any, workspace: Any
) -> None:
    build = plan_services.run_create(work_package=release, title="build")
    plan_services.run_create(work_package=release, title="ship", depends_on=[build.pk])
    other, _ = hand_services.lane_create(workspace=workspace, slug="docs", name="Docs")
    package, _ = plan_services.work_package_create(lane=other, key="d", title="D")
    plan_services.run_create(work_package=package, title="publish", depends_on=[build.pk])
    workspace_admin_client.get("/board/waiting/")
    with CaptureQueriesContext(connection) as few:
        every = workspace_admin_client.get("/board/waiting/").content.decode()
    assert "ship" in every and "publish" in every
    only = workspace_admin_client.get("/board/waiting/", {"lane": "docs"}).content.decode()
    assert "publish" in only and "ship" not in only
    for i in range(30):
        plan_services.run_create(work_package=release, title=f"more{i}", depends_on=[build.pk])
    with CaptureQueriesContext(connection) as many:
        crowded = workspace_admin_client.get("/board/waiting/").content.decode()
    assert "And 12 more waiting runs." in crowded
    assert len(many) == len(few), [q["sql"] for q in many.captured_queries]


def test_a_run_that_waits_for_a_closed_run_says_it_waits_until_that_one_is_reopened(
    workspace_admin_client: Any, release: Any
) -> None:
    build = plan_services.run_create(work_package=release, title="build")
    lint = plan_services.run_create(work_package=release, title="lint")
    ship = plan_services.run_create(
        work_package=release, title="ship", depends_on=[build.pk, lint.pk]
    )
    warning = "closed, so it will not be done"
    assert warning not in workspace_admin_client.get(f"/runs/{ship.pk}/").content.decode()
    assert (
        "until it is reopened" not in workspace_admin_client.get("/board/waiting/").content.decode()
    )

    _set(release, build, "closed")
    page = workspace_admin_client.get(f"/runs/{ship.pk}/").content.decode()
    assert (
        f'<p class="warning" data-waits-for-closed><a href="/runs/{build.pk}/">build</a> is '
        "closed, so it will not be done: this run waits until it is reopened, or until it no "
        "longer waits for it.</p>"
    ) in page
    board = workspace_admin_client.get("/board/waiting/").content.decode()
    assert board.count("until it is reopened") == 1

    _set(release, lint, "closed")
    both = workspace_admin_client.get(f"/runs/{ship.pk}/").content.decode()
    assert (
        f'<a href="/runs/{build.pk}/">build</a> and <a href="/runs/{lint.pk}/">lint</a> are '
        "closed, so they will not be done: this run waits until they are reopened, or until it "
        "no longer waits for them."
    ) in both

    _set(release, build, "open")
    _set(release, lint, "open")
    assert (
        "data-waits-for-closed"
        not in workspace_admin_client.get(f"/runs/{ship.pk}/").content.decode()
    )


def _set(package: Any, run: Run, state: str) -> None:
    plan_services.run_set_state(
        workspace_id=package.workspace_id, run_id=run.pk, state=state, actor="boss"
    )
