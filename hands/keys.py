"""A key's usability, written once: `gc_<prefix>_<secret>`, the secret's SHA-256 equal to the one
stored, not revoked, not expired (an expiry is the last instant it is not usable from: usable
while `now < expires_at`), and holding the call's scope. A lane-limited key reaches only its
lane's objects; each lookup takes the key's lane (`lane_id`) for that.

Its forms: Python (`parse_token`, `hash_secret`, `key_refusal`) for `fleet.services
.key_authenticate`; SQL text (`usable_sql`, `expired_sql`) for the hot statements and the revoking
job; ORM (`usable_q`) for lookups. `tests/fleet/test_key_parity.py` holds them together.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.db.models import Q

from apikit.errors import GroundControlError, ScopeDenied
from hands.errors import KeyExpired, KeyRevoked

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
) -> GroundControlError | None:
    """Why a key whose secret matched may not make the call now, or None."""
    if revoked_at is not None:
        return KeyRevoked(f"key {prefix} was revoked", revoked_at=revoked_at.isoformat())
    if expires_at is not None and expires_at <= now:
        return KeyExpired(f"key {prefix} expired", expired_at=expires_at.isoformat())
    return scope_refusal(scopes, scope) if scope is not None else None


def key_refusal_of(key: Any, now: datetime) -> GroundControlError | None:
    """`key_refusal` for a key's row (anything with its prefix, revoked_at, expires_at, scopes)."""
    return key_refusal(
        prefix=key.prefix,
        revoked_at=key.revoked_at,
        expires_at=key.expires_at,
        scopes=key.scopes,
        now=now,
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


def expired_sql(alias: str, now: str) -> str:
    return f"{alias}.expires_at IS NOT NULL AND {alias}.expires_at <= {now}"


def usable_sql(alias: str, now: str, scope: str | None = None) -> str:
    """SQL: the key at `alias` is usable at `now` (and holds `scope`: PostgreSQL's jsonb, with the
    scope a constant of the statement's text, read once per plan)."""
    condition = f"{alias}.revoked_at IS NULL AND NOT ({expired_sql(alias, now)})"
    if scope is not None:
        condition += f" AND {alias}.scopes @> CAST('[\"{scope}\"]' AS jsonb)"
    return condition


def usable_q(now: Any, *, prefix: str = "") -> Q:
    """ORM: keys (at `prefix`) usable at the expression `now`, whatever the scope."""
    return Q(**{f"{prefix}revoked_at": None}) & (
        Q(**{f"{prefix}expires_at": None}) | Q(**{f"{prefix}expires_at__gt": now})
    )
