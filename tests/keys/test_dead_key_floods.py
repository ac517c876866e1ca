"""A flood of calls with a revoked or expired key: such a key is not authenticated, and its calls
count against the address's limit like any unauthenticated call, so past the limit they are
answered 429 and counted as aggregates instead of writing a refusal row each, while a valid key
from the same address is unaffected."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from apikit import ratelimit
from hands import services as hand_services
from hands.models import Hand, HandKey
from leases.clock import db_now
from leases.models import AddressRefusal, Refusal
from tests.support.api import API, error_of, mint

pytestmark = [pytest.mark.security, pytest.mark.django_db]

# --- A flood with a revoked or expired key -----------------------------------------------------

LIMIT = 5


@pytest.fixture
def address(time_machine) -> Any:  # noqa: ANN001
    # A minute's first second on the web process's clock: no test's calls straddle two windows.
    time_machine.move_to(datetime(2031, 6, 1, 9, 30, 1, tzinfo=UTC), tick=True)
    ratelimit.unauthenticated_limiter.forget()
    raw = uuid.uuid4().int
    yield f"10.{raw % 250 + 1}.{(raw >> 8) % 250 + 1}.{(raw >> 16) % 250 + 1}"
    ratelimit.unauthenticated_limiter.forget()


def _dead_key(owner: Hand, how: str) -> str:
    key = mint(owner, ["work", "leases"], expires_in_s=60)
    prefix = key.split("_")[1]
    if how == "expired":  # an hour ago, on the database's clock
        HandKey.objects.filter(prefix=prefix).update(expires_at=db_now() - timedelta(hours=1))
    else:
        hand_services.key_revoke(workspace_id=owner.workspace_id, prefix=prefix, actor="t")
    return key


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_flood_with_a_dead_key_is_limited_and_counted(
    owner: Hand, settings: Any, address: str, how: str
) -> None:
    settings.GC_UNAUTHENTICATED_PER_MINUTE = LIMIT
    key = _dead_key(owner, how)
    code = f"key_{how}"
    answered = Counter()
    for i in range(40):
        if i % 2:
            response = Client().get(
                API + "/me", HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR=address
            )
        else:  # the hot renew, whose statement a dead key does not match
            response = Client().post(
                f"{API}/leases/renew",
                data='{"resource": "r", "fence": 1, "process_id": "p"}',
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {key}",
                REMOTE_ADDR=address,
            )
        answered[response.status_code] += 1
        if response.status_code == 429:
            assert error_of(response, 429, "rate_limited")["retry_after_s"] > 0
    assert answered == {401: LIMIT, 429: 40 - LIMIT}
    # The calls within the limit are each recorded with the hand (a supervisor sees its dead key
    # still calling); the flood past it is one counted row.
    assert Refusal.objects.filter(code=code, hand=owner.name).count() == LIMIT
    assert Refusal.objects.count() == LIMIT
    # Counted by the database's minute, which the calls may straddle (time_machine moves only
    # the web process's clock): one row per minute, their counts adding up to the flood.
    counted = AddressRefusal.objects.filter(address=address, code="rate_limited")
    assert 1 <= len(counted) <= 2
    assert sum(row.count for row in counted) == 40 - LIMIT


def test_a_valid_key_from_that_address_is_still_unaffected(
    owner: Hand, settings: Any, address: str
) -> None:
    settings.GC_UNAUTHENTICATED_PER_MINUTE = LIMIT
    dead, live = _dead_key(owner, "revoked"), mint(owner, ["work", "leases"])
    for _ in range(LIMIT + 3):
        Client().get(API + "/me", HTTP_AUTHORIZATION=f"Bearer {dead}", REMOTE_ADDR=address)
    me = Client().get(API + "/me", HTTP_AUTHORIZATION=f"Bearer {live}", REMOTE_ADDR=address)
    assert me.status_code == 200, me.content
