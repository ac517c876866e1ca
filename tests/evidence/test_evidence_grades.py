"""Evidence graded by who observed it: the hand's word, the wrapper's, CI's attestation (the
`attest` scope); a run's least grade per kind, a finish below it refused naming the grade;
nothing crosses workspaces."""

from __future__ import annotations

from typing import Any

import pytest

from evidence.models import Attestation, Evidence
from fleet.models import Attempt
from hands import services as hand_services
from hands.models import Hand, Workspace
from leases.models import Event, Lease
from tests.support.api import PR_URL, Api, error_of, mint, refusals

pytestmark = pytest.mark.django_db

PR = {"kind": "pull_request", "url": PR_URL}


@pytest.fixture
def ci(workspace: Workspace) -> Api:
    hand, _ = hand_services.hand_create(workspace=workspace, name="ci")
    return Api(mint(hand, ["attest"]), hand)


@pytest.fixture
def graded_run(make_run: Any) -> Any:
    return make_run(evidence_grades={"pull_request": "ci"}, slots=1)


def claim(api: Api, run: Any) -> dict[str, Any]:
    response = api.post(f"/runs/{run.pk}/claim", {"process_id": "p"})
    assert response.status_code == 201, response.content
    return response.json()


def finish(api: Api, attempt: dict[str, Any], *evidence: dict[str, str], **body: Any) -> Any:
    return api.post(
        f"/attempts/{attempt['id']}/finish",
        {"fence": attempt["fence"], "process_id": "p", "evidence": list(evidence), **body},
    )


def attest(api: Api, url: str = PR_URL, result: str = "pass", **body: Any) -> dict[str, Any]:
    response = api.post("/attestations", {"url": url, "result": result, **body})
    assert response.status_code == 201, response.content
    return response.json()


def test_it_grades_a_finish_hand_unless_the_wrapper_says_it_saw_it(
    api_a: Api, make_run: Any
) -> None:
    run = make_run(evidence_required=["pull_request"])
    first = finish(api_a, claim(api_a, run), PR)
    assert first.status_code == 200, first.content
    [item] = first.json()["evidence"]
    assert (item["grade"], item["observed_by"], item["attestation"]) == ("hand", "hand", None)
    second = finish(api_a, claim(api_a, run), PR, observed_by="wrapper")
    assert [e["grade"] for e in second.json()["evidence"]] == ["wrapper"]
    assert sorted(Evidence.objects.values_list("grade", flat=True)) == ["hand", "wrapper"]


def test_a_finish_cannot_say_ci_saw_it(api_a: Api, run: Any) -> None:
    attempt = claim(api_a, run)
    error = error_of(finish(api_a, attempt, PR, observed_by="ci"), 400, "validation_error")
    assert "observed_by" in error["fields"]
    assert Attempt.objects.get(pk=attempt["id"]).end is None


def test_a_finish_below_the_grade_is_refused_naming_it_and_the_tenure_stays(
    api_a: Api, graded_run: Any
) -> None:
    assert graded_run.evidence_required == ["pull_request"]
    attempt = claim(api_a, graded_run)
    error = error_of(finish(api_a, attempt, PR, observed_by="wrapper"), 422, "evidence_missing")
    assert error["missing"] == ["pull_request"]
    assert error["grades_needed"] == {"pull_request": "ci"}
    assert error["grades_seen"] == {"pull_request": "wrapper"}
    assert "pull_request evidence seen by ci" in error["message"]
    assert Attempt.objects.get(pk=attempt["id"]).end is None
    assert Lease.objects.get(resource=f"run/{graded_run.pk}/slot/0").status == "held"
    assert not Evidence.objects.exists()
    assert refusals("evidence_missing")[0].details["grades_needed"] == {"pull_request": "ci"}


def test_once_ci_attests_the_retried_finish_passes_graded_ci(
    api_a: Api, ci: Api, graded_run: Any
) -> None:
    attempt = claim(api_a, graded_run)
    assert finish(api_a, attempt, PR).status_code == 422
    answer = attest(ci, kind="pull_request", note="build 12 green")
    assert answer["graded"] == 0  # nothing stored yet: the refused finish rolled back
    assert (answer["hand"], answer["key_prefix"]) == ("ci", ci.key.split("_")[1])
    done = finish(api_a, attempt, PR)
    assert done.status_code == 200, done.content
    [item] = done.json()["evidence"]
    assert item["grade"] == "ci"
    assert item["observed_by"] == "hand"
    assert item["attestation"]["hand"] == "ci"
    assert item["attestation"]["result"] == "pass"
    listed = api_a.get(f"/attempts/{attempt['id']}/evidence").json()
    assert [e["grade"] for e in listed] == ["ci"]


def test_an_attestation_after_the_finish_regrades_the_evidence_and_a_fail_undoes_it(
    api_a: Api, ci: Api, run: Any
) -> None:
    attempt = claim(api_a, run)
    assert finish(api_a, attempt, PR, observed_by="wrapper").status_code == 200
    assert attest(ci)["graded"] == 1
    assert Evidence.objects.get().grade == "ci"
    assert attest(ci, result="fail")["graded"] == 1
    stored = Evidence.objects.select_related("attestation").get()
    assert (stored.grade, stored.attestation.result) == ("wrapper", "fail")
    events = Event.objects.filter(kind="attested").order_by("id")
    assert [(e.data["result"], e.data["graded"], e.hand) for e in events] == [
        ("pass", 1, "ci"),
        ("fail", 1, "ci"),
    ]


def test_a_failed_attestation_does_not_grade_a_finish(api_a: Api, ci: Api, graded_run: Any) -> None:
    attest(ci, result="fail")
    attempt = claim(api_a, graded_run)
    error = error_of(finish(api_a, attempt, PR), 422, "evidence_missing")
    assert error["grades_seen"] == {"pull_request": "hand"}


def test_an_absent_kind_and_a_kind_below_its_grade_are_named_together(
    api_a: Api, make_run: Any
) -> None:
    run = make_run(evidence_required=["commit"], evidence_grades={"pull_request": "wrapper"})
    assert run.evidence_required == ["commit", "pull_request"]
    error = error_of(finish(api_a, claim(api_a, run), PR), 422, "evidence_missing")
    assert error["missing"] == ["commit", "pull_request"]
    assert error["grades_needed"] == {"pull_request": "wrapper"}
    assert "kind: commit" in error["message"]


def test_the_best_piece_of_a_kind_counts(api_a: Api, ci: Api, graded_run: Any) -> None:
    other = "https://github.com/acme/app/pull/8"
    attest(ci, url=other)
    done = finish(api_a, claim(api_a, graded_run), PR, {"kind": "pull_request", "url": other})
    assert done.status_code == 200, done.content
    assert [e["grade"] for e in done.json()["evidence"]] == ["hand", "ci"]


def test_a_work_key_cannot_attest_and_a_supervisor_mints_an_attest_key(
    api_a: Api, boss: Api
) -> None:
    refused = api_a.post("/attestations", {"url": PR_URL, "result": "pass"})
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "attest"
    assert boss.post("/hands", {"name": "ci"}).status_code in (200, 201)
    minted = boss.post("/hands/ci/keys", {"scopes": ["attest"]})
    assert minted.status_code == 201, minted.content
    assert attest(Api(minted.json()["key"]))["hand"] == "ci"
    # A key that lacks `attest` cannot mint one.
    hands_key = boss.post("/hands/ci/keys", {"scopes": ["hands"]}).json()["key"]
    refused = Api(hands_key).post("/hands/ci/keys", {"scopes": ["attest"]})
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "attest"
    # An attest key reads attestations but does no work.
    attest_key = Api(minted.json()["key"])
    assert [a["url"] for a in attest_key.get("/attestations", {"url": PR_URL}).json()] == [PR_URL]
    assert error_of(attest_key.get("/runs"), 403, "scope_denied")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"url": PR_URL},
        {"url": PR_URL, "result": "maybe"},
        {"url": "javascript:alert(1)", "result": "pass"},
        {"url": "/relative", "result": "pass"},
        {"url": 7, "result": "pass"},
        {"url": PR_URL, "result": "pass", "kind": "k" * 65},
        {"url": PR_URL, "result": "pass", "note": "n" * 2001},
        {"url": "https://x.example/" + "a" * 2000, "result": "pass"},
        {"url": "https://x.example/\u0000", "result": "pass"},
        ["pass"],
    ],
)
def test_bad_attestations_are_validation_errors_and_record_nothing(ci: Api, body: Any) -> None:
    error_of(ci.post("/attestations", body), 400, "validation_error")
    assert not Attestation.objects.exists()
    assert not Event.objects.filter(kind="attested").exists()


@pytest.mark.parametrize(
    "grades",
    [{"pull_request": "gold"}, {"": "ci"}, {"pull_request": 3}, ["ci"], {"k" * 65: "ci"}],
)
def test_bad_evidence_grades_on_a_run_are_validation_errors(boss: Api, grades: Any) -> None:
    lane = boss.post("/lanes", {"slug": "l", "name": "L"})
    assert lane.status_code in (200, 201), lane.content
    package = boss.post("/lanes/l/work-packages", {"key": "k", "title": "t"}).json()
    answer = boss.post(
        f"/work-packages/{package['id']}/runs", {"title": "t", "evidence_grades": grades}
    )
    assert "evidence_grades" in error_of(answer, 400, "validation_error")["fields"]


def test_a_run_created_over_the_api_answers_its_grades(boss: Api) -> None:
    boss.post("/lanes", {"slug": "l", "name": "L"})
    package = boss.post("/lanes/l/work-packages", {"key": "k", "title": "t"}).json()
    made = boss.post(
        f"/work-packages/{package['id']}/runs",
        {"title": "t", "evidence_grades": {"pull_request": "ci"}},
    )
    assert made.status_code == 201, made.content
    assert made.json()["evidence_grades"] == {"pull_request": "ci"}
    assert made.json()["evidence_required"] == ["pull_request"]


def test_nothing_crosses_workspaces(
    api_a: Api, run: Any, graded_run: Any, outsider: Hand, api_outsider: Api
) -> None:
    attempt = claim(api_a, run)
    assert finish(api_a, attempt, PR).status_code == 200
    # The outsider's key has every scope, attest included, in its own workspace.
    assert attest(api_outsider)["graded"] == 0
    assert Evidence.objects.get().grade == "hand"
    assert api_outsider.get("/attestations").json()[0]["hand"] == outsider.name
    assert api_a.get("/attestations").status_code == 403
    assert not Event.objects.filter(kind="attested", workspace_id=run.workspace_id).exists()
    # Nor does it count for a finish in another workspace.
    error = error_of(finish(api_a, claim(api_a, graded_run), PR), 422, "evidence_missing")
    assert error["grades_seen"] == {"pull_request": "hand"}


# --- Forgery (issue 30, item 1) ---------------------------------------------------------------


def test_a_key_with_work_and_attest_never_attests_its_own_evidence(
    owner: Hand, run: Any, graded_run: Any
) -> None:
    both = Api(mint(owner, ["work", "attest"]), owner)
    assert finish(both, claim(both, run), PR).status_code == 200
    error = error_of(
        both.post("/attestations", {"url": PR_URL, "result": "pass"}), 403, "attest_own_evidence"
    )
    assert error["url"] == PR_URL
    assert not Attestation.objects.exists()
    assert Evidence.objects.get().grade == "hand"
    assert refusals("attest_own_evidence")[0].hand == owner.name


def test_a_hands_own_attestation_posted_first_does_not_grade_its_finish(
    owner: Hand, graded_run: Any
) -> None:
    both = Api(mint(owner, ["work", "attest"]), owner)
    attest(both)  # no evidence of its own yet: recorded
    attempt = claim(both, graded_run)
    error = error_of(finish(both, attempt, PR), 422, "evidence_missing")
    assert error["grades_seen"] == {"pull_request": "hand"}
    assert Attestation.objects.get().backs is None


def test_a_lane_limited_attest_key_regrades_only_its_lanes_evidence(
    workspace: Workspace, lane: Any, api_a: Api, make_run: Any
) -> None:
    from fleet.plan import services as plan_services

    other, _ = hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    package, _ = plan_services.work_package_create(lane=other, key="o", title="O")
    theirs = plan_services.run_create(work_package=package, title="r", slots=1)
    assert finish(api_a, claim(api_a, make_run(slots=1)), PR).status_code == 200
    assert finish(api_a, claim(api_a, theirs), PR).status_code == 200
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    laned = Api(mint(ci, ["attest"], lane=lane), ci)
    answer = attest(laned)
    assert (answer["graded"], answer["lane"]) == (1, "rewalk")
    grades = dict(Evidence.objects.values_list("attempt__lane__slug", "grade"))
    assert grades == {"rewalk": "ci", "other": "hand"}
    # Its fail, likewise, reaches only its lane.
    attest(ci_of(workspace, "ci-2"), result="pass")
    assert dict(Evidence.objects.values_list("attempt__lane__slug", "grade"))["other"] == "ci"
    attest(laned, result="fail")
    grades = dict(Evidence.objects.values_list("attempt__lane__slug", "grade"))
    assert grades == {"rewalk": "hand", "other": "ci"}


def ci_of(workspace: Workspace, name: str) -> Api:
    hand, _ = hand_services.hand_create(workspace=workspace, name=name)
    return Api(mint(hand, ["attest"]), hand)


def test_a_pass_observed_before_a_later_fail_never_undoes_it(api_a: Api, ci: Api, run: Any) -> None:
    assert finish(api_a, claim(api_a, run), PR).status_code == 200
    attest(ci, result="fail", observed_at="2020-01-01T12:00:00Z")
    late = attest(ci, result="pass", observed_at="2020-01-01T11:00:00Z")
    assert late["graded"] == 0
    stored = Evidence.objects.select_related("attestation").get()
    assert (stored.grade, stored.attestation.result) == ("hand", "fail")
    # A pass observed after the fail grades it again.
    assert attest(ci, result="pass", observed_at="2020-01-01T13:00:00Z")["graded"] == 1
    assert Evidence.objects.get().grade == "ci"


def test_the_same_observation_posted_again_changes_nothing(api_a: Api, ci: Api, run: Any) -> None:
    assert finish(api_a, claim(api_a, run), PR).status_code == 200
    body = {"url": PR_URL, "result": "pass", "observed_at": "2020-01-01T11:00:00Z"}
    first = ci.post("/attestations", body)
    assert (first.status_code, first.json()["graded"], first.json()["duplicate"]) == (201, 1, False)
    again = ci.post("/attestations", body)
    assert again.status_code == 200
    assert again.json() == {**first.json(), "graded": 0, "duplicate": True}
    assert Attestation.objects.count() == 1
    assert Event.objects.filter(kind="attested").count() == 1


def test_an_observation_in_the_future_is_refused(ci: Api) -> None:
    body = {"url": PR_URL, "result": "pass", "observed_at": "2999-01-01T00:00:00Z"}
    assert (
        "observed_at" in error_of(ci.post("/attestations", body), 400, "validation_error")["fields"]
    )
    assert not Attestation.objects.exists()


def test_one_attestation_backs_the_finish_of_one_attempt(
    api_a: Api, api_b: Api, ci: Api, make_run: Any
) -> None:
    made = attest(ci)
    first = finish(api_a, claim(api_a, make_run(evidence_grades={"pull_request": "ci"})), PR)
    assert first.status_code == 200, first.content
    assert first.json()["evidence"][0]["attestation"]["backs"] == first.json()["id"]
    second = claim(api_b, make_run(evidence_grades={"pull_request": "ci"}))
    error = error_of(finish(api_b, second, PR), 422, "evidence_missing")
    assert error["backing_other_attempts"] == [PR_URL]
    assert "each attempt needs an attestation of its own" in error["message"]
    # Its own attestation then grades it.
    assert attest(ci)["id"] != made["id"]
    done = finish(api_b, second, PR)
    assert done.status_code == 200, done.content
    backs = sorted(Attestation.objects.values_list("backs_id", flat=True))
    assert backs == sorted([first.json()["id"], second["id"]])


# Each case: the attestations in arrival order, (result, observed hour). Evidence finished
# before all of them (graded by the regrading statements, the rule's SQL form) ends as evidence
# finished after all of them (graded by `attestation_deciding`, its Python form).
SEQUENCES = [
    [("pass", 1)],
    [("fail", 1)],
    [("pass", 1), ("fail", 2)],
    [("fail", 2), ("pass", 1)],
    [("pass", 3), ("fail", 2)],
    [("pass", 1), ("fail", 2), ("pass", 3)],
    [("fail", 1), ("pass", 2)],
    [("pass", 2), ("pass", 1), ("fail", 3)],
    [("fail", 3), ("pass", 1), ("pass", 2)],
    [("pass", 1), ("fail", 1)],
]


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_a_finish_before_and_a_finish_after_the_attestations_agree(
    api_a: Api, ci: Api, make_run: Any, sequence: list[tuple[str, int]]
) -> None:
    before_url, after_url = PR_URL, "https://github.com/acme/app/pull/70"
    before = finish(api_a, claim(api_a, make_run(slots=1)), {**PR, "url": before_url})
    assert before.status_code == 200
    for url in (before_url, after_url):
        for result, hour in sequence:
            attest(ci, url=url, result=result, observed_at=f"2020-01-01T{hour:02d}:00:00Z")
    after = finish(api_a, claim(api_a, make_run(slots=1)), {**PR, "url": after_url})
    assert after.status_code == 200

    def outcome(attempt_id: int) -> tuple[str, Any]:
        stored = Evidence.objects.select_related("attestation").get(attempt_id=attempt_id)
        at = stored.attestation
        return stored.grade, at and (at.result, at.observed_at.hour)

    assert outcome(before.json()["id"]) == outcome(after.json()["id"])
