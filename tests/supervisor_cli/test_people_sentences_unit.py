"""How gctl says times, money, keys and budgets, without a server: each unit at its boundary,
cents when they say it all, a replayed mint that carries no secret, and a reached budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from groundcontrol_client.core.people import IssuedKey, KeyRecord, describe_issued, describe_key
from groundcontrol_client.core.records import Budget, describe_budget, dollars
from groundcontrol_client.core.when import absolute, relative, span

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.4, "0 s"),
        (89, "89 s"),
        (90, "2 minutes"),
        (60 * 89, "89 minutes"),
        (60 * 90, "2 hours"),
        (3600 * 35, "35 hours"),
        (3600 * 36, "2 days"),
        (86_400, "24 hours"),
        (7 * 86_400 - 0.5, "7 days"),
    ],
)
def test_a_span_is_said_in_its_unit_rounded(seconds: float, said: str) -> None:
    assert span(seconds) == said


def test_a_moment_is_said_relative_to_now_and_absolute_in_utc() -> None:
    assert relative(NOW + timedelta(days=7), NOW) == "in 7 days"
    assert relative(NOW - timedelta(minutes=3), NOW) == "3 minutes ago"
    assert relative(NOW + timedelta(milliseconds=300), NOW) == "now"
    assert absolute(NOW + timedelta(seconds=36)) == "2030-01-01 12:00:36 UTC"


def test_money_is_said_in_cents_unless_the_cents_lose_something() -> None:
    assert dollars(Decimal("1.030000")) == "$1.03"
    assert dollars(Decimal("5")) == "$5.00"
    assert dollars(Decimal("0.000125")) == "$0.000125"


KEY = {
    "prefix": "3f9a11223344",
    "hand": "builder",
    "scopes": ["work", "leases"],
    "lane": "docs",
    "expires_at": (NOW + timedelta(days=7)).isoformat(),
    "created_at": NOW.isoformat(),
}


def test_a_key_says_its_scopes_lane_expiry_and_how_it_stands() -> None:
    key = KeyRecord.from_wire(KEY)
    assert describe_key(key, NOW) == (
        "key gc_3f9a11223344 of hand 'builder' (work, leases; lane docs; expires in 7 days), "
        "never used"
    )
    revoked = KeyRecord.from_wire(
        {**KEY, "revoked_at": (NOW - timedelta(days=2)).isoformat(), "revoke_reason": "rotated"}
    )
    assert describe_key(revoked, NOW).endswith(", revoked 2 days ago: rotated")
    expired = KeyRecord.from_wire({**KEY, "lane": None, "expires_at": NOW.isoformat()})
    assert "(work, leases; any lane; expired now)" in describe_key(expired, NOW)


def test_a_minted_key_is_said_once_and_a_replay_says_what_to_do() -> None:
    issued = IssuedKey.from_wire({**KEY, "key": "gc_3f9a11223344_s3cr3t"})
    assert describe_issued(issued, NOW) == (
        "key gc_3f9a11223344 of hand 'builder' (work, leases; lane docs; expires in 7 days) "
        "— shown once: gc_3f9a11223344_s3cr3t"
    )
    replayed = IssuedKey.from_wire({**KEY, "key": None})
    said = describe_issued(replayed, NOW)
    assert "s3cr3t" not in said
    assert said.endswith("revoke it (gctl keys revoke 3f9a11223344) and mint another")


def test_a_reached_budget_says_so() -> None:
    budget = Budget.from_wire(
        {
            "id": 3,
            "lane": "docs",
            "period": "week",
            "limit_usd": "20.000000",
            "limit_tokens": 1_000_000,
            "action": "stop",
            "period_start": "2029-12-31T00:00:00Z",
            "period_end": "2030-01-07T00:00:00Z",
            "spent": {"tokens_in": 900_000, "tokens_out": 100_000, "cost_usd": "12.500000"},
            "reached_at": (NOW - timedelta(minutes=5)).isoformat(),
        }
    )
    assert describe_budget(budget, NOW) == (
        "budget 3: lane docs's weekly budget is $20.00 or 1,000,000 tokens, stop when reached; "
        "spent $12.50 and 1,000,000 tokens in this period (until 2030-01-07 00:00:00 UTC, in 6 "
        "days); reached 5 minutes ago: the lane's claims wait"
    )
