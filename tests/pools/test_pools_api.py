"""Lease pools over HTTP: create, list, read, acquire until full, the denial's members, release
returns the member, a lost member is retaken with its expiry recorded once, scopes, bad input
and workspaces."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from hands.models import Hand
from leases import clock
from leases.models import Event, Lease, Refusal
from pools.models import Pool
from tests.support.api import Api, error_of, mint, refusals

pytestmark = pytest.mark.django_db

PORTS = ["8001", "8002", "8003"]


def create(api: Api, name: str = "ports", **body: Any) -> Any:
    return api.post("/pools", {"name": name, **(body or {"members": PORTS})})


def take(api: Api, name: str = "ports", process: str = "p1", ttl: float = 60, **extra: Any):
    return api.post(f"/pools/{name}/acquire", {"process_id": process, "ttl_s": ttl, **extra})


@pytest.fixture
def ports(boss: Api) -> dict[str, Any]:
    response = create(boss)
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def api_c(workspace) -> Api:  # noqa: ANN001
    from hands import services as hand_services

    hand = hand_services.hand_create(workspace=workspace, name="hand-c")[0]
    return Api(mint(hand, ["leases"]), hand)


def test_it_creates_a_pool_with_a_free_lease_per_member(boss: Api, frozen_clock: datetime) -> None:
    response = create(boss)
    assert response.status_code == 201
    pool = response.json()
    assert (pool["name"], pool["size"], pool["available"]) == ("ports", 3, 3)
    assert pool["created_by"] == "boss"
    assert [m["member"] for m in pool["members"]] == PORTS
    assert pool["members"][0] == {
        "member": "8001",
        "resource": "pool/ports/8001",
        "state": "free",
        "holder": None,
        "process_id": None,
        "fence": 0,
        "expires_at": None,
        "expires_in_s": None,
    }
    leases = Lease.objects.filter(resource__startswith="pool/ports/").order_by("id")
    assert [(x.resource, x.kind, x.status, x.fence) for x in leases] == [
        (f"pool/ports/{m}", "resource", "free", 0) for m in PORTS
    ]


def test_a_capacity_makes_members_one_to_n_in_order(boss: Api) -> None:
    pool = create(boss, "browsers", capacity=12).json()
    assert [m["member"] for m in pool["members"]] == [str(n) for n in range(1, 13)]
    assert Pool.objects.get(name="browsers").members[-1] == "12"


def test_creating_it_again_answers_the_pool_and_other_members_answer_pool_exists(
    boss: Api, ports: dict[str, Any]
) -> None:
    again = create(boss)
    assert again.status_code == 200
    assert again.json()["name"] == "ports"
    error = error_of(create(boss, members=["9001"]), 409, "pool_exists")
    assert (error["pool"], error["members"]) == ("ports", PORTS)
    assert Pool.objects.count() == 1
    assert Lease.objects.filter(resource__startswith="pool/").count() == 3


def test_it_lists_pools_and_reads_one(boss: Api, api_a: Api, ports: dict[str, Any]) -> None:
    create(boss, "dbs", members=["test_1", "test_2"])
    listed = api_a.get("/pools")
    assert listed.status_code == 200
    assert [p["name"] for p in listed.json()] == ["dbs", "ports"]  # newest first
    one = api_a.get("/pools/dbs").json()
    assert [m["resource"] for m in one["members"]] == ["pool/dbs/test_1", "pool/dbs/test_2"]
    error_of(api_a.get("/pools/nope"), 404, "not_found")


def test_acquire_grants_the_lowest_free_member_with_its_own_fence(
    api_a: Api, api_b: Api, ports: dict[str, Any], frozen_clock: datetime
) -> None:
    first = take(api_a)
    assert first.status_code == 201
    lease = first.json()
    assert (lease["pool"], lease["member"], lease["resource"]) == (
        "ports",
        "8001",
        "pool/ports/8001",
    )
    assert (lease["holder"], lease["fence"], lease["state"], lease["ttl_s"]) == (
        "hand-a",
        1,
        "live",
        60,
    )
    second = take(api_b).json()
    assert (second["member"], second["holder"], second["fence"]) == ("8002", "hand-b", 1)
    event = Event.objects.get(kind="lease_acquired", resource="pool/ports/8001")
    assert event.data == {"ttl_s": 60.0, "process_id": "p1", "pool": "ports", "member": "8001"}
    assert (event.hand, event.fence) == ("hand-a", 1)


def test_the_same_process_asking_again_renews_its_member(
    api_a: Api, ports: dict[str, Any], frozen_clock: datetime
) -> None:
    take(api_a, ttl=10)
    clock.advance(5)
    again = take(api_a, ttl=30)
    assert again.status_code == 201
    lease = again.json()
    assert (lease["member"], lease["fence"], lease["expires_in_s"]) == ("8001", 1, 30)
    assert Event.objects.filter(kind="lease_acquired").count() == 1
    # Another process of the same hand is another tenant: it takes another member.
    other = take(api_a, process="p2").json()
    assert (other["member"], other["holder"]) == ("8002", "hand-a")


def test_a_full_pool_denies_with_each_members_holder_and_window(
    api_a: Api, api_b: Api, api_c: Api, ports: dict[str, Any], frozen_clock: datetime
) -> None:
    take(api_a, ttl=30)
    take(api_b, ttl=20)
    clock.advance(5)
    take(api_a, process="p2", ttl=60)
    error = error_of(take(api_c), 409, "lease_held")
    assert error["pool"] == "ports"
    assert error["members"] == [
        {
            "member": "8001",
            "resource": "pool/ports/8001",
            "state": "live",
            "holder": "hand-a",
            "fence": 1,
            "expires_in_s": 25,
        },
        {
            "member": "8002",
            "resource": "pool/ports/8002",
            "state": "live",
            "holder": "hand-b",
            "fence": 1,
            "expires_in_s": 15,
        },
        {
            "member": "8003",
            "resource": "pool/ports/8003",
            "state": "live",
            "holder": "hand-a",
            "fence": 1,
            "expires_in_s": 60,
        },
    ]
    # As a resource's denial: the member whose window ends first.
    assert (error["holder"], error["resource"], error["expires_in_s"]) == (
        "hand-b",
        "pool/ports/8002",
        15,
    )
    assert error["message"].startswith("pool ports is full (3 of 3 members held): 8001 by hand")
    assert [r.code for r in Refusal.objects.all()] == ["lease_held"]


def test_release_returns_the_member_and_the_next_take_gets_the_next_fence(
    api_a: Api, api_b: Api, ports: dict[str, Any]
) -> None:
    lease = take(api_a).json()
    released = api_a.post("/leases/release", {"resource": lease["resource"], "fence": 1})
    assert released.status_code == 200
    again = take(api_b).json()
    assert (again["member"], again["holder"], again["fence"]) == ("8001", "hand-b", 2)
    stale = api_a.post("/leases/check", {"resource": "pool/ports/8001", "fence": 1})
    error_of(stale, 409, "stale_fence")


def test_a_member_renews_and_checks_through_the_lease_calls(
    api_a: Api, ports: dict[str, Any], frozen_clock: datetime
) -> None:
    lease = take(api_a, ttl=10).json()
    clock.advance(8)
    renewed = api_a.post(
        "/leases/renew", {"resource": lease["resource"], "fence": 1, "process_id": "p1"}
    )
    assert renewed.status_code == 200
    assert renewed.json()["expires_in_s"] == 10
    checked = api_a.post("/leases/check", {"resource": lease["resource"], "fence": 1})
    assert checked.json()["valid"] is True
    listed = api_a.get("/leases", {"prefix": "pool/ports/"}).json()
    assert {x["resource"]: x["state"] for x in listed}["pool/ports/8001"] == "live"


def test_a_lost_member_is_retaken_and_its_expiry_recorded_once(
    api_a: Api, api_b: Api, api_c: Api, boss: Api, frozen_clock: datetime
) -> None:
    create(boss, "one", members=["only"])
    take(api_a, "one", ttl=5)
    error_of(take(api_b, "one"), 409, "lease_held")
    clock.advance(5.001)
    got = take(api_b, "one").json()
    assert (got["member"], got["holder"], got["fence"]) == ("only", "hand-b", 2)
    expired = Event.objects.filter(kind="lease_expired", resource="pool/one/only")
    assert [(e.hand, e.fence) for e in expired] == [("hand-a", 1)]
    # The old holder is refused; nothing records the expiry a second time.
    renew = api_a.post(
        "/leases/renew", {"resource": "pool/one/only", "fence": 1, "process_id": "p1"}
    )
    error_of(renew, 409, "stale_fence")
    error_of(take(api_c, "one"), 409, "lease_held")
    assert expired.count() == 1
    kinds = list(
        Event.objects.filter(resource="pool/one/only").order_by("id").values_list("kind", "fence")
    )
    assert kinds == [("lease_acquired", 1), ("lease_expired", 1), ("lease_acquired", 2)]


def test_a_broken_member_is_free_again(
    api_a: Api, api_b: Api, boss: Api, ports: dict[str, Any]
) -> None:
    take(api_a)
    broken = boss.post("/leases/break", {"resource": "pool/ports/8001", "reason": "stuck"})
    assert broken.json()["fence"] == 2
    again = take(api_b).json()
    assert (again["member"], again["fence"]) == ("8001", 3)


def test_wait_s_is_granted_when_a_member_frees(api_a: Api, api_b: Api, boss: Api) -> None:
    create(boss, "one", members=["only"])
    take(api_a, "one", ttl=1)
    got = take(api_b, "one", wait_s=5)
    assert got.status_code == 201, got.content
    assert got.json()["holder"] == "hand-b"
    assert refusals("lease_held") == []  # the denials on the way are not refusals


def test_scopes_are_checked(api_a: Api, ports: dict[str, Any], workspace) -> None:  # noqa: ANN001
    hand = Hand.objects.get(name="hand-a")
    worker = Api(mint(hand, ["work"]), hand)
    error = error_of(take(worker), 403, "scope_denied")
    assert error["required_scope"] == "leases"
    error_of(worker.get("/pools"), 403, "scope_denied")
    error = error_of(create(api_a, "mine"), 403, "scope_denied")
    assert error["required_scope"] == "supervise"
    assert not Pool.objects.filter(name="mine").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a/b", "members": ["1"]}, "name"),
        ({"name": "", "members": ["1"]}, "name"),
        ({"name": " ports", "members": ["1"]}, "name"),
        ({"name": "x" * 201, "members": ["1"]}, "name"),
        ({"name": "p\u202e", "members": ["1"]}, "name"),
        ({"name": 7, "members": ["1"]}, "name"),
        ({"name": "p"}, "members"),
        ({"name": "p", "members": []}, "members"),
        ({"name": "p", "members": ["1"], "capacity": 1}, "members"),
        ({"name": "p", "members": ["a", "a"]}, "members[1]"),
        ({"name": "p", "members": ["a/b"]}, "members[0]"),
        ({"name": "p", "members": ["."]}, "members[0]"),
        ({"name": "p", "members": ["ok", ".."]}, "members[1]"),
        ({"name": "p", "members": ["\x00"]}, "members[0]"),
        ({"name": "p", "members": "8001"}, "members"),
        ({"name": "p", "members": [8001]}, "members"),
        ({"name": "p", "members": [str(n) for n in range(257)]}, "members"),
        ({"name": "p", "capacity": 0}, "capacity"),
        ({"name": "p", "capacity": 257}, "capacity"),
        ({"name": "p", "capacity": "3"}, "capacity"),
        ({"name": "p", "capacity": True}, "capacity"),
    ],
)
def test_bad_pools_are_refused_naming_the_field_and_write_nothing(
    boss: Api, body: dict[str, Any], field: str
) -> None:
    error = error_of(boss.post("/pools", body), 400, "validation_error")
    assert any(name == field or name.startswith(f"{field}") for name in error["fields"]), error
    assert Pool.objects.count() == 0
    assert Lease.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"ttl_s": 60},
        {"process_id": "p", "ttl_s": 0},
        {"process_id": "p", "ttl_s": "60"},
        {"process_id": "p", "ttl_s": 60, "wait_s": 61},
        {"process_id": "x" * 201, "ttl_s": 60},
        {"process_id": "p\x00", "ttl_s": 60},
    ],
)
def test_bad_acquires_are_refused_and_take_nothing(
    api_a: Api, ports: dict[str, Any], body: dict[str, Any]
) -> None:
    error_of(api_a.post("/pools/ports/acquire", body), 400, "validation_error")
    assert not Lease.objects.filter(status="held").exists()


@pytest.mark.parametrize("name", ["nope", "a%20b", "%E2%80%AE", "x" * 300])
def test_an_unknown_pool_is_not_found(api_a: Api, ports: dict[str, Any], name: str) -> None:
    error_of(take(api_a, name), 404, "not_found")


def test_another_workspaces_pool_is_never_seen(
    api_outsider: Api, api_a: Api, ports: dict[str, Any], boss: Api
) -> None:
    error_of(api_outsider.get("/pools/ports"), 404, "not_found")
    error_of(take(api_outsider), 404, "not_found")
    assert api_outsider.get("/pools").json() == []
    # Its own pool of the same name is its own, with its own leases.
    assert create(api_outsider).status_code == 201
    assert take(api_outsider).json()["fence"] == 1
    assert take(api_a).json()["fence"] == 1
    assert Lease.objects.filter(resource="pool/ports/8001", status="held").count() == 2


def test_a_lane_limited_key_creates_no_pool(boss: Api, lane) -> None:  # noqa: ANN001
    limited = Api(mint(boss.hand, ["supervise"], lane=lane), boss.hand)
    error_of(create(limited), 403, "scope_denied")
    assert Pool.objects.count() == 0


POOL_ENDPOINTS = [
    ("get", "/pools"),
    ("post", "/pools"),
    ("get", "/pools/{name}"),
    ("post", "/pools/{name}/acquire"),
]


def test_the_schema_documents_the_pools_and_their_answers_match_it(
    anonymous: Api, boss: Api, api_a: Api, api_b: Api
) -> None:
    import jsonschema

    from tests.support.api import API, json_schema_of

    schema = anonymous.client.get(f"{API}/schema/", {"format": "json"}).json()
    for method, path in POOL_ENDPOINTS:
        operation = schema["paths"][f"{API}{path}"][method]
        assert {"401", "403", "429", "503"} <= set(operation["responses"]), (method, path)
        if method == "post":
            assert {"400", "413"} <= set(operation["responses"]), (method, path)
    acquire = schema["paths"][f"{API}/pools/{{name}}/acquire"]["post"]["responses"]
    assert "`lease_held`" in acquire["409"]["description"]
    assert "`not_found`" in acquire["404"]["description"]
    assert (
        "`pool_exists`"
        in schema["paths"][f"{API}/pools"]["post"]["responses"]["409"]["description"]
    )

    def check(name: str, body: Any) -> None:
        jsonschema.validate(body, json_schema_of(schema, name))

    check("PoolOut", create(boss, members=["8001"]).json())
    check("PoolLeaseOut", take(api_a).json())
    check("PoolOut", api_a.get("/pools/ports").json())
    check("Error", take(api_b).json())
    check("Error", create(boss, members=["9"]).json())
