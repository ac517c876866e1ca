"""Pools from the client's side, against the live server: `Client.lease_from_pool` and its async
twin, `hand.lease_from_pool("ports")`, `gctl hold --pool` (GC_MEMBER) and the MCP tool."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from groundcontrol_client import AsyncClient, AsyncHand, Client, Hand, LeaseHeld, StaleFence
from groundcontrol_client.core.errors import describe

from hands.models import Hand as HandRecord
from leases.models import Event, Lease
from pools import services as pool_services
from tests.client.conftest import INTERVAL_S, Fleet
from tests.client.test_mcp import drive, stdio, text

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_DENIED = 3


@pytest.fixture
def ports(gc: Fleet) -> list[str]:
    workspace = HandRecord.objects.get(name="hand-a").workspace
    members = ["8001", "8002"]
    pool_services.pool_create(workspace=workspace, name="ports", members=members, actor="test")
    return members


def test_the_client_takes_members_and_hears_a_full_pool_member_by_member(
    gc: Fleet, ports: list[str]
) -> None:
    a, b = Client(gc.url, gc.key_a), Client(gc.url, gc.key_b)
    first = a.lease_from_pool("ports", ttl_s=30, process_id="a:1")
    assert (first.pool, first.member, first.resource, first.fence) == (
        "ports",
        "8001",
        "pool/ports/8001",
        1,
    )
    again = a.lease_from_pool("ports", ttl_s=30, process_id="a:1")  # its own, renewed
    assert (again.member, again.fence) == ("8001", 1)
    second = b.lease_from_pool("ports", ttl_s=20, process_id="b:1")
    assert second.member == "8002"
    with pytest.raises(LeaseHeld) as raised:
        a.lease_from_pool("ports", ttl_s=30, process_id="a:2")
    denial = raised.value
    assert [m["member"] for m in denial.get("members")] == ports
    sentence = describe(denial)
    assert sentence.startswith(
        "pool ports is full (2 members): 8002 held by hand hand-b (fence 1), renewing; its "
        "current window ends in "
    )
    assert "; 8001 held by hand hand-a (fence 1)" in sentence
    assert sentence.endswith("wait, pick other work, or escalate.")
    # Released through the lease calls, the member is the next taker's at the next fence.
    assert a.lease_release(first.resource, fence=first.fence)
    assert a.lease_from_pool("ports", ttl_s=30, process_id="a:2").fence == 2


def test_a_hand_holds_a_member_past_its_ttl_and_gives_it_back(gc: Fleet, ports: list[str]) -> None:
    hand = Hand(Client(gc.url, gc.key_a), process_id="host-a:1:1")
    with hand.lease_from_pool("ports", ttl=INTERVAL_S) as port:
        assert (port.member, port.resource, port.fence) == ("8001", "pool/ports/8001", 1)
        time.sleep(2.5 * INTERVAL_S)  # past the ttl: the renewals keep it
        assert port.check().fence == 1
        lease = Lease.objects.get(resource="pool/ports/8001")
        assert (lease.status, lease.holder) == ("held", "hand-a")
    assert Lease.objects.get(resource="pool/ports/8001").status == "free"
    kinds = Event.objects.filter(resource="pool/ports/8001").values_list("kind", flat=True)
    assert list(kinds.order_by("id")) == ["lease_acquired", "lease_released"]
    taken = Client(gc.url, gc.key_b).lease_from_pool("ports", ttl_s=5, process_id="b")
    assert (taken.member, taken.fence) == ("8001", 2)
    with pytest.raises(StaleFence):
        hand.client.lease_check("pool/ports/8001", fence=1)


def test_the_async_hand_holds_a_member_too(gc: Fleet, ports: list[str]) -> None:
    async def hold() -> tuple[str, int]:
        async with AsyncClient(gc.url, gc.key_a) as client:
            hand = AsyncHand(client, process_id="host-a:2:2")
            async with hand.lease_from_pool("ports", ttl=5) as port:
                checked = await port.check()
                assert (await client.lease_from_pool("ports", ttl_s=5, process_id="x")).member
                return port.member, checked.fence

    assert asyncio.run(hold()) == ("8001", 1)
    assert Lease.objects.get(resource="pool/ports/8001").status == "free"


def test_gctl_holds_a_member_while_the_command_runs_and_exports_it(
    gc: Fleet, ports: list[str], tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    script = f'echo "$GC_MEMBER $GC_POOL $GC_RESOURCE $GC_FENCE" > {seen}'
    held = gc.gctl("--json", "hold", "--pool", "ports", "--ttl", "5", "--", "sh", "-c", script)
    assert held.returncode == 0, held.stderr
    assert seen.read_text().split() == ["8001", "ports", "pool/ports/8001", "1"]
    first = json.loads(held.stderr.splitlines()[0])
    assert (first["member"], first["pool"], first["fence"]) == ("8001", "ports", 1)
    assert Lease.objects.get(resource="pool/ports/8001").status == "free"  # released after


def test_gctl_says_who_holds_a_full_pool_and_refuses_a_resource_and_a_pool(
    gc: Fleet, ports: list[str]
) -> None:
    other = Client(gc.url, gc.key_b)
    other.lease_from_pool("ports", ttl_s=60, process_id="b:1")
    other.lease_from_pool("ports", ttl_s=60, process_id="b:2")
    denied = gc.gctl("hold", "--pool", "ports", "--", "true")
    assert denied.returncode == EXIT_DENIED
    assert denied.stderr.startswith("gctl: denied: pool ports is full (2 members): 8001 held by")
    both = gc.gctl("hold", "src/", "--pool", "ports", "--", "true")
    assert both.returncode == 2 and "--pool" in both.stderr


def test_the_mcp_tool_takes_a_member_and_releases_it_by_its_resource(
    gc: Fleet, ports: list[str]
) -> None:
    _, taken, again, released = drive(
        stdio(gc, gc.key_a),
        [
            ("lease_from_pool", {"pool": "ports"}),
            ("lease_from_pool", {"pool": "ports"}),
            ("release_lease", {"resource": "pool/ports/8001"}),
        ],
    )
    assert not taken.is_error, text(taken)
    assert text(taken).startswith(
        "Acquired member 8001 of pool ports (lease pool/ports/8001, fence 1)"
    )
    assert text(again).startswith("You already hold member 8001 of pool ports")
    assert text(released) == "Released pool/ports/8001."
    assert Lease.objects.get(resource="pool/ports/8001").status == "free"
