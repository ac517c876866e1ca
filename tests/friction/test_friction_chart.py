"""The friction chart is a pure function of its data: a stacked column per week, a segment per
lane, heights in proportion, every text escaped, and a sentence when there is nothing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import date, timedelta

from dashboard.charts import LANE_COLOURS, friction_chart_svg

SVG = "{http://www.w3.org/2000/svg}"
WEEKS = [date(2030, 1, 7) + timedelta(weeks=i) for i in range(4)]


def test_it_stacks_each_weeks_minutes_by_lane_in_proportion() -> None:
    minutes = {("rewalk", WEEKS[0]): 30, ("payments", WEEKS[0]): 10, ("rewalk", WEEKS[2]): 20}
    root = ET.fromstring(friction_chart_svg(WEEKS, ["rewalk", "payments"], minutes))
    segments = [r for r in root.iter(f"{SVG}rect") if r.get("data-lane")]
    by = {(r.get("data-lane"), r.get("data-minutes")): float(r.get("height")) for r in segments}
    assert set(by) == {("rewalk", "30"), ("payments", "10"), ("rewalk", "20")}
    assert abs(by[("rewalk", "30")] / by[("payments", "10")] - 3) < 0.05
    assert abs(by[("rewalk", "30")] / by[("rewalk", "20")] - 1.5) < 0.05
    colours = {r.get("data-lane"): r.get("fill") for r in segments}
    assert colours == {"rewalk": LANE_COLOURS[0], "payments": LANE_COLOURS[1]}
    weeks = [g.get("data-week") for g in root.iter(f"{SVG}g")]
    assert weeks == [week.isoformat() for week in WEEKS]
    assert "week of 07 Jan: 40 min (rewalk 30 min, payments 10 min)" in ET.tostring(
        root, encoding="unicode"
    )
    assert root.find(f"{SVG}desc").text == "Minutes lost by lane: rewalk: 50 min; payments: 10 min."


def test_it_escapes_lane_names_and_says_when_there_is_nothing() -> None:
    svg = friction_chart_svg(WEEKS, ['<b>"x"</b>'], {('<b>"x"</b>', WEEKS[1]): 5})
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    ET.fromstring(svg)
    empty = friction_chart_svg(WEEKS, [], {})
    assert "No friction reported in these weeks." in empty
    ET.fromstring(empty)
