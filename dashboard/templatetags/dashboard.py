"""Filters for the dashboard's templates: safe Markdown, safe links, short durations, costs, and
every time a page shows (`when`: the one way a time is drawn)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import markdown as markdown_lib
import nh3
from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from fleet.costs.spend import Spend, money_text
from leases.clock import db_now

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


# --- Times ---------------------------------------------------------------------------------------
# Every time on every page is drawn by `when`: relative text ("3 min ago", "in 40 s") inside a
# `<time>` whose `datetime` is the instant and whose title is the absolute UTC time, kept current
# by static/js/dashboard.js (`relative`, the same rule written in JavaScript;
# tests/lease_tree/test_times.py runs one table of cases through both, and fails on a template
# that draws a time any other way).

# The styles: "relative" (to the minute past ten minutes), "countdown" (to the second below an
# hour: a window that is running out), and "offset" (`since` an origin, such as a run's start on
# its replay: "+3 min 05 s"; it does not tick).
TIME_STYLES = ("relative", "countdown", "offset")
# Where a page keeps its database time, if it has one: `now` itself, or an object's `.now`.
_PAGE_NOW = ("board", "page", "paged", "tree", "row")


def _amount(total: int, precise: bool) -> str:
    """A whole number of seconds in words: "40 s", "4 min 05 s", "3 min" (to the minute past ten
    minutes unless `precise`, to the second below the hour), "2 h 05 min", "3 d 4 h", "45 d"."""
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if total < 60:
        return f"{total} s"
    if total < 3600:
        if precise or minutes < 10:
            return f"{minutes} min {total % 60:02d} s"
        return f"{minutes} min"
    if total < 86400:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{days} d {hours % 24} h" if days < 30 else f"{days} d"


def relative(seconds: float, style: str = "relative") -> str:
    """An instant `seconds` from now, in words: "now", "in 40 s", "3 min ago", "2 h 05 min ago"
    (`_amount`; the countdown style to the second below the hour); in the offset style,
    `seconds` after an origin: "+4 min 05 s"."""
    total = int(abs(seconds))
    amount = _amount(total, precise=style != "relative")
    if style == "offset":
        return ("-" if seconds < 0 and total else "+") + amount
    if total == 0:
        return "now"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def utc_text(instant: datetime) -> str:
    """The absolute time, as the tooltip gives it: 2030-01-02 06:00:00 UTC."""
    return instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _page_now(context: template.Context) -> datetime:
    """The page's database time: its `now`, else the `.now` of its board, page or rows, else
    asked of the database once per request (a page that shows times but never needed the
    clock)."""
    found = context.get("now")
    if isinstance(found, datetime):
        return found
    for name in _PAGE_NOW:
        found = getattr(context.get(name), "now", None)
        if isinstance(found, datetime):
            return found
    request = context.get("request")
    cached = getattr(request, "gc_db_now", None)
    if isinstance(cached, datetime):
        return cached
    now = db_now()
    if request is not None:
        request.gc_db_now = now
    return now


@register.simple_tag(takes_context=True)
def when(
    context: template.Context,
    instant: datetime | None,
    style: str = "relative",
    now: datetime | None = None,
    since: datetime | None = None,
) -> SafeString:
    """`<time datetime="..." title="... UTC">3 min ago</time>`, relative to the page's database
    time (`now`, else `_page_now`), which the element carries (`data-now`) so that the browser
    ticks it on from the server's clock, not its own; with `since`, its offset from that origin
    instead ("+3 min 05 s", the offset style). Nothing for no time."""
    if instant is None or instant == "":
        return mark_safe("")  # noqa: S308
    iso, title = instant.astimezone(UTC).isoformat(), utc_text(instant)
    if since is not None:
        return format_html(
            '<time datetime="{}" title="{}" data-when="offset">{}</time>',
            iso,
            title,
            relative((instant - since).total_seconds(), "offset"),
        )
    if style not in TIME_STYLES or style == "offset":
        raise template.TemplateSyntaxError(f"when: style {style!r} is not relative or countdown")
    at = now if isinstance(now, datetime) else _page_now(context)
    return format_html(
        '<time datetime="{}" title="{}" data-when="{}" data-now="{}">{}</time>',
        iso,
        title,
        style,
        at.astimezone(UTC).isoformat(),
        relative((instant - at).total_seconds(), style),
    )
