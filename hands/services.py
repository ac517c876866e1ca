"""Who may do what, where: workspaces and their members, lanes, hands, and the keys hands call
with (issued, revoked, and checked on every call).

Every change is one statement plus its event, in one transaction; every refusal is recorded by
`refusals_recorded`. The key's usability is `hands.keys` (one definition, three forms).
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Model, Q
from django.utils.text import slugify

from apikit.errors import GroundControlError, KeyInvalid, NotFound, ScopeDenied, ValidationFailed
from apikit.retries import retried
from hands import capabilities as hand_capabilities
from hands import keys
from hands.models import Hand, HandKey, Lane, Membership, Role, Scope, Workspace
from leases import engine
from leases.audit import (
    event,
    record_event,
    record_events,
    record_refusal,
    refusals_recorded,
)
from leases.clock import db_now, now_expression, now_sql, parse_timestamp
from leases.models import EventKind, Lease
from leases.services import (
    key_tenures_end,
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


P = ParamSpec("P")
R = TypeVar("R")


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
    caller_lane_id: int | None = None,
) -> tuple[Lane, bool]:
    """Create a lane, or return the existing one with that slug (created=False). A lane-limited
    caller (`caller_lane_id`) creates none: its world is its lane."""
    if caller_lane_id is not None:
        raise ScopeDenied("a lane-limited key cannot create lanes", required_scope="plan")
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


def hand_create(
    *,
    workspace: Workspace,
    name: str,
    lane: Lane | None = None,
    caller_lane_id: int | None = None,
    capabilities: list[str] | None = None,
) -> tuple[Hand, bool]:
    """Create a hand, or return the existing one of that name (created=False, its capabilities
    as they are: `hand_set_capabilities` changes them). A lane-limited caller
    (`caller_lane_id`) creates hands only in its own lane, and finds only those."""
    validate_name(name, field="name")
    tags = hand_capabilities.normalise(capabilities)
    if caller_lane_id is not None and (lane is None or lane.pk != caller_lane_id):
        raise ScopeDenied(
            "a lane-limited key can create hands only in its own lane", required_scope="hands"
        )
    hand, created = Hand.objects.get_or_create(
        workspace=workspace, name=name, defaults={"lane": lane, "capabilities": tags}
    )
    if caller_lane_id is not None and hand.lane_id != caller_lane_id:
        raise ScopeDenied(
            f"a hand named {name!r} exists outside this key's lane", required_scope="hands"
        )
    return hand, created


@refusals_recorded
def hand_set_capabilities(
    *, workspace_id: int, name: str, capabilities: object, caller_lane_id: int | None = None
) -> Hand:
    """A supervisor sets what a hand can do, in one statement (a lane-limited caller: only its
    lane's hands). A claim running at the same moment judges by the row its own statement
    reads (`fleet.attempts.services.attempt_claim`)."""
    tags = hand_capabilities.normalise(capabilities)
    hands = Hand.objects.filter(workspace_id=workspace_id, name=name).in_lane(caller_lane_id)
    if not hands.update(capabilities=tags):
        raise NotFound(f"no hand {name!r}")
    return Hand.objects.select_related("lane").get(workspace_id=workspace_id, name=name)


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


def _refused_as_the_caller(func: Callable[P, R]) -> Callable[P, R]:
    """`refusals_recorded` for a service whose `hand` is the hand a key is minted for: a refusal
    is the caller's (the call's key's hand; none for a person on the dashboard), never recorded
    under the hand it aimed at, whose record it is not."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except GroundControlError as error:
            hand = kwargs.get("hand")
            record_refusal(error, workspace_id=getattr(hand, "workspace_id", None), hand="")
            raise

    return wrapper


@_refused_as_the_caller
def key_issue(
    *,
    hand: Hand,
    scopes: list[str],
    actor: str,
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
    issuer: HandKey | None = None,
    bound_to: tuple[str, int | None] | None = None,
) -> IssuedKey:
    """Mint a key `gc_<prefix>_<secret>` for `hand`; only the prefix and a hash are kept.

    A key minted by a key (`issuer`, see `key_issue_by`) never outlives it: its expiry is at
    most the issuer's, and it is revoke-when-done when the issuer is. The issuer's row is locked
    and checked in the minting transaction, so a key revoked meanwhile mints nothing, and a
    revocation that commits after this sees the new key and revokes it too.

    `bound_to` (a resource and a fence, None for the current one) binds the key to that tenure
    of a lease `hand` holds now: the key is usable only while it lasts (`keys.key_refusal`)."""
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
        expires_at = now + timedelta(seconds=expires_in_s) if expires_in_s else None
        if issuer is not None:
            issuer = _usable_issuer(issuer, now)
            if issuer.expires_at is not None:
                expires_at = min(expires_at or issuer.expires_at, issuer.expires_at)
            revoke_when_done = revoke_when_done or issuer.revoke_when_done
        bound, bound_fence = (
            _held_tenure(hand, *bound_to, now=now) if bound_to is not None else (None, None)
        )
        if issuer is not None and issuer.bound_lease_id is not None:
            # A key never outlives its issuer: a bound key's children live by its tenure too.
            if bound is not None and (bound.pk, bound_fence) != (
                issuer.bound_lease_id,
                issuer.bound_fence,
            ):
                raise ValidationFailed(
                    "a key bound to a tenure can mint only keys bound to the same one",
                    fields={"bound_to": ["The issuer's own tenure, or none."]},
                )
            bound, bound_fence = issuer.bound_lease, issuer.bound_fence
        key = HandKey.objects.create(
            hand=hand,
            prefix=secrets.token_hex(KEY_PREFIX_BYTES),
            secret_hash=keys.hash_secret(secret),
            scopes=scopes,
            lane=lane,
            expires_at=expires_at,
            revoke_when_done=revoke_when_done,
            created_by=actor,
            issued_by=issuer,
            bound_lease=bound,
            bound_fence=bound_fence,
        )
        record_event(
            workspace_id=hand.workspace_id,
            kind=EventKind.KEY_ISSUED,
            at=now,
            actor=actor,
            hand=hand.name,
            data={
                "prefix": key.prefix,
                "scopes": scopes,
                "issued_by": issuer.prefix if issuer else None,
                **({"bound_to": bound_json(key)} if bound is not None else {}),
            },
        )
    return IssuedKey(key=key, plaintext=f"gc_{key.prefix}_{secret}")


def _held_tenure(
    hand: Hand, resource: str, fence: int | None, *, now: datetime
) -> tuple[Lease, int]:
    """The lease `hand` holds on `resource` now, alive, at `fence` (or its current one): the
    node's own row (`shared_by` ''), the exclusive tenure. A shared tenure of the hand's is
    refused in words of its own (issue 33, item 9d): it is not the tenure "does not hold"
    would deny, and a node's rows were once picked in id order, the node's first."""
    rows = {
        row.shared_by: row
        for row in Lease.objects.filter(
            workspace_id=hand.workspace_id, resource=resource, shared_by__in=("", hand.name)
        )
    }
    shared = rows.get(hand.name)
    if shared is not None and keys.bound_alive(
        shared, shared.fence if fence is None else fence, now
    ):
        raise ValidationFailed(
            f"hand {hand.name!r} holds the lease on {resource!r} shared (fence {shared.fence}): "
            "a key can be bound only to an exclusive tenure (a resource lease taken exclusive, "
            "or an attempt's slot lease); release the shared tenure and acquire the lease "
            "exclusive to bind a key to it",
            fields={"bound_to": ["An exclusive tenure of this hand; this one is shared."]},
        )
    lease = rows.get("")
    if lease is None:
        raise NotFound(f"no lease on {resource!r} in this workspace")
    fence = lease.fence if fence is None else fence
    if lease.holder != hand.name or not keys.bound_alive(lease, fence, now):
        raise ValidationFailed(
            f"hand {hand.name!r} does not hold the lease on {resource!r} at fence {fence} now: "
            "a key can be bound only to a live tenure of the hand it is for",
            fields={"bound_to": ["A live tenure of this hand."]},
        )
    return lease, fence


def bound_json(key: HandKey) -> dict[str, Any] | None:
    """The tenure a bound key lives by, as the API shows it (None for a key that is not)."""
    if key.bound_lease_id is None:
        return None
    return {"resource": key.bound_lease.resource, "fence": key.bound_fence}


def _usable_issuer(issuer: HandKey, now: datetime) -> HandKey:
    """The issuer's row, locked for the minting transaction, if it is still usable now."""
    locked = (
        HandKey.objects.select_for_update(of=("self",))
        .select_related("bound_lease")
        .get(pk=issuer.pk)
    )
    refusal = keys.key_refusal_of(locked, now)
    if refusal is not None:
        raise refusal
    locked.hand = issuer.hand
    return locked


@refusals_recorded
@retried
def key_revoke(
    *,
    workspace_id: int,
    prefix: str,
    actor: str,
    reason: str = "",
    lane_id: int | None = None,
    by: HandKey | None = None,
) -> HandKey:
    """Revoke now, with every key it issued (and theirs); the very next call of each is refused
    (nothing caches a key's validity), and every tenure taken with any of them ends in the same
    transaction (`keys_tenures_end`).

    A lane-limited caller (`lane_id`) reaches only keys limited to its own lane; any other key is
    not found, as objects outside its lane are everywhere. A key (`by`) revokes only keys it
    outranks or equals (`keys.authority_refusal`): never one with a scope it lacks."""
    reason = validate_reason(reason)
    try:
        key = (
            HandKey.objects.in_lane(lane_id)
            .select_related("hand")
            .get(prefix=prefix, hand__workspace_id=workspace_id)
        )
    except HandKey.DoesNotExist:
        raise NotFound(f"no key {prefix!r}") from None
    if by is not None:
        refusal = keys.authority_refusal(
            issuer_scopes=by.scopes,
            issuer_lane_id=by.lane_id,
            scopes=key.scopes,
            lane_id=key.lane_id,
            acting="revoke",
        ) or keys.other_hand_refusal(
            issuer_scopes=by.scopes,
            issuer_hand_id=by.hand_id,
            hand_id=key.hand_id,
            hand_name=key.hand.name,
            acting="revoke",
        )
        if refusal is not None:
            raise refusal
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
        issued = keys_issued_revoke(roots=[key.pk], actor=actor, at=now)
        # The root too when it was revoked before: ending its tenures again ends nothing.
        keys_tenures_end(key_ids=[key.pk, *issued], actor=actor)
    key.refresh_from_db()
    return key


def keys_issued_revoke(*, roots: list[int], actor: str, at: datetime) -> list[int]:
    """Revoke every live key issued, directly or through others, by the keys `roots`, each with
    its event and the reason naming the revoked issuer; one statement for the whole tree.
    Called in the transaction that revoked the roots (by a caller, or by the revoking job).
    Returns the ids of the keys it revoked, whose tenures the caller ends (`keys_tenures_end`)."""
    if not roots:
        return []
    table = HandKey._meta.db_table
    ids = ", ".join(str(int(pk)) for pk in roots)
    reason = (
        f"'its issuer ' || (SELECT p.prefix FROM {table} p WHERE p.id = {table}.issued_by_id) "
        "|| ' was revoked'"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE tree(id) AS (SELECT id FROM {table} WHERE issued_by_id IN ({ids}) "
            f"UNION SELECT k.id FROM {table} k JOIN tree ON k.issued_by_id = tree.id) "
            f"UPDATE {table} SET revoked_at = %s, revoked_by = %s, revoke_reason = {reason} "
            f"WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL "
            "RETURNING prefix, hand_id, revoke_reason, id",
            [at, actor],
        )
        revoked = cursor.fetchall()
    if not revoked:
        return []
    hands = {
        pk: (workspace_id, name)
        for pk, workspace_id, name in Hand.objects.filter(
            pk__in={row[1] for row in revoked}
        ).values_list("pk", "workspace_id", "name")
    }
    record_events(
        [
            event(
                workspace_id=hands[hand_id][0],
                kind=EventKind.KEY_REVOKED,
                at=at,
                actor=actor,
                hand=hands[hand_id][1],
                data={"prefix": prefix, "reason": reason},
            )
            for prefix, hand_id, reason, _ in revoked
        ]
    )
    return [key_id for *_, key_id in revoked]


def keys_tenures_end(*, key_ids: list[int], actor: str) -> int:
    """End every live tenure (resource and slot leases) taken with one of the keys `key_ids`,
    revoked in the caller's transaction, each with its event and the reason `key revoked`
    (`leases.services.key_tenures_end`; the attempts on the slots end with them, in fleet).
    Every path that revokes keys calls this in its transaction: the API, the dashboard, the
    admin (`key_revoke`), the revoking job (`fleet.jobs.keys_revoke_due`), and each key's
    issued subtree (`keys_issued_revoke`)."""
    return len(key_tenures_end(key_ids=key_ids, actor=actor))


# The key's row and what authentication loads with it, in this order (a lane is optional).
_KEY_MODELS: tuple[type[Model], ...] = (HandKey, Hand, Workspace, Lane, Lease)


Converter = tuple[int, Any, list[Any]]


@functools.cache
def _key_query() -> tuple[str, list[list[Converter]]]:
    """The key, its hand, the hand's workspace, the key's lane and the lease a bound key lives by
    in one SELECT, written out once instead of compiled by the ORM on every call (that
    compilation was the hot path's largest cost), with each column's converters as the ORM would
    apply them. `{now}` is rendered per call: tests move the database clock."""
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
    key, hand, workspace, lane, lease = (quote(m._meta.db_table) for m in _KEY_MODELS)
    sql = (
        f"SELECT {', '.join(columns)}, {{now}} FROM {key} "
        f"INNER JOIN {hand} ON {key}.{quote('hand_id')} = {hand}.{quote('id')} "
        f"INNER JOIN {workspace} ON {hand}.{quote('workspace_id')} = {workspace}.{quote('id')} "
        f"LEFT OUTER JOIN {lane} ON {key}.{quote('lane_id')} = {lane}.{quote('id')} "
        f"LEFT OUTER JOIN {lease} ON {key}.{quote('bound_lease_id')} = {lease}.{quote('id')} "
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
        if values[0] is None:  # no primary key: the optional lane or bound lease
            out.append(None)
            continue
        for index, column, funcs in mine:
            for func in funcs:
                values[index] = func(values[index], column, connection)
        out.append(model.from_db(connection.alias, [f.attname for f in fields], values))
    return out


def _key_with_hand(prefix: str) -> tuple[HandKey, datetime] | None:
    """The key with its hand, workspace and lane loaded, and the database's time (one query)."""
    sql, converters = _key_query()
    with connection.cursor() as cursor:
        cursor.execute(sql.format(now=now_sql()), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    key, hand, workspace, lane, bound = _models_of(row[:-1], converters)
    assert isinstance(key, HandKey) and isinstance(hand, Hand)
    hand.workspace = workspace
    key.hand = hand
    key.lane = lane
    key.bound_lease = bound
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
    refusal = keys.key_refusal_of(key, now)
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


def key_guard(key: HandKey) -> engine.Guard:
    """The key as a condition of the statement that grants (`leases.engine.Guard`): still usable
    at the instant of the grant, so a key revoked or expired while its `wait_s` acquire slept is
    granted nothing. A key's scopes never change once it is issued, so its revocation and its
    expiry are what can have changed since it was authenticated."""
    table = HandKey._meta.db_table

    def explain() -> Exception | None:
        current = HandKey.objects.filter(pk=key.pk).select_related("bound_lease").first()
        return (
            KeyInvalid("unknown key") if current is None else keys.key_refusal_of(current, db_now())
        )

    # FOR SHARE on the key's row: a revocation's UPDATE of it waits for the grant's commit (and
    # then ends the new tenure, `keys_tenures_end`), and a grant that meets a revocation in
    # flight waits for it and reads the key as revoked. `key_id`: the tenure records its key.
    return engine.Guard(
        sql=f"EXISTS (SELECT 1 FROM {table} k WHERE k.id = %(guard_key_id)s "
        f"AND {keys.usable_sql('k', '{now}')} FOR SHARE OF k)",
        params={"guard_key_id": key.pk, "key_id": key.pk},
        explain=explain,
        # The grant's transaction takes the key's row before any lease row (`Guard.hold`).
        locks=(f"SELECT 1 FROM {table} WHERE id = %(guard_key_id)s FOR SHARE",),
    )


def key_require_scope(key: HandKey, scope: str) -> None:
    refusal = keys.scope_refusal(key.scopes, scope)
    if refusal is not None:
        raise refusal


def default_hand_name(username: str) -> str:
    return f"{slugify(username) or 'admin'}-supervisor"


def bootstrap(
    *,
    workspace_name: str,
    username: str,
    password: str,
    new_key: bool = False,
    member_of: Sequence[str] = (),
) -> dict[str, Any]:
    """Idempotently: a workspace, an admin member, and a supervisor hand with every scope.

    A key is minted when the supervisor hand has no live key (or `new_key`); it is returned once.
    `member_of` names other workspaces (created when missing) the user is an admin of as well,
    without a supervisor hand there: `scripts/run` keeps the demo fleet in its own `demo`
    workspace this way, apart from the admin's own.
    """
    others = [name for name in dict.fromkeys(member_of) if name != workspace_name]
    user_model = get_user_model()
    with transaction.atomic():
        workspace = workspace_get_or_create(name=workspace_name)
        user, created = user_model.objects.get_or_create(username=username)
        if created or not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        membership_set(workspace=workspace, user=user, role=Role.ADMIN)
        for name in others:
            membership_set(workspace=workspace_get_or_create(name=name), user=user, role=Role.ADMIN)
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
        "member_of": others,
    }


@_refused_as_the_caller
def key_issue_by(
    *,
    issuer: HandKey,
    hand: Hand,
    scopes: list[str],
    expires_in_s: float | None = None,
    lane: Lane | None = None,
    revoke_when_done: bool = False,
    bound_to: tuple[str, int | None] | None = None,
) -> IssuedKey:
    """`key_issue` on behalf of a key: only keys it outranks or equals (`keys.authority_refusal`:
    its own scopes at most, its own lane when it is lane-limited), for hands in its lane, for
    another hand than its own only with `supervise` (`keys.other_hand_refusal`), and never
    outliving it."""
    refusal = keys.authority_refusal(
        issuer_scopes=issuer.scopes,
        issuer_lane_id=issuer.lane_id,
        scopes=_validate_scopes(scopes),
        lane_id=lane.pk if lane is not None else None,
        acting="issue",
    ) or keys.other_hand_refusal(
        issuer_scopes=issuer.scopes,
        issuer_hand_id=issuer.hand_id,
        hand_id=hand.pk,
        hand_name=hand.name,
    )
    if refusal is None and issuer.lane_id is not None and hand.lane_id != issuer.lane_id:
        refusal = ScopeDenied(
            "a lane-limited key can issue keys only for hands in its own lane",
            required_scope=Scope.HANDS.value,
        )
    if refusal is not None:
        raise refusal
    return key_issue.__wrapped__(  # type: ignore[attr-defined]  # recorded once, here
        hand=hand,
        scopes=scopes,
        actor=issuer.hand.name,
        expires_in_s=expires_in_s,
        lane=lane,
        revoke_when_done=revoke_when_done,
        issuer=issuer,
        bound_to=bound_to,
    )
