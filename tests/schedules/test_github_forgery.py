"""CI grades cannot be forged through a GitHub integration (issue 30, item 1): making one needs
`attest` from a key not limited to another lane; it names its repository, and a delivery
attests only that repository's pull requests, for its own lane's evidence, never for the
evidence of the hand whose key made it; a replayed body changes nothing; one merge backs one
attempt's finish."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apikit.errors import ScopeDenied
from evidence.models import Attestation, Evidence
from fleet.models import Attempt
from fleet.plan import services as plan_services
from hands import services as hand_services
from schedules import github
from schedules.models import GitHubDelivery, GitHubIntegration
from tests.schedules.conftest import REPOSITORY
from tests.schedules.test_github import ISSUE_OPENED, PR_URL, deliver, merged
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def run_in(lane, **options: Any) -> Any:  # noqa: ANN001
    package, _ = plan_services.work_package_create(lane=lane, key=f"k{lane.slug}", title="P")
    options = {"title": "Run", "slots": 1, **options}
    return plan_services.run_create(work_package=package, **options)


def claim(api: Api, run: Any) -> dict[str, Any]:
    response = api.post(f"/runs/{run.pk}/claim", {"process_id": "p"})
    assert response.status_code == 201, response.content
    return response.json()


def finish(api: Api, attempt: dict[str, Any], url: str = PR_URL) -> Any:
    return api.post(
        f"/attempts/{attempt['id']}/finish",
        {
            "fence": attempt["fence"],
            "process_id": "p",
            "evidence": [{"kind": "pull_request", "url": url}],
        },
    )


@pytest.fixture
def lane_hand(workspace, lane):  # noqa: ANN001, ANN201
    hand, _ = hand_services.hand_create(workspace=workspace, name="laned", lane=lane)
    return hand


def test_a_lane_limited_work_and_plan_key_cannot_create_or_delete_an_integration(
    lane, lane_hand, boss: Api
) -> None:
    api = Api(mint(lane_hand, ["work", "plan"], lane=lane), lane_hand)
    refused = api.post("/lanes/rewalk/github-integrations", {"repository": REPOSITORY})
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "attest"
    assert not GitHubIntegration.objects.exists()
    made = boss.post("/lanes/rewalk/github-integrations", {"repository": REPOSITORY}).json()
    deleted = api.client.delete(
        f"/api/v1/lanes/rewalk/github-integrations/{made['id']}", headers=api._headers(None)
    )
    assert error_of(deleted, 403, "scope_denied")["required_scope"] == "attest"
    assert GitHubIntegration.objects.count() == 1
    # Listing them (never with a secret) stays a planner's read.
    [listed] = api.get("/lanes/rewalk/github-integrations").json()
    assert "secret" not in listed and listed["repository"] == REPOSITORY


def test_a_key_limited_to_a_lane_cannot_create_an_integration_for_another_lane(
    workspace, lane, lane_hand
) -> None:
    other, _ = hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    api = Api(mint(lane_hand, ["attest", "plan"], lane=lane), lane_hand)
    # Another lane is not even visible to it.
    error_of(
        api.post("/lanes/other/github-integrations", {"repository": REPOSITORY}), 404, "not_found"
    )
    # And the service refuses it whoever calls.
    with pytest.raises(ScopeDenied):
        github.integration_create(
            lane=other, repository=REPOSITORY, actor="laned", key_lane_id=lane.pk
        )
    assert not GitHubIntegration.objects.exists()


@pytest.mark.parametrize(
    "repository", [None, "", "acme", "acme/app/x", "-acme/app", "acme/..", "a b/c", "a" * 40 + "/b"]
)
def test_an_integration_names_a_valid_repository(boss: Api, lane, repository: object) -> None:
    body = {} if repository is None else {"repository": repository}
    error = error_of(boss.post("/lanes/rewalk/github-integrations", body), 400, "validation_error")
    assert "repository" in error["fields"]
    assert not GitHubIntegration.objects.exists()


def test_a_hands_own_integration_never_grades_its_own_evidence(
    anonymous: Api, lane, lane_hand
) -> None:
    """The whole forgery: a lane hand makes an integration in its lane, signs its own merge of
    its own pull request, and finishes a run that requires pull_request at grade ci."""
    api = Api(mint(lane_hand, ["work", "attest"], lane=lane), lane_hand)
    made = api.post("/lanes/rewalk/github-integrations", {"repository": REPOSITORY})
    assert made.status_code == 201, made.content
    integration = made.json()
    run = run_in(lane, evidence_grades={"pull_request": "ci"})
    attempt = claim(api, run)
    answer = deliver(anonymous, integration, merged(), event="pull_request")
    assert answer.status_code == 200, answer.content
    refused = error_of(finish(api, attempt), 422, "evidence_missing")
    assert refused["grades_seen"] == {"pull_request": "hand"}
    assert Attempt.objects.get(pk=attempt["id"]).end is None
    assert Attestation.objects.get().backs is None


def test_the_same_delivery_regrades_only_its_lanes_evidence(
    anonymous: Api, boss: Api, workspace, lane, api_a: Api, integration
) -> None:
    other, _ = hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    ours, theirs = run_in(lane), run_in(other)
    assert finish(api_a, claim(api_a, ours)).status_code == 200
    assert finish(api_a, claim(api_a, theirs)).status_code == 200
    answer = deliver(anonymous, integration, merged(), event="pull_request").json()
    assert (answer["outcome"], answer["graded"]) == ("attested", 1)
    grades = dict(Evidence.objects.values_list("attempt__lane__slug", "grade"))
    assert grades == {"rewalk": "ci", "other": "hand"}
    # Nor does it count for a later finish in the other lane.
    graded = run_in(other, evidence_grades={"pull_request": "ci"}, title="Graded")
    package = graded.work_package
    assert package.lane == other
    error_of(finish(api_a, claim(api_a, graded)), 422, "evidence_missing")


@pytest.mark.parametrize(
    "html_url",
    [
        "https://evil.example/anything",
        "https://github.com/Someone/Else/pull/2",
        "https://github.com/Codertocat/Hello-World/pull/3",
        "https://github.com/Codertocat/Hello-World/issues/2",
        "http://github.com/Codertocat/Hello-World/pull/2",
        "https://github.com/Codertocat/Hello-World/pull/2/files",
    ],
)
def test_a_url_that_is_not_the_repositorys_pull_request_is_not_attested(
    anonymous: Api, integration, html_url: str
) -> None:
    payload = json.loads(merged())
    payload["pull_request"]["html_url"] = html_url
    body = json.dumps(payload).encode()
    error = error_of(
        deliver(anonymous, integration, body, event="pull_request"), 400, "validation_error"
    )
    assert "pull_request.html_url" in error["fields"]
    assert not Attestation.objects.exists()
    assert not GitHubDelivery.objects.exists()


def test_a_pull_request_of_another_repository_is_ignored(
    anonymous: Api, integration, api_a: Api, make_run
) -> None:
    finish(api_a, claim(api_a, make_run(slots=1)), "https://github.com/Someone/Else/pull/2")
    payload = json.loads(merged())
    payload["repository"]["full_name"] = "Someone/Else"
    payload["pull_request"]["html_url"] = "https://github.com/Someone/Else/pull/2"
    response = deliver(anonymous, integration, json.dumps(payload).encode(), event="pull_request")
    assert (response.status_code, response.json()["outcome"]) == (202, "ignored")
    assert not Attestation.objects.exists()
    assert Evidence.objects.get().grade == "hand"


def test_an_issue_of_another_repository_is_ignored(anonymous: Api, integration) -> None:
    payload = json.loads(ISSUE_OPENED)
    payload["repository"]["full_name"] = "Someone/Else"
    response = deliver(anonymous, integration, json.dumps(payload).encode(), event="issues")
    assert (response.status_code, response.json()["outcome"]) == (202, "ignored")


def test_a_replayed_body_under_a_new_delivery_id_does_not_undo_a_later_fail(
    anonymous: Api, integration, api_a: Api, make_run, workspace
) -> None:
    attempt = claim(api_a, make_run(slots=1))
    assert finish(api_a, attempt).status_code == 200
    body = merged()
    first = deliver(anonymous, integration, body, event="pull_request", delivery="d-1").json()
    assert (first["outcome"], first["graded"]) == ("attested", 1)
    assert Evidence.objects.get().grade == "ci"
    # CI's own key then says the pull request fails (observed now, after the merge).
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    failed = Api(mint(ci, ["attest"]), ci).post("/attestations", {"url": PR_URL, "result": "fail"})
    assert (failed.status_code, failed.json()["graded"]) == (201, 1)
    assert Evidence.objects.get().grade == "hand"
    # The captured body, signed as it was, under new delivery ids.
    for delivery in ("d-2", "d-3"):
        again = deliver(anonymous, integration, body, event="pull_request", delivery=delivery)
        assert again.status_code == 200
        assert (again.json()["outcome"], again.json()["graded"], again.json()["duplicate"]) == (
            "existing",
            0,
            False,
        )
    stored = Evidence.objects.select_related("attestation").get()
    assert (stored.grade, stored.attestation.result) == ("hand", "fail")
    assert Attestation.objects.count() == 2


def test_a_late_delivery_of_an_earlier_merge_does_not_undo_a_later_fail(
    anonymous: Api, integration, api_a: Api, make_run, workspace
) -> None:
    assert finish(api_a, claim(api_a, make_run(slots=1))).status_code == 200
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    # CI failed it after the merge (the fixture's merged_at is 2019-05-15T15:21:18Z) ...
    Api(mint(ci, ["attest"]), ci).post(
        "/attestations", {"url": PR_URL, "result": "fail", "observed_at": "2019-05-16T00:00:00Z"}
    )
    # ... and the merge's delivery arrives only now.
    late = deliver(anonymous, integration, merged(), event="pull_request").json()
    assert (late["outcome"], late["graded"]) == ("attested", 0)
    stored = Evidence.objects.select_related("attestation").get()
    assert (stored.grade, stored.attestation.result) == ("hand", "fail")


def test_one_merge_backs_the_finish_of_one_attempt(
    anonymous: Api, integration, api_a: Api, api_b: Api, make_run
) -> None:
    deliver(anonymous, integration, merged(), event="pull_request")
    first = finish(api_a, claim(api_a, make_run(slots=1, evidence_grades={"pull_request": "ci"})))
    assert first.status_code == 200, first.content
    assert [e["grade"] for e in first.json()["evidence"]] == ["ci"]
    second_attempt = claim(api_b, make_run(slots=1, evidence_grades={"pull_request": "ci"}))
    refused = error_of(finish(api_b, second_attempt), 422, "evidence_missing")
    assert refused["backing_other_attempts"] == [PR_URL]
    assert "backs another attempt's finish already" in refused["message"]
    assert Attestation.objects.get().backs_id == first.json()["id"]
    # A redelivery changes nothing either.
    deliver(anonymous, integration, merged(), event="pull_request", delivery="again")
    error_of(finish(api_b, second_attempt), 422, "evidence_missing")


def test_a_merge_delivered_after_two_finishes_grades_one_of_them(
    anonymous: Api, integration, api_a: Api, api_b: Api, make_run
) -> None:
    run = make_run(slots=2)
    assert finish(api_a, claim(api_a, run)).status_code == 200
    assert finish(api_b, claim(api_b, run)).status_code == 200
    answer = deliver(anonymous, integration, merged(), event="pull_request").json()
    assert answer["graded"] == 1
    assert sorted(Evidence.objects.values_list("grade", flat=True)) == ["ci", "hand"]
    first_attempt = Evidence.objects.order_by("attempt_id").first().attempt_id
    assert Evidence.objects.get(grade="ci").attempt_id == first_attempt
