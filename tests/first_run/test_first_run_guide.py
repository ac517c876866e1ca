"""The board of a new workspace (no run, so no attempt) shows the first-run guide: mint a hand's
key, claim with `gctl run` against this site, watch; it is gone from the first run on."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.attempts import services as attempt_services
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Role

pytestmark = pytest.mark.django_db

GUIDE = 'id="first-run"'


def board(client, path: str = "/", **headers: str) -> str:  # noqa: ANN001
    response = client.get(path, **headers)
    assert response.status_code == 200
    return response.content.decode()


def test_it_guides_a_new_workspace_from_key_to_claim_to_watching(workspace_admin_client) -> None:
    html = board(workspace_admin_client)
    assert GUIDE in html
    assert "Mint a hand's key" in html and 'href="/hands/"' in html
    # The claim line carries this site's address, ready to paste.
    assert "export GC_URL=http://testserver GC_KEY=gc_…" in html
    assert "gctl run --run RUN -- ./agent.sh" in html
    assert "Watch." in html and 'href="/api/v1/docs/"' in html
    # One workspace: nothing to switch to.
    assert "switch in the header" not in html


def test_it_is_shown_to_every_role(viewer_client) -> None:
    assert GUIDE in board(viewer_client)


def test_it_is_gone_once_the_workspace_has_a_run(workspace_admin_client, make_run) -> None:
    make_run()
    html = board(workspace_admin_client)
    assert GUIDE not in html and "No attempts to show." in html


def test_it_is_gone_from_the_board_fragment_at_the_first_claim(
    workspace_admin_client, make_run, owner
) -> None:
    fragment = board(workspace_admin_client, HTTP_HX_REQUEST="true")
    assert GUIDE in fragment
    run = make_run()
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    fragment = board(workspace_admin_client, HTTP_HX_REQUEST="true")
    assert GUIDE not in fragment and f'data-attempt="{view.attempt.pk}"' in fragment


def test_a_filtered_empty_board_shows_no_guide(workspace_admin_client) -> None:
    html = board(workspace_admin_client, "/?state=lost")
    assert GUIDE not in html and "No attempts to show for these filters." in html


def test_it_is_per_workspace(workspace_admin_client, outsider_workspace, workspace) -> None:
    """A run in another workspace does not end this one's guide; a member of both is told of
    the switch (scripts/run's admin and its `demo`)."""
    lane, _ = hand_services.lane_create(workspace=outsider_workspace, slug="elsewhere")
    package, _ = plan_services.work_package_create(lane=lane, key="k", title="Elsewhere")
    plan_services.run_create(work_package=package, title="Not ours", slots=1)
    ada = get_user_model().objects.get(username="ada")
    hand_services.membership_set(workspace=outsider_workspace, user=ada, role=Role.VIEWER)
    session = workspace_admin_client.session
    session["gc_workspace_id"] = workspace.pk
    session.save()
    html = board(workspace_admin_client)
    assert GUIDE in html and "switch in the header" in html


def test_the_guide_costs_one_query_and_only_on_an_empty_board(
    workspace_admin_client, make_run, owner
) -> None:
    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            board(workspace_admin_client)
        return [q["sql"] for q in captured.captured_queries]

    empty = queries()
    asked = [sql for sql in empty if 'FROM "fleet_run"' in sql]
    assert len(asked) == 1 and "LIMIT 1" in asked[0], asked
    run = make_run()
    attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    full = queries()
    # A board with attempts never asks: its runs come with its rows.
    assert not [sql for sql in full if sql.startswith('SELECT 1 AS "a" FROM "fleet_run"')]


def test_a_member_of_the_demo_lands_on_their_own_workspace_first(db, client) -> None:  # noqa: ANN001
    """`scripts/run`'s admin is a member of their own workspace and then of `demo`; a fresh
    session opens their own, whatever the names' order (`aaa-demo` sorts before `zzz-own`)."""
    own = hand_services.workspace_get_or_create(name="zzz-own")
    demo = hand_services.workspace_get_or_create(name="aaa-demo")
    ada = get_user_model().objects.create_user(username="ada", password="pw-not-used-here")
    hand_services.membership_set(workspace=own, user=ada, role=Role.ADMIN)
    hand_services.membership_set(workspace=demo, user=ada, role=Role.ADMIN)
    client.force_login(ada)
    html = board(client)
    assert GUIDE in html
    assert f'<option value="{own.pk}" selected>zzz-own' in html
    assert f'<option value="{demo.pk}">aaa-demo' in html
