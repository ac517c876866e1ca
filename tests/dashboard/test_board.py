"""The fleet board: counts and states in SQL agree with the pure state function at every
boundary; filters; HTMX fragments; 204 when nothing changed; everything escaped."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dashboard import pages as dashboard
from dashboard.pages import BoardFilters
from fleet.attempts import services as attempt_services
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import clock

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def claim(hand, run, process: str = "host:1"):  # noqa: ANN001, ANN201
    return attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=process)


def board_of(workspace, **filters):  # noqa: ANN001, ANN201
    return dashboard.board(workspace_id=workspace.pk, filters=BoardFilters(**filters))


@pytest.mark.parametrize(
    ("grace", "offset", "state"),
    [
        (60, 100, "live"),
        (60, 100.001, "late"),
        (60, 130, "late"),
        (60, 130.001, "stalled"),
        (60, 160, "stalled"),
        (60, 160.001, "lost"),
        (0, 100, "live"),
        (0, 100.001, "lost"),
    ],
)
def test_it_counts_each_state_in_sql_exactly_as_the_state_function(
    workspace, owner, make_run, frozen_clock, grace, offset, state
):
    run = make_run(heartbeat_interval_s=100, grace_s=grace)
    claim(owner, run)
    clock.freeze(frozen_clock + timedelta(seconds=offset))
    data = board_of(workspace)
    assert data.counts[state] == 1
    assert sum(data.counts.values()) == 1
    assert [row.state for row in data.rows] == [state]
    assert [row.state for row in board_of(workspace, state=state).rows] == [state]


def test_it_shows_finished_released_and_broken_attempts_with_their_end(
    workspace, owner, teammate, make_run, frozen_clock
):
    run = make_run(heartbeat_interval_s=100, grace_s=60, slots=3)
    released = claim(owner, run)
    attempt_services.attempt_release(
        hand=owner,
        attempt_id=released.attempt.pk,
        fence=1,
        process_id="host:1",
        reason="done for today",
    )
    broken = claim(teammate, run, "host:2")
    attempt_services.lease_break(
        workspace_id=workspace.pk, resource=broken.lease.resource, actor="boss", reason="stuck"
    )
    claim(owner, run, "host:3")
    data = board_of(workspace)
    assert data.counts == {
        "live": 1,
        "late": 0,
        "stalled": 0,
        "lost": 1,
        "finished": 0,
        "released": 1,
    }
    by_id = {row.attempt.pk: row for row in data.rows}
    assert by_id[released.attempt.pk].state == "released"
    assert by_id[broken.attempt.pk].state == "lost"


def test_it_filters_by_lane_state_and_hand(workspace, owner, teammate, make_run, frozen_clock):
    run = make_run(heartbeat_interval_s=100, grace_s=60)
    other_lane, _ = hand_services.lane_create(workspace=workspace, slug="payments")
    package, _ = plan_services.work_package_create(lane=other_lane, key="p1", title="Payments")
    other_run = plan_services.run_create(
        work_package=package, title="Migrate", slots=1, heartbeat_interval_s=10, grace_s=60
    )
    claim(owner, run)
    claim(teammate, other_run, "host:2")
    clock.advance(20)  # teammate's lease (interval 10) is late; owner's is live
    assert [r.attempt.hand.name for r in board_of(workspace, lane="payments").rows] == ["hand-b"]
    assert [r.attempt.hand.name for r in board_of(workspace, state="late").rows] == ["hand-b"]
    assert [r.attempt.hand.name for r in board_of(workspace, hand="hand-a").rows] == ["hand-a"]
    assert board_of(workspace, lane="payments").counts["late"] == 1
    assert board_of(workspace, lane="payments").counts["live"] == 0


def test_it_groups_rows_by_lane_then_run(workspace, owner, teammate, make_run, frozen_clock):
    first, second = make_run(), make_run()
    claim(owner, first)
    claim(teammate, second, "host:2")
    claim(owner, first, "host:3")
    groups = board_of(workspace).groups
    assert [g.lane.slug for g in groups] == ["rewalk"]
    assert [(rg.run.pk, len(rg.rows)) for rg in groups[0].runs] == [(first.pk, 2), (second.pk, 1)]


def test_it_pages_the_board_and_counts_every_attempt(workspace, make_fleet, frozen_clock):
    make_fleet(25, now=frozen_clock)
    data = dashboard.board(workspace_id=workspace.pk, filters=BoardFilters(page=3), page_size=10)
    assert data.total == 25 and data.pages == 3 and len(data.rows) == 5
    assert sum(data.counts.values()) == 25
    assert {state: n > 0 for state, n in data.counts.items()} == dict.fromkeys(
        dashboard.STATES, True
    )


def test_it_renders_the_whole_page_and_htmx_gets_only_the_board_fragment(
    workspace_admin_client, owner, make_run, frozen_clock
):
    claim(owner, make_run())
    page = workspace_admin_client.get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<html" in html and 'id="board"' in html and 'id="fleet-chart"' in html
    fragment = workspace_admin_client.get("/?state=live", **HTMX)
    body = fragment.content.decode()
    assert fragment.status_code == 200
    assert "<html" not in body and body.strip().startswith('<div id="board"')
    assert 'hx-get="/?state=live"' in body  # the poll keeps the filters
    assert fragment["Vary"] and "HX-Request" in fragment["Vary"]


def test_it_answers_204_to_a_poll_when_nothing_changed_and_the_fragment_when_something_did(
    workspace_admin_client, owner, make_run, frozen_clock
):
    run = make_run(heartbeat_interval_s=100, grace_s=60)
    claim(owner, run)
    first = workspace_admin_client.get("/", **HTMX)
    fingerprint = first.content.decode().split('data-fp="')[1].split('"')[0]
    clock.advance(50)  # time passes, but nothing on the board changes state
    same = workspace_admin_client.get("/", HTTP_X_GC_FINGERPRINT=fingerprint, **HTMX)
    assert same.status_code == 204 and same.content == b""
    clock.advance(51)  # now late
    changed = workspace_admin_client.get("/", HTTP_X_GC_FINGERPRINT=fingerprint, **HTMX)
    assert changed.status_code == 200
    assert 'data-state="late"' in changed.content.decode()


def test_it_escapes_names_and_messages(workspace_admin_client, workspace, make_run, frozen_clock):
    hand, _ = hand_services.hand_create(workspace=workspace, name="<script>alert(1)</script>")
    claim(hand, make_run())
    html = workspace_admin_client.get("/").content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_it_lists_a_runs_open_tenures_before_its_ended_ones(
    workspace, owner, teammate, make_run, frozen_clock
):
    run = make_run(heartbeat_interval_s=100, grace_s=60, slots=2)
    first = claim(owner, run)
    attempt_services.attempt_release(
        hand=owner, attempt_id=first.attempt.pk, fence=1, process_id="host:1", reason="done"
    )
    clock.advance(1)
    second = claim(teammate, run, "host:2")  # takes slot 0 again
    claim(owner, run, "host:3")  # slot 1
    order = [(row.attempt.slot.index, row.state) for row in board_of(workspace).rows]
    assert order == [(0, "live"), (1, "live"), (0, "released")]
    assert board_of(workspace).rows[0].attempt.pk == second.attempt.pk
