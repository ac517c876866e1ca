"""A run's record and replay in real Chromium: the run page lists everything that happened under
the run, and moving the scrubber replays the board's state for the run at that moment (each
slot's holder and state, the leases its hand held, its last report), rendered by the server and
swapped in by HTMX."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.browser.test_csp import _violations, _watch
from tests.run_timeline import conftest as run_timeline
from tests.run_timeline.conftest import Story

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

story = run_timeline.story  # the run with a story, as tests/run_timeline/ tells it


def test_moving_the_scrubber_replays_the_board_at_that_moment(
    logged_in: Any, story: Story, artifacts: Any
) -> None:
    page = logged_in
    messages = _watch(page)
    page.goto(f"/runs/{story.run.pk}/")
    entries = page.locator("#run-entries li.entry")
    entries.first.wait_for()
    assert entries.count() == 15
    assert entries.first.locator(".entry-text").inner_text() == (
        "hand-a claimed slot 0 (fence 1) as process host-a:1."
    )
    # Human times: an offset from the run's creation, the absolute time on hover.
    first_time = entries.first.locator("time")
    assert first_time.inner_text().startswith("+")
    assert first_time.get_attribute("title").endswith("UTC")
    replay = page.locator("#run-replay")
    # At first the board as the span ends: slot 0 done, slot 1 hand-a's again.
    assert replay.locator('tr[data-slot="0"]').get_attribute("data-state") == "done"
    assert replay.locator('tr[data-slot="1"]').get_attribute("data-state") == "live"

    scrubber = page.get_by_label("Replay the board at")
    late = int((story.times["claim_b"] + timedelta(seconds=110)).timestamp())
    scrubber.fill(str(late))
    page.locator('#run-replay tr[data-slot="1"][data-state="late"]').wait_for()
    row = replay.locator('tr[data-slot="1"]')
    assert "hand-b" in row.inner_text()
    page.screenshot(path=str(artifacts / "run-timeline-late.png"), full_page=True)

    # Back to when hand-a held src/a.py and had reported progress.
    held = int(story.times["report_a"].timestamp())
    scrubber.fill(str(held))
    page.locator('#run-replay tr[data-slot="0"][data-state="live"]').wait_for()
    row = replay.locator('tr[data-slot="0"]')
    assert f"src/a.py@{story.fences['src/a.py']}" in row.inner_text()
    assert "progress: half way" in row.inner_text()
    assert replay.locator('tr[data-slot="1"]').get_attribute("data-state") == "free"

    # One step with the keyboard, as a person nudges it: a second later, still live.
    scrubber.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "prefix => document.querySelector('#run-replay .replay').dataset.at.startsWith(prefix)",
        arg=(story.times["report_a"] + timedelta(seconds=1)).isoformat()[:19],
    )
    assert replay.locator('tr[data-slot="0"]').get_attribute("data-state") == "live"
    page.locator("#run-record").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "run-timeline.png"), full_page=True)

    download = page.get_by_role("link", name="Download JSON Lines")
    assert download.get_attribute("href") == f"/runs/{story.run.pk}/timeline.jsonl"
    assert _violations(page) == [] and messages == [], messages
