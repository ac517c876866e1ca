"""What "distributable by workspace" means, as code the shardability test applies (docs/scale.md,
"Sharding"): which tables carry the workspace, which do not and why, and a reader of SQL that
says which table references in a statement are pinned to one workspace.

Pinned is what Citus's router needs to send a statement to one shard without looking; a
reference reached by a row's id, or joined by a foreign key, also touches one workspace's rows
(no foreign key crosses workspaces), but Citus cannot tell which shard before it runs the
statement: those are listed with the change that pins them (`ROUTE_GAPS`).

A reference is pinned when the statement says which workspace its rows are in: an alias's
`workspace_id` compared with a value (`= %s`, `= %(workspace_id)s`, the caller's workspace from
the key check, or another pinned alias's `workspace_id`), or, for an INSERT, a `workspace_id`
among the columns it writes. Tables without the workspace are either global (their reason
below) or known gaps (their fix below); both lists are held to the models by the test.
"""

from __future__ import annotations

import re

# Tables with no workspace column by design, and why (each is in docs/scale.md too). On Citus
# these are reference tables (copied to every node) or the coordinator's local tables.
GLOBAL_TABLES = {
    "fleet_workspace": "the workspace itself: the distribution key's own table (a reference table)",
    "fleet_handkey": "found by the bearer token's prefix before anyone knows the workspace (a "
    "reference table; its once-a-minute last_used_at stamp moves to a distributed table)",
    "leases_addressrefusal": "refusals of callers with no valid key, counted by client address: "
    "no workspace is known (a coordinator-local table)",
    "fleet_jobrun": "one row per periodic job of the whole installation (coordinator-local)",
    "leases_clockepoch": "one row per primary's (system identifier, timeline) of the whole "
    "installation: the clock's epochs (coordinator-local)",
    "auth_user": "Django's users: one person is a member of several workspaces (reference)",
    "auth_group": "Django's auth tables (reference)",
    "auth_permission": "Django's auth tables (reference)",
    "auth_group_permissions": "Django's auth tables (reference)",
    "auth_user_groups": "Django's auth tables (reference)",
    "auth_user_user_permissions": "Django's auth tables (reference)",
    "django_content_type": "Django's (reference)",
    "django_admin_log": "Django admin's log of its users' edits (coordinator-local)",
    "django_session": "the dashboard's sessions, a user's, across workspaces (coordinator-local)",
}

# Child tables that reach their workspace only through their parent: each needs a denormalised
# `workspace_id` (filled from the parent) before it can be distributed (docs/scale.md).
GAPS: dict[str, str] = {}

# Unique constraints without the workspace: each on a global table, or fixed by adding it (none
# today: each has the workspace as its last column, docs/scale.md).
UNIQUE_GAPS: dict[tuple[str, tuple[str, ...]], str] = {}

_WORD = r"[A-Za-z_][A-Za-z0-9_]*"
_KEYWORDS = {
    "where", "join", "on", "set", "left", "inner", "cross", "using", "group", "order", "limit",
    "union", "returning", "for", "as", "and", "or", "select", "from", "values", "with", "natural",
    "lateral", "window", "having", "offset", "fetch", "except", "intersect", "do", "default",
}  # fmt: skip


def references(sql: str, tables: set[str]) -> list[tuple[str, str]]:
    """Every (table, alias) the statement reads or writes, for the tables named in `tables`;
    a reference without an alias is named by its table."""
    text = sql.replace('"', "")
    found = []
    pattern = re.compile(
        rf"\b(?:FROM|JOIN|UPDATE|,)\s+({_WORD})(?!\s*\.|\s*\()(?:\s+(?:AS\s+)?({_WORD}))?"
        rf"|\bINTO\s+({_WORD})",
        re.IGNORECASE,
    )
    for match in pattern.finditer(text):
        table, alias = match.group(1) or match.group(3), match.group(2)
        if table not in tables:
            continue
        if alias is None or alias.lower() in _KEYWORDS:
            alias = table
        found.append((table, alias))
    return found


def _pins(text: str, alias: str) -> bool:
    qualified = rf"\b{re.escape(alias)}\.workspace_id\b"
    return bool(
        re.search(qualified + r"\s*=", text)
        or re.search(r"=\s*" + qualified, text)
        or re.search(qualified + r"\s*(?:IN|=\s*ANY)\b", text, re.IGNORECASE)
    )


def how_reached(
    sql: str, workspace_tables: set[str], every_table: set[str]
) -> list[tuple[str, str]]:
    """(table, how) for each reference of `sql` to a table that carries the workspace (or is a
    gap) and is not pinned to a workspace by its own `workspace_id`: "by id" (its own or its
    parent's id equals a value: one row, so one workspace), "by foreign key" (joined to another
    reference by a column equality: the same workspace, as no foreign key crosses workspaces),
    "no workspace column" (a gap table, reached either way), or "unroutable"."""
    text = sql.replace('"', "")
    refs = references(text, every_table)
    bare = [t for t, a in refs if a == t]
    out = []
    for table, alias in refs:
        if table not in workspace_tables and table not in GAPS:
            continue
        if table not in GAPS and (
            _pins(text, alias)
            or _inserted_with_workspace(text, table)
            or (
                alias == table
                and len(bare) == 1
                and re.search(r"(?<![.\w])workspace_id\s*(?:=|IN\b)", text, re.IGNORECASE)
            )
        ):
            continue
        out.append((table, "no workspace column" if table in GAPS else _how(text, alias, table)))
    return out


def _how(text: str, alias: str, table: str) -> str:
    a = re.escape(alias)
    value = r"\s*(?:=\s*(?:%|\d|ANY)|IN\s*\()"
    if re.search(rf"\b{a}\.(?:id|{_WORD}_id){value}", text, re.IGNORECASE):
        return "by id"
    if alias == table and re.search(rf"(?<![.\w])(?:id|{_WORD}_id){value}", text, re.IGNORECASE):
        return "by id"
    column = rf"\b{_WORD}\.{_WORD}"
    if re.search(rf"\b{a}\.{_WORD}\s*=\s*{column}", text) or re.search(
        rf"{column}\s*=\s*{a}\.{_WORD}\b", text
    ):
        return "by foreign key"
    return "unroutable"


def _inserted_with_workspace(text: str, table: str) -> bool:
    match = re.search(rf"\bINSERT\s+INTO\s+{re.escape(table)}\s*\(([^)]*)\)", text, re.IGNORECASE)
    return bool(match and re.search(r"\bworkspace_id\b", match.group(1)))


# How the engine's statements reach a table other than by its workspace today, and the change
# that pins them (docs/scale.md, "What in the SQL would change"). The test holds this to what
# the statements do: a new way of reaching a table must be added here (and there), a fixed one
# removed.
ROUTE_GAPS = {
    ("fleet_run", "by foreign key"): "select_related from an attempt: join on (workspace_id, id)",
    ("fleet_workpackage", "by foreign key"): "select_related from a run: join on "
    "(workspace_id, id)",
    ("fleet_lane", "by foreign key"): "select_related, or a lane's slug by id: join on "
    "(workspace_id, id)",
    ("fleet_hand", "by foreign key"): "the key check's join from the key to its hand (both "
    "reference tables on Citus), and select_related from an attempt",
    ("leases_lease", "by foreign key"): "a slot's or an attempt's lease joined by its id: "
    "join on (workspace_id, id)",
    ("fleet_slot", "by foreign key"): "select_related from an attempt: join on (workspace_id, id)",
}
