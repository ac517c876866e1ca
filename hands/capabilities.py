"""Capabilities: the free-form tags a run needs (`python`, `browser`, `gpu`) and a hand has.

One rule, in three forms held together by `tests/capabilities/test_capability_rule.py`:
`normalise` (what a tag list may be: lowercase, stripped, each once), `missing` (Python: the tags
a run needs that a hand lacks) and `fits_sql` (the same as SQL, for the claim's one statement and
the runs a hand may take). Here, with the hand, because a hand's capabilities are who it is, as
its lane is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from apikit.errors import ValidationFailed

MAX_TAGS = 20
MAX_TAG_LENGTH = 32
# Letters, digits and `.`, `_`, `+`, `-` after the first: `python3.12`, `c++`, `gpu-a100`.
_TAG = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
TAG_HELP = (
    f"At most {MAX_TAGS} tags of 1 to {MAX_TAG_LENGTH} characters: letters, digits and . _ + - "
    "(not first); stored lowercase, each once."
)


def normalise(value: object, *, field: str = "capabilities") -> list[str]:
    """A list of tags as stored: each stripped and lowercased, duplicates dropped (first kept).
    Anything else (not a list, a tag that is not a string, empty, too long or with other
    characters, too many) is a validation_error naming `field` and the tag."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationFailed(f"{field} must be a list of tags", fields={field: [TAG_HELP]})
    tags: list[str] = []
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise ValidationFailed(
                f"{field}[{position}] must be a string", fields={field: [TAG_HELP]}
            )
        tag = item.strip().lower()
        if not tag or len(tag) > MAX_TAG_LENGTH or not _TAG.match(tag):
            shown = item if len(item) <= 40 else item[:40] + "…"
            raise ValidationFailed(
                f"{field}[{position}] {shown!r} is not a tag: {TAG_HELP}",
                fields={field: [f"{shown!r}: {TAG_HELP}"]},
            )
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise ValidationFailed(
            f"{field} holds at most {MAX_TAGS} tags ({len(tags)} sent)", fields={field: [TAG_HELP]}
        )
    return tags


def missing(needed: Iterable[str], has: Iterable[str]) -> list[str]:
    """The tags of `needed` not in `has`, in `needed`'s order: empty when the hand fits."""
    held = set(has)
    return [tag for tag in needed if tag not in held]


def fits_sql(needed: str, has: str) -> str:
    """`missing(needed, has) == []` as SQL, over two SQL expressions that are JSON arrays of
    tags (a column, or a parameter cast by `array_param_sql`)."""
    # jsonb containment of arrays: every element of the left is an element of the right.
    return f"({needed} <@ {has})"


def array_param_sql(placeholder: str) -> str:
    """A JSON text parameter as the array `fits_sql` compares."""
    return f"CAST({placeholder} AS jsonb)"
