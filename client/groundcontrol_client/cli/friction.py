"""gctl's friction command: `gctl friction "what I hit" --instead "what I did" --minutes 3
--refusal REQ_ID` files a report (about GC_ATTEMPT when it is set, so a wrapped command's
report names its attempt); `gctl friction --list` lists them and `gctl friction --export md|json`
prints the server's export, a Markdown table or the JSON list, to save or paste (a supervisor's
key)."""

from __future__ import annotations

import argparse
import os
import sys

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.friction import describe_report
from groundcontrol_client.http import Client
from groundcontrol_client.runtime.wrappers import EXIT_OK

# `--export`'s choices: a Markdown file's extension, or json.
EXPORTS = ("md", "json")


def _attempt(args: argparse.Namespace) -> int | None:
    raw = args.attempt if args.attempt is not None else os.environ.get("GC_ATTEMPT")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise UsageError(
            f"--attempt (or GC_ATTEMPT) must be an attempt's id, not {raw!r}"
        ) from None


def cmd_friction_export(client: Client, args: argparse.Namespace) -> int:
    """The export as the server wrote it, on stdout: `gctl friction --export md > friction.md`."""
    if args.what or args.list:
        raise UsageError("--export takes no report text and no --list")
    if args.json and args.export != "json":
        raise UsageError("--export chooses the output: --export json for JSON, without --json")
    document = client.friction_export(args.export, lane=args.lane, since=args.since)
    sys.stdout.write(document if document.endswith("\n") else f"{document}\n")
    sys.stdout.flush()
    return EXIT_OK


def cmd_friction(client: Client, args: argparse.Namespace) -> Result | int:
    if args.export:
        return cmd_friction_export(client, args)
    if args.list:
        if args.what:
            raise UsageError("--list takes no report text")
        reports = client.friction_reports(lane=args.lane, since=args.since)
        text = "\n".join(map(describe_report, reports)) or "no friction reports"
        return [report.raw for report in reports], text
    if not args.what:
        raise UsageError('say what got in the way: gctl friction "what I hit" --minutes N')
    if args.since:
        raise UsageError("--since is for --list and --export")
    report = client.friction_file(
        args.what,
        instead=args.instead,
        minutes=args.minutes,
        lane=args.lane,
        run=args.run,
        attempt=_attempt(args),
        refusals=args.refusal,
    )
    return report.raw, f"filed friction report {describe_report(report)}"


def add_friction_command(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    help_text = "report friction: what got in the way, what you did instead, minutes lost"
    p = sub.add_parser("friction", parents=[common], help=help_text, description=help_text)
    p.add_argument("what", nargs="?", help="what got in the way")
    p.add_argument("--instead", help="what you did instead")
    p.add_argument("--minutes", type=int, help="minutes lost (0 to 2000)")
    p.add_argument(
        "--refusal",
        action="append",
        default=[],
        metavar="REQ_ID",
        help="the request id of a refused call it is about (gctl --json shows it); repeatable",
    )
    p.add_argument("--lane", help="the lane (default: the attempt's or run's, else your own)")
    p.add_argument("--run", type=int, help="the run it is about")
    p.add_argument("--attempt", help="the attempt it is about (default: GC_ATTEMPT)")
    p.add_argument("--list", action="store_true", help="list the reports (a supervisor's key)")
    p.add_argument(
        "--export",
        choices=EXPORTS,
        metavar="md|json",
        help="print the server's export of the reports (a supervisor's key): a Markdown table "
        "with the total (md), or the JSON list (json); the newest that match",
    )
    p.add_argument(
        "--since", help="with --list or --export: reports filed at or after this ISO time"
    )
    p.set_defaults(handler=cmd_friction)
