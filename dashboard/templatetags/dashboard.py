"""Filters for the dashboard's templates: safe Markdown, safe links, short durations, costs."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import markdown as markdown_lib
import nh3
from django import template
from django.utils.safestring import SafeString, mark_safe

from fleet.costs.spend import Spend, money_text

register = template.Library()

# No images or other embedded resources: a brief must not make the browser fetch anything.
_BRIEF_TAGS = set(nh3.ALLOWED_TAGS) - {"img", "map", "area"}
_BRIEF_SCHEMES = {"http", "https", "mailto"}


@register.filter
def markdown(text: str) -> SafeString:
    """A run's brief: Markdown rendered, then sanitised (no scripts, handlers or javascript:)."""
    html = markdown_lib.markdown(text or "", extensions=["fenced_code", "tables", "sane_lists"])
    return mark_safe(nh3.clean(html, tags=_BRIEF_TAGS, url_schemes=_BRIEF_SCHEMES))  # noqa: S308


@register.filter
def http_url(value: str) -> str:
    """The URL if it is an absolute http(s) link, else "" (the template then shows text)."""
    if not isinstance(value, str):
        return ""
    parts = urlsplit(value.strip())
    if parts.scheme.lower() in ("http", "https") and parts.hostname:
        return value.strip()
    return ""


@register.filter
def duration(seconds: float | None) -> str:
    """12s, 4m 05s, 3h 02m, 2d 4h."""
    if seconds is None:
        return ""
    total = int(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if total < 60:
        return f"{sign}{total}s"
    if total < 3600:
        return f"{sign}{total // 60}m {total % 60:02d}s"
    if total < 86400:
        return f"{sign}{total // 3600}h {total % 3600 // 60:02d}m"
    return f"{sign}{total // 86400}d {total % 86400 // 3600}h"


@register.filter
def iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


@register.filter
def state_count(counts: dict[str, int] | None, state: str) -> int:
    return (counts or {}).get(state, 0)


@register.filter
def spend_of(spends: dict[int, Any] | None, attempt_id: int) -> Any:
    """An attempt's total from a page's `by_attempt`; none (zero) when it reported no cost."""
    return (spends or {}).get(attempt_id) or Spend()


@register.filter
def money(value: Any) -> str:
    """A dollar figure as the contract writes it (6 places, a Decimal, never a float)."""
    return money_text(value) or ""


@register.filter
def required_evidence(run: Any) -> str:
    """A run's required kinds, each with the least grade it needs: "pull_request (seen by ci),
    commit"; "none" when it requires none. Plain text: the template escapes it."""
    grades = run.evidence_grades or {}
    kinds = [
        kind + (f" (seen by {grades[kind]})" if kind in grades else "")
        for kind in run.evidence_required
    ]
    return ", ".join(kinds) or "none"
