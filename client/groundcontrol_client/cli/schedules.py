"""gctl's commands for a supervisor's schedules (a `plan` key; reading also with `supervise`):
`gctl schedules LANE`, `gctl schedule create|tries|delete`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.schedules import describe_schedule, describe_try
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


def _runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The template's runs: a JSON list from --run-json (a file, or - for stdin), or one
    `{"title": TITLE}` per --run (the server's defaults for the rest)."""
    if args.run_json and args.run:
        raise UsageError("give --run-json FILE or --run TITLE, not both")
    if not args.run_json:
        return [{"title": title} for title in args.run]
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
        runs=_runs(args),
        active=not args.off,
    )
    return schedule.raw, f"created {describe_schedule(schedule)}"


def cmd_schedule_tries(client: Client, args: argparse.Namespace) -> Result:
    tries = client.schedule_tries(args.lane, args.schedule)
    text = "\n".join(map(describe_try, tries))
    return [row.raw for row in tries], text or f"schedule {args.schedule} has no tries yet"


def cmd_schedule_delete(client: Client, args: argparse.Namespace) -> Result:
    client.schedule_delete(args.lane, args.schedule)
    text = f"deleted schedule {args.schedule} of lane {args.lane}; the packages it made stay"
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
    p = add_action("tries", cmd_schedule_tries, "what the beat job did for each period")
    p.add_argument("schedule", type=int, help="the schedule's id")
    p = add_action("delete", cmd_schedule_delete, "delete a schedule (its packages stay)")
    p.add_argument("schedule", type=int, help="the schedule's id")
