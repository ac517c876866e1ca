"""The dashboard in real Chromium against a live server: log in, watch a badge turn late without
a reload, revoke a key and see the hand's next API call refused, break a lease, and save
screenshots of the board and of a run's timeline (test-artifacts/)."""

from __future__ import annotations

import httpx
import pytest

from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from hands import services as hand_services
from leases import engine
from leases.models import Event
from leases.services import lease_acquire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_logs_in_and_shows_the_board(page, admin, owner, make_run, artifacts):
    attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")
    page.goto("/")
    assert "/login/" in page.url
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("a long browser password")
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet board").wait_for()
    assert page.locator('[data-count="live"] .n').inner_text() == "1"
    page.screenshot(path=str(artifacts / "board.png"), full_page=True)


def test_it_turns_a_badge_from_live_to_late_without_a_reload(logged_in, owner, make_run):
    page = logged_in
    view = attempt_services.attempt_claim(
        hand=owner, run_id=make_run(heartbeat_interval_s=3, grace_s=60).pk, process_id="host:1"
    )
    page.goto("/")
    badge = page.locator(f'tr[data-attempt="{view.attempt.pk}"] .badge')
    assert badge.inner_text().strip().endswith("live")
    page.evaluate("window.__notReloaded = true")
    page.locator(f'tr[data-attempt="{view.attempt.pk}"] [data-state="late"]').wait_for()
    assert badge.inner_text().strip().endswith("late")
    assert page.evaluate("window.__notReloaded") is True
    assert page.locator('[data-count="late"] .n').inner_text() == "1"


def test_it_sends_nothing_new_when_nothing_changed_and_polls_slower_when_hidden(
    logged_in, owner, make_run
):
    page = logged_in
    attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")
    page.goto("/")
    statuses: list[int] = []
    page.on(
        "response",
        lambda r: (
            statuses.append(r.status)
            if r.request.headers.get("hx-request")
            and r.url.rstrip("/").endswith(page.url.rstrip("/"))
            else None
        ),
    )
    page.wait_for_timeout(3500)
    assert len(statuses) >= 2 and set(statuses) == {204}
    page.evaluate("Object.defineProperty(document, 'hidden', {get: () => true})")
    page.wait_for_timeout(500)
    statuses.clear()
    page.wait_for_timeout(4000)
    assert len(statuses) <= 1  # at most one poll every 30 s while hidden


def test_it_revokes_a_key_and_the_hands_next_api_call_is_refused(logged_in, live_server, owner):
    page = logged_in
    issued = hand_services.key_issue(hand=owner, scopes=["work"], actor="test")
    api = httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {issued.plaintext}"}
    )
    assert api.get("/api/v1/me").status_code == 200
    page.goto(f"/hands/{owner.pk}/")
    page.get_by_role("link", name=f"Revoke key {issued.key.prefix}").click()
    page.get_by_label("Reason").fill("leaked in a log")
    page.get_by_role("button", name="Revoke the key").click()
    page.get_by_text(f"Key {issued.key.prefix} of {owner.name} is revoked.").wait_for()
    assert "revoked" in page.locator(f'tr[data-key="{issued.key.prefix}"]').inner_text()
    refused = api.get("/api/v1/me")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "key_revoked"


def test_it_issues_a_key_shown_once_with_a_copy_button(logged_in, owner):
    page = logged_in
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/hands/{owner.pk}/")
    page.get_by_role("link", name="Issue a key…").click()
    page.get_by_role("button", name="Issue the key").click()
    key = page.locator("#key-plaintext").inner_text()
    assert key.startswith("gc_")
    page.get_by_role("button", name="Copy the key").click()
    page.get_by_text("Copied.").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == key
    assert hand_services.key_authenticate(key).hand_id == owner.pk


def test_it_breaks_a_lease_with_a_reason(logged_in, owner, workspace):
    page = logged_in
    lease_acquire(
        workspace_id=workspace.pk,
        resource="migrations",
        holder=owner.name,
        process_id="p",
        ttl_s=600,
    )
    page.goto("/leases/")
    page.get_by_role("link", name="Break the lease on migrations").click()
    page.get_by_label("Reason").fill("the holder crashed")
    page.get_by_role("button", name="Break the lease").click()
    page.get_by_text("The lease on migrations is broken; its fence is now 2.").wait_for()
    assert page.locator('[data-resource="migrations"]').count() == 0
    assert not engine.read(workspace_id=workspace.pk, resource="migrations").held
    assert Event.objects.get(kind="lease_broken").data["reason"] == "the holder crashed"


def test_it_shows_a_runs_timeline(logged_in, owner, teammate, make_run, artifacts):
    page = logged_in
    run = make_run(slots=2, evidence_required=["pull_request"], brief="# Ship it\n\nWith a **PR**.")
    done = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    report_services.attempt_report(
        hand=owner,
        attempt_id=done.attempt.pk,
        fence=1,
        kind="progress",
        process_id="host:1",
        percent=50,
    )
    attempt_finish(
        hand=owner,
        attempt_id=done.attempt.pk,
        fence=1,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/1"}],
    )
    attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="host:2")
    page.goto(f"/runs/{run.pk}/")
    timeline = page.locator("#run-timeline")
    assert timeline.locator("rect[data-state]").count() == 2
    assert timeline.locator('path[data-mark="evidence"]').count() == 1
    timeline.screenshot(path=str(artifacts / "run-timeline.png"))
    page.screenshot(path=str(artifacts / "run.png"), full_page=True)


def test_it_shows_a_done_run_and_reopens_its_slot_with_a_reason(
    logged_in, owner, make_run, artifacts
):
    page = logged_in
    run = make_run(slots=1, evidence_required=["pull_request"])
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=1,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/1"}],
    )
    page.goto(f"/runs/{run.pk}/")
    assert page.locator("h1 .badge-plan-done").inner_text() == "done"
    assert page.locator("li.slot-done").count() == 1
    page.screenshot(path=str(artifacts / "run-done.png"), full_page=True)
    page.get_by_role("link", name="Reopen slot 0").click()
    page.get_by_label("Reason").fill("the fix regressed")
    page.get_by_role("button", name="Reopen the slot").click()
    page.get_by_text("Slot 0 is open again.").wait_for()
    assert page.locator("li.slot-open").count() == 1
    assert page.locator("h1 .badge-plan-open").inner_text() == "open"
    assert Event.objects.get(kind="slot_reopened").data["reason"] == "the fix regressed"
