"""The SVG pictures are pure functions of their data: bars, phases, marks, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from dashboard.charts import STATE_COLOURS, Bar, Mark, timeline_svg

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_it_draws_a_bar_per_attempt_in_its_phases_capped_by_its_state_with_marks():
    bars = [
        Bar(
            "a · slot 0",
            NOW - timedelta(minutes=10),
            NOW - timedelta(minutes=5),
            "finished",
            phases=[
                ("live", NOW - timedelta(minutes=10), NOW - timedelta(minutes=8)),
                ("late", NOW - timedelta(minutes=8), NOW - timedelta(minutes=7)),
                ("live", NOW - timedelta(minutes=7), NOW - timedelta(minutes=5)),
            ],
            marks=[
                Mark(NOW - timedelta(minutes=9), "progress", "Progress report, 40%"),
                Mark(NOW - timedelta(minutes=5), "evidence", "Evidence pull_request"),
            ],
            href="/runs/1/",
        ),
        Bar("b · slot 1", NOW - timedelta(minutes=4), None, "late"),
    ]
    root = parse(timeline_svg(bars, now=NOW, title="Run 1"))
    caps = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "cap"]
    assert [(r.get("data-state"), r.get("fill")) for r in caps] == [
        ("finished", STATE_COLOURS["finished"]),
        ("late", STATE_COLOURS["late"]),
    ]
    phases = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "phase"]
    assert [(r.get("data-phase"), r.get("fill")) for r in phases] == [
        ("live", STATE_COLOURS["live"]),
        ("late", STATE_COLOURS["late"]),
        ("live", STATE_COLOURS["live"]),
        ("late", STATE_COLOURS["late"]),  # a bar without phases is its state
    ]
    marks = [p.get("data-mark") for p in root.iter(f"{SVG}path") if p.get("data-mark")]
    assert marks == ["progress", "evidence"]
    late = phases[1].find(f"{SVG}title").text
    assert late.startswith("a · slot 0: late from 11:52:00 UTC (8 min 00 s ago) to 11:53:00 UTC")
    # The open bar reaches the right edge (now); the finished one stops at its end.
    first, second = caps
    assert float(first.get("x")) < float(second.get("x"))
    assert root.get("role") == "img" and root.find(f"{SVG}title").text == "Run 1"


def test_the_legend_draws_each_colour_and_mark_the_bars_use():
    root = parse(
        timeline_svg([Bar("a", NOW - timedelta(minutes=1), None, "live")], now=NOW, title="t")
    )
    legend = {r.get("data-legend"): r.get("fill") for r in root.iter() if r.get("data-legend")}
    for state in ("live", "late", "stalled", "lost", "finished", "released"):
        assert legend[state] == STATE_COLOURS[state]
    assert {"progress", "blocker", "note", "evidence"} <= set(legend)


def test_it_cuts_the_picture_at_since_and_leaves_out_older_marks():
    bar = Bar(
        "a",
        NOW - timedelta(hours=3),
        None,
        "live",
        phases=[("live", NOW - timedelta(hours=3), NOW)],
        marks=[Mark(NOW - timedelta(hours=2), "note", "old"), Mark(NOW, "note", "new")],
    )
    root = parse(timeline_svg([bar], now=NOW, title="t", since=NOW - timedelta(hours=1)))
    assert [
        p.get("data-mark") for p in root.iter(f"{SVG}path") if p.get("class", "").startswith("mark")
    ] == ["note"]
    axis = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "axis"]
    assert axis[0] == "11:00:00" and axis[-1] == "12:00:00 UTC"


def test_it_escapes_labels_and_links():
    bars = [
        Bar(
            '<script>"x"</script>',
            NOW - timedelta(seconds=5),
            None,
            "live",
            href='/hands/1/"onmouseover="alert(1)',
        )
    ]
    svg = timeline_svg(bars, now=NOW, title="<b>t</b>")
    root = parse(svg)
    assert "<script>" not in svg and "<b>" not in svg
    link = next(root.iter(f"{SVG}a"))
    assert link.get("href") == '/hands/1/"onmouseover="alert(1)' and link.get("onmouseover") is None


def test_it_says_so_when_there_is_nothing_to_draw():
    assert "No attempts yet." in timeline_svg([], now=NOW, title="t")
