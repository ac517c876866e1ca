"""One key hammers refused calls (issue 33, item 5): each refused call of a valid key used to
write a refusal row of its own (up to a few KB), as fast as the key could call. Now a key's
first `KEPT_PER_KEY_MINUTE` refusals a minute keep rows of their own and the rest are counted
in the key's tally (`KeyTally`, one row per key, kind and minute), so no key writes more than
that many rows a minute, whatever it sends; the answers are unchanged, the metrics count every
refusal, and friction links the refusals that kept rows (the link rule, docs/api.md)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings

from hands.models import Hand
from leases import clock
from leases.audit import KEPT_PER_KEY_MINUTE
from leases.models import KeyRecord, KeyTally, Refusal
from ops import jobs as ops_jobs
from tests.support.api import Api, error_of, mint

pytestmark = [pytest.mark.security]

KEPT = KEPT_PER_KEY_MINUTE
HAMMER = KEPT * 3


def refused_calls(api: Api) -> list[tuple[str, Callable[[], Any]]]:
    """Refused calls of a valid `work`/`leases` key, of three codes, through a DRF view, a
    service and the hot path."""
    return [
        ("scope_denied", lambda: api.get("/refusals")),
        ("validation_error", lambda: api.post("/leases/release", {"resource": "", "fence": 1})),
        (
            "not_found",
            lambda: api.post("/leases/renew", {"resource": "nope/", "fence": 1, "process_id": "p"}),
        ),
    ]


def hammer(api: Api, calls: int) -> list[tuple[str, str]]:
    """`calls` refused calls, cycling through the codes: each answer's (code, request id)."""
    kinds = refused_calls(api)
    answered = []
    for n in range(calls):
        code, call = kinds[n % len(kinds)]
        response = call()
        assert response.json()["error"]["code"] == code, response.content
        answered.append((code, response["X-Request-ID"]))
    return answered


def prefix_of(api: Api) -> str:
    assert api.key is not None
    return api.key.split("_")[1]


def tally(api: Api, record: KeyRecord = KeyRecord.REFUSAL) -> list[KeyTally]:
    return list(KeyTally.objects.filter(key_prefix=prefix_of(api), record=record))


@pytest.mark.django_db
def test_a_key_hammering_refused_calls_keeps_at_most_the_limits_rows_a_minute(
    api_a: Api, frozen_clock: datetime
) -> None:
    answered = hammer(api_a, HAMMER)
    prefix = prefix_of(api_a)
    rows = list(Refusal.objects.filter(key_prefix=prefix).order_by("id"))
    # The bound: the minute's first KEPT refusals, each a row of its own, and one tally row.
    assert len(rows) == KEPT
    assert [(r.code, r.request_id) for r in rows] == answered[:KEPT]
    [counted] = tally(api_a)
    assert counted.count == HAMMER
    assert counted.past_limit == dict(Counter(code for code, _ in answered[KEPT:]))
    assert counted.minute == frozen_clock and counted.hand == api_a.hand.name
    assert counted.workspace_id == api_a.hand.workspace_id
    # Every refusal is on record: a row, or a count.
    assert len(rows) + sum(counted.past_limit.values()) == HAMMER


@pytest.mark.django_db
def test_each_key_and_each_minute_has_a_bound_of_its_own(
    api_a: Api, owner: Hand, frozen_clock: datetime
) -> None:
    hammer(api_a, KEPT + 5)
    other = Api(mint(owner, ["work", "leases"]), owner)  # the same hand's other key
    hammer(other, 2)
    assert Refusal.objects.filter(key_prefix=prefix_of(other)).count() == 2
    clock.advance(60)  # the next minute of the database's clock
    hammer(api_a, 3)
    assert Refusal.objects.filter(key_prefix=prefix_of(api_a)).count() == KEPT + 3
    minutes = sorted((t.minute, t.count, sum(t.past_limit.values())) for t in tally(api_a))
    assert minutes == [(frozen_clock, KEPT + 5, 5), (frozen_clock + timedelta(minutes=1), 3, 0)]


@pytest.mark.django_db
def test_the_answers_are_unchanged_past_the_limit(api_a: Api, frozen_clock: datetime) -> None:
    hammer(api_a, KEPT)
    error = error_of(api_a.get("/refusals"), 403, "scope_denied")
    assert error["caller"] == {"hand": api_a.hand.name, "key_prefix": prefix_of(api_a)}
    error_of(api_a.post("/leases/release", {"resource": "", "fence": 1}), 400, "validation_error")
    assert Refusal.objects.filter(key_prefix=prefix_of(api_a)).count() == KEPT


@pytest.mark.django_db
def test_friction_links_a_kept_refusal_and_says_so_of_a_counted_one(
    api_a: Api, frozen_clock: datetime
) -> None:
    answered = hammer(api_a, KEPT + 1)
    kept_id, counted_id = answered[0][1], answered[KEPT][1]
    linked = api_a.post("/friction", {"what": "looping", "refusals": [kept_id]})
    assert linked.status_code == 201, linked.content
    assert [r["request_id"] for r in linked.json()["refusals"]] == [kept_id]
    # A refusal counted past the limit has no row to link (docs/api.md, "Friction").
    error = error_of(
        api_a.post("/friction", {"what": "looping", "refusals": [counted_id]}),
        400,
        "validation_error",
    )
    assert counted_id in error["message"]


@pytest.mark.django_db
@override_settings(GC_METRICS_OPEN=True)
def test_metrics_count_every_refusal_kept_or_counted(api_a: Api, frozen_clock: datetime) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    answered = hammer(api_a, HAMMER)
    body = Client().get("/metrics").content.decode()
    samples = {
        sample.labels.get("code"): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "gc_refusals"
    }
    for code, count in Counter(code for code, _ in answered).items():
        assert samples[code] == count, (code, samples)


@pytest.mark.django_db
@override_settings(GC_RETENTION_REFUSALS_DAYS=30, GC_RETENTION_EVENTS_DAYS=10)
def test_retention_prunes_the_tallies_with_the_rows_they_count(frozen_clock: datetime) -> None:
    for record in KeyRecord:
        for days in (5, 15, 35):
            minute = frozen_clock - timedelta(days=days)
            KeyTally.objects.create(
                workspace_id=1,
                key_prefix=f"k{days}",
                record=record,
                minute=minute,
                count=1,
                first_at=minute,
                last_at=minute,
            )
    result = ops_jobs.records_prune(batch=1)
    assert result.deleted["key_refusal_tallies"] == 1  # past the refusals' 30 days
    assert result.deleted["key_verification_tallies"] == 2  # past the events' 10 days
    left = sorted(KeyTally.objects.values_list("record", "key_prefix"))
    assert left == [("refusal", "k15"), ("refusal", "k5"), ("verification", "k5")]


@pytest.mark.django_db(transaction=True)
def test_concurrent_refused_calls_of_one_key_keep_exactly_the_limit(
    owner: Hand, frozen_clock: datetime
) -> None:
    """Many connections at once on one key: the tally's row lock counts them one after another,
    so exactly the limit keep rows and every one is counted."""
    api = Api(mint(owner, ["work", "leases"]), owner)
    threads, each = 8, KEPT // 4  # twice the limit in all
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            hammer(api, each)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures
    assert Refusal.objects.filter(key_prefix=prefix_of(api)).count() == KEPT
    [counted] = tally(api)
    assert counted.count == threads * each
    assert sum(counted.past_limit.values()) == threads * each - KEPT


@pytest.mark.django_db
def test_the_admin_lists_the_tallies(
    admin_client: Client, api_a: Api, frozen_clock: datetime
) -> None:
    hammer(api_a, KEPT + 2)
    page = admin_client.get("/admin/leases/keytally/")
    assert page.status_code == 200
    assert prefix_of(api_a) in page.content.decode()
    [row] = tally(api_a)
    assert admin_client.get(f"/admin/leases/keytally/{row.pk}/change/").status_code == 200
    assert admin_client.get("/admin/leases/keytally/add/").status_code == 403
