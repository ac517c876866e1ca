"""The run, hand, lease, refusal and event pages: what they show, and that nothing a hand or a
brief says can run in the browser."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apikit.errors import error_codes
from dashboard.templatetags.dashboard import iso
from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.models import Report
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import clock
from leases.errors import LeaseHeld
from leases.models import Refusal
from leases.services import lease_acquire

pytestmark = pytest.mark.django_db

BRIEF = """# Fix the login

Do **this**. <script>alert('brief')</script>

[safe](https://example.com/docs) [unsafe](javascript:alert(1)) <img src="https://tracker.example/x.png">
<a href="#" onclick="alert(2)">handler</a>
"""


def test_the_run_page_renders_the_brief_from_markdown_safely(workspace_admin_client, make_run):
    run = make_run(brief=BRIEF)
    html = workspace_admin_client.get(f"/runs/{run.pk}/").content.decode()
    brief = html.split('<div class="brief">')[1].split("</div>")[0]
    assert "<h1>Fix the login</h1>" in brief and "<strong>this</strong>" in brief
    assert '<a href="https://example.com/docs"' in brief
    for bad in ("<script", "javascript:", "onclick", "<img", "tracker.example"):
        assert bad not in brief, bad


def test_the_run_page_shows_slots_attempts_timeline_and_only_http_evidence_links(
    workspace_admin_client, owner, teammate, make_run
):
    run = make_run(slots=3, evidence_required=["pull_request"])
    done = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    attempt_finish(
        hand=owner,
        attempt_id=done.attempt.pk,
        fence=1,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/7"}],
    )
    attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="host:2")
    html = workspace_admin_client.get(f"/runs/{run.pk}/").content.decode()
    # The finished slot is done, not open again (issue 17.1).
    assert html.count('class="slot slot-') == 3 and "(1 open, 1 done)" in html
    assert 'class="slot slot-done"' in html
    assert 'data-state="finished"' in html and 'data-state="live"' in html
    assert '<a href="https://example.com/pr/7"' in html
    timeline = html.split('id="run-timeline">')[1].split("</figure>")[0]
    assert timeline.count('class="cap"') == 2  # two bars, each capped by its state
    assert 'data-mark="evidence"' in timeline


def test_a_non_http_link_is_shown_as_text(workspace_admin_client, lane):
    package, _ = plan_services.work_package_create(
        lane=lane, key="k", title="Package", external_ref="javascript:alert(1)"
    )
    html = workspace_admin_client.get(f"/work-packages/{package.pk}/").content.decode()
    assert "javascript:alert(1)" in html and 'href="javascript:' not in html


def test_the_hand_page_shows_keys_by_prefix_attempts_and_refusals(
    workspace_admin_client, owner, make_run
):
    key = hand_services.key_issue(hand=owner, scopes=["work", "leases"], actor="boss").key
    hand_services.key_revoke(
        workspace_id=owner.workspace_id, prefix=key.prefix, actor="boss", reason="rotated"
    )
    live = hand_services.key_issue(hand=owner, scopes=["work"], actor="boss", expires_in_s=3600).key
    attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")
    lease_acquire(
        workspace_id=owner.workspace_id, resource="db", holder="hand-z", process_id="z", ttl_s=60
    )
    with pytest.raises(LeaseHeld):
        lease_acquire(
            workspace_id=owner.workspace_id,
            resource="db",
            holder=owner.name,
            process_id="p",
            ttl_s=60,
        )
    html = workspace_admin_client.get(f"/hands/{owner.pk}/").content.decode()
    revoked_row = html.split(f'data-key="{key.prefix}"')[1].split("</tr>")[0]
    live_row = html.split(f'data-key="{live.prefix}"')[1].split("</tr>")[0]
    assert "revoked" in revoked_row and "rotated" in revoked_row and "Revoke" not in revoked_row
    assert "active" in live_row and "work" in live_row and "Revoke" in live_row
    assert "lease_held" in html and 'data-state="live"' in html
    assert 'id="hand-timeline"' in html


def test_the_refusals_page_filters_by_code_and_hand(workspace_admin_client, workspace, owner):
    for code, hand in [("lease_held", "hand-a"), ("stale_fence", "hand-a"), ("lease_held", "x")]:
        Refusal.objects.create(workspace_id=workspace.pk, code=code, hand=hand, message=code)
    Refusal.objects.create(workspace_id=workspace.pk + 999, code="lease_held", hand="hand-a")
    html = workspace_admin_client.get("/refusals/?code=lease_held&hand=hand-a").content.decode()
    assert html.count("<code>lease_held</code>") == 1 and "stale_fence</code>" not in html
    assert workspace_admin_client.get("/refusals/").content.decode().count("</code></td><td>") == 3


def test_the_events_page_filters_by_kind(workspace_admin_client, owner, make_run):
    attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")
    hand_services.key_issue(hand=owner, scopes=["work"], actor="boss")
    html = workspace_admin_client.get("/events/?kind=key_issued").content.decode()
    assert "<code>key_issued</code>" in html and "<code>claimed</code>" not in html


def test_the_lanes_and_lane_pages_list_the_plan(workspace_admin_client, make_run):
    run = make_run()
    assert "Rewalk" in workspace_admin_client.get("/lanes/").content.decode()
    lane_html = workspace_admin_client.get("/lanes/rewalk/").content.decode()
    assert f'href="/work-packages/{run.work_package_id}/"' in lane_html
    package_html = workspace_admin_client.get(
        f"/work-packages/{run.work_package_id}/"
    ).content.decode()
    assert f'href="/runs/{run.pk}/"' in package_html
    assert workspace_admin_client.get("/lanes/nope/").status_code == 404


def test_the_board_and_the_timeline_show_a_heartbeat_that_is_not_on_record(
    workspace_admin_client, owner, make_run, frozen_clock
):
    run = make_run(heartbeat_interval_s=100, grace_s=60)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    beat = {"hand": owner, "attempt_id": view.attempt.pk, "fence": 1, "kind": "heartbeat"}
    report_services.attempt_report(process_id="host:1", **beat)  # on record
    clock.advance(20)
    report_services.attempt_report(process_id="host:1", **beat)  # a renewal only, within the minute
    latest = frozen_clock + timedelta(seconds=20)
    assert Report.objects.count() == 1
    board = workspace_admin_client.get("/").content.decode()
    # The last heard-of time (the `when` tag's `<time>`) is the renewal's, not the record's.
    assert f'<time datetime="{iso(latest)}" title="2030-01-01 12:00:20 UTC"' in board
    # Past the recorded heartbeat's deadline, not the latest renewal's: the bar is live still.
    clock.advance(90)
    html = workspace_admin_client.get(f"/runs/{run.pk}/").content.decode()
    timeline = html.split('id="run-timeline">')[1].split("</figure>")[0]
    assert 'data-phase="live"' in timeline and 'data-phase="late"' not in timeline


def test_the_refusals_filter_offers_every_code_of_the_contract(workspace_admin_client, workspace):
    # A code the dashboard once left out of its own copy of the table: never filterable.
    Refusal.objects.create(workspace_id=workspace.pk, code="held_in_other_mode", hand="hand-a")
    Refusal.objects.create(workspace_id=workspace.pk, code="lease_held", hand="hand-a")
    page = workspace_admin_client.get("/refusals/")
    offered = [value for value, _ in page.context["form"].fields["code"].choices if value]
    assert offered == list(error_codes())
    html = workspace_admin_client.get("/refusals/?code=held_in_other_mode").content.decode()
    assert "<code>held_in_other_mode</code>" in html and "<code>lease_held</code>" not in html
