"""A key's usability, written once: `gc_<prefix>_<secret>`, the secret's SHA-256 equal to the one
stored, not revoked, not expired (an expiry is the last instant it is not usable from: usable
while `now < expires_at`), for a key bound to a tenure that tenure still alive (its lease held
at the bound fence and not lost: `leases.state`), and holding the call's scope. A lane-limited
key reaches only its lane's objects; each lookup takes the key's lane (`lane_id`) for that.

Its forms: Python (`parse_token`, `hash_secret`, `key_refusal`) for
`hands.services.key_authenticate`; SQL text (`usable_sql`, `expired_sql`) for the hot statements
and the revoking job; ORM (`usable_q`) for lookups. `tests/keys/test_key_parity.py` holds them
together.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.db.models import F, Q

from apikit.errors import GroundControlError, ScopeDenied
from hands.errors import KeyExpired, KeyRevoked
from leases.models import Lease
from leases.state import HELD_STATES, alive_sql, lease_state, state_q

TOKEN_PREFIX = "gc"


def parse_token(raw: object) -> tuple[str, str] | None:
    """(prefix, secret) of a key as the hand sends it, or None if it is not one."""
    parts = raw.split("_", 2) if isinstance(raw, str) else []
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def hash_secret(secret: str) -> str:
    # The secret is 256 random bits, so a fast hash is enough (no dictionary to guess from);
    # SHA-256 keeps authentication cheap on the hot calls.
    return hashlib.sha256(secret.encode()).hexdigest()


def key_refusal(
    *,
    prefix: str,
    revoked_at: datetime | None,
    expires_at: datetime | None,
    scopes: list[str],
    now: datetime,
    scope: str | None = None,
    bound: Any = None,
    bound_fence: int | None = None,
) -> GroundControlError | None:
    """Why a key whose secret matched may not make the call now, or None. `bound` is the lease
    a bound key lives by (anything with its resource, fence, status, deadline and grace_s)."""
    if revoked_at is not None:
        return KeyRevoked(f"key {prefix} was revoked", revoked_at=revoked_at.isoformat())
    if expires_at is not None and expires_at <= now:
        return KeyExpired(f"key {prefix} expired", expired_at=expires_at.isoformat())
    if bound is not None and not bound_alive(bound, bound_fence, now):
        return KeyRevoked(
            f"key {prefix} lived by the lease on {bound.resource!r} at fence {bound_fence}, "
            "whose tenure has ended",
            bound_to={"resource": bound.resource, "fence": bound_fence},
        )
    return scope_refusal(scopes, scope) if scope is not None else None


def bound_alive(lease: Any, fence: int | None, now: datetime) -> bool:
    """Python: the tenure of `lease` at `fence` is held and not lost at `now`."""
    state = lease_state(
        status=lease.status, deadline=lease.deadline, grace_s=lease.grace_s, now=now
    )
    return lease.fence == fence and state in HELD_STATES


def key_refusal_of(key: Any, now: datetime) -> GroundControlError | None:
    """`key_refusal` for a key's row (anything with its prefix, revoked_at, expires_at, scopes)."""
    return key_refusal(
        prefix=key.prefix,
        revoked_at=key.revoked_at,
        expires_at=key.expires_at,
        scopes=key.scopes,
        now=now,
        # Loaded with the key by every lookup that authenticates (`select_related`).
        bound=key.bound_lease if key.bound_lease_id is not None else None,
        bound_fence=key.bound_fence,
    )


def scope_refusal(scopes: list[str], scope: str) -> ScopeDenied | None:
    if scope not in scopes:
        return ScopeDenied(f"this key lacks the '{scope}' scope", required_scope=scope)
    return None


def authority_refusal(
    *,
    issuer_scopes: list[str],
    issuer_lane_id: int | None,
    scopes: list[str],
    lane_id: int | None,
    acting: str,
) -> ScopeDenied | None:
    """Who may issue or revoke whom, written once: a key acts only on keys whose scopes are all
    its own and, when it is lane-limited, that are limited to its own lane. So no key outranks
    the key that issued it, and no limit can be minted or revoked one's way out of."""
    missing = [scope for scope in scopes if scope not in issuer_scopes]
    if missing:
        return ScopeDenied(
            f"this key cannot {acting} a key with the '{missing[0]}' scope, which it lacks",
            required_scope=missing[0],
        )
    if issuer_lane_id is not None and lane_id != issuer_lane_id:
        return ScopeDenied(
            f"a lane-limited key can {acting} only keys limited to its own lane",
            required_scope="hands",
        )
    return None


def other_hand_refusal(
    *,
    issuer_scopes: list[str],
    issuer_hand_id: int,
    hand_id: int,
    hand_name: str,
    acting: str = "issue",
) -> ScopeDenied | None:
    """No key acts as another hand: a key mints (`acting="issue"`) or revokes (`"revoke"`) keys
    of a hand other than its own only with the `supervise` scope (and then only within
    `authority_refusal`). Without this, a key with `hands` could mint itself a key for the
    supervisor's hand, or for any hand in a lane, and act as that hand on its leases and
    attempts; or revoke another hand's key, which ends its tenures at once (a break by
    another name)."""
    if hand_id == issuer_hand_id or "supervise" in issuer_scopes:
        return None
    if acting == "revoke":
        sentence = (
            f"this key can revoke only its own hand's keys; revoking a key of hand "
            f"{hand_name!r} needs the 'supervise' scope"
        )
    else:
        sentence = (
            f"this key can mint keys only for its own hand; a key for hand {hand_name!r} "
            "needs the 'supervise' scope"
        )
    return ScopeDenied(sentence, required_scope="supervise")


def expired_sql(alias: str, now: str) -> str:
    return f"{alias}.expires_at IS NOT NULL AND {alias}.expires_at <= {now}"


def bound_alive_sql(alias: str, now: str) -> str:
    """SQL: the key at `alias` is bound to no tenure, or its tenure is alive at `now`."""
    alive = alive_sql(now, status="bl.status", deadline="bl.deadline", grace="bl.grace_s")
    return (
        f"({alias}.bound_lease_id IS NULL OR EXISTS (SELECT 1 FROM {Lease._meta.db_table} bl "
        f"WHERE bl.id = {alias}.bound_lease_id AND bl.fence = {alias}.bound_fence AND {alive}))"
    )


def usable_sql(alias: str, now: str, scope: str | None = None) -> str:
    """SQL: the key at `alias` is usable at `now` (and holds `scope`: PostgreSQL's jsonb, with the
    scope a constant of the statement's text, read once per plan)."""
    condition = (
        f"{alias}.revoked_at IS NULL AND NOT ({expired_sql(alias, now)}) "
        f"AND {bound_alive_sql(alias, now)}"
    )
    if scope is not None:
        condition += f" AND {alias}.scopes @> CAST('[\"{scope}\"]' AS jsonb)"
    return condition


def usable_q(now: Any, *, prefix: str = "") -> Q:
    """ORM: keys (at `prefix`) usable at the expression `now`, whatever the scope."""
    bound = f"{prefix}bound_lease__"
    alive = Q()
    for state in HELD_STATES:
        alive |= state_q(state, now, prefix=bound)
    return (
        Q(**{f"{prefix}revoked_at": None})
        & (Q(**{f"{prefix}expires_at": None}) | Q(**{f"{prefix}expires_at__gt": now}))
        & (
            Q(**{f"{prefix}bound_lease": None})
            | (Q(**{f"{bound}fence": F(f"{prefix}bound_fence")}) & alive)
        )
    )
