"""`POST /leases/renew-all {process_id}`: one statement renews every live resource lease the
key's hand holds with that process identity, and says which it has lost (issue 21, item 7)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hands.models import HandKey
from leases import clock
from leases.models import Lease, LeaseStatus, Refusal
from leasing import hot
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def take(api: Api, resource: str, ttl: float = 30, process: str = "p:1") -> dict:
    answer = api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": ttl, "process_id": process}
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


def renew_all(api: Api, process: str = "p:1") -> dict:
    answer = api.post("/leases/renew-all", {"process_id": process})
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_it_renews_every_live_lease_of_the_process_and_nothing_else(
    api_a: Api, api_b: Api, api_outsider: Api, frozen_clock: datetime
) -> None:
    for n in range(20):
        take(api_a, f"src/file-{n:02}.py")
    take(api_a, "other-process", process="p:2")
    take(api_b, "teammates")
    take(api_outsider, "src/file-00.py")  # another workspace, the same name
    clock.advance(20)
    answer = renew_all(api_a)
    assert [lease["resource"] for lease in answer["renewed"]] == [
        f"src/file-{n:02}.py" for n in range(20)
    ]
    assert answer["not_renewed"] == []
    for lease in answer["renewed"]:
        assert lease["expires_in_s"] == 30 and lease["fence"] == 1 and lease["holder"] == "hand-a"
    # Everything else kept its deadline, 10 s from now.
    others = Lease.objects.exclude(resource__startswith="src/file-", holder="hand-a")
    assert {lease.deadline for lease in others} == {clock.db_now() + timedelta(seconds=10)}


def test_a_lost_lease_stays_lost_and_is_named(api_a: Api, frozen_clock: datetime) -> None:
    take(api_a, "short", ttl=5)
    take(api_a, "long", ttl=60)
    clock.advance(5)  # exactly at its deadline "short" is still held (lost only after it)
    assert [lease["resource"] for lease in renew_all(api_a)["renewed"]] == ["long", "short"]
    clock.advance(5.001)
    answer = renew_all(api_a)
    assert [lease["resource"] for lease in answer["renewed"]] == ["long"]
    [lost] = answer["not_renewed"]
    assert (lost["lease"]["resource"], lost["lease"]["state"], lost["code"]) == (
        "short",
        "lost",
        "lease_lost",
    )
    assert "short" in lost["message"]
    assert Lease.objects.get(resource="short").deadline < clock.db_now()
    # A partial answer is not a refused call.
    assert not Refusal.objects.exists()


def test_a_released_or_broken_lease_is_in_neither_list(api_a: Api, boss: Api) -> None:
    released = take(api_a, "released")
    broken = take(api_a, "broken")
    take(api_a, "kept")
    api_a.post("/leases/release", {"resource": "released", "fence": released["fence"]})
    assert boss.post("/leases/break", {"resource": "broken", "reason": "test"}).status_code == 200
    answer = renew_all(api_a)
    assert [lease["resource"] for lease in answer["renewed"]] == ["kept"]
    assert answer["not_renewed"] == []
    assert Lease.objects.get(resource="broken").fence == broken["fence"] + 1


def test_slot_leases_are_renewed_by_their_reports_only(api_a: Api, run) -> None:  # noqa: ANN001
    claim = api_a.post(f"/runs/{run.id}/claim", {"process_id": "p:1"})
    assert claim.status_code == 201
    take(api_a, "plain")
    assert [lease["resource"] for lease in renew_all(api_a)["renewed"]] == ["plain"]


def test_it_costs_one_statement_however_many_leases(api_a: Api) -> None:
    """One statement (`leasing.hot.run_statement`, through psycopg itself:
    tests/leases/test_plans.py reads its plan) renews them all and names the lost, however many
    there are; nothing reads or writes a lease through Django besides."""

    def statements() -> tuple[int, int]:
        with (
            mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as ran,
            CaptureQueriesContext(connection) as queries,
        ):
            renew_all(api_a)
        # Leave out authentication's own (the key, with any lease a bound key lives by).
        through_django = sum(
            1
            for q in queries.captured_queries
            if Lease._meta.db_table in q["sql"] and HandKey._meta.db_table not in q["sql"]
        )
        return ran.call_count, through_django

    take(api_a, "one")
    few = statements()
    for n in range(40):
        take(api_a, f"many/{n}")
    assert statements() == few == (1, 0)  # the renewal and the look for lost ones, together


def test_it_refuses_a_bad_process_id_and_a_key_without_the_scope(
    api_a: Api, boss: Api, owner
) -> None:  # noqa: ANN001
    error_of(api_a.post("/leases/renew-all", {"process_id": ""}), 400, "validation_error")
    error_of(api_a.post("/leases/renew-all", {"process_id": 7}), 400, "validation_error")
    error_of(api_a.post("/leases/renew-all", {}), 400, "validation_error")
    work_only = Api(mint(owner, ["work"]), owner)
    error_of(work_only.post("/leases/renew-all", {"process_id": "p:1"}), 403, "scope_denied")


@pytest.mark.django_db(transaction=True)
def test_a_renew_all_racing_a_break_never_revives_the_broken_tenure(api_a: Api, boss: Api) -> None:
    for round_ in range(15):
        resource = f"race-{round_}"
        held = take(api_a, resource)
        answers: dict[str, object] = {}

        def renew(answers: dict[str, object] = answers) -> None:
            try:
                answers["renew"] = renew_all(api_a)
            finally:
                connection.close()

        def break_(answers: dict[str, object] = answers, resource: str = resource) -> None:
            try:
                answers["break"] = boss.post(
                    "/leases/break", {"resource": resource, "reason": "race"}
                ).status_code
            finally:
                connection.close()

        threads = [threading.Thread(target=renew), threading.Thread(target=break_)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert answers["break"] == 200
        lease = Lease.objects.get(resource=resource)
        # Whichever came first, the break ended the tenure: nothing renewed it afterwards.
        assert lease.status == LeaseStatus.FREE and lease.fence == held["fence"] + 1
        api_a.post("/leases/release", {"resource": resource, "fence": held["fence"]})


def test_it_answers_the_renewed_and_the_lost_in_order(api_a: Api, frozen_clock) -> None:  # noqa: ANN001
    """The same process's leases, renewed and lost, in one answer: each list in name order."""
    for name in ("b", "a/x", "c"):
        take(api_a, name)
    take(api_a, "d", ttl=1)
    clock.advance(5)
    answer = renew_all(api_a)
    assert [lease["resource"] for lease in answer["renewed"]] == ["a/x", "b", "c"]
    assert [(lost["lease"]["resource"], lost["code"]) for lost in answer["not_renewed"]] == [
        ("d", "lease_lost")
    ]
