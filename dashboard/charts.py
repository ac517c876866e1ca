"""Server-rendered SVG pictures: a timeline of attempts (their phases from the record, their
reports and evidence) and the minutes lost to friction per week.

Pure functions of their data (no queries, no clock): the page passes in the database time it
read once. Every text and attribute is escaped; the markup carries a title and a description
for screen readers, and each state is named in words as well as coloured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from html import escape

from dashboard.templatetags.dashboard import relative

# Fill colours, each with a dark enough stroke and text that they read on white.
STATE_COLOURS = {
    "live": "#2e7d32",
    "late": "#c28a00",
    "stalled": "#d35400",
    "lost": "#b71c1c",
    "finished": "#1f5fa8",
    "released": "#6b6b6b",
    "open": "#d0d7de",
}
STATES = ["live", "late", "stalled", "lost", "finished", "released"]
# A bar's body is its phases; its end is a cap in the colour of how it ended (or stands now).
PHASES = ["live", "late", "stalled", "lost"]
ENDS = ["finished", "released"]
# The marks on a bar: reports above it, evidence on it. Each has its shape in the legend.
MARK_STYLES = {
    "progress": ("M{x} {y} l-4 -6 h8 z", "#1f2328"),  # a small triangle pointing at the bar
    "note": ("M{x} {y} m-3 -5 h6 v6 h-6 z", "#6f42c1"),  # a square
    "blocker": ("M{x} {y} m-4 -8 l8 8 m0 -8 l-8 8", "#b71c1c"),  # a cross (stroked)
    "evidence": ("M{x} {y} l5 5 l-5 5 l-5 -5 z", "#111111"),  # a diamond on the bar
}
MARKS = list(MARK_STYLES)


@dataclass(frozen=True)
class Mark:
    """Something that happened on a tenure: a report (progress, blocker, note) or evidence."""

    at: datetime
    kind: str
    text: str  # what it said, in words on hover (the time is added)


@dataclass(frozen=True)
class Bar:
    """One attempt on a timeline: its phases (state, start, end) from the record, how it ended
    (or stands now) as `state`, and its marks."""

    label: str
    start: datetime
    end: datetime | None  # None while the tenure is open: drawn up to `now`
    state: str
    phases: Sequence[tuple[str, datetime, datetime]] = ()
    marks: Sequence[Mark] = ()
    href: str = ""
    detail: str = ""


@dataclass(frozen=True)
class _Scale:
    start: datetime
    end: datetime
    x0: float
    width: float

    def x(self, instant: datetime) -> float:
        span = (self.end - self.start).total_seconds() or 1.0
        offset = (instant - self.start).total_seconds() / span
        return round(self.x0 + min(max(offset, 0.0), 1.0) * self.width, 1)


def _clock(instant: datetime, span_s: float) -> str:
    return instant.strftime("%H:%M:%S" if span_s < 6 * 3600 else "%d %b %H:%M")


def _axis(scale: _Scale, y: float, ticks: int = 5) -> list[str]:
    span_s = (scale.end - scale.start).total_seconds()
    parts = [
        f'<line x1="{scale.x0}" y1="{y}" x2="{scale.x0 + scale.width}" y2="{y}" '
        'stroke="#57606a" stroke-width="1"/>'
    ]
    for i in range(ticks + 1):
        instant = scale.start + timedelta(seconds=span_s * i / ticks)
        x = scale.x(instant)
        anchor = "start" if i == 0 else "end" if i == ticks else "middle"
        text = _clock(instant, span_s) + (" UTC" if i == ticks else "")
        parts.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 4}" stroke="#57606a"/>')
        parts.append(
            f'<text x="{x}" y="{y + 16}" text-anchor="{anchor}" class="axis">{escape(text)}</text>'
        )
    return parts


def _legend(x: float, y: float, states: Sequence[str]) -> list[str]:
    parts = []
    for state in states:
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{STATE_COLOURS[state]}" '
            f'data-legend="{state}"/>'
            f'<text x="{x + 14}" y="{y}" class="legend">{escape(state)}</text>'
        )
        x += 22 + 7.5 * len(state)
    return parts


def _mark_shape(kind: str, x: float, y: float) -> str:
    """A mark's shape at (x, y), the point of the bar it names."""
    path, colour = MARK_STYLES.get(kind, MARK_STYLES["note"])
    d = path.format(x=x, y=y)
    if kind == "blocker":
        return f'd="{d}" stroke="{colour}" stroke-width="2" fill="none"'
    return f'd="{d}" fill="{colour}" stroke="#ffffff" stroke-width="0.5"'


def _timeline_legend(x: float, y: float) -> list[str]:
    """What the colours and shapes mean: the phases of a bar's body, the caps of its end, and
    its marks, drawn as the bars draw them."""
    parts = _legend(x, y, PHASES)
    x += sum(22 + 7.5 * len(s) for s in PHASES) + 8
    parts.append(f'<text x="{x}" y="{y}" class="legend muted">ended:</text>')
    x += 46
    parts += _legend(x, y, ENDS)
    x += sum(22 + 7.5 * len(s) for s in ENDS) + 8
    for kind in MARKS:
        mark_y = y - 9 if kind == "evidence" else y + 1
        parts.append(
            f'<path {_mark_shape(kind, x + 5, mark_y)} data-legend="{kind}"/>'
            f'<text x="{x + 14}" y="{y}" class="legend">{escape(kind)}</text>'
        )
        x += 22 + 7.5 * len(kind)
    return parts


def _svg(width: float, height: float, title: str, desc: str, ident: str, body: list[str]) -> str:
    ident = escape(ident, quote=True)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" class="chart" role="img" aria-labelledby="{ident}-t {ident}-d">'
        f'<title id="{ident}-t">{escape(title)}</title><desc id="{ident}-d">{escape(desc)}</desc>'
        + "".join(body)
        + "</svg>"
    )


def _human(instant: datetime, now: datetime) -> str:
    """An instant as a hover says it: 12:03:04 UTC (3 min ago)."""
    ago = relative((instant - now).total_seconds())
    return f"{instant.astimezone(UTC):%H:%M:%S} UTC ({ago})"


def _length(start: datetime, end: datetime) -> str:
    return relative((end - start).total_seconds()).removeprefix("in ")


def timeline_svg(
    bars: Sequence[Bar],
    *,
    now: datetime,
    title: str,
    ident: str = "timeline",
    width: int = 960,
    since: datetime | None = None,
) -> str:
    """A bar per attempt from claim to end (or now): its body coloured by the phases the record
    shows (live, late, stalled, lost), a cap at its end in the colour of how it ended (or its
    state now), reports marked above it and evidence on it, each with its words on hover.

    `since` cuts the picture's left edge: a bar that began before starts at the edge, and marks
    before it are left out."""
    label_w, row_h, top = 230, 26, 34
    if not bars:
        return _svg(
            width,
            40,
            title,
            "No attempts yet.",
            ident,
            ['<text x="8" y="24" class="legend">No attempts yet.</text>'],
        )
    start = min(bar.start for bar in bars)
    if since is not None:
        start = max(start, since)
    end = max([now, *(bar.end for bar in bars if bar.end)])
    if end <= start:
        end = start + timedelta(seconds=1)
    scale = _Scale(start, end, label_w, width - label_w - 12)
    height = top + row_h * len(bars) + 30
    body = _timeline_legend(8, 16)
    for i, bar in enumerate(bars):
        y = top + i * row_h
        bar_end = bar.end or now
        x1, x2 = scale.x(bar.start), scale.x(bar_end)
        label = bar.label if len(bar.label) <= 34 else bar.label[:33] + "…"
        row = [
            f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end" class="label">'
            f"<title>{escape(bar.label)}</title>{escape(label)}</text>",
        ]
        phases = bar.phases or [(bar.state if bar.state in PHASES else "live", bar.start, bar_end)]
        for state, phase_start, phase_end in phases:
            px1, px2 = scale.x(phase_start), scale.x(phase_end)
            if phase_end <= start:
                continue  # before the picture's left edge
            tip = (
                f"{bar.label}: {state} from {_human(phase_start, now)} to "
                f"{_human(phase_end, now)}, {_length(phase_start, phase_end)}"
            )
            row.append(
                f'<rect x="{px1}" y="{y + 6}" width="{max(px2 - px1, 1)}" height="14" '
                f'fill="{STATE_COLOURS.get(state, "#999999")}" class="phase" '
                f'data-phase="{escape(state, quote=True)}"><title>{escape(tip)}</title></rect>'
            )
        # The cap: how the tenure ended, or where it stands now.
        ended = f"ended {bar.state} at {_human(bar.end, now)}" if bar.end else f"{bar.state} now"
        tip = f"{bar.label}: {ended}" + (f" ({bar.detail})" if bar.detail else "")
        cap_w = 5.0
        row.append(
            f'<rect x="{max(x2 - cap_w, x1)}" y="{y + 4}" width="{cap_w}" height="18" rx="1" '
            f'fill="{STATE_COLOURS.get(bar.state, "#999999")}" stroke="#ffffff" '
            f'stroke-width="1" class="cap" data-state="{escape(bar.state, quote=True)}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        for mark in sorted(bar.marks, key=lambda m: m.at):
            if mark.at < start:
                continue
            mx = scale.x(mark.at)
            mark_y = y if mark.kind == "evidence" else y + 6
            row.append(
                f'<path {_mark_shape(mark.kind, mx, mark_y)} class="mark mark-'
                f'{escape(mark.kind, quote=True)}" data-mark="{escape(mark.kind, quote=True)}">'
                f"<title>{escape(mark.text)}, {escape(_human(mark.at, now))}</title></path>"
            )
        if bar.href:
            row = [f'<a href="{escape(bar.href, quote=True)}">', *row, "</a>"]
        body.append(f'<g class="bar" data-bar="{i}">{"".join(row)}</g>')
    body.extend(_axis(scale, top + row_h * len(bars) + 4))
    states = ", ".join(
        f"{bar.label} {bar.state}"
        + (f" (was {', '.join(dict.fromkeys(p[0] for p in bar.phases))})" if bar.phases else "")
        for bar in bars[:20]
    )
    return _svg(width, height, title, f"{len(bars)} attempts: {states}", ident, body)


# Lanes' colours on the friction chart, in the order the lanes are drawn (most minutes first);
# lanes past the palette share its last colour, and every lane is named in the legend.
LANE_COLOURS = ["#1f5fa8", "#c28a00", "#2e7d32", "#b71c1c", "#6f42c1", "#d35400", "#6b6b6b"]


def friction_chart_svg(
    weeks: Sequence[date],
    lanes: Sequence[str],
    minutes: Mapping[tuple[str, date], int],
    *,
    width: int = 720,
    height: int = 180,
    ident: str = "friction-chart",
) -> str:
    """Minutes lost per week, a stacked column per week with a segment per lane."""
    title = f"Minutes lost to friction per week, the last {len(weeks)} weeks, by lane"
    totals = [sum(minutes.get((lane, week), 0) for lane in lanes) for week in weeks]
    if not weeks or not any(totals):
        return _svg(
            width,
            40,
            title,
            "No friction reported in these weeks.",
            ident,
            ['<text x="8" y="24" class="legend">No friction reported in these weeks.</text>'],
        )
    colours = {lane: LANE_COLOURS[min(i, len(LANE_COLOURS) - 1)] for i, lane in enumerate(lanes)}
    top, bottom, left = 24, height - 24, 44
    tallest = max(totals)
    column_w = (width - left - 8) / len(weeks)
    body: list[str] = []
    x = float(left)
    for lane in lanes:
        body.append(
            f'<rect x="{x}" y="3" width="10" height="10" fill="{colours[lane]}"/>'
            f'<text x="{x + 14}" y="12" class="legend">{escape(lane)}</text>'
        )
        x += 22 + 7.5 * len(lane)
    body.append(
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" class="axis">{tallest} min</text>'
    )
    body.append(f'<text x="{left - 4}" y="{bottom}" text-anchor="end" class="axis">0</text>')
    for index, (week, total) in enumerate(zip(weeks, totals, strict=True)):
        x = round(left + index * column_w, 1)
        y = float(bottom)
        parts = []
        for lane in lanes:
            n = minutes.get((lane, week), 0)
            if not n:
                continue
            h = (bottom - top) * n / tallest
            y -= h
            parts.append(
                f'<rect x="{x + 2}" y="{round(y, 1)}" width="{round(column_w - 4, 1)}" '
                f'height="{round(h, 1)}" fill="{colours[lane]}" data-lane="'
                f'{escape(lane, quote=True)}" data-minutes="{n}"/>'
            )
        tip = ", ".join(
            f"{lane} {minutes.get((lane, week), 0)} min"
            for lane in lanes
            if minutes.get((lane, week))
        )
        label = f"week of {week:%d %b}: {total} min" + (f" ({tip})" if tip else "")
        body.append(
            f'<g data-week="{week.isoformat()}"><title>{escape(label)}</title>'
            + "".join(parts)
            + "</g>"
        )
        if index % max(1, len(weeks) // 6) == 0:
            body.append(
                f'<text x="{x + column_w / 2}" y="{bottom + 16}" text-anchor="middle" '
                f'class="axis">{escape(f"{week:%d %b}")}</text>'
            )
    body.append(
        f'<line x1="{left}" y1="{bottom}" x2="{width - 8}" y2="{bottom}" stroke="#57606a"/>'
    )
    desc = "; ".join(
        f"{lane}: {sum(minutes.get((lane, week), 0) for week in weeks)} min" for lane in lanes
    )
    return _svg(width, height, title, f"Minutes lost by lane: {desc}.", ident, body)
