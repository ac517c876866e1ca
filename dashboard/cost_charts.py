"""The spend per UTC day of a lane or a run as server-rendered SVG columns, with a lane's daily
budget's limit as a line. A pure function of its data, as dashboard/charts.py: every text
escaped, a title and a description for screen readers, each day's figures in words in its
tooltip."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from html import escape

from dashboard.charts import _svg
from fleet.costs.spend import Spend

SPEND_COLOUR = "#1f5fa8"
LIMIT_COLOUR = "#b71c1c"


def _dollars(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.01'))}"


def cost_chart_svg(
    days: Sequence[tuple[date, Spend]],
    *,
    limit_usd: Decimal | None = None,
    width: int = 480,
    height: int = 150,
    ident: str = "cost-chart",
) -> str:
    """One column per day (oldest first) of what the reports of a lane or a run cost, and the
    daily limit (a lane's)."""
    title = "Cost per day (UTC)"
    total = sum((spend.cost_usd for _, spend in days), Decimal(0))
    tokens = sum(spend.tokens for _, spend in days)
    desc = f"{len(days)} days, {_dollars(total)} and {tokens} tokens in all" + (
        f"; the daily budget is {_dollars(limit_usd)}" if limit_usd is not None else ""
    )
    top, bottom, left = 14, height - 22, 48
    tallest = max([spend.cost_usd for _, spend in days] + [limit_usd or Decimal(0)])
    tallest = tallest or Decimal(1)
    column_w = (width - left - 8) / max(len(days), 1)
    scale = (bottom - top) / float(tallest)
    body = [
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" class="axis">'
        f"{escape(_dollars(tallest))}</text>",
        f'<text x="{left - 4}" y="{bottom}" text-anchor="end" class="axis">$0</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{width - 8}" y2="{bottom}" stroke="#57606a"/>',
    ]
    for i, (day, spend) in enumerate(days):
        x = round(left + i * column_w, 1)
        h = round(float(spend.cost_usd) * scale, 1)
        tip = f"{day.isoformat()}: {_dollars(spend.cost_usd)}, {spend.tokens} tokens"
        body.append(
            f'<rect x="{x}" y="{round(bottom - h, 1)}" width="{round(column_w - 2, 1)}" '
            f'height="{h}" fill="{SPEND_COLOUR}" data-day="{escape(day.isoformat(), quote=True)}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        if i in (0, len(days) - 1):
            anchor = "start" if i == 0 else "end"
            tx = x if i == 0 else round(x + column_w - 2, 1)
            body.append(
                f'<text x="{tx}" y="{bottom + 14}" text-anchor="{anchor}" class="axis">'
                f"{escape(day.strftime('%d %b'))}</text>"
            )
    if limit_usd is not None:
        y = round(bottom - float(limit_usd) * scale, 1)
        body.append(
            f'<line x1="{left}" y1="{y}" x2="{width - 8}" y2="{y}" stroke="{LIMIT_COLOUR}" '
            'stroke-dasharray="4 3" class="limit"><title>'
            f"{escape('daily budget ' + _dollars(limit_usd))}</title></line>"
        )
    return _svg(width, height, title, desc, ident, body)
