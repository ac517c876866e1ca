"""Names a caller may not read, concealed from everything the API answers it.

A lane-limited key reads only its lane's (docs/api.md, "Lanes"): the hands of other lanes are
never named to it. Which names those are is the lane rule's (`hands.selectors.hands_elsewhere`),
which the authentication hands to the call's context (`CallContext.conceal`); this module applies
it: `conceal_answer` over every answer an API view gives (`hands.views.HandAPIView`, and the hot
views of `leasing.hot`); `concealed` and `shown` where text names a hand (a denial's sentence, a
handoff's, a receipt's: the sentence, and the refusal recorded with it, name nobody the caller
may not read); `unnamed` where a list is filtered by a hand's name.

In an answer, a field that names a hand (`NAMING`) reads null, and so do the fields beside it
that say more of that same hand (its process, its key): one filter over every answer, so an
endpoint added later cannot forget it (`tests/lanes/test_lane_probe.py` walks every endpoint).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apikit.context import current_call

# Each field of the contract that names a hand, with the fields beside it (in the same object,
# or in its `data`: an event's) that belong to that hand.
NAMING: dict[str, tuple[str, ...]] = {
    "holder": ("process_id", "holder_process_id"),
    "hand": ("process_id", "key_prefix", "data.process_id", "data.from_process_id"),
    "from": (),
    "asker": (),
    "actor": ("actor_key",),
    "answered_by": (),
    "created_by": (),
}

# How a sentence names a hand it may not name, and how the schema says a field may be null.
ANOTHER_LANE = "a hand of another lane"
CONCEALED = "Null to a lane-limited key when it is a hand of another lane (docs/api.md, Lanes)."


def concealed(names: Iterable[object]) -> frozenset[str]:
    """Of `names`, those the caller may not read (none for a caller who may read every name):
    one query, none when there is nothing to ask."""
    conceal = current_call().conceal
    if conceal is None:
        return frozenset()
    wanted = frozenset(name for name in names if isinstance(name, str) and name)
    return conceal(wanted) if wanted else frozenset()


def shown(name: str) -> str | None:
    """`name`, or None when the caller may not read it."""
    return None if name in concealed([name]) else name


def unnamed(name: str) -> bool:
    """A name the caller may not read: a list filtered by it finds nothing, as for a name that
    is nobody's (else the filter would confirm what the name holds or did)."""
    return bool(name) and shown(name) is None


def conceal_answer(data: Any, *, everyone: bool = False) -> Any:
    """`data` (an answer as dicts and lists) with every name the caller may not read null, and
    the fields beside it that belong to that hand; `data` itself when nothing is concealed.
    `everyone`: conceal every name (an answer whose reader could not be told)."""
    if current_call().conceal is None and not everyone:
        return data
    found: set[str] = set()
    _collect(data, found)
    hidden = frozenset(found) if everyone else concealed(found)
    return _blank(data, hidden) if hidden else data


def _collect(data: Any, found: set[str]) -> None:
    if isinstance(data, dict):
        for field, value in data.items():
            if field in NAMING and isinstance(value, str):
                found.add(value)
            else:
                _collect(value, found)
    elif isinstance(data, list | tuple):
        for item in data:
            _collect(item, found)


def _blank(data: Any, hidden: frozenset[str]) -> Any:
    if isinstance(data, dict):
        out = {field: _blank(value, hidden) for field, value in data.items()}
        for field, beside in NAMING.items():
            value = out.get(field)
            if isinstance(value, str) and value in hidden:
                out[field] = None
                for other in beside:
                    inner, _, other = other.rpartition(".")
                    owner = out.get(inner) if inner else out
                    if isinstance(owner, dict) and other in owner:
                        owner[other] = None
        return out
    if isinstance(data, list | tuple):
        return [_blank(item, hidden) for item in data]
    return data
