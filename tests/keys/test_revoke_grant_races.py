"""A key's revocation races the grants it is making, on PostgreSQL, each thread with its own
connection, through Django's handler (the hot acquire's one statement, the service's shared
acquire, a claim): whichever commits first, no live tenure is left taken with the revoked key,
and every tenure it was granted ended with the reason `key revoked`.

Each granter keeps asking until its key is refused, and the revocation starts once a grant has
been made, so the revocation lands among grants in flight whatever the scheduling; the assertions
are the invariant, never how many grants won. Without the key's row lock on both sides
(`hands.services.key_guard`'s FOR SHARE, the revocation's UPDATE), a grant whose statement read
the key as usable before the revocation committed, and committed after the revocation's end of
tenures read the leases, would keep its tenure live with a revoked key."""

from __future__ import annotations

import itertools
import json
import threading

import pytest
from django.test import Client

from fleet.models import Attempt
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import HandKey
from leases.clock import now_expression
from leases.models import Event, Lease, LeaseStatus
from leases.state import HELD_STATES, state_q
from tests.support.api import mint
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROUNDS = 4
GRANTERS = 6
CLAIMERS = 3
MOST_CALLS = 40  # a granter never refused stops here (the revocation then came after them all)


def _post(key: str, path: str, payload: dict) -> tuple[int, dict]:
    response = Client().post(
        f"/api/v1{path}",
        data=json.dumps(payload),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    return response.status_code, response.json()


def test_no_live_tenure_is_left_with_a_revoked_key(workspace, lane) -> None:  # noqa: ANN001
    package, _ = plan_services.work_package_create(lane=lane, key="wp", title="Package")
    for round_ in range(ROUNDS):
        _race_round(workspace, package, round_)


def _race_round(workspace, package, round_: int) -> None:  # noqa: ANN001
    """One hand's key granting from every thread while one more revokes it."""
    hand, _ = hand_services.hand_create(workspace=workspace, name=f"hand-{round_}")
    run = plan_services.run_create(
        work_package=package,
        title=f"Run {round_}",
        slots=CLAIMERS * MOST_CALLS,
        heartbeat_interval_s=600,
        grace_s=600,
    )
    key = mint(hand, ["work", "leases"])
    key_row = HandKey.objects.get(prefix=key.split("_")[1])
    granted = threading.Event()
    refusals: list[tuple[int, str]] = []
    lock = threading.Lock()

    def ask(path: str, payload: dict) -> bool:
        """One grant; False once the key is refused (the granter stops)."""
        status, body = _post(key, path, payload)
        if status == 201:
            granted.set()
            return True
        with lock:
            refusals.append((status, body["error"]["code"]))
        return status != 401

    def granter(number: int) -> None:
        mode = "shared" if number % 2 else "exclusive"
        for call in range(MOST_CALLS):
            resource = f"r{round_}/{number}/{call}"
            payload = {"resource": resource, "ttl_s": 600, "process_id": "p", "mode": mode}
            if not ask("/leases/acquire", payload):
                return

    def claimer(number: int) -> None:
        for call in range(MOST_CALLS):
            if not ask(f"/runs/{run.pk}/claim", {"process_id": f"c{number}:{call}"}):
                return

    def revoker() -> None:
        assert granted.wait(timeout=30), "no grant was made"
        hand_services.key_revoke(
            workspace_id=workspace.pk, prefix=key_row.prefix, actor="admin", reason="race"
        )

    bodies = [
        *(lambda n=n: granter(n) for n in range(GRANTERS)),
        *(lambda n=n: claimer(n) for n in range(CLAIMERS)),
        revoker,
    ]
    assert together(bodies) == []
    assert {code for _, code in refusals} <= {"key_revoked"}, refusals

    # The invariant: nothing taken with the revoked key is still held alive.
    alive = list(
        itertools.chain.from_iterable(
            Lease.objects.filter(key_id=key_row.pk).filter(state_q(state, now_expression()))
            for state in HELD_STATES
        )
    )
    assert alive == []
    assert not Lease.objects.filter(key_id=key_row.pk, status=LeaseStatus.HELD).exists()
    # Every tenure the key was granted ended on record, with the reason.
    acquired = Event.objects.filter(kind="lease_acquired", hand=hand.name)
    ended = Event.objects.filter(kind="lease_released", hand=hand.name, data__reason="key revoked")
    assert sorted(acquired.values_list("resource", "fence")) == sorted(
        ended.values_list("resource", "fence")
    )
    attempts = Attempt.objects.filter(hand=hand)
    assert not attempts.filter(end=None).exists()
    assert set(attempts.values_list("end", "end_reason")) <= {("released", "key revoked")}
    assert Event.objects.filter(kind="released", attempt_id__in=attempts).count() == (
        attempts.count()
    )
