"""gctl's commands for the record and the money (a `supervise` key; `plan` also reads costs and
sets budgets): `gctl refusals`, `gctl events`, `gctl costs [reports | void]`, `gctl budgets
list|set`. Each prints sentences, newest first; `--json` the server's JSON."""

from __future__ import annotations

import argparse
from typing import Any

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.cli.people import noun
from groundcontrol_client.core.records import (
    BUDGET_ACTIONS,
    BUDGET_PERIODS,
    COST_GROUPS,
    describe_budget,
    describe_cost_report,
    describe_costs,
    describe_event,
    describe_refusal,
    dollars,
)
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.http import Client

DEFAULT_LIMIT = 20


def limit_of(args: argparse.Namespace) -> int | None:
    if args.all:
        return None
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit}")
    return int(args.limit)


def cmd_refusals(client: Client, args: argparse.Namespace) -> Result:
    refusals = client.refusals(code=args.code, hand=args.hand, limit=limit_of(args))
    text = "\n".join(map(describe_refusal, refusals))
    return [r.raw for r in refusals], text or "no refused calls match"


def cmd_events(client: Client, args: argparse.Namespace) -> Result:
    events = client.events(
        kind=args.kind, since=args.since, hand=args.hand, attempt=args.attempt, limit=limit_of(args)
    )
    text = "\n".join(map(describe_event, events))
    return [e.raw for e in events], text or "no events match"


# --- costs ------------------------------------------------------------------------------------


def cmd_costs(client: Client, args: argparse.Namespace) -> Result:
    costs = client.costs(by=args.by, since=args.since, until=args.until, lane=args.lane)
    return costs.raw, describe_costs(costs)


def cmd_cost_reports(client: Client, args: argparse.Namespace) -> Result:
    reports = client.cost_reports(lane=args.lane, run_id=args.run, attempt_id=args.attempt)
    text = "\n".join(map(describe_cost_report, reports))
    return [r.raw for r in reports], text or "no costed reports match"


def cmd_cost_void(client: Client, args: argparse.Namespace) -> Result:
    outcome = client.report_void(args.report, reason=args.reason)
    report = outcome.report
    if not outcome.voided:
        return outcome.raw, (
            f"report {report.id}'s cost ({dollars(report.cost_usd)}) was voided already: "
            f"{report.voided.reason if report.voided else ''}; nothing changed"
        )
    lifted = ", ".join(f"budget {budget}" for budget in outcome.lifted)
    text = (
        f"voided report {report.id}'s cost ({dollars(report.cost_usd)}, attempt {report.attempt}):"
        " no total or budget counts it from now on"
        + (f"; lifted the hit of {lifted}: the lane's claims are taken again" if lifted else "")
    )
    return outcome.raw, text


# --- budgets ----------------------------------------------------------------------------------


def cmd_budgets_list(client: Client, args: argparse.Namespace) -> Result:
    budgets, now = client.budgets(lane=args.lane), now_utc()
    text = "\n".join(describe_budget(b, now) for b in budgets)
    where = f"lane {args.lane} has" if args.lane else "no lane has"
    return [b.raw for b in budgets], text or f"{where} no budget"


def cmd_budgets_show(client: Client, args: argparse.Namespace) -> Result:
    budget = client.budget(args.budget)
    return budget.raw, describe_budget(budget, now_utc())


def cmd_budgets_set(client: Client, args: argparse.Namespace) -> Result:
    if args.usd is None and args.tokens is None:
        raise UsageError("a budget needs --usd, --tokens or both")
    budget = client.budget_set(
        args.lane,
        period=args.period,
        action=args.action,
        limit_usd=args.usd,
        limit_tokens=args.tokens,
    )
    return budget.raw, f"set {describe_budget(budget, now_utc())}"


def add_records_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    limit_help = f"only the newest N (default {DEFAULT_LIMIT})"
    p = sub.add_parser(
        "refusals",
        parents=[common],
        help="refused calls, newest first (a supervise key)",
        description="refused calls, newest first: who, what, the code and its sentence",
    )
    p.set_defaults(handler=cmd_refusals)
    p.add_argument("--hand", help="only this hand's")
    p.add_argument("--code", help="only this code's (lease_held, scope_denied, ...)")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help=limit_help)
    p.add_argument("--all", action="store_true", help="every one kept")

    p = sub.add_parser(
        "events",
        parents=[common],
        help="the record of transitions, newest first (a supervise key)",
        description="the record of transitions, newest first: claims, losses, leases, keys, ...",
    )
    p.set_defaults(handler=cmd_events)
    p.add_argument("--kind", help="only this kind (claimed, lost, key_revoked, budget, ...)")
    p.add_argument("--hand", help="only those about this hand")
    p.add_argument("--attempt", type=int, help="only those about this attempt")
    p.add_argument(
        "--since", help="an ISO time (at or after it, e.g. 2030-01-01T00:00:00Z) or an event id"
    )
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help=limit_help)
    p.add_argument("--all", action="store_true", help="every one kept")

    help_text = "what the work cost, by lane, run, hand or attempt (a plan or supervise key)"
    p = sub.add_parser(
        "costs",
        parents=[common],
        help=help_text,
        description=f"{help_text}; `gctl costs reports` lists the costed reports, `gctl costs "
        "void REPORT --reason ...` voids one's cost",
    )
    p.set_defaults(handler=cmd_costs)
    p.add_argument("--by", choices=COST_GROUPS, default="lane", help="how to group (default lane)")
    p.add_argument("--since", help="reports at or after this ISO time")
    p.add_argument("--until", help="reports before this ISO time")
    p.add_argument("--lane", help="only this lane's reports")
    actions = p.add_subparsers(dest="action", title="actions", help="an action (default: totals)")
    q = actions.add_parser(
        "reports",
        parents=[common],
        help="the costed reports, newest first (voided ones too)",
        description="the costed reports, newest first (voided ones too)",
    )
    q.set_defaults(handler=cmd_cost_reports)
    q.add_argument("--lane", help="only this lane's")
    q.add_argument("--run", type=int, help="only this run's attempts'")
    q.add_argument("--attempt", type=int, help="only this attempt's")
    q = actions.add_parser(
        "void",
        parents=[common],
        help="void a report's cost (a supervise key): no total or budget counts it",
        description="void a report's cost: no total or budget counts it, and a budget hit it "
        "caused is lifted; its figures stay on record",
    )
    q.set_defaults(handler=cmd_cost_void)
    q.add_argument("report", type=int, help="the costed report's id (gctl costs reports)")
    q.add_argument("--reason", required=True, help="why (kept with the report)")

    budgets = noun(sub, common, "budgets", "the lanes' budgets: list, show, set")
    q = budgets("list", cmd_budgets_list, "each budget in its current period, with its spend")
    q.add_argument("--lane", help="only this lane's")
    q = budgets("show", cmd_budgets_show, "one budget in its current period, with its spend")
    q.add_argument("budget", type=int, help="the budget's id (gctl budgets list --json)")
    q = budgets(
        "set",
        cmd_budgets_set,
        "set a lane's budget for a day or week (the one there is changed, else one is made); "
        "reached at --usd or --tokens, whichever comes first",
    )
    q.add_argument("lane", help="the lane's slug")
    q.add_argument("--period", choices=BUDGET_PERIODS, required=True, help="a UTC day or ISO week")
    q.add_argument(
        "--action",
        choices=BUDGET_ACTIONS,
        required=True,
        help="what reaching it does to the lane's open attempts (and its claims wait)",
    )
    q.add_argument("--usd", metavar="DOLLARS", help="the limit in US dollars, e.g. 5.00")
    q.add_argument("--tokens", type=int, metavar="N", help="the limit in tokens (in + out)")
