"""Runs that wait for runs in real Chromium: a supervisor plans a run that waits for two others
from the work package's page (with its priority), the run page shows what it waits for (links,
their states) and which runs wait for it, and the board lists the waiting run until the last run
it waits for is done, without a reload."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from fleet.models import Run
from fleet.plan import services as plan_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PR = [{"kind": "pull_request", "url": "https://github.com/acme/app/pull/3"}]


def test_a_run_planned_to_wait_shows_its_waits_and_leaves_the_board_when_ready(
    logged_in, owner, lane, artifacts
) -> None:
    page = logged_in
    package, _ = plan_services.work_package_create(lane=lane, key="release", title="Release")
    build = plan_services.run_create(work_package=package, title="build", slots=1)
    lint = plan_services.run_create(work_package=package, title="lint", slots=1)
    other, _ = plan_services.work_package_create(lane=lane, key="docs", title="Docs")
    docs = plan_services.run_create(work_package=other, title="docs", slots=1)

    page.goto(f"/work-packages/{package.pk}/")
    page.get_by_role("link", name="New run…").click()
    page.get_by_label("Title").fill("ship")
    page.get_by_label("Slots").fill("2")
    page.get_by_label("Priority").select_option("0")
    page.get_by_label("Waits for", exact=True).select_option([str(build.pk), str(lint.pk)])
    page.get_by_label("Also waits for runs").fill(str(docs.pk))
    page.get_by_role("button", name="Plan the run").click()
    page.get_by_text("Run ship is planned, waiting for 3 runs.").wait_for()
    ship = Run.objects.get(title="ship")
    assert urlparse(page.url).path == f"/runs/{ship.pk}/"
    assert ship.priority == 0 and ship.slot_count == 2
    assert sorted(ship.depends_on.values_list("pk", flat=True)) == sorted(
        [build.pk, lint.pk, docs.pk]
    )
    waits = page.locator("#run-waits")
    assert "Its slots take no claim until 3 runs are done." in waits.inner_text()
    for run in (build, lint, docs):
        item = waits.locator(f'[data-waits-for] li[data-run="{run.pk}"]')
        assert "open" in item.inner_text()
        assert item.get_by_role("link", name=run.title).get_attribute("href") == f"/runs/{run.pk}/"
    page.screenshot(path=str(artifacts / "run-waits-for-runs.png"), full_page=True)

    # The run it waits for says which runs wait for it.
    waits.get_by_role("link", name="build").click()
    waited = page.locator(f'#run-waits [data-waited-on-by] li[data-run="{ship.pk}"]')
    assert "ship" in waited.inner_text()

    # The board lists it while it waits, and drops it once the last run is done.
    page.goto("/")
    listed = page.locator(f'#board-waits li[data-run="{ship.pk}"]')
    listed.wait_for()
    assert "waits for build open, lint open and docs open" in " ".join(listed.inner_text().split())
    page.screenshot(path=str(artifacts / "board-waiting-runs.png"), full_page=True)
    page.evaluate("window.__notReloaded = true")
    for run in (build, lint, docs):
        view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="h:1")
        attempt_finish(
            hand=owner,
            attempt_id=view.attempt.pk,
            fence=view.lease.fence,
            process_id="h:1",
            evidence=PR,
        )
    listed.wait_for(state="detached")
    assert page.evaluate("window.__notReloaded") is True


def test_a_run_waiting_for_a_closed_run_is_told_what_would_end_the_wait(
    logged_in, lane, artifacts
) -> None:
    page = logged_in
    package, _ = plan_services.work_package_create(lane=lane, key="release", title="Release")
    build = plan_services.run_create(work_package=package, title="build", slots=1)
    ship = plan_services.run_create(work_package=package, title="ship", depends_on=[build.pk])
    plan_services.run_set_state(
        workspace_id=package.workspace_id, run_id=build.pk, state="closed", actor="ada"
    )
    page.goto(f"/runs/{ship.pk}/")
    warning = page.locator("#run-waits [data-waits-for-closed]")
    assert warning.inner_text() == (
        "build is closed, so it will not be done: this run waits until it is reopened, or until "
        "it no longer waits for it."
    )
    assert warning.is_visible()
    page.locator("#run-waits").screenshot(path=str(artifacts / "run-waits-for-a-closed-run.png"))
    page.goto("/")
    marked = page.locator(f'#board-waits li[data-run="{ship.pk}"] [data-closed]')
    assert marked.inner_text() == "until it is reopened"
