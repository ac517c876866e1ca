"""Floods of unauthenticated calls (issue 18, item 5): each client address has a limit on calls
that turn out unauthenticated (no key, a malformed, unknown or wrong one, an unknown path), over
which it is answered 429 before anything else is looked up; and such calls, which reach no
workspace, are recorded as counts (one AddressRefusal row per address, code and minute) instead
of a Refusal row each. A valid key is never counted nor refused for its address's sake; the
address is REMOTE_ADDR unless GC_TRUSTED_PROXY_HOPS says how many proxies' X-Forwarded-For
entries to trust."""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext

from apikit import ratelimit
from apikit.clients import UNKNOWN, client_address
from hands.models import Hand
from leases import clock
from leases.audit import address_refusal_sql
from leases.clock import db_now
from leases.models import AddressRefusal, Refusal
from ops import jobs as ops_jobs
from tests.reliability.live import free_port
from tests.support.api import API, Api, mint

pytestmark = [pytest.mark.security, pytest.mark.django_db]

LIMIT = 120
# A minute's first second on the web process's clock, so that no test's calls straddle two of
# the limit's windows.
WINDOW_START = datetime(2031, 6, 1, 9, 30, 1, tzinfo=UTC)


@pytest.fixture
def address(frozen_clock: datetime) -> str:
    """An address of this test's own: the counts live in the cache (Redis in CI), shared by every
    test and every run within two minutes. The database's clock stands still (the counts'
    minutes are its), so that no test's calls straddle two minutes by chance."""
    return _fresh_address()


def _fresh_address() -> str:
    raw = uuid.uuid4().int
    return f"10.{raw % 250 + 1}.{(raw >> 8) % 250 + 1}.{(raw >> 16) % 250 + 1}"


@pytest.fixture(autouse=True)
def _fresh_blocks(time_machine) -> Iterator[None]:  # noqa: ANN001
    # The web process's clock in a window of its own (it moves on as the test runs).
    time_machine.move_to(WINDOW_START, tick=True)
    ratelimit.unauthenticated_limiter.forget()
    yield
    ratelimit.unauthenticated_limiter.forget()


@pytest.fixture
def at_noon(frozen_clock: datetime) -> datetime:
    """The database's clock, frozen at 12:00:00 (the counts' minutes are the database's)."""
    return frozen_clock


def anonymous_get(address: str, path: str = "/me", **meta: str) -> Any:
    return Client().get(API + path, REMOTE_ADDR=address, **meta)


def with_header(address: str, header: str, path: str = "/me") -> Any:
    return Client().get(API + path, REMOTE_ADDR=address, HTTP_AUTHORIZATION=header)


def renew_with(address: str, key: str) -> Any:
    """The hot renew (leasing/hot.py), as a hand sends it."""
    return Client().post(
        f"{API}/leases/renew",
        data=json.dumps({"resource": "r", "fence": 1, "process_id": "p"}),
        content_type="application/json",
        REMOTE_ADDR=address,
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


def counts(**filters: Any) -> dict[tuple[str, str], int]:
    return {(row.address, row.code): row.count for row in AddressRefusal.objects.filter(**filters)}


def unauthenticated_kinds(real_prefix: str) -> list[Callable[[str], Any]]:
    """Every kind of unauthenticated call: no key, malformed headers, an unknown key, a wrong
    secret (on a DRF view and on the hot renew), an unknown path."""
    return [
        lambda a: anonymous_get(a),
        lambda a: with_header(a, "Token gc_abc_def"),
        lambda a: with_header(a, "Bearer gc_abc"),
        lambda a: with_header(a, "Bearer gc_000000000000_unknown"),
        lambda a: with_header(a, f"Bearer gc_{real_prefix}_wrong-secret"),
        lambda a: renew_with(a, f"gc_{real_prefix}_wrong-secret"),
        lambda a: anonymous_get(a, "/no/such/endpoint"),
    ]


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """The statements a call ran, without the test transaction's savepoints (in production
    the count's statement runs in autocommit)."""
    return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"].upper()]


# --- A flood from one address -------------------------------------------------------------------


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=LIMIT)
def test_it_counts_500_unauthenticated_calls_in_a_few_rows_then_answers_429(
    owner: Hand, address: str, at_noon: datetime
) -> None:
    prefix = mint(owner, ["leases"]).split("_")[1]
    kinds = itertools.cycle(unauthenticated_kinds(prefix))
    answers = [next(kinds)(address) for _ in range(500)]

    statuses = [response.status_code for response in answers]
    assert set(statuses[:LIMIT]) == {401, 404}
    assert set(statuses[LIMIT:]) == {429}
    for response in answers[LIMIT:]:
        error = response.json()["error"]
        assert error["code"] == "rate_limited"
        assert error["limit_per_minute"] == LIMIT
        assert 0 < error["retry_after_s"] <= 60
        assert 1 <= int(response["Retry-After"]) <= 60
        assert "address" in error["message"]
    # One row per code in the minute, counting every call; no Refusal row at all.
    rows = list(AddressRefusal.objects.filter(address=address))
    assert len(rows) == 3
    assert sum(row.count for row in rows) == 500
    by_code = {row.code: row.count for row in rows}
    assert by_code["rate_limited"] == 500 - LIMIT
    assert by_code["key_invalid"] + by_code["not_found"] == LIMIT
    assert {row.minute for row in rows} == {at_noon}
    assert all(row.first_at == row.last_at == at_noon for row in rows)
    assert not Refusal.objects.exists()


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=3)
def test_over_the_limit_a_call_is_answered_before_any_database_work_but_its_count(
    owner: Hand, address: str
) -> None:
    prefix = mint(owner, ["leases"]).split("_")[1]
    for _ in range(3):
        assert anonymous_get(address).status_code == 401
    for call in (
        lambda: anonymous_get(address),
        lambda: with_header(address, "Bearer not-a-key"),
        lambda: anonymous_get(address, "/no/such/endpoint"),
    ):
        with CaptureQueriesContext(connection) as queries:
            assert call().status_code == 429
        # The count's one upsert, and nothing else.
        assert len(_statements(queries)) == 1, _statements(queries)
        assert "ON CONFLICT" in _statements(queries)[0]
    # A well-formed key is unauthenticated only once looked up: the one indexed read a valid key
    # pays too (refusing it unread would refuse valid keys sharing the address), then the count.
    with CaptureQueriesContext(connection) as queries:
        assert with_header(address, f"Bearer gc_{prefix}_wrong").status_code == 429
    assert len(_statements(queries)) == 2, _statements(queries)


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=5)
def test_another_address_is_unaffected(address: str) -> None:
    for _ in range(8):
        anonymous_get(address)
    assert anonymous_get(address).status_code == 429
    other = _fresh_address()
    response = anonymous_get(other)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "key_invalid"
    assert counts(address=other) == {(other, "key_invalid"): 1}
    assert counts(address=address) == {
        (address, "key_invalid"): 5,
        (address, "rate_limited"): 4,
    }


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=5, GC_RATE_LIMIT_PER_MINUTE=1000)
def test_an_authenticated_key_from_the_flooded_address_is_unaffected_and_never_counted(
    owner: Hand, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = mint(owner, ["leases", "work"])
    for _ in range(10):
        anonymous_get(address)
    assert anonymous_get(address).status_code == 429

    reserved: list[str] = []
    real = ratelimit._reserve

    def noting(name: str, size: int) -> int | None:
        reserved.append(name)
        return real(name, size)

    monkeypatch.setattr(ratelimit, "_reserve", noting)
    api = Api(key, owner)
    for _ in range(3):
        assert api.client.get(f"{API}/me", REMOTE_ADDR=address, **_bearer(key)).status_code == 200
        acquired = api.client.post(
            f"{API}/leases/acquire",
            data=json.dumps({"resource": f"r-{uuid.uuid4().hex}", "ttl_s": 30, "process_id": "p"}),
            content_type="application/json",
            REMOTE_ADDR=address,
            **_bearer(key),
        )
        assert acquired.status_code == 201
    # An authenticated refusal keeps its own row, under its workspace, as before.
    refused = api.client.get(f"{API}/refusals", REMOTE_ADDR=address, **_bearer(key))
    assert refused.status_code == 403
    # The valid key's calls were counted against the key only: no round trip for the address.
    assert reserved and not [name for name in reserved if name.startswith("gc:unauth:")]
    assert list(Refusal.objects.values_list("code", "workspace_id", "hand")) == [
        ("scope_denied", owner.workspace_id, owner.name)
    ]
    assert sum(counts(address=address).values()) == 11


def _bearer(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def test_a_supervisors_refusal_list_shows_none_of_the_flood(owner: Hand, address: str) -> None:
    boss = Api(mint(owner, ["supervise", "leases"]), owner)
    for _ in range(5):
        anonymous_get(address)
    boss.get("/attempts/999999")  # a refusal of the workspace's own
    listed = boss.get("/refusals").json()
    assert [refusal["code"] for refusal in listed] == ["not_found"]
    assert listed[0]["hand"] == owner.name


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=0)
def test_no_limit_answers_every_call_and_still_counts_it(address: str) -> None:
    for _ in range(200):
        assert anonymous_get(address).status_code == 401
    assert counts(address=address) == {(address, "key_invalid"): 200}


def test_a_nul_in_the_path_is_counted_with_a_printable_sample(address: str) -> None:
    response = anonymous_get(address, "/leases%00x")
    assert response.status_code == 400
    row = AddressRefusal.objects.get(address=address)
    assert (row.code, row.count, row.method) == ("validation_error", 1, "GET")
    assert "\x00" not in row.path and row.path.startswith("/api/v1/leases")


def test_a_long_path_and_an_odd_method_are_truncated_in_the_sample(address: str) -> None:
    long_path = "/no/" + "x" * 3000
    response = Client().generic("FROBNICATEXYZ", API + long_path, REMOTE_ADDR=address)
    assert response.status_code == 404
    row = AddressRefusal.objects.get(address=address)
    assert (len(row.path), row.method) == (200, "FROBNICATE")


# --- Concurrency: one row, every call counted ---------------------------------------------------


def _flood(threads: int, calls: int, call: Callable[[], Any]) -> Counter[int]:
    """`threads` threads make `calls` calls each at once, each thread on its own connection."""
    start = threading.Barrier(threads)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            for _ in range(calls):
                status = call().status_code
                with lock:
                    statuses[status] += 1
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
    return statuses


@pytest.mark.django_db(transaction=True)
@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=0)
def test_concurrent_unauthenticated_calls_lose_no_count(address: str, at_noon: datetime) -> None:
    statuses = _flood(12, 40, lambda: anonymous_get(address))
    assert statuses == {401: 480}
    row = AddressRefusal.objects.get(address=address)
    assert (row.code, row.count, row.minute) == ("key_invalid", 480, at_noon)


@pytest.mark.django_db(transaction=True)
@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=100)
def test_concurrent_calls_over_the_limit_are_counted_as_answered(
    address: str, at_noon: datetime
) -> None:
    statuses = _flood(12, 40, lambda: anonymous_get(address))
    assert sum(statuses.values()) == 480
    assert statuses[401] <= 100 and set(statuses) <= {401, 429}
    # Each answer is in the record, under the code it was answered with: no update lost.
    assert counts(address=address) == {
        (address, "key_invalid"): statuses[401],
        (address, "rate_limited"): statuses[429],
    }


@pytest.mark.django_db(transaction=True)
def test_the_upsert_itself_loses_no_count_under_contention(at_noon: datetime) -> None:
    """The statement alone, many connections at once on one row (no HTTP in between)."""
    params = {"address": _fresh_address(), "code": "key_invalid", "method": "GET", "path": "/"}
    params["key_prefix"] = ""

    class Done:
        status_code = 0

    def upsert() -> Done:
        with connection.cursor() as cursor:
            cursor.execute(address_refusal_sql(), params)
        return Done()

    _flood(16, 50, upsert)
    assert AddressRefusal.objects.get().count == 800


# --- The client's address -----------------------------------------------------------------------


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=5, GC_TRUSTED_PROXY_HOPS=0)
def test_a_spoofed_forwarded_for_is_ignored_when_no_proxy_is_trusted(address: str) -> None:
    answers = [
        anonymous_get(address, HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").status_code for i in range(8)
    ]
    assert answers == [401] * 5 + [429] * 3
    assert counts() == {(address, "key_invalid"): 5, (address, "rate_limited"): 3}


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=5, GC_TRUSTED_PROXY_HOPS=1)
def test_behind_one_proxy_the_address_it_appended_is_counted(address: str) -> None:
    proxy = "127.0.0.9"
    # The client writes what it likes on the left; the proxy appends the address it saw.
    answers = [
        anonymous_get(proxy, HTTP_X_FORWARDED_FOR=f"198.51.100.{i}, {address}").status_code
        for i in range(7)
    ]
    assert answers == [401] * 5 + [429] * 2
    assert counts() == {(address, "key_invalid"): 5, (address, "rate_limited"): 2}
    # Another client behind the same proxy has its own count.
    other = _fresh_address()
    assert anonymous_get(proxy, HTTP_X_FORWARDED_FOR=other).status_code == 401


@pytest.mark.parametrize(
    ("hops", "forwarded", "expected"),
    [
        (0, "203.0.113.5", "10.0.0.1"),
        (1, "203.0.113.5", "203.0.113.5"),
        (1, "6.6.6.6, 203.0.113.5", "203.0.113.5"),
        (2, "6.6.6.6, 203.0.113.5, 10.2.0.1", "203.0.113.5"),
        (2, "203.0.113.5, 10.2.0.1", "203.0.113.5"),
        (1, " 203.0.113.5:4711 ", "203.0.113.5"),
        (1, "[2001:db8:1:2::7]:443", "2001:db8:1:2::/64"),
        (1, "2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        (1, "::ffff:203.0.113.5", "203.0.113.5"),
        (1, "fe80::1%eth0", "fe80::/64"),
        # Malformed: the proxy's own address, never an error.
        (1, "", "10.0.0.1"),
        (1, "not-an-address", "10.0.0.1"),
        (1, "203.0.113.5, ", "10.0.0.1"),
        (1, ",,,,", "10.0.0.1"),
        (1, "999.1.1.1", "10.0.0.1"),
        (1, "1.2.3.4\x00", "10.0.0.1"),
        (1, "x" * 10_000, "10.0.0.1"),
        (3, "203.0.113.5, 10.2.0.1", "10.0.0.1"),  # fewer entries than trusted proxies
        (1, "[]:80", "10.0.0.1"),
    ],
)
def test_client_address(hops: int, forwarded: str, expected: str) -> None:
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(GC_TRUSTED_PROXY_HOPS=hops):
        assert client_address(request) == expected


@pytest.mark.parametrize("remote", ["", "garbage", None])
def test_a_request_without_a_usable_peer_address_is_unknown(remote: str | None) -> None:
    request = RequestFactory().get("/")
    if remote is None:
        del request.META["REMOTE_ADDR"]
    else:
        request.META["REMOTE_ADDR"] = remote
    assert client_address(request) == UNKNOWN


@override_settings(GC_TRUSTED_PROXY_HOPS=1)
def test_a_malformed_forwarded_for_never_fails_a_call(address: str) -> None:
    for header in ("", ",", "a, b, c", "\t", "1.2.3.4, 5.6.7.8, nope", "x" * 9000):
        response = anonymous_get(address, HTTP_X_FORWARDED_FOR=header)
        assert response.status_code == 401
    assert counts() == {(address, "key_invalid"): 6}


# --- The cache down -----------------------------------------------------------------------------


def _dead_redis() -> dict[str, Any]:
    """A Redis cache (the production backend) on a port nothing listens on."""
    return {
        "default": {
            "BACKEND": "apikit.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=1)
def test_with_the_cache_down_nothing_is_a_500_and_the_limit_fails_open(
    owner: Hand, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = mint(owner, ["leases"])
    prefix = key.split("_")[1]
    with override_settings(CACHES=_dead_redis(), GC_RATE_LIMIT_PER_MINUTE=1):
        ratelimit.limiter.forget()
        statuses = [call(address).status_code for call in unauthenticated_kinds(prefix) * 2]
        assert 500 not in statuses and 429 not in statuses
        assert Api(key).client.get(f"{API}/me", **_bearer(key)).status_code == 200
    assert sorted(set(statuses)) == [401, 404]
    assert sum(counts(address=address).values()) == len(statuses)


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=1)
def test_with_the_cache_raising_the_limit_fails_open(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(ratelimit.cache, "incr", broken)
    monkeypatch.setattr(ratelimit.cache, "add", broken)
    for _ in range(5):
        assert anonymous_get(address).status_code == 401
        assert anonymous_get(address, "/no/such/thing").status_code == 404
    assert counts(address=address) == {(address, "key_invalid"): 5, (address, "not_found"): 5}


# --- Minutes ------------------------------------------------------------------------------------


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=0)
def test_a_minute_boundary_starts_a_new_row(address: str) -> None:
    clock.freeze(datetime(2030, 1, 1, 12, 0, 59, 999000, tzinfo=UTC))
    anonymous_get(address)
    anonymous_get(address)
    clock.freeze(datetime(2030, 1, 1, 12, 1, 0, tzinfo=UTC))  # the exact boundary
    anonymous_get(address)
    rows = list(AddressRefusal.objects.filter(address=address).order_by("minute"))
    assert [(row.minute, row.count) for row in rows] == [
        (datetime(2030, 1, 1, 12, 0, tzinfo=UTC), 2),
        (datetime(2030, 1, 1, 12, 1, tzinfo=UTC), 1),
    ]
    assert rows[0].first_at == rows[0].last_at == datetime(2030, 1, 1, 12, 0, 59, 999000, UTC)
    assert rows[1].first_at == datetime(2030, 1, 1, 12, 1, tzinfo=UTC)


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=0)
def test_a_row_records_its_first_and_last_call_and_the_first_ones_sample(address: str) -> None:
    clock.freeze(datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC))
    anonymous_get(address, "/first")
    clock.freeze(datetime(2030, 1, 1, 12, 0, 40, tzinfo=UTC))
    Client().post(f"{API}/second", REMOTE_ADDR=address)
    row = AddressRefusal.objects.get(address=address)
    assert (row.code, row.count, row.method, row.path) == ("not_found", 2, "GET", "/api/v1/first")
    assert row.first_at == datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC)
    assert row.last_at == datetime(2030, 1, 1, 12, 0, 40, tzinfo=UTC)


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=3)
def test_the_limits_next_window_admits_the_address_again(address: str, time_machine) -> None:  # noqa: ANN001
    for _ in range(3):
        assert anonymous_get(address).status_code == 401
    refused = anonymous_get(address)
    assert refused.status_code == 429
    wait = refused.json()["error"]["retry_after_s"]
    time_machine.shift(timedelta(seconds=wait))  # the web process's clock, to the next window
    assert anonymous_get(address).status_code == 401


# --- Where operators look -----------------------------------------------------------------------


@override_settings(GC_RETENTION_REFUSALS_DAYS=30)
def test_retention_prunes_the_counts_past_the_refusals_age() -> None:
    now = db_now()
    for days in (5, 25, 35, 45):
        minute = (now - timedelta(days=days)).replace(second=0, microsecond=0)
        AddressRefusal.objects.create(
            address="10.0.0.1", code="key_invalid", minute=minute, first_at=minute, last_at=minute
        )
    result = ops_jobs.records_prune(batch=1)
    assert result.deleted["address_refusals"] == 2
    left = sorted(round((now - m).total_seconds() / 86_400) for m in _minutes())
    assert left == [5, 25]


def _minutes() -> list[datetime]:
    return list(AddressRefusal.objects.values_list("minute", flat=True))


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=0, GC_METRICS_OPEN=True)
def test_metrics_count_the_flood_in_refusals_and_say_how_much_is_unauthenticated(
    owner: Hand, address: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    for _ in range(7):
        anonymous_get(address)
    Api(mint(owner, ["work"]), owner).get("/refusals")  # a scope_denied row
    body = Client().get("/metrics").content.decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert samples[("gc_refusals", (("code", "key_invalid"),))] == 7
    assert samples[("gc_refusals", (("code", "scope_denied"),))] == 1
    assert samples[("gc_refusals_unauthenticated", (("code", "key_invalid"),))] == 7
    assert ("gc_refusals_unauthenticated", (("code", "scope_denied"),)) not in samples


def test_the_admin_lists_the_counts(admin_client: Client, address: str) -> None:
    for _ in range(3):
        anonymous_get(address)
    page = admin_client.get("/admin/leases/addressrefusal/")
    assert page.status_code == 200
    assert address in page.content.decode()
    row = AddressRefusal.objects.get(address=address)
    assert admin_client.get(f"/admin/leases/addressrefusal/{row.pk}/change/").status_code == 200
    assert admin_client.get("/admin/leases/addressrefusal/add/").status_code == 403
