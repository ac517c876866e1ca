"""Who may do what, where: workspaces and their members, lanes, hands, and the keys hands call
with (issued, revoked, and checked on every call).

Every change is one statement plus its event, in one transaction; every refusal is recorded by
`refusals_recorded`. The key's usability is `hands.keys` (one definition, three forms).
"""

from __future__ import annotations

import functools
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Model, Q
from django.utils.text import slugify

from apikit.errors import KeyInvalid, NotFound, ScopeDenied, ValidationFailed
from hands import keys
from hands.models import Hand, HandKey, Lane, Membership, Role, Scope, Workspace
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now, now_expression, now_sql, parse_timestamp
from leases.models import EventKind
from leases.services import (
    validate_choice,
    validate_interval,
    validate_name,
    validate_reason,
    validate_seconds,
)

KEY_PREFIX_BYTES = 6  # 12 hex characters: the lookup prefix


KEY_SECRET_BYTES = 32


LAST_USED_RESOLUTION_S = 60


ALL_SCOPES = [scope.value for scope in Scope]


def workspace_get_or_create(*, name: str) -> Workspace:
    validate_name(name, field="workspace")
    workspace, _ = Workspace.objects.get_or_create(name=name)
    return workspace


def membership_set(*, workspace: Workspace, user: Any, role: str) -> Membership:
    validate_choice(role, field="role", choices=[r.value for r in Role])
    membership, _ = Membership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    return membership


def lane_create(
    *,
    workspace: Workspace,
    slug: str,
    name: str = "",
    heartbeat_interval_s: int | None = None,
    grace_s: int | None = None,
) -> tuple[Lane, bool]:
    """Create a lane, or return the existing one with that slug (created=False)."""
    validate_name(slug, field="slug")
    if slugify(slug) != slug:
        raise ValidationFailed(
            "slug may hold only lowercase letters, digits, hyphens and underscores",
            fields={"slug": ["Lowercase letters, digits, hyphens and underscores."]},
        )
    name = validate_name(name, field="name", required=False) or slug
    defaults = {
        "name": name,
        "heartbeat_interval_s": None
        if heartbeat_interval_s is None
        else validate_interval(
            heartbeat_interval_s, field="heartbeat_interval_s", default=0, minimum=1
        ),
        "grace_s": None
        if grace_s is None
        else validate_interval(grace_s, field="grace_s", default=0, minimum=0),
    }
    return Lane.objects.get_or_create(workspace=workspace, slug=slug, defaults=defaults)


def hand_create(*, workspace: Workspace, name: str, lane: Lane | None = None) -> tuple[Hand, bool]:
    validate_name(name, field="name")
    return Hand.objects.get_or_create(workspace=workspace, name=name, defaults={"lane": lane})


@dataclass(frozen=True)
class IssuedKey:
    key: HandKey
    plaintext: str  # shown once, never stored


def _validate_scopes(scopes: object) -> list[str]:
    if not isinstance(scopes, list) or not scopes or not all(s in ALL_SCOPES for s in scopes):
        raise ValidationFailed(
            f"scopes must be a non-empty list of: {', '.join(ALL_SCOPES)}",
            fields={"scopes": [f"A non-empty list of: {', '.join(ALL_SCOPES)}."]},
        )
    return list(dict.fromkeys(scopes))


@refusals_recorded
def key_issue(
    *,
    hand: Hand,
    scopes: list[str],
    actor: str,
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
) -> IssuedKey:
    """Mint a key `gc_<prefix>_<secret>` for `hand`; only the prefix and a hash are kept."""
    scopes = _validate_scopes(scopes)
    if expires_in_s is not None:
        expires_in_s = validate_seconds(
            expires_in_s, field="expires_in_s", minimum=1, maximum=366 * 86_400
        )
    if lane is not None and lane.workspace_id != hand.workspace_id:
        raise NotFound("no such lane")
    secret = secrets.token_urlsafe(KEY_SECRET_BYTES)
    with transaction.atomic():
        now = db_now()
        key = HandKey.objects.create(
            hand=hand,
            prefix=secrets.token_hex(KEY_PREFIX_BYTES),
            secret_hash=keys.hash_secret(secret),
            scopes=scopes,
            lane=lane,
            expires_at=now + timedelta(seconds=expires_in_s) if expires_in_s else None,
            revoke_when_done=revoke_when_done,
            created_by=actor,
        )
        record_event(
            workspace_id=hand.workspace_id,
            kind=EventKind.KEY_ISSUED,
            at=now,
            actor=actor,
            hand=hand.name,
            data={"prefix": key.prefix, "scopes": scopes},
        )
    return IssuedKey(key=key, plaintext=f"gc_{key.prefix}_{secret}")


@refusals_recorded
def key_revoke(
    *, workspace_id: int, prefix: str, actor: str, reason: str = "", lane_id: int | None = None
) -> HandKey:
    """Revoke now; the key's very next call is refused (nothing caches a key's validity).

    A lane-limited caller (`lane_id`) reaches only keys limited to its own lane, the only keys it
    may issue; any other key is not found, as objects outside its lane are everywhere."""
    reason = validate_reason(reason)
    within_lane = {"lane_id": lane_id} if lane_id is not None else {}
    try:
        key = HandKey.objects.select_related("hand").get(
            prefix=prefix, hand__workspace_id=workspace_id, **within_lane
        )
    except HandKey.DoesNotExist:
        raise NotFound(f"no key {prefix!r}") from None
    with transaction.atomic():
        now = db_now()
        if HandKey.objects.filter(pk=key.pk, revoked_at=None).update(
            revoked_at=now, revoked_by=actor, revoke_reason=reason
        ):
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.KEY_REVOKED,
                at=now,
                actor=actor,
                hand=key.hand.name,
                data={"prefix": prefix, "reason": reason},
            )
    key.refresh_from_db()
    return key


# The key's row and what authentication loads with it, in this order (a lane is optional).
_KEY_MODELS: tuple[type[Model], ...] = (HandKey, Hand, Workspace, Lane)


Converter = tuple[int, Any, list[Any]]


@functools.cache
def _key_query(vendor: str) -> tuple[str, list[list[Converter]]]:
    """The key, its hand, the hand's workspace and the key's lane in one SELECT, written out once
    per database instead of compiled by the ORM on every call (that compilation was the hot
    path's largest cost), with each column's converters as the ORM would apply them. `{now}` is
    rendered per call: tests move the database clock."""
    quote = connection.ops.quote_name
    columns, converters = [], []
    for model in _KEY_MODELS:
        table = quote(model._meta.db_table)
        mine = []
        for index, field in enumerate(model._meta.concrete_fields):
            columns.append(f"{table}.{quote(field.column)}")
            column = field.get_col(model._meta.db_table)
            funcs = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if funcs:
                mine.append((index, column, funcs))
        converters.append(mine)
    key, hand, workspace, lane = (quote(m._meta.db_table) for m in _KEY_MODELS)
    sql = (
        f"SELECT {', '.join(columns)}, {{now}} FROM {key} "
        f"INNER JOIN {hand} ON {key}.{quote('hand_id')} = {hand}.{quote('id')} "
        f"INNER JOIN {workspace} ON {hand}.{quote('workspace_id')} = {workspace}.{quote('id')} "
        f"LEFT OUTER JOIN {lane} ON {key}.{quote('lane_id')} = {lane}.{quote('id')} "
        f"WHERE {key}.{quote('prefix')} = %s"
    )
    return sql, converters


def _models_of(row: tuple[Any, ...], converters: list[list[Converter]]) -> list[Model | None]:
    """One instance per model of `_KEY_MODELS` from a row (None for a left join that missed)."""
    out: list[Model | None] = []
    position = 0
    for model, mine in zip(_KEY_MODELS, converters, strict=True):
        fields = model._meta.concrete_fields
        values = list(row[position : position + len(fields)])
        position += len(fields)
        if values[0] is None:  # no primary key: the optional lane
            out.append(None)
            continue
        for index, column, funcs in mine:
            for func in funcs:
                values[index] = func(values[index], column, connection)
        out.append(model.from_db(connection.alias, [f.attname for f in fields], values))
    return out


def _key_with_hand(prefix: str) -> tuple[HandKey, datetime] | None:
    """The key with its hand, workspace and lane loaded, and the database's time (one query)."""
    sql, converters = _key_query(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql.format(now=now_sql()), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    key, hand, workspace, lane = _models_of(row[:-1], converters)
    assert isinstance(key, HandKey) and isinstance(hand, Hand)
    hand.workspace = workspace
    key.hand = hand
    key.lane = lane
    now = parse_timestamp(row[-1])
    assert now is not None
    return key, now


def key_authenticate(raw: str) -> HandKey:
    """The key behind a bearer token, checked for revocation and expiry on every call.

    One query (the key, its hand, and the database's time) plus, at most once a minute per key,
    one conditional write of `last_used_at`.
    """
    token = keys.parse_token(raw)
    if token is None:
        raise KeyInvalid("the key is missing or malformed")
    prefix, secret = token
    found = _key_with_hand(prefix)
    key, now = found if found else (None, None)
    # Compare even when no key matched, so timing does not tell whether a prefix exists.
    expected = key.secret_hash if key else keys.hash_secret("")
    if not hmac.compare_digest(expected, keys.hash_secret(secret)) or key is None or now is None:
        raise KeyInvalid("unknown key")
    refusal = keys.key_refusal(
        prefix=prefix,
        revoked_at=key.revoked_at,
        expires_at=key.expires_at,
        scopes=key.scopes,
        now=now,
    )
    if refusal is not None:
        raise refusal
    key_mark_used(key.pk, key.last_used_at, now)
    return key


def key_mark_used(key_id: int, last_used_at: datetime | None, now: datetime) -> None:
    """Stamp a key's `last_used_at` with `now` if it is a minute old: at most one write a minute
    per key, conditional, so callers that find it stale at once write it once."""
    stale = now - timedelta(seconds=LAST_USED_RESOLUTION_S)
    if last_used_at is None or last_used_at < stale:
        HandKey.objects.filter(pk=key_id).filter(
            Q(last_used_at=None) | Q(last_used_at__lt=stale)
        ).update(last_used_at=now)


def key_require_scope(key: HandKey, scope: str) -> None:
    refusal = keys.scope_refusal(key.scopes, scope)
    if refusal is not None:
        raise refusal


def default_hand_name(username: str) -> str:
    return f"{slugify(username) or 'admin'}-supervisor"


def bootstrap(
    *, workspace_name: str, username: str, password: str, new_key: bool = False
) -> dict[str, Any]:
    """Idempotently: a workspace, an admin member, and a supervisor hand with every scope.

    A key is minted when the supervisor hand has no live key (or `new_key`); it is returned once.
    """
    user_model = get_user_model()
    with transaction.atomic():
        workspace = workspace_get_or_create(name=workspace_name)
        user, created = user_model.objects.get_or_create(username=username)
        if created or not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        membership_set(workspace=workspace, user=user, role=Role.ADMIN)
        hand, _ = hand_create(workspace=workspace, name=default_hand_name(username))
        if not hand.is_supervisor:
            Hand.objects.filter(pk=hand.pk).update(is_supervisor=True)
        has_live_key = (
            HandKey.objects.filter(hand=hand).filter(keys.usable_q(now_expression())).exists()
        )
        issued = None
        if new_key or not has_live_key:
            issued = key_issue(hand=hand, scopes=ALL_SCOPES, actor=username)
    return {
        "workspace": workspace.name,
        "workspace_id": workspace.pk,
        "username": user.get_username(),
        "supervisor_hand": hand.name,
        "supervisor_key": issued.plaintext if issued else None,
        "supervisor_key_prefix": issued.key.prefix if issued else None,
    }


@refusals_recorded
def key_issue_by(
    *,
    issuer: HandKey,
    hand: Hand,
    scopes: list[str],
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
) -> IssuedKey:
    """`key_issue` on behalf of a key: it may grant only scopes it holds, and a lane-limited
    issuer only keys limited to its own lane (no minting one's way out of a limit)."""
    for scope in _validate_scopes(scopes):
        key_require_scope(issuer, scope)
    if issuer.lane_id is not None and (lane is None or lane.pk != issuer.lane_id):
        raise ScopeDenied(
            "a lane-limited key can issue only keys limited to its own lane",
            required_scope=Scope.HANDS.value,
            lane=issuer.lane.slug if issuer.lane else None,
        )
    return key_issue.__wrapped__(  # type: ignore[attr-defined]  # recorded once, here
        hand=hand,
        scopes=scopes,
        actor=issuer.hand.name,
        expires_in_s=expires_in_s,
        lane=lane,
        revoke_when_done=revoke_when_done,
    )
