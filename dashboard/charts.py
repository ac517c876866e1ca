"""Server-rendered SVG pictures: a timeline of attempts, the fleet by state over time, and the
minutes lost to friction per week.

Pure functions of their data (no queries, no clock): the page passes in the database time it
read once. Every text and attribute is escaped; the markup carries a title and a description
for screen readers, and each state is named in words as well as coloured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from html import escape

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


@dataclass(frozen=True)
class Bar:
    """One attempt on a timeline."""

    label: str
    start: datetime
    end: datetime | None  # None while the tenure is open: drawn up to `now`
    state: str
    ticks: Sequence[datetime] = ()
    markers: Sequence[tuple[datetime, str]] = ()  # evidence (at, kind)
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
        parts.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 4}" stroke="#57606a"/>')
        parts.append(
            f'<text x="{x}" y="{y + 16}" text-anchor="{anchor}" class="axis">'
            f"{escape(_clock(instant, span_s))}</text>"
        )
    return parts


def _legend(x: float, y: float, states: Sequence[str]) -> list[str]:
    parts = []
    for state in states:
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{STATE_COLOURS[state]}"/>'
            f'<text x="{x + 14}" y="{y}" class="legend">{escape(state)}</text>'
        )
        x += 22 + 7.5 * len(state)
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


def timeline_svg(
    bars: Sequence[Bar], *, now: datetime, title: str, ident: str = "timeline", width: int = 960
) -> str:
    """A bar per attempt from claim to end (or now), coloured by state, with a tick for each
    report and a diamond for each piece of evidence."""
    label_w, row_h, top = 230, 24, 28
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
    end = max([now, *(bar.end for bar in bars if bar.end)])
    if end <= start:
        end = start + timedelta(seconds=1)
    scale = _Scale(start, end, label_w, width - label_w - 12)
    height = top + row_h * len(bars) + 30
    body = _legend(label_w, 16, STATES)
    for i, bar in enumerate(bars):
        y = top + i * row_h
        x1, x2 = scale.x(bar.start), scale.x(bar.end or now)
        colour = STATE_COLOURS.get(bar.state, "#999999")
        tip = f"{bar.label}: {bar.state}" + (f" ({bar.detail})" if bar.detail else "")
        label = bar.label if len(bar.label) <= 34 else bar.label[:33] + "…"
        row = [
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" class="label">'
            f"{escape(label)}</text>",
            f'<rect x="{x1}" y="{y + 4}" width="{max(x2 - x1, 2)}" height="14" rx="2" '
            f'fill="{colour}" data-state="{escape(bar.state, quote=True)}">'
            f"<title>{escape(tip)}</title></rect>",
        ]
        for tick in bar.ticks:
            tx = scale.x(tick)
            row.append(
                f'<line x1="{tx}" y1="{y + 5}" x2="{tx}" y2="{y + 17}" '
                'stroke="#ffffff" stroke-width="1" opacity="0.8" class="tick"/>'
            )
        for at, kind in bar.markers:
            mx = scale.x(at)
            row.append(
                f'<path d="M{mx} {y} l5 5 l-5 5 l-5 -5 z" fill="#111111" class="evidence">'
                f"<title>{escape(kind)} evidence</title></path>"
            )
        if bar.href:
            row = [f'<a href="{escape(bar.href, quote=True)}">', *row, "</a>"]
        body.extend(row)
    body.extend(_axis(scale, top + row_h * len(bars) + 4))
    states = ", ".join(f"{bar.label} {bar.state}" for bar in bars[:20])
    return _svg(width, height, title, f"{len(bars)} attempts: {states}", ident, body)


@dataclass
class _Column:
    at: datetime
    counts: dict[str, int] = field(default_factory=dict)


def state_chart_svg(
    samples: Sequence[tuple[datetime, dict[str, int]]],
    *,
    now: datetime,
    window_s: float | None = None,
    columns: int = 60,
    width: int = 480,
    height: int = 140,
    ident: str = "fleet-chart",
) -> str:
    """Stacked columns of the fleet by state over the last `window_s`: each column shows the
    latest sample taken in its slice of time; slices without a sample stay empty.

    Without `window_s` the window spans the samples there are, from 10 minutes up to 3 hours,
    so a fleet that started a minute ago does not draw as one sliver at the right edge.
    """
    title = "The fleet by state over the last hours"
    if window_s is None:
        oldest = min((at for at, _ in samples), default=now)
        window_s = min(max((now - oldest).total_seconds(), 600.0), 3 * 3600.0)
    start = now - timedelta(seconds=window_s)
    picked: dict[int, _Column] = {}
    slice_s = window_s / columns
    for at, counts in samples:
        if not (start <= at <= now):
            continue
        index = min(int((at - start).total_seconds() // slice_s), columns - 1)
        if index not in picked or picked[index].at <= at:
            picked[index] = _Column(at, counts)
    if not picked:
        return _svg(
            width,
            40,
            title,
            "No samples yet: the board records one every few seconds while someone watches it.",
            ident,
            ['<text x="8" y="24" class="legend">No samples yet.</text>'],
        )
    top, bottom, left = 22, height - 24, 34
    tallest = max(sum(c.counts.get(s, 0) for s in STATES) for c in picked.values()) or 1
    column_w = (width - left - 8) / columns
    body = _legend(left, 12, STATES)
    body.append(
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" class="axis">{tallest}</text>'
    )
    body.append(f'<text x="{left - 4}" y="{bottom}" text-anchor="end" class="axis">0</text>')
    for index, column in sorted(picked.items()):
        x = round(left + index * column_w, 1)
        y = float(bottom)
        tip = ", ".join(f"{column.counts.get(s, 0)} {s}" for s in STATES)
        parts = []
        for state in STATES:
            n = column.counts.get(state, 0)
            if not n:
                continue
            h = (bottom - top) * n / tallest
            y -= h
            parts.append(
                f'<rect x="{x}" y="{round(y, 1)}" width="{round(column_w - 1, 1)}" '
                f'height="{round(h, 1)}" fill="{STATE_COLOURS[state]}"/>'
            )
        body.append(
            f"<g><title>{escape(column.at.strftime('%H:%M:%S'))}: {escape(tip)}</title>"
            + "".join(parts)
            + "</g>"
        )
    body.extend(_axis(_Scale(start, now, left, width - left - 8), bottom, ticks=3))
    latest = picked[max(picked)]
    desc = "Latest: " + ", ".join(f"{latest.counts.get(s, 0)} {s}" for s in STATES)
    return _svg(width, height + 4, title, desc, ident, body)


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
