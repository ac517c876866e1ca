"""A supervisor's reads of the record, and the money: refused calls (`GET /refusals`), events
(`GET /events`), what the work cost (`GET /costs`), and the lanes' budgets (`/budgets`). A
`supervise` key reads them (`plan` too for costs and budgets; `plan` sets budgets); a
lane-limited key sees its lane's only. `Client` and `AsyncClient` both have them
(`RecordsCalls`); the costed reports and their void are `Client.cost_reports` and
`Client.report_void` (`core.costs`).

    boss.refusals(hand="builder", code="lease_lost", limit=20)   # newest first
    boss.events(kind="claimed", since="2030-01-01T00:00:00Z")
    boss.costs(by="run").total.cost_usd                          # a Decimal
    boss.budget_set("docs", period="day", action="pause", limit_usd="5.00")
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from groundcontrol_client.core.costs import CostReport, Money
from groundcontrol_client.core.errors import ANOTHER_LANE, hand_called
from groundcontrol_client.core.loop import cost_usd_text
from groundcontrol_client.core.planning import UNCHANGED
from groundcontrol_client.core.sending import MAX_PAGES, Sending, decoded, drop_none
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.when import absolute, relative
from groundcontrol_client.core.wire import OrDefault, Text, Time, WholeNumber, WireModel

# The server's largest page (`limit`): a read of the newest N asks for pages this long.
PAGE_LIMIT = 500
COST_GROUPS = ("lane", "run", "hand", "attempt")
BUDGET_PERIODS = ("day", "week")
BUDGET_ACTIONS = ("pause", "stop")
QUOTE = "'"


class Refusal(WireModel, title="refusal"):
    """A refused call as it was recorded: who (`hand`, None for a caller without a valid key or
    a hand of another lane), with which key, what it asked and the contract's code."""

    id: WholeNumber
    at: Time = None
    code: Text = ""
    message: Text = ""
    hand: Text | None = None
    key_prefix: Text | None = None
    method: Text = ""
    path: Text = ""
    request_id: Text = ""
    details: OrDefault[dict[str, Any]] = {}


class Event(WireModel, title="event"):
    """One transition of the record: its `kind`, who made it (`actor`, with `actor_key`, the
    prefix of the key that acted; None for a person or the system) and whom it is about."""

    id: WholeNumber
    kind: Text
    at: Time = None
    actor: Text | None = None
    actor_key: Text | None = None
    hand: Text | None = None
    attempt: WholeNumber | None = None
    resource: Text | None = None
    fence: WholeNumber | None = None
    data: OrDefault[dict[str, Any]] = {}


class Spend(WireModel, title="spend"):
    tokens_in: WholeNumber = 0
    tokens_out: WholeNumber = 0
    cost_usd: Money


class CostRow(Spend, title="cost row"):
    id: WholeNumber
    name: Text | None = None  # the lane's slug, the run's title, the hand's name (None: concealed)


class Costs(WireModel, title="costs"):
    """The costed reports summed `by` lane, run, hand or attempt within [since, until): the
    total, and a row per group, the largest cost first (at most 500)."""

    by: Text
    since: Time = None
    until: Time = None
    total: Spend
    rows: OrDefault[list[CostRow]] = []


class Budget(WireModel, title="budget"):
    """A lane's budget for a `day` (UTC) or an ISO `week`: reached when the lane's spend in the
    period reaches `limit_usd` or `limit_tokens` (in + out), then `action` (pause or stop) on
    the lane's open attempts and its claims refused until the period ends."""

    id: WholeNumber
    lane: Text
    period: Text
    limit_usd: Money | None = None
    limit_tokens: WholeNumber | None = None
    action: Text
    period_start: Time = None
    period_end: Time = None
    spent: Spend
    reached_at: Time = None


def _moment(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def limit_text(value: Decimal | str | float | int | None) -> str | None:
    """A budget's dollar limit as the decimal text the server reads exactly (as a cost's)."""
    if value is None:
        return None
    try:
        return cost_usd_text(value)
    except ValueError as error:
        raise ValueError(str(error).replace("cost_usd", "limit_usd")) from None


# --- sentences: how gctl says a refusal, an event, costs and a budget ------------------------


def dollars(amount: Decimal) -> str:
    """ "$1.03", "$0.000125": cents when they say it all, else every place the server keeps."""
    cents = amount.quantize(Decimal("0.01"))
    return f"${cents if cents == amount else format(amount.normalize(), 'f')}"


def tokens(count: int) -> str:
    return f"{count:,} token{'' if count == 1 else 's'}"


def _who(hand: str | None, key_prefix: str | None) -> str:
    if hand:
        return hand_called(hand, quote="'")
    return f"key gc_{key_prefix}" if key_prefix else "a caller without a valid key"


def describe_refusal(refusal: Refusal) -> str:
    """e.g. "2030-01-01 10:20:36 UTC: hand 'b' was refused lease_lost on POST
    /api/v1/attempts/2/reports: attempt 2 has ended (lost) (request b005…)"."""
    when = absolute(refusal.at) if refusal.at else "at an unknown time"
    return (
        f"{when}: {_who(refusal.hand, refusal.key_prefix)} was refused {refusal.code} on "
        f"{refusal.method} {refusal.path}: {refusal.message} (request {refusal.request_id})"
    )


def describe_event(event: Event) -> str:
    """e.g. "2030-01-01 10:20:36 UTC: claimed by hand 'b' (key gc_8c83…): attempt 2,
    run/1/slot/0 at fence 1"."""
    text = f"{absolute(event.at) if event.at else 'at an unknown time'}: {event.kind}"
    if event.actor:
        text += f" by {hand_called(event.actor, quote=QUOTE)}"
        if event.actor_key:
            text += f" (key gc_{event.actor_key})"
    facts = []
    if event.hand and event.hand != event.actor:
        facts.append(hand_called(event.hand, quote=QUOTE))
    if event.attempt is not None:
        facts.append(f"attempt {event.attempt}")
    if event.resource:
        facts.append(
            event.resource + (f" at fence {event.fence}" if event.fence is not None else "")
        )
    return text + (f": {', '.join(facts)}" if facts else "")


def describe_spend(spend: Spend) -> str:
    return f"{dollars(spend.cost_usd)} ({tokens(spend.tokens_in)} in, {spend.tokens_out:,} out)"


def describe_costs(costs: Costs) -> str:
    """A line for the total, then one per group, the largest first."""
    window = "".join(
        f" {word} {absolute(moment)}"
        for word, moment in (("since", costs.since), ("until", costs.until))
        if moment is not None
    )
    head = f"spent{window or ' in the reports kept'}: {describe_spend(costs.total)}"
    if not costs.rows:
        return f"{head}; no costed reports"
    lines = [f"{head}, by {costs.by}:"]
    for row in costs.rows:
        if costs.by == "hand":
            label = hand_called(row.name, quote=QUOTE)
        elif costs.by == "lane":
            label = f"lane {row.name}"
        else:  # a run's title, or an attempt's hand
            label = f"{costs.by} {row.id} ({row.name or ANOTHER_LANE})"
        lines.append(f"  {label}: {describe_spend(row)}")
    return "\n".join(lines)


def describe_cost_report(report: CostReport) -> str:
    """e.g. "report 12 at 2030-01-01 10:20:36 UTC: attempt 3 of hand 'a' (run 2, lane docs)
    cost $0.41 (1,200 tokens in, 300 out)", and its void if voided."""
    when = f" at {absolute(report.at)}" if report.at else ""
    text = (
        f"report {report.id}{when}: attempt {report.attempt} of "
        f"{hand_called(report.hand, quote=QUOTE)} (run {report.run}, lane {report.lane}) cost "
        f"{describe_spend(report)}"
    )
    if report.voided is not None:
        by = f" by {hand_called(report.voided.actor, quote=QUOTE)}" if report.voided.actor else ""
        text += f"; voided{by}: {report.voided.reason} (no total counts it)"
    return text


_PERIOD_WORD = {"day": "daily", "week": "weekly"}


def describe_budget(budget: Budget, now: datetime) -> str:
    """e.g. "budget 3: lane docs's daily budget is $5.00, pause when reached; spent $0.41 and
    2,000 tokens in this period (until 2030-01-02 00:00:00 UTC, in 11 hours)"."""
    limits = [dollars(limit) for limit in (budget.limit_usd,) if limit is not None]
    if budget.limit_tokens is not None:
        limits.append(tokens(budget.limit_tokens))
    spent = budget.spent
    period = _PERIOD_WORD.get(budget.period, budget.period)
    text = (
        f"budget {budget.id}: lane {budget.lane}'s {period} budget is {' or '.join(limits)}, "
        f"{budget.action} when reached; spent {dollars(spent.cost_usd)} and "
        f"{tokens(spent.tokens_in + spent.tokens_out)} in this period"
    )
    if budget.period_end is not None:
        text += f" (until {absolute(budget.period_end)}, {relative(budget.period_end, now)})"
    if budget.reached_at is not None:
        text += f"; reached {relative(budget.reached_at, now)}: the lane's claims wait"
    return text


class RecordsCalls(Sending):
    """Refusals, events, costs and budgets, as steps (`core.steps`); `Client` and
    `AsyncClient` have them."""

    def _newest(
        self, path: str, params: Mapping[str, Any], limit: int | None
    ) -> Steps[list[dict[str, Any]]]:
        """The newest `limit` items of a list endpoint (None: every item, as `_list` reads),
        in pages of at most the server's largest."""
        if limit is None:
            return (yield from self._list(path, params))
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        items: list[dict[str, Any]] = []
        next_url: str | None = path
        query: Mapping[str, Any] | None = {**params, "limit": min(limit, PAGE_LIMIT)}
        for _ in range(MAX_PAGES):
            if next_url is None or len(items) >= limit:
                break
            response = yield from self._send("GET", next_url, params=query)
            items.extend(decoded(response) or [])
            next_url, query = response.links.get("next", {}).get("url"), None
        return items[:limit]

    # --- the record -----------------------------------------------------------------------------

    @call
    def refusals(
        self, *, code: str | None = None, hand: str | None = None, limit: int | None = None
    ) -> Steps[list[Refusal]]:
        """Refused calls, newest first (a `supervise` key); `code` a code of the contract,
        `hand` a hand's name; `limit`: only the newest so many."""
        items = yield from self._newest("refusals", drop_none({"code": code, "hand": hand}), limit)
        return [Refusal.from_wire(item) for item in items]

    @call
    def events(
        self,
        *,
        kind: str | None = None,
        since: datetime | str | int | None = None,
        hand: str | None = None,
        attempt: int | None = None,
        limit: int | None = None,
    ) -> Steps[list[Event]]:
        """Events, newest first (a `supervise` key): of a `kind`, at or after `since` (a time)
        or after it (an event's id), about a `hand` or an `attempt`; `limit`: the newest so
        many."""
        params = drop_none(
            {
                "kind": kind,
                "since": _moment(since) if not isinstance(since, int) else since,
                "hand": hand,
                "attempt": None if attempt is None else int(attempt),
            }
        )
        items = yield from self._newest("events", params, limit)
        return [Event.from_wire(item) for item in items]

    # --- money ----------------------------------------------------------------------------------

    @call
    def costs(
        self,
        *,
        by: str = "lane",
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        lane: str | None = None,
    ) -> Steps[Costs]:
        """What the costed reports (voided ones left out) add up to, `by` lane, run, hand or
        attempt, within [since, until), of one `lane` if given (a `plan` or `supervise` key)."""
        params = drop_none(
            {"by": by, "since": _moment(since), "until": _moment(until), "lane": lane}
        )
        return Costs.from_wire((yield from self._request("GET", "costs", params=params)))

    @call
    def budgets(self, *, lane: str | None = None) -> Steps[list[Budget]]:
        """The lanes' budgets (of one `lane` if given), each in its current period with what
        the lane spent in it."""
        items = (yield from self._request("GET", "budgets", params={"lane": lane})) or []
        return [Budget.from_wire(item) for item in items]

    @call
    def budget(self, budget_id: int) -> Steps[Budget]:
        return Budget.from_wire((yield from self._request("GET", f"budgets/{int(budget_id)}")))

    @call
    def budget_create(
        self,
        lane: str,
        *,
        period: str,
        action: str,
        limit_usd: Decimal | str | float | None = None,
        limit_tokens: int | None = None,
    ) -> Steps[Budget]:
        """A lane's budget for a `period` (day or week; one per lane and period), reached at
        `limit_usd` or `limit_tokens` (in + out), whichever comes first; then `action` (pause or
        stop). Never resent: a create whose answer was lost may have been applied (the same
        create again is refused: one budget per lane and period)."""
        body = drop_none(
            {
                "lane": lane,
                "period": period,
                "action": action,
                "limit_usd": limit_text(limit_usd),
                "limit_tokens": limit_tokens,
            }
        )
        answer = yield from self._request("POST", "budgets", json=body, idempotent=False)
        return Budget.from_wire(answer)

    @call
    def budget_update(
        self,
        budget_id: int,
        *,
        action: str | None = None,
        limit_usd: Decimal | str | float | None = UNCHANGED,
        limit_tokens: int | None = UNCHANGED,
    ) -> Steps[Budget]:
        """Change what is given (`action` None: unchanged; a limit None: cleared, one must
        stay). Lifts the current period's hit: the next costed report judges the new limits.
        Safe to repeat."""
        body: dict[str, Any] = drop_none({"action": action})
        if limit_usd is not UNCHANGED:
            body["limit_usd"] = limit_text(limit_usd)
        if limit_tokens is not UNCHANGED:
            body["limit_tokens"] = limit_tokens
        answer = yield from self._request("PATCH", f"budgets/{int(budget_id)}", json=body)
        return Budget.from_wire(answer)

    @call
    def budget_set(
        self,
        lane: str,
        *,
        period: str,
        action: str,
        limit_usd: Decimal | str | float | None = None,
        limit_tokens: int | None = None,
    ) -> Steps[Budget]:
        """The lane's budget for `period` made exactly this: the one there is changed (a limit
        not given is cleared), else one created."""
        existing = [b for b in (yield from self.budgets.steps(lane=lane)) if b.period == period]
        if existing:
            return (
                yield from self.budget_update.steps(
                    existing[0].id, action=action, limit_usd=limit_usd, limit_tokens=limit_tokens
                )
            )
        return (
            yield from self.budget_create.steps(
                lane, period=period, action=action, limit_usd=limit_usd, limit_tokens=limit_tokens
            )
        )
