"""The board and the run page show each piece of evidence's grade (hand, wrapper, ci), who
attested it, and the grades a run requires; everything a hand or CI wrote is escaped."""

from __future__ import annotations

from typing import Any

import pytest

from evidence.services import attempt_finish, attestation_record
from fleet.attempts import services as attempt_services
from hands import services as hand_services
from hands.models import Hand

pytestmark = pytest.mark.django_db

PR = "https://github.com/acme/app/pull/7"


def finish(hand: Hand, run: Any, *, kind: str = "pull_request", observed_by: str = "hand") -> int:
    view = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p")
    attempt_finish(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="p",
        evidence=[{"kind": kind, "url": PR}],
        observed_by=observed_by,
    )
    return view.attempt.pk


def ci_attests(owner: Hand, result: str = "pass", **kwargs: str) -> None:
    ci, _ = hand_services.hand_create(workspace=owner.workspace, name="ci-<b>")
    issued = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test")
    attestation_record(hand=ci, key=issued.key, url=PR, result=result, **kwargs)


def test_the_board_shows_each_finished_attempts_grade(
    workspace_admin_client, owner, make_run
) -> None:
    run = make_run(slots=2)
    first = finish(owner, run, observed_by="wrapper")
    html = workspace_admin_client.get("/").content.decode()
    assert '<th scope="col">Evidence</th>' in html
    assert f'<tr data-attempt="{first}"' in html
    assert 'data-grade="wrapper"' in html and "pull_request · wrapper" in html
    ci_attests(owner)
    html = workspace_admin_client.get("/").content.decode()
    assert 'data-grade="ci"' in html and "pull_request · ci" in html
    assert "ci-&lt;b&gt; attested it passed" in html and "ci-<b>" not in html


def test_the_run_page_shows_the_grade_who_attested_and_the_grades_required(
    workspace_admin_client, owner, make_run
) -> None:
    run = make_run(slots=2, evidence_grades={"pull_request": "ci"}, evidence_required=["commit"])
    ci_attests(owner, note="build 12")
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="p",
        evidence=[
            {"kind": "pull_request", "url": PR},
            {"kind": "commit", "url": "https://github.com/acme/app/commit/abc"},
        ],
    )
    html = workspace_admin_client.get(f"/runs/{run.pk}/").content.decode()
    assert "<dd>commit, pull_request (seen by ci)</dd>" in html
    assert 'data-grade="ci"' in html and 'data-grade="hand"' in html
    assert "ci-&lt;b&gt; attested pass at" in html
    package = workspace_admin_client.get(f"/work-packages/{run.work_package_id}/").content.decode()
    assert "pull_request (seen by ci)" in package


def test_a_kind_a_hand_wrote_is_escaped_in_the_grade(
    workspace_admin_client, owner, make_run
) -> None:
    run = make_run(slots=1)
    finish(owner, run, kind='<img src=x onerror="alert(1)">')
    for url in ("/", f"/runs/{run.pk}/"):
        html = workspace_admin_client.get(url).content.decode()
        assert "<img src=x" not in html
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; · hand" in html


def test_a_regrade_changes_the_boards_fingerprint(workspace_admin_client, owner, make_run) -> None:
    run = make_run(slots=1)
    finish(owner, run)
    before = workspace_admin_client.get("/", headers={"HX-Request": "true"})
    ci_attests(owner)
    after = workspace_admin_client.get("/", headers={"HX-Request": "true"})
    assert _fingerprint(before) != _fingerprint(after)


def _fingerprint(response: Any) -> str:
    html = response.content.decode()
    return html.split('data-fp="', 1)[1].split('"', 1)[0]
