"""What the hot path (fleet/hot.py) remembers per process: facts that never change once true, so
that its statements carry them as values instead of reading them again. Each statement checks
what it is given (a wrong value matches nothing, and the DRF view answers), and a call that
matched nothing forgets what it used."""

from __future__ import annotations

from typing import Any

from hands.models import Hand, HandKey

# attempt id -> its lease's id, as the reports' rows gave them: a report names its lease by this
# value instead of reading the attempt again for it (an attempt's lease never changes).
ATTEMPT_LEASES: dict[int, int] = {}
# key prefix -> the workspace of the key's hand (a key never changes hand, a hand never changes
# workspace): a report names the attempt's workspace by it, so that the statement reaches one
# workspace's rows (docs/scale.md). Whether the key may still be used is the statement's to say.
KEY_WORKSPACES: dict[str, int] = {}
MAX_REMEMBERED = 100_000

# The key's hand's workspace, by the key's prefix and its secret's hash.
KEY_WORKSPACE = (
    f"SELECT h.workspace_id FROM {HandKey._meta.db_table} k "
    f"JOIN {Hand._meta.db_table} h ON h.id = k.hand_id "
    "WHERE k.prefix = %(key_prefix)s AND k.secret_hash = %(key_secret_hash)s"
)


def remember(memory: dict[Any, int], key: Any, value: int) -> None:
    if len(memory) >= MAX_REMEMBERED:
        memory.clear()
    memory[key] = value


def key_workspace(db: Any, prefix: str, secret_hash: str) -> int | None:
    """The workspace of the key `prefix` (read once per process, by its secret's hash too, so
    that no call with a wrong secret fills the memory), or None if there is no such key."""
    known = KEY_WORKSPACES.get(prefix)
    if known is not None:
        return known
    with db.cursor() as cursor:
        cursor.execute(KEY_WORKSPACE, {"key_prefix": prefix, "key_secret_hash": secret_hash})
        row = cursor.fetchone()
    if row is None:
        return None
    remember(KEY_WORKSPACES, prefix, row[0])
    return row[0]
