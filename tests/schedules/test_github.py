"""GitHub's deliveries: trusted by X-Hub-Signature-256 over the raw body (GitHub's documented
example payloads, signed here with the integration's secret); an opened issue becomes a work
package once, whatever the redeliveries; a merged pull request grades the evidence naming it ci
through the attestations' own rule."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from evidence.models import Attestation, Evidence
from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from fleet.models import WorkPackage
from hands import services as hand_services
from leases.models import Event
from schedules.models import GitHubDelivery, GitHubIntegration
from tests.schedules.conftest import REPOSITORY
from tests.support.api import API, Api, error_of

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"
ISSUE_OPENED = (FIXTURES / "issues-opened.json").read_bytes()
PR_CLOSED = (FIXTURES / "pull_request-closed.json").read_bytes()
ISSUE_URL = "https://github.com/Codertocat/Hello-World/issues/1"
PR_URL = "https://github.com/Codertocat/Hello-World/pull/2"


def merged(raw: bytes = PR_CLOSED) -> bytes:
    """The documented closed payload as GitHub sends it for a merged pull request."""
    payload = json.loads(raw)
    payload["pull_request"].update(
        merged=True, merged_at="2019-05-15T15:21:18Z", merged_by=payload["sender"]
    )
    return json.dumps(payload).encode()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    anonymous: Api,
    integration: dict[str, Any],
    body: bytes,
    *,
    event: str,
    delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    signature: str | None = None,
    secret: str | None = None,
) -> Any:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": (
            signature if signature is not None else sign(secret or integration["secret"], body)
        ),
    }
    return anonymous.client.post(
        f"{API}/integrations/github/{integration['id']}",
        data=body,
        content_type="application/json",
        headers=headers,
    )


def test_the_secret_is_shown_once(boss: Api, integration: dict[str, Any]) -> None:
    assert integration["secret"].startswith("ghsec_")
    assert integration["delivery_path"] == f"/api/v1/integrations/github/{integration['id']}"
    listed = boss.get("/lanes/rewalk/github-integrations").json()
    assert [row["id"] for row in listed] == [integration["id"]]
    assert "secret" not in listed[0]


def test_an_opened_issue_becomes_a_work_package(anonymous: Api, integration, lane) -> None:
    response = deliver(anonymous, integration, ISSUE_OPENED, event="issues")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["outcome"], body["event"], body["action"], body["duplicate"]) == (
        "created",
        "issues",
        "opened",
        False,
    )
    package = WorkPackage.objects.get()
    assert (package.lane, package.key, package.title, package.external_ref) == (
        lane,
        "Codertocat/Hello-World#1",
        "Spelling error in the README file",
        ISSUE_URL,
    )
    assert body["work_package"]["id"] == package.pk
    assert body["work_package"]["external_ref"] == ISSUE_URL


def test_a_redelivery_answers_as_the_first_and_makes_nothing(anonymous: Api, integration) -> None:
    first = deliver(anonymous, integration, ISSUE_OPENED, event="issues").json()
    again = deliver(anonymous, integration, ISSUE_OPENED, event="issues")
    assert again.status_code == 200
    assert again.json() == {**first, "duplicate": True}
    assert WorkPackage.objects.count() == 1
    assert GitHubDelivery.objects.count() == 1


def test_another_delivery_of_the_same_issue_finds_its_package(anonymous: Api, integration) -> None:
    deliver(anonymous, integration, ISSUE_OPENED, event="issues")
    reopened = json.loads(ISSUE_OPENED)
    reopened["action"] = "reopened"
    body = json.dumps(reopened).encode()
    response = deliver(anonymous, integration, body, event="issues", delivery="second")
    assert response.json()["outcome"] == "existing"
    assert WorkPackage.objects.count() == 1


def test_with_a_label_only_labelled_issues_count(boss: Api, anonymous: Api, lane) -> None:
    integration = boss.post(
        "/lanes/rewalk/github-integrations", {"repository": REPOSITORY, "label": "agents"}
    ).json()
    # The documented issue carries "bug", not "agents".
    ignored = deliver(anonymous, integration, ISSUE_OPENED, event="issues")
    assert (ignored.status_code, ignored.json()["outcome"]) == (202, "ignored")
    assert not WorkPackage.objects.exists()
    labeled = json.loads(ISSUE_OPENED)
    labeled["action"] = "labeled"
    labeled["label"] = {"name": "agents"}
    body = json.dumps(labeled).encode()
    response = deliver(anonymous, integration, body, event="issues", delivery="labeled")
    assert response.json()["outcome"] == "created"
    assert WorkPackage.objects.get().external_ref == ISSUE_URL


@pytest.mark.parametrize(
    "signature",
    ["", "sha256=" + "0" * 64, "sha1=abc", "sha256=nothex"],
)
def test_a_bad_signature_is_refused_and_acts_on_nothing(
    anonymous: Api, integration, signature: str
) -> None:
    response = deliver(anonymous, integration, ISSUE_OPENED, event="issues", signature=signature)
    error_of(response, 401, "signature_invalid")
    assert not WorkPackage.objects.exists()
    assert not GitHubDelivery.objects.exists()


def test_another_secret_or_another_body_does_not_verify(anonymous: Api, integration) -> None:
    response = deliver(anonymous, integration, ISSUE_OPENED, event="issues", secret="other" * 4)
    error_of(response, 401, "signature_invalid")
    tampered = deliver(
        anonymous,
        integration,
        ISSUE_OPENED.replace(b"Spelling", b"Spilling"),
        event="issues",
        signature=sign(integration["secret"], ISSUE_OPENED),
    )
    error_of(tampered, 401, "signature_invalid")
    assert not WorkPackage.objects.exists()


def test_an_unknown_or_deleted_integration_answers_as_a_bad_signature(
    boss: Api, anonymous: Api, integration
) -> None:
    error_of(
        deliver(
            anonymous, {**integration, "id": integration["id"] + 99}, ISSUE_OPENED, event="issues"
        ),
        401,
        "signature_invalid",
    )
    deleted = boss.client.delete(
        f"{API}/lanes/rewalk/github-integrations/{integration['id']}", headers=boss._headers(None)
    )
    assert deleted.status_code == 204
    assert not GitHubIntegration.objects.exists()
    error_of(
        deliver(anonymous, integration, ISSUE_OPENED, event="issues"), 401, "signature_invalid"
    )


def test_ping_answers_200(anonymous: Api, integration) -> None:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    response = deliver(anonymous, integration, body, event="ping")
    assert response.status_code == 200
    assert response.json()["outcome"] == "pong"


def test_an_unknown_event_is_ignored_with_202(anonymous: Api, integration) -> None:
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    response = deliver(anonymous, integration, body, event="push")
    assert (response.status_code, response.json()["outcome"]) == (202, "ignored")
    assert not WorkPackage.objects.exists()


def test_malformed_json_is_400(anonymous: Api, integration) -> None:
    response = deliver(anonymous, integration, b'{"action": ', event="issues")
    error_of(response, 400, "validation_error")
    not_an_issue = json.dumps({"action": "opened", "issue": {"number": "one"}}).encode()
    response = deliver(anonymous, integration, not_an_issue, event="issues", delivery="x")
    error_of(response, 400, "validation_error")
    assert not GitHubDelivery.objects.exists()


def test_a_delivery_without_its_id_is_400(anonymous: Api, integration) -> None:
    error_of(
        deliver(anonymous, integration, ISSUE_OPENED, event="issues", delivery=""),
        400,
        "validation_error",
    )


def test_an_oversized_body_is_refused(anonymous: Api, integration, settings) -> None:
    body = json.dumps({"action": "opened", "pad": "x" * (settings.GC_MAX_BODY_BYTES)}).encode()
    error_of(deliver(anonymous, integration, body, event="issues"), 413, "payload_too_large")


def finished_with(workspace, run, url: str) -> Evidence:
    hand, _ = hand_services.hand_create(workspace=workspace, name=f"h-{url[-1]}")
    view = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p")
    attempt_finish(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="p",
        evidence=[{"kind": "pull_request", "url": url}],
    )
    return Evidence.objects.get(attempt=view.attempt)


def test_a_merged_pull_request_grades_the_evidence_naming_it_ci(
    anonymous: Api, integration, workspace, make_run
) -> None:
    run = make_run(slots=2, evidence_required=["pull_request"])
    named = finished_with(workspace, run, PR_URL)
    other = finished_with(workspace, run, "https://github.com/Codertocat/Hello-World/pull/3")
    assert named.grade == "hand"
    body = merged()
    response = deliver(anonymous, integration, body, event="pull_request")
    assert response.status_code == 200, response.content
    assert (response.json()["outcome"], response.json()["graded"]) == ("attested", 1)
    named.refresh_from_db()
    other.refresh_from_db()
    assert (named.grade, other.grade) == ("ci", "hand")
    attestation = Attestation.objects.get()
    assert (attestation.url, attestation.result, attestation.key_prefix) == (PR_URL, "pass", "")
    assert attestation.hand == f"github-integration-{integration['id']}"
    event = Event.objects.get(kind="attested")
    assert event.data["url"] == PR_URL
    assert event.data["graded"] == 1


def test_a_run_requiring_ci_finishes_once_the_merge_is_delivered(
    anonymous: Api, integration, workspace, make_run
) -> None:
    deliver(anonymous, integration, merged(), event="pull_request")
    run = make_run(slots=1, evidence_grades={"pull_request": "ci"})
    assert finished_with(workspace, run, PR_URL).grade == "ci"


def test_a_pull_request_closed_without_merging_grades_nothing(
    anonymous: Api, integration, workspace, make_run
) -> None:
    run = make_run(slots=1, evidence_required=["pull_request"])
    named = finished_with(workspace, run, PR_URL)
    # The documented payload as published: closed, "merged": false.
    response = deliver(anonymous, integration, PR_CLOSED, event="pull_request")
    assert (response.status_code, response.json()["outcome"]) == (202, "ignored")
    named.refresh_from_db()
    assert named.grade == "hand"
    assert not Attestation.objects.exists()


def test_nothing_crosses_workspaces(
    anonymous: Api, integration, outsider_workspace, outsider
) -> None:
    lane, _ = hand_services.lane_create(workspace=outsider_workspace, slug="rewalk", name="R")
    from fleet.plan import services as plan_services

    package, _ = plan_services.work_package_create(lane=lane, key="x", title="x")
    run = plan_services.run_create(work_package=package, title="r", evidence_required=["pr"])
    view = attempt_services.attempt_claim(hand=outsider, run_id=run.pk, process_id="p")
    attempt_finish(
        hand=outsider,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="p",
        evidence=[{"kind": "pr", "url": PR_URL}],
    )
    assert deliver(anonymous, integration, merged(), event="pull_request").json()["graded"] == 0
    assert Evidence.objects.get().grade == "hand"


def test_a_replayed_integration_create_makes_one_and_shows_no_secret(boss: Api, lane) -> None:
    headers = {"Idempotency-Key": "gh-1"}
    body = {"repository": REPOSITORY}
    first = boss.post("/lanes/rewalk/github-integrations", body, headers=headers)
    again = boss.post("/lanes/rewalk/github-integrations", body, headers=headers)
    assert first.json()["secret"].startswith("ghsec_")
    assert again.json() == {**first.json(), "secret": None}
    assert GitHubIntegration.objects.count() == 1
