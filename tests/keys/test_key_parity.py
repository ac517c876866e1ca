"""A key's usability (hands/keys.py) through every form: Python (`key_refusal`, and
`key_authenticate` end to end), SQL text (`usable_sql`, as the hot statements use it, and
`expired_sql`, as the revoking job does) and ORM (`usable_q`), over one table of cases at the
exact boundaries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from hands import keys
from hands import services as hand_services
from hands.models import HandKey
from leases.clock import db_now, now_expression, now_sql

pytestmark = pytest.mark.django_db

# (name, revoked, seconds from now to the expiry or None, scopes, the scope asked, the refusal)
CASES = [
    ("usable, no expiry", False, None, ["work"], "work", None),
    ("usable, expires in a second", False, 1, ["work"], "work", None),
    ("expires exactly now", False, 0, ["work"], "work", "key_expired"),
    ("expired a second ago", False, -1, ["work"], "work", "key_expired"),
    ("revoked", True, None, ["work"], "work", "key_revoked"),
    ("revoked and expired", True, -1, ["work"], "work", "key_revoked"),
    ("lacks the scope", False, None, ["leases"], "work", "scope_denied"),
    ("lacks the scope and expired", False, -1, ["leases"], "work", "key_expired"),
]


def _keys(owner, frozen_clock):  # noqa: ANN001, ANN202
    made = {}
    for name, revoked, expires_in, scopes, _, _ in CASES:
        issued = hand_services.key_issue(hand=owner, scopes=scopes, actor="test")
        HandKey.objects.filter(pk=issued.key.pk).update(
            revoked_at=frozen_clock if revoked else None,
            expires_at=None if expires_in is None else frozen_clock + timedelta(seconds=expires_in),
        )
        made[name] = issued
    return made


def _ids(condition: str) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT k.id FROM {HandKey._meta.db_table} k WHERE {condition}", [])
        return {int(i) for (i,) in cursor.fetchall()}


def test_every_form_of_a_keys_usability_agrees(owner, frozen_clock) -> None:
    made = _keys(owner, frozen_clock)
    now = db_now()
    usable_by_sql = _ids(keys.usable_sql("k", now_sql()))
    expired_by_sql = _ids(keys.expired_sql("k", now_sql()))
    usable_by_orm = set(
        HandKey.objects.filter(keys.usable_q(now_expression())).values_list("id", flat=True)
    )
    for name, _, _, _, scope, expected in CASES:
        key = HandKey.objects.get(pk=made[name].key.pk)
        refusal = keys.key_refusal(
            prefix=key.prefix,
            revoked_at=key.revoked_at,
            expires_at=key.expires_at,
            scopes=key.scopes,
            now=now,
            scope=scope,
        )
        assert (refusal.code if refusal else None) == expected, name
        without_scope = keys.key_refusal(
            prefix=key.prefix,
            revoked_at=key.revoked_at,
            expires_at=key.expires_at,
            scopes=key.scopes,
            now=now,
        )
        usable = without_scope is None
        assert (key.pk in usable_by_sql) == usable, name
        assert (key.pk in usable_by_orm) == usable, name
        expired = key.expires_at is not None and key.expires_at <= now
        assert (key.pk in expired_by_sql) == expired, name
        # End to end: the authentication the DRF views use, then the scope check.
        try:
            authenticated = hand_services.key_authenticate(made[name].plaintext)
            hand_services.key_require_scope(authenticated, scope)
            code = None
        except GroundControlError as error:
            code = error.code
        assert code == expected, name
        wrong = made[name].plaintext[:-1] + ("A" if made[name].plaintext[-1] != "A" else "B")
        with pytest.raises(GroundControlError) as refused:
            hand_services.key_authenticate(wrong)
        assert refused.value.code == "key_invalid", name


def test_the_hot_statements_key_check_agrees_with_the_python_form(owner, frozen_clock) -> None:
    made = _keys(owner, frozen_clock)
    now = db_now()
    for scope in ("work", "leases"):
        by_sql = _ids(keys.usable_sql("k", now_sql(), scope))
        for name, *_ in CASES:
            key = HandKey.objects.get(pk=made[name].key.pk)
            refusal = keys.key_refusal(
                prefix=key.prefix,
                revoked_at=key.revoked_at,
                expires_at=key.expires_at,
                scopes=key.scopes,
                now=now,
                scope=scope,
            )
            assert (key.pk in by_sql) == (refusal is None), (name, scope)


@pytest.mark.parametrize(
    "raw", ["", "gc_", "gc__secret", "gc_prefix_", "xx_prefix_secret", "gc-prefix-secret", None, 7]
)
def test_a_malformed_token_is_no_key(raw) -> None:  # noqa: ANN001
    assert keys.parse_token(raw) is None


def test_a_token_splits_into_prefix_and_secret_once() -> None:
    assert keys.parse_token("gc_abc_s_e_c") == ("abc", "s_e_c")
