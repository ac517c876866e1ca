"""gctl's commands for a supervisor's schedules (a `plan` key; reading also with `supervise`):
`gctl schedules LANE`, `gctl schedule create|show|update|tries|delete`; and a lane's GitHub
integrations (an `attest` key makes and deletes them): `gctl integrations list|create|delete`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.schedules import (
    describe_integration,
    describe_schedule,
    describe_try,
)
from groundcontrol_client.http import Client


def cmd_schedules(client: Client, args: argparse.Namespace) -> Result:
    rows = [
        (schedule, client.schedule_latest_try(args.lane, schedule.id))
        for schedule in client.schedules(args.lane)
    ]
    data = [
        {**schedule.raw, "latest_try": latest.raw if latest else None} for schedule, latest in rows
    ]
    text = "\n".join(describe_schedule(s, latest) for s, latest in rows)
    return data, text or f"lane {args.lane} has no schedules"


def _runs(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The template's runs: a JSON list from --run-json (a file, or - for stdin), or one
    `{"title": TITLE}` per --run (the server's defaults for the rest); None when neither is
    given."""
    if args.run_json and args.run:
        raise UsageError("give --run-json FILE or --run TITLE, not both")
    if not args.run_json:
        return [{"title": title} for title in args.run] if args.run else None
    try:
        text = sys.stdin.read() if args.run_json == "-" else Path(args.run_json).read_text()
    except OSError as error:
        raise UsageError(f"--run-json: cannot read {args.run_json}: {error.strerror}") from None
    try:
        runs = json.loads(text)
    except ValueError as error:
        raise UsageError(f"--run-json: {args.run_json} is not JSON: {error}") from None
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise UsageError(f"--run-json: {args.run_json} must hold a JSON list of run objects")
    return runs


def cmd_schedule_create(client: Client, args: argparse.Namespace) -> Result:
    schedule = client.schedule_create(
        args.lane,
        cron=args.cron,
        key_pattern=args.key,
        title_pattern=args.title,
        runs=_runs(args) or (),
        active=not args.off,
    )
    return schedule.raw, f"created {describe_schedule(schedule)}"


def cmd_schedule_show(client: Client, args: argparse.Namespace) -> Result:
    schedule = client.schedule(args.lane, args.schedule)
    latest = client.schedule_latest_try(args.lane, schedule.id)
    data = {**schedule.raw, "latest_try": latest.raw if latest else None}
    return data, describe_schedule(schedule, latest)


def cmd_schedule_update(client: Client, args: argparse.Namespace) -> Result:
    if args.on and args.off:
        raise UsageError("give --on or --off, not both")
    active = True if args.on else False if args.off else None
    changes = (args.cron, args.key, args.title, args.run_json or args.run or None, active)
    if all(change is None for change in changes):
        raise UsageError("say what changes: --cron, --key, --title, --run/--run-json, --on, --off")
    schedule = client.schedule_update(
        args.lane,
        args.schedule,
        cron=args.cron,
        key_pattern=args.key,
        title_pattern=args.title,
        runs=_runs(args),
        active=active,
    )
    restart = " (from now: the periods it missed are not made)" if args.cron or args.on else ""
    return schedule.raw, f"changed {describe_schedule(schedule)}{restart}"


def cmd_schedule_tries(client: Client, args: argparse.Namespace) -> Result:
    tries = client.schedule_tries(args.lane, args.schedule)
    text = "\n".join(map(describe_try, tries))
    return [row.raw for row in tries], text or f"schedule {args.schedule} has no tries yet"


def cmd_schedule_delete(client: Client, args: argparse.Namespace) -> Result:
    client.schedule_delete(args.lane, args.schedule)
    text = f"deleted schedule {args.schedule} of lane {args.lane}; the packages it made stay"
    return {"deleted": True}, text


def cmd_integrations_list(client: Client, args: argparse.Namespace) -> Result:
    found = client.github_integrations(args.lane)
    text = "\n".join(map(describe_integration, found))
    return [i.raw for i in found], text or f"lane {args.lane} has no GitHub integrations"


def cmd_integration_create(client: Client, args: argparse.Namespace) -> Result:
    made = client.github_integration_create(args.lane, repository=args.repository, label=args.label)
    if made.secret is None:
        # A replay of a lost answer: the server keeps no secret for it.
        text = (
            f"created {describe_integration(made)}; its secret was in an earlier answer that "
            f"was lost: delete it (gctl integrations delete {args.lane} {made.id}) and create "
            "another"
        )
    else:
        text = (
            f"created {describe_integration(made)}\n"
            f"in {made.repository}'s settings, add a webhook: payload URL <server>"
            f"{made.delivery_path}, content type application/json, secret (shown once): "
            f"{made.secret}"
        )
    return made.raw, text


def cmd_integration_delete(client: Client, args: argparse.Namespace) -> Result:
    client.github_integration_delete(args.lane, args.integration)
    text = (
        f"deleted GitHub integration {args.integration} of lane {args.lane}: GitHub's "
        "deliveries to it are refused from now on"
    )
    return {"deleted": True}, text


def add_schedule_commands(
    sub: Any,
    common: argparse.ArgumentParser,
    add: Callable[..., argparse.ArgumentParser],
) -> None:
    lane_help = "the lane's slug"
    p = add(
        "schedules",
        cmd_schedules,
        "a lane's schedules, each with its next planned periods (UTC) and its latest try",
    )
    p.add_argument("lane", help=lane_help)
    schedule = sub.add_parser(
        "schedule", help="a lane's schedules", description="a lane's schedules"
    ).add_subparsers(dest="action", required=True, title="actions", help="an action")

    def add_action(
        name: str, handler: Callable[..., Any], help_text: str
    ) -> argparse.ArgumentParser:
        p = schedule.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        p.add_argument("lane", help=lane_help)
        return p

    p = add_action(
        "create", cmd_schedule_create, "a schedule: each period of --cron makes a work package"
    )
    p.add_argument(
        "--cron", required=True, help="five fields in UTC, e.g. '0 6 * * *' (06:00 daily)"
    )
    p.add_argument(
        "--key",
        required=True,
        help="the package's key: {date} (and {time} for more than one period a day) is "
        "substituted, e.g. 'daily-{date}'",
    )
    p.add_argument("--title", required=True, help="the package's title, {date} substituted too")
    p.add_argument(
        "--run-json",
        metavar="FILE",
        help="the runs: a JSON list, each as POST /work-packages/{id}/runs takes one (- for stdin)",
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="TITLE",
        help="a run with this title and the server's defaults (one slot); repeatable",
    )
    p.add_argument("--off", action="store_true", help="create it switched off")
    p = add_action("show", cmd_schedule_show, "one schedule: its next periods and latest try")
    p.add_argument("schedule", type=int, help="the schedule's id")
    p = add_action(
        "update",
        cmd_schedule_update,
        "change what is given; a new --cron, or --on, starts from now",
    )
    p.add_argument("schedule", type=int, help="the schedule's id")
    p.add_argument("--cron", help="five fields in UTC")
    p.add_argument("--key", help="the package's key pattern ({date}, {time})")
    p.add_argument("--title", help="the package's title pattern")
    p.add_argument("--run-json", metavar="FILE", help="replace the runs: a JSON list (- for stdin)")
    p.add_argument(
        "--run", action="append", default=[], metavar="TITLE", help="replace the runs; repeatable"
    )
    p.add_argument("--on", action="store_true", help="switch it on (from now)")
    p.add_argument("--off", action="store_true", help="switch it off")
    p = add_action("tries", cmd_schedule_tries, "what the beat job did for each period")
    p.add_argument("schedule", type=int, help="the schedule's id")
    p = add_action("delete", cmd_schedule_delete, "delete a schedule (its packages stay)")
    p.add_argument("schedule", type=int, help="the schedule's id")

    integrations = sub.add_parser(
        "integrations",
        help="a lane's GitHub integrations",
        description="a lane's GitHub integrations: issues become work packages, CI's results "
        "attest evidence (an attest key makes and deletes them)",
    ).add_subparsers(dest="action", required=True, title="actions", help="an action")

    def add_integration(
        name: str, handler: Callable[..., Any], help_text: str
    ) -> argparse.ArgumentParser:
        p = integrations.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        p.add_argument("lane", help=lane_help)
        return p

    add_integration("list", cmd_integrations_list, "the lane's integrations (never a secret)")
    p = add_integration(
        "create",
        cmd_integration_create,
        "an integration of a repository: its webhook secret is printed once, here",
    )
    p.add_argument("--repository", required=True, help="owner/name: only its deliveries act")
    p.add_argument("--label", help="only issues with this label become work packages")
    p = add_integration("delete", cmd_integration_delete, "delete an integration")
    p.add_argument("integration", type=int, help="the integration's id")
