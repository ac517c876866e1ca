"""A harness session's row: touched by every event in the statement that checks the caller's
key (`touch`), and, when an event brings repositories the session has not registered yet (or
another TTL), merged under a row lock (`register`).

What a session may register is bounded (`MAX_REPOSITORIES`, `MAX_LINKS`): a path is at most
4,096 characters, like a POSIX path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from apikit.errors import ValidationFailed
from hands import keys
from hands.models import Hand, HandKey, Scope
from harnesses.models import HookSession
from leases.clock import now_expression, now_sql, plus_seconds_sql
from leasing.hot import run_statement

MAX_REPOSITORIES = 64
MAX_LINKS = 1024
MAX_PATH = 4096
DEFAULT_TTL_S = 300.0
MIN_TTL_S, MAX_TTL_S = 5.0, 3600.0


@dataclass(frozen=True)
class Registration:
    """What the agent's side says of its disk with an event (all optional)."""

    repositories: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    ttl_s: float | None = None

    def __bool__(self) -> bool:
        return bool(self.repositories or self.links or self.ttl_s is not None)


@dataclass(frozen=True)
class Session:
    process_id: str
    holder: str
    workspace_id: int
    hand_id: int
    repositories: list[str]
    links: dict[str, str]
    ttl_s: float


def _path(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_PATH:
        raise ValidationFailed(
            f"{field} must be absolute paths (at most {MAX_PATH} characters)",
            fields={field: ["An absolute path."]},
        )
    if "\x00" in value:
        raise ValidationFailed(f"{field} holds a NUL", fields={field: ["No NUL."]})
    return value.rstrip("/") or "/"


def registration_of(facts: object, header: str | None) -> Registration:
    """The agent's side's `groundcontrol` object of the event (and the `X-GC-Repository`
    header's path), checked: absolute paths, within the bounds."""
    repositories: list[str] = []
    if header:
        repositories.append(_path(header, "X-GC-Repository"))
    if facts is None:
        return Registration(tuple(repositories))
    if not isinstance(facts, dict):
        raise ValidationFailed(
            "groundcontrol must be an object", fields={"groundcontrol": ["An object."]}
        )
    given = facts.get("repositories") or []
    links = facts.get("links") or {}
    if not isinstance(given, list) or len(given) > MAX_REPOSITORIES:
        raise ValidationFailed(
            f"groundcontrol.repositories must be a list of at most {MAX_REPOSITORIES} paths",
            fields={"groundcontrol.repositories": [f"At most {MAX_REPOSITORIES}."]},
        )
    if not isinstance(links, dict) or len(links) > MAX_LINKS:
        raise ValidationFailed(
            f"groundcontrol.links must be an object of at most {MAX_LINKS} links",
            fields={"groundcontrol.links": [f"At most {MAX_LINKS}."]},
        )
    repositories += [_path(item, "groundcontrol.repositories") for item in given]
    pairs = tuple(
        (_path(link, "groundcontrol.links"), _path(target, "groundcontrol.links"))
        for link, target in links.items()
    )
    ttl = facts.get("ttl_s")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
            raise ValidationFailed(
                "groundcontrol.ttl_s must be a number",
                fields={"groundcontrol.ttl_s": ["A number."]},
            )
        if not MIN_TTL_S <= ttl <= MAX_TTL_S:
            raise ValidationFailed(
                f"groundcontrol.ttl_s must be from {MIN_TTL_S:g} to {MAX_TTL_S:g} seconds",
                fields={"groundcontrol.ttl_s": [f"{MIN_TTL_S:g} to {MAX_TTL_S:g}."]},
            )
        ttl = float(ttl)
    return Registration(tuple(dict.fromkeys(repositories)), pairs, ttl)


# A session's `last_event_at` is written at most this often: each event's statement reads the
# row and writes it only when the stamp is this old (or the session had ended), so an event of a
# busy session writes no session row at all.
STAMP_EVERY_S = 10.0


def _touch_sql() -> str:
    """The session's row, read, made on its first event, and stamped when it is due, in one
    statement whose source is the key check (no usable key: no row)."""
    table, hand, key = HookSession._meta.db_table, Hand._meta.db_table, HandKey._meta.db_table
    now = now_sql()
    usable = keys.usable_sql("k", now, Scope.LEASES.value)
    due = plus_seconds_sql(now, repr(-STAMP_EVERY_S))
    return (
        f"WITH key AS (SELECT h.id AS hand_id, h.name AS holder, h.workspace_id FROM {key} k "
        f"JOIN {hand} h ON h.id = k.hand_id WHERE k.prefix = %(key_prefix)s "
        f"AND k.secret_hash = %(key_secret_hash)s AND h.workspace_id = %(workspace_id)s "
        f"AND {usable}), "
        "found AS (SELECT s.id, s.repositories, s.links, s.ttl_s, s.last_event_at, s.ended_at "
        f"FROM {table} s, key WHERE s.workspace_id = %(workspace_id)s "
        "AND s.hand_id = key.hand_id AND s.process_id = %(process_id)s), "
        f"made AS (INSERT INTO {table} (workspace_id, hand_id, harness, session_id, process_id, "
        "repositories, links, ttl_s, started_at, last_event_at, ended_at) "
        "SELECT workspace_id, hand_id, %(harness)s, %(session_id)s, %(process_id)s, '[]'::jsonb, "
        f"'{{}}'::jsonb, %(ttl_s)s, {now}, {now}, NULL FROM key "
        "WHERE NOT EXISTS (SELECT 1 FROM found) "
        "ON CONFLICT (workspace_id, hand_id, process_id) DO NOTHING "
        "RETURNING repositories, links, ttl_s), "
        f"stamped AS (UPDATE {table} s SET last_event_at = {now}, ended_at = NULL FROM found "
        f"WHERE s.id = found.id AND (found.ended_at IS NOT NULL OR found.last_event_at < {due}) "
        "RETURNING s.id) "
        "SELECT found.repositories, found.links, found.ttl_s, key.hand_id, key.holder "
        "FROM found, key UNION ALL "
        "SELECT made.repositories, made.links, made.ttl_s, key.hand_id, key.holder FROM made, key"
    )


def touch(
    params: dict[str, Any], *, harness: str, session_id: str, process_id: str
) -> Session | None:
    """The session's row, made on its first event or stamped with this event's time when due,
    if the key (`params`: its prefix, secret hash and workspace, as the hot calls name them) may
    take leases; else None. Prepared, as the hot statements are."""
    values = {
        **params,
        "harness": harness,
        "session_id": session_id,
        "process_id": process_id,
        "ttl_s": DEFAULT_TTL_S,
    }
    db = connections[DEFAULT_DB_ALIAS]
    sql = _touch_sql()
    row = run_statement(db, sql, values)
    if row is None:
        # The first events of one session at once: another made the row meanwhile (this one's
        # insert did nothing); it is there to read now. Still none: the key is refused.
        row = run_statement(db, sql, values)
    if row is None:
        return None
    repositories, links, ttl_s, hand_id, holder = row
    if isinstance(repositories, str):  # a cursor without JSON loading
        repositories, links = json.loads(repositories), json.loads(links)
    return Session(process_id, holder, params["workspace_id"], hand_id, repositories, links, ttl_s)


def register(session: Session, given: Registration) -> Session:
    """Merge what the event registers into the session: nothing is written when it adds
    nothing. A session over its bounds is refused, and nothing of the event is registered."""
    new_repositories = [r for r in given.repositories if r not in session.repositories]
    new_links = {link: target for link, target in given.links if session.links.get(link) != target}
    new_ttl = given.ttl_s is not None and given.ttl_s != session.ttl_s
    if not (new_repositories or new_links or new_ttl):
        return session
    with transaction.atomic():
        row = HookSession.objects.select_for_update().get(
            workspace_id=session.workspace_id,
            hand_id=session.hand_id,
            process_id=session.process_id,
        )
        repositories = list(dict.fromkeys([*row.repositories, *given.repositories]))
        links = {**row.links, **dict(given.links)}
        if len(repositories) > MAX_REPOSITORIES or len(links) > MAX_LINKS:
            raise ValidationFailed(
                f"a session registers at most {MAX_REPOSITORIES} repositories and {MAX_LINKS} "
                "links; end it (SessionEnd) and start another",
                fields={"groundcontrol": ["Too many repositories or links for one session."]},
            )
        row.repositories, row.links = repositories, links
        if given.ttl_s is not None:
            row.ttl_s = given.ttl_s
        row.save(update_fields=["repositories", "links", "ttl_s"])
    return Session(
        session.process_id,
        session.holder,
        session.workspace_id,
        session.hand_id,
        repositories,
        links,
        row.ttl_s,
    )


def end(session: Session) -> None:
    HookSession.objects.filter(
        workspace_id=session.workspace_id, hand_id=session.hand_id, process_id=session.process_id
    ).update(ended_at=now_expression())
