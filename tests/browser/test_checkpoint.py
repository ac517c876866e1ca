"""The run page shows each slot's last checkpoint in real Chromium: pretty-printed, open when
short and folded when long, with who reported it and when (a human time, the absolute one on
hover); a slot without one shows nothing, and a run without any has no such section."""

from __future__ import annotations

import pytest

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_run_page_shows_each_slots_last_checkpoint(
    logged_in, owner, teammate, make_run, artifacts
):
    page = logged_in
    run = make_run(slots=3)
    page.goto(f"/runs/{run.pk}/")
    assert page.locator("#run-checkpoints").count() == 0  # nothing reported yet
    first = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p", slot=0)
    for step in (1, 2):
        report_services.attempt_report(
            hand=owner, attempt_id=first.attempt.pk, fence=first.attempt.fence, kind="progress",
            process_id="p", checkpoint={"step": step, "done": ["src/a.py", "src/b.py"]},
        )  # fmt: skip
    attempt_services.attempt_release(
        hand=owner, attempt_id=first.attempt.pk, fence=first.attempt.fence, process_id="p",
        reason="context full",
    )  # fmt: skip
    long = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="q", slot=1)
    files = {f"src/module_{n}.py": {"state": "ported", "tests": n} for n in range(20)}
    report_services.attempt_report(
        hand=teammate, attempt_id=long.attempt.pk, fence=long.attempt.fence, kind="note",
        process_id="q", message="where I am", checkpoint={"files": files},
    )  # fmt: skip
    page.reload()
    section = page.locator("#run-checkpoints")
    section.wait_for()
    items = section.locator("li[data-slot]")
    # Slot 2, claimed by nobody, has none.
    assert items.evaluate_all("els => els.map(e => e.dataset.slot)") == ["0", "1"]
    short = section.locator('li[data-slot="0"] details')
    assert short.get_attribute("open") is not None  # short: open
    summary = short.locator("summary").inner_text()
    assert summary.startswith(f"Slot 0: from hand-a (attempt {first.attempt.pk}, released)")
    assert "reported" in summary and ("ago" in summary or "now" in summary)
    shown = short.locator("pre").inner_text()
    assert '"step": 2' in shown and '"src/b.py"' in shown and '"step": 1' not in shown
    when = short.locator("summary time")
    assert when.get_attribute("title").endswith("UTC")  # the absolute time on hover
    folded = section.locator('li[data-slot="1"] details')
    assert folded.get_attribute("open") is None  # long: folded
    assert "still running" in folded.locator("summary").inner_text()
    assert not folded.locator("pre").is_visible()
    page.screenshot(path=str(artifacts / "run-checkpoints.png"), full_page=True)
    folded.locator("summary").click()
    assert folded.locator("pre").is_visible()
    assert '"src/module_19.py"' in folded.locator("pre").inner_text()
    section.screenshot(path=str(artifacts / "run-checkpoints-unfolded.png"))
