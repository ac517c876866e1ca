"""Body-size and rate limits."""

from __future__ import annotations

import io
import json

import psutil
import pytest
from django.conf import settings
from django.test import override_settings

from apikit import api as infrastructure
from apikit import ratelimit
from apikit.errors import PayloadTooLarge
from hands import keys
from leases.models import Lease, Refusal
from tests.support.api import Api, error_of, refusals

pytestmark = pytest.mark.django_db


@override_settings(GC_MAX_BODY_BYTES=1024)
def test_a_body_over_the_limit_answers_413_and_writes_nothing(api_a: Api) -> None:
    body = {"resource": "big", "ttl_s": 5, "process_id": "p", "pad": "x" * 2000}
    error = error_of(api_a.post("/leases/acquire", body), 413, "payload_too_large")
    assert error["limit_bytes"] == 1024
    assert not Lease.objects.exists()
    refusal = Refusal.objects.get()
    assert (refusal.code, refusal.hand) == ("payload_too_large", "hand-a")
    small = {"resource": "small", "ttl_s": 5, "process_id": "p"}
    assert api_a.post("/leases/acquire", small).status_code == 201


@override_settings(GC_MAX_BODY_BYTES=1024)
def test_the_parser_stops_reading_a_body_without_a_length_at_the_limit() -> None:
    stream = io.BytesIO(json.dumps({"pad": "x" * 5000}).encode())
    with pytest.raises(PayloadTooLarge):
        infrastructure.LimitedJSONParser().parse(stream)
    assert stream.tell() == 1025


@override_settings(GC_RATE_LIMIT_PER_MINUTE=3)
def test_a_key_over_its_rate_answers_429_with_retry_after(api_a: Api, api_b: Api) -> None:
    for _ in range(3):
        assert api_a.get("/me").status_code == 200
    response = api_a.get("/me")
    error = error_of(response, 429, "rate_limited")
    assert 0 < error["retry_after_s"] <= 60
    assert 1 <= int(response["Retry-After"]) <= 60
    assert error["limit_per_minute"] == 3
    # Per key: another hand's key is not affected.
    assert api_b.get("/me").status_code == 200
    assert [r.hand for r in refusals("rate_limited")] == ["hand-a"]


@override_settings(GC_RATE_LIMIT_PER_MINUTE=1)
def test_the_rate_limit_fails_open_when_the_cache_is_down(api_a: Api, monkeypatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(ratelimit.cache, "incr", broken)
    monkeypatch.setattr(ratelimit.cache, "add", broken)
    for _ in range(3):
        assert api_a.get("/me").status_code == 200
    assert not Refusal.objects.exists()


@pytest.mark.skipif(
    not getattr(settings, "REDIS_URL", ""), reason="needs Redis (the embedded default has none)"
)
@override_settings(GC_RATE_LIMIT_PER_MINUTE=100)
def test_the_count_survives_a_redis_that_forgot_its_scripts_and_dropped_the_connection(
    api_a: Api,
) -> None:
    """`incr` runs on the thread's own connection (apikit/cache.py): after SCRIPT FLUSH
    it loads the script again; after the server closed the connection it connects again."""
    import redis

    server = redis.Redis.from_url(settings.REDIS_URL)
    # This key's counters only: other test processes count their own keys in the same Redis.
    prefix, _ = keys.parse_token(api_a.key)

    def counted() -> int:
        return sum(int(server.get(n) or 0) for n in server.scan_iter(f"*gc:rate:{prefix}:*"))

    def drop_this_process_connections() -> int:
        """The server closes this process's connections (not another test process's)."""
        mine = {
            f"{c.laddr.ip}:{c.laddr.port}"
            for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == server.connection_pool.connection_kwargs["port"]
        }
        own = server.client_id()
        dropped = [
            server.client_kill_filter(_id=client["id"])
            for client in server.client_list()
            if client["addr"] in mine and int(client["id"]) != own
        ]
        return len(dropped)

    def call() -> None:
        # Without a block held, the call reserves one count in Redis (groundcontrol/ratelimit).
        ratelimit.limiter.forget()
        assert api_a.get("/me").status_code == 200

    call()
    before = counted()
    server.script_flush()
    call()
    assert counted() == before + 1
    before = counted()
    assert drop_this_process_connections() >= 1
    call()  # the dead connection's write fails, and the count is taken on a new one
    assert counted() == before + 1
    call()
    assert counted() == before + 2
