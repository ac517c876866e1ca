"""Plain values for the hot path (fleet/hot.py): a request's value that its DRF serializer would
keep unchanged, so the one statement may take it as sent; anything else goes to the serializer."""

from __future__ import annotations

import math


def plain_text(value: object, *, max_length: int, trimmed: bool = True) -> str | None:
    """`value` if a DRF CharField would keep it exactly (printable, within its length, and, for a
    trimming field, without surrounding spaces); None if the serializer must decide."""
    if type(value) is not str or not 0 < len(value) <= max_length or not value.isprintable():
        return None
    if trimmed and value != value.strip():
        return None
    return value


def plain_float(value: object, *, minimum: float, maximum: float) -> float | None:
    """As a DRF FloatField would return it (a float), if it is a plain in-range number."""
    if type(value) not in (int, float) or not math.isfinite(value):
        return None
    return float(value) if minimum <= value <= maximum else None
