"""Idempotency-Key on the creating POSTs: a retry gets the first answer and creates nothing."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from fleet.models import Run, WorkPackage
from hands.models import Hand, HandKey, IdempotencyRecord
from leases.models import Event
from tests.support.api import Api, error_of, refusals

pytestmark = pytest.mark.django_db


def test_a_repeat_with_the_same_key_and_body_returns_the_first_answer(boss: Api, run) -> None:
    path = f"/work-packages/{run.work_package_id}/runs"
    body = {"title": "Again", "slots": 2}
    headers = {"Idempotency-Key": "run-create-1"}
    first = boss.post(path, body, headers)
    assert first.status_code == 201
    second = boss.post(path, body, headers)
    assert second.status_code == 201
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Run.objects.filter(title="Again").count() == 1
    assert IdempotencyRecord.objects.get().idempotency_key == "run-create-1"


def test_the_same_key_with_another_body_is_refused(boss: Api, lane) -> None:
    headers = {"Idempotency-Key": "wp-1"}
    assert (
        boss.post("/lanes/rewalk/work-packages", {"title": "A", "key": "a"}, headers).status_code
        == 201
    )
    error = error_of(
        boss.post("/lanes/rewalk/work-packages", {"title": "B", "key": "b"}, headers),
        409,
        "idempotency_conflict",
    )
    assert error["idempotency_key"] == "wp-1"
    assert list(WorkPackage.objects.values_list("key", flat=True)) == ["a"]
    error_of(boss.post("/hands", {"name": "x"}, headers), 409, "idempotency_conflict")
    assert not Hand.objects.filter(name="x").exists()
    assert len(refusals("idempotency_conflict")) == 2


def test_a_replayed_key_issue_never_shows_the_secret_again(boss: Api, owner) -> None:
    headers = {"Idempotency-Key": "mint-1"}
    first = boss.post("/hands/hand-a/keys", {"scopes": ["work"]}, headers)
    assert first.status_code == 201
    assert first.json()["key"].startswith("gc_")
    again = boss.post("/hands/hand-a/keys", {"scopes": ["work"]}, headers)
    assert again.status_code == 201
    assert again.json()["key"] is None
    assert again.json()["prefix"] == first.json()["prefix"]
    assert HandKey.objects.filter(hand=owner).count() == 1
    assert Event.objects.filter(kind="key_issued", hand="hand-a").count() == 1
    secret = first.json()["key"].split("_", 2)[2]
    assert secret not in str(IdempotencyRecord.objects.get().response)


def test_keys_are_per_caller_and_a_refused_first_call_is_not_stored(
    boss: Api, workspace, lane
) -> None:
    from hands import services as hand_services

    other_hand, _ = hand_services.hand_create(workspace=workspace, name="planner")
    planner = Api(hand_services.key_issue(hand=other_hand, scopes=["plan"], actor="t").plaintext)
    headers = {"Idempotency-Key": "same"}
    refused = boss.post("/work-packages/999/runs", {"title": "x"}, headers)
    error_of(refused, 404, "not_found")
    assert IdempotencyRecord.objects.count() == 0
    assert boss.post("/lanes", {"slug": "one"}, headers).status_code == 201
    assert planner.post("/lanes", {"slug": "two"}, headers).status_code == 201
    assert IdempotencyRecord.objects.count() == 2


def test_a_service_refusal_inside_an_idempotent_call_is_still_recorded(boss: Api, run) -> None:
    boss.patch(f"/runs/{run.pk}", {"state": "closed"})
    package = run.work_package
    package.state = "closed"
    package.save(update_fields=["state"])
    response = boss.post(
        f"/work-packages/{package.pk}/runs", {"title": "late"}, {"Idempotency-Key": "k"}
    )
    error_of(response, 409, "run_closed")
    assert len(refusals("run_closed")) == 1
    assert IdempotencyRecord.objects.count() == 0


def test_an_idempotency_key_must_be_printable(boss: Api) -> None:
    error = error_of(
        boss.post("/lanes", {"slug": "x"}, {"Idempotency-Key": "x" * 201}), 400, "validation_error"
    )
    assert "Idempotency-Key" in error["fields"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_first_requests_create_once(boss: Api, run) -> None:
    path = f"/work-packages/{run.work_package_id}/runs"
    answers: list[tuple[int, dict]] = []
    barrier = threading.Barrier(4)

    def call() -> None:
        try:
            barrier.wait()
            response = Api(boss.key).post(path, {"title": "Race"}, {"Idempotency-Key": "race"})
            answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [201] * 4
    assert len({body["id"] for _, body in answers}) == 1
    assert Run.objects.filter(title="Race").count() == 1
