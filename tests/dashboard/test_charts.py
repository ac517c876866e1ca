"""The SVG pictures are pure functions of their data: bars, ticks, markers, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from dashboard.charts import STATE_COLOURS, Bar, state_chart_svg, timeline_svg

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_it_draws_a_bar_per_attempt_coloured_by_state_with_ticks_and_evidence():
    bars = [
        Bar(
            "a · slot 0",
            NOW - timedelta(minutes=10),
            NOW - timedelta(minutes=5),
            "finished",
            ticks=[NOW - timedelta(minutes=m) for m in (9, 8, 7)],
            markers=[(NOW - timedelta(minutes=5), "pull_request")],
            href="/runs/1/",
        ),
        Bar("b · slot 1", NOW - timedelta(minutes=4), None, "late"),
    ]
    root = parse(timeline_svg(bars, now=NOW, title="Run 1"))
    drawn = [r for r in root.iter(f"{SVG}rect") if r.get("data-state")]
    assert [(r.get("data-state"), r.get("fill")) for r in drawn] == [
        ("finished", STATE_COLOURS["finished"]),
        ("late", STATE_COLOURS["late"]),
    ]
    assert len([line for line in root.iter(f"{SVG}line") if line.get("class") == "tick"]) == 3
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "evidence"]) == 1
    # The open bar reaches the right edge (now); the finished one stops at its end.
    first, second = drawn
    assert float(first.get("x")) < float(second.get("x"))
    assert float(second.get("x")) + float(second.get("width")) > float(first.get("x")) + float(
        first.get("width")
    )
    assert root.get("role") == "img" and root.find(f"{SVG}title").text == "Run 1"


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
    assert "No samples yet." in state_chart_svg([], now=NOW)


def test_the_state_chart_stacks_the_latest_sample_of_each_slice():
    samples = [
        (NOW - timedelta(minutes=30), {"live": 3, "lost": 1}),
        (NOW - timedelta(minutes=29, seconds=59), {"live": 4, "lost": 1}),  # same slice: wins
        (NOW - timedelta(minutes=1), {"live": 2, "late": 1, "finished": 2}),
        (NOW - timedelta(hours=5), {"live": 99}),  # outside the window
    ]
    root = parse(state_chart_svg(samples, now=NOW, window_s=3600, columns=60))
    groups = [g for g in root.iter(f"{SVG}g")]
    assert len(groups) == 2
    first = [r.get("fill") for r in groups[0].iter(f"{SVG}rect")]
    assert first == [STATE_COLOURS["live"], STATE_COLOURS["lost"]]
    assert "4 live" in groups[0].find(f"{SVG}title").text
    assert "Latest: 2 live, 1 late, 0 stalled, 0 lost, 2 finished" in root.find(f"{SVG}desc").text
