"""Every time on every page is drawn by one template tag (`when`): relative words with the
absolute UTC time on hover and the instant in `<time datetime>`, which static/js/dashboard.js
keeps current by the same rule (tests/browser/test_lease_tree.py runs `CASES` through it)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.template import Context, Template, TemplateSyntaxError

from dashboard.templatetags.dashboard import relative

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
# (seconds from now, style, words): the rule's boundaries, in both directions.
CASES = [
    (0, "relative", "now"),
    (0.9, "relative", "now"),
    (1, "relative", "in 1 s"),
    (-1, "relative", "1 s ago"),
    (-40.7, "relative", "40 s ago"),
    (59.99, "countdown", "in 59 s"),
    (60, "relative", "in 1 min 00 s"),
    (-185, "relative", "3 min 05 s ago"),
    (599, "relative", "in 9 min 59 s"),
    (600, "relative", "in 10 min"),
    (600, "countdown", "in 10 min 00 s"),
    (-3599, "relative", "59 min ago"),
    (-3599, "countdown", "59 min 59 s ago"),
    (3600, "relative", "in 1 h 00 min"),
    (-7500, "relative", "2 h 05 min ago"),
    (86399, "countdown", "in 23 h 59 min"),
    (-86400, "relative", "1 d 0 h ago"),
    (-(3 * 86400 + 4 * 3600 + 59), "relative", "3 d 4 h ago"),
    (30 * 86400, "relative", "in 30 d"),
    (0, "offset", "+0 s"),
    (245, "offset", "+4 min 05 s"),
    (-30, "offset", "-30 s"),
    (7500, "offset", "+2 h 05 min"),
]
TEMPLATES = Path(settings.BASE_DIR) / "templates"


@pytest.mark.parametrize(("seconds", "style", "words"), CASES)
def test_a_time_reads_as_words(seconds: float, style: str, words: str) -> None:
    assert relative(seconds, style) == words


def render(source: str, **context: object) -> str:
    return Template("{% load dashboard %}" + source).render(Context(context))


def test_the_tag_draws_a_time_element_with_the_absolute_time_on_hover() -> None:
    html = render("{% when at %}", at=NOW - timedelta(minutes=3), now=NOW)
    assert html == (
        '<time datetime="2030-01-01T11:57:00+00:00" title="2030-01-01 11:57:00 UTC" '
        'data-when="relative" data-now="2030-01-01T12:00:00+00:00">3 min 00 s ago</time>'
    )


def test_the_tag_reads_the_pages_database_time() -> None:
    class Page:
        now = NOW

    at = NOW + timedelta(seconds=40)
    assert ">in 40 s<" in render("{% when at %}", at=at, page=Page())
    assert ">in 40 s<" in render('{% when at "countdown" now=now %}', at=at, now=NOW)
    offset = render("{% when at since=start %}", at=at, start=NOW - timedelta(minutes=2))
    assert offset == (
        '<time datetime="2030-01-01T12:00:40+00:00" title="2030-01-01 12:00:40 UTC" '
        'data-when="offset">+2 min 40 s</time>'
    )
    assert render("{% when nothing %}", nothing=None, now=NOW) == ""


@pytest.mark.django_db
def test_a_page_without_a_clock_asks_the_database_once(frozen_clock) -> None:
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    source = "{% when a %} {% when b %}"
    context = {"a": frozen_clock - timedelta(hours=1), "b": frozen_clock, "request": request}
    assert render(source, **context).count("data-now=") == 2
    assert request.gc_db_now == frozen_clock


def test_an_unknown_style_is_a_template_error() -> None:
    with pytest.raises(TemplateSyntaxError):
        render('{% when at "soon" %}', at=NOW, now=NOW)


# What draws a time other than through the tag: Django's date filters and tags, an ISO string
# shown as text, a `<time>` element written by hand, and the old ticking attributes.
RAW_TIME = re.compile(
    r"\|\s*(date|time|timesince|timeuntil|naturaltime|naturalday)\b"
    r"|\{%\s*now\b|isoformat|<time\b|data-(since|until)="
)
# `|iso` only in a page's clock for the browser (`data-now`) or a data attribute.
ISO = re.compile(r"\|\s*iso\b")
ISO_ALLOWED = re.compile(r'data-[a-z-]+="\{\{ [\w.]+\|iso \}\}"')


def offenders(text: str) -> list[str]:
    found = [match.group(0) for match in RAW_TIME.finditer(text)]
    found += [match.group(0) for match in ISO.finditer(ISO_ALLOWED.sub("", text))]
    return found


def test_every_template_draws_its_times_through_the_tag() -> None:
    drawn = {
        str(path.relative_to(TEMPLATES)): offenders(path.read_text())
        for path in TEMPLATES.rglob("*.html")
        if "drf_spectacular" not in path.parts  # the vendor's Swagger UI page shows no time
    }
    assert {name: found for name, found in drawn.items() if found} == {}


def test_the_check_finds_a_raw_time() -> None:
    """The check above is only as good as what it can see."""
    assert offenders('<td>{{ event.at|date:"Y-m-d H:i:s" }}</td>') == ["|date"]
    assert offenders('<time datetime="{{ x|iso }}">{{ x|iso }}</time>') == ["<time", "|iso", "|iso"]
    assert offenders('<span data-since="{{ x|iso }}">') == ["data-since="]
    assert offenders('{{ a.at|timesince }} {% now "c" %} {{ a.at.isoformat }}') == [
        "|timesince", "{% now", "isoformat",
    ]  # fmt: skip
    assert offenders('<div data-now="{{ board.now|iso }}">{% when x %}') == []
