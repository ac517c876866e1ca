"""gctl's argument parser: every command, its options and their help, and the `--` that ends
them for the wrappers."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from groundcontrol_client.cli.attempts import (
    cmd_brief,
    cmd_claim,
    cmd_finish,
    cmd_me,
    cmd_release,
    cmd_report,
)
from groundcontrol_client.cli.attestations import add_attestation_commands
from groundcontrol_client.cli.friction import add_friction_command
from groundcontrol_client.cli.git import add_git_commands
from groundcontrol_client.cli.handoffs import add_handoff_commands
from groundcontrol_client.cli.leases import (
    cmd_lease_acquire,
    cmd_lease_check,
    cmd_lease_list,
    cmd_lease_queue,
    cmd_lease_release,
    cmd_lease_renew,
)
from groundcontrol_client.cli.people import add_people_commands
from groundcontrol_client.cli.planning import add_planning_commands
from groundcontrol_client.cli.pools import add_pool_commands
from groundcontrol_client.cli.records import add_records_commands
from groundcontrol_client.cli.schedules import add_schedule_commands
from groundcontrol_client.cli.wrappers import cmd_hold, cmd_hook, cmd_mcp, cmd_run
from groundcontrol_client.hooks.command import HARNESSES

# `gctl hold` and `gctl lease acquire` take a lease for this long unless told (seconds).
DEFAULT_TTL_S = 60.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gctl",
        description="Ground Control for agents. Configured by GC_URL and GC_KEY.",
        epilog="exit codes: 0 ok, 1 error (a hook's refusal too), 2 usage, 3 denied, 4 lease lost "
        "or a stale fence, 5 auth, 6 stopped",
    )
    json_help = 'machine-readable output: the server\'s JSON, or {"error": {...}}'
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--url", help="the server (default: GC_URL)")
    # Options that each subcommand also accepts after its name; SUPPRESS keeps a value given
    # before the subcommand from being overwritten by the subparser's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=json_help)
    common.add_argument(
        "--process-id",
        default=None,
        help="the process identity to claim and report with (default: GC_PROCESS_ID, else "
        "the process that runs gctl; the wrappers use their own)",
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands", help="a command")

    def add(
        name: str, handler: Callable[..., Any], help_text: str, **kw: Any
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text, **kw)
        p.set_defaults(handler=handler)
        return p

    attempt_help = "the attempt's id (default: GC_ATTEMPT)"
    fence_help = "the attempt's fence (default: GC_ATTEMPT_FENCE for GC_ATTEMPT, else the server's)"
    claim_wait_help = (
        "if every slot is taken, ask again (with backoff) for up to this many seconds; a run "
        "that is closed or done is never waited on"
    )

    add("me", cmd_me, "who this key is")
    # `gctl runs` and `gctl slots` (lists, and a supervisor's actions): cli.planning
    add_planning_commands(sub, common, add)
    p = add(
        "claim",
        cmd_claim,
        "claim an open slot of a run; prints the export line that makes `gctl report` renew it",
    )
    p.add_argument("run", type=int, help="the run's id")
    p.add_argument("--slot", type=int, help="this slot (default: the lowest open one)")
    p.add_argument("--wait", type=float, metavar="S", help=claim_wait_help)
    p.add_argument(
        "--export",
        action="store_true",
        help='print only the export line, for eval "$(gctl claim --export RUN)"',
    )
    p = add("brief", cmd_brief, "read an attempt's brief")
    p.add_argument("attempt", nargs="?", help=attempt_help)
    p = add("report", cmd_report, "report progress (renews the lease with the claim's identity)")
    p.add_argument("attempt", nargs="?", help=attempt_help)
    p.add_argument("--message", "-m", help="what happened, for the supervisor")
    p.add_argument("--percent", type=float, help="how far along, 0 to 100")
    p.add_argument("--tokens-in", type=int, help="input tokens used since the last report")
    p.add_argument("--tokens-out", type=int, help="output tokens used since the last report")
    p.add_argument("--cost", help="what the work cost since the last report, in US dollars")
    p.add_argument(
        "--checkpoint-file",
        metavar="FILE",
        help="a JSON file (- for standard input) to report as the checkpoint: where the work "
        "stands, which the next attempt on the slot inherits",
    )
    p.add_argument(
        "--kind",
        default="progress",
        choices=["heartbeat", "progress", "blocker", "note"],
        help="the report's kind (default: progress)",
    )
    p.add_argument("--fence", type=int, help=fence_help)
    p.add_argument(
        "--no-renew",
        action="store_true",
        help="record only, without a process identity (what a command under `gctl run` uses)",
    )
    p = add("finish", cmd_finish, "finish an attempt with evidence")
    p.add_argument("attempt", nargs="?", help=attempt_help)
    p.add_argument(
        "--evidence",
        action="append",
        default=[],
        metavar="KIND=URL",
        help="evidence of a kind the brief asks for, e.g. pull_request=https://…; repeatable",
    )
    p.add_argument("--summary", help="what was done, in a sentence or two")
    p.add_argument("--fence", type=int, help=fence_help)
    p = add("release", cmd_release, "give an attempt's slot back, with a reason")
    p.add_argument("attempt", nargs="?", help=attempt_help)
    p.add_argument("--reason", required=True, help="why, for the supervisor and the next hand")
    p.add_argument("--fence", type=int, help=fence_help)

    lease = sub.add_parser(
        "lease", help="resource leases", description="resource leases"
    ).add_subparsers(dest="action", required=True, title="actions", help="an action")

    def add_lease(
        name: str, handler: Callable[..., Any], help_text: str
    ) -> argparse.ArgumentParser:
        p = lease.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    resource_help = "the resource's name (a path like src/auth/, a lock's name)"
    ttl_help = (
        f"seconds the lease lasts unless renewed (default {DEFAULT_TTL_S:g}); if the holder "
        "dies, it lapses this long after its last renewal"
    )
    lease_wait_help = (
        "if it is held, wait in line up to this many seconds for it to free (any length: "
        "asked 60 s at a time, each call keeping the place in line); first come, first served"
    )
    shared_help = (
        "a shared lease: held beside other shared leases on it, never beside an exclusive one "
        "(on it, a directory above it, or a name below it)"
    )
    take_over_help = (
        "take the lease from another process of this hand that holds it (a session that is "
        "gone, or this one under another identity): it moves here at a new fence, and the other "
        "process's next renewal is refused; never another hand's"
    )
    p = add_lease("acquire", cmd_lease_acquire, "take a resource lease")
    p.add_argument("resource", help=resource_help)
    p.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, help=ttl_help)
    p.add_argument("--wait", type=float, metavar="S", help=lease_wait_help)
    p.add_argument("--shared", action="store_true", help=shared_help)
    p.add_argument("--take-over", action="store_true", help=take_over_help)
    p.add_argument(
        "--export",
        action="store_true",
        help='print only the export line, for eval "$(gctl lease acquire --export RES)"',
    )
    for name, handler, help_text in (
        ("renew", cmd_lease_renew, "renew a resource lease"),
        ("release", cmd_lease_release, "release a resource lease"),
        ("check", cmd_lease_check, "is this fence still the current tenure? (exit 4 if not)"),
    ):
        p = add_lease(name, handler, help_text)
        p.add_argument("resource", help=resource_help)
        p.add_argument("--fence", type=int, help="default: GC_FENCE when GC_RESOURCE matches")
    p = add_lease("list", cmd_lease_list, "list the workspace's resource leases")
    p.add_argument("--prefix", help="only resources whose name starts with this")
    p.add_argument("--holder", help="only leases this hand holds (a hand's name)")
    p.add_argument(
        "--state", choices=["live", "late", "stalled", "lost", "free"], help="only in this state"
    )
    p = add_lease(
        "queue",
        cmd_lease_queue,
        "the requests waiting in line for leases (acquires with --wait), oldest first",
    )
    p.add_argument(
        "resource", nargs="?", help="only the line of this name (the names above and below it)"
    )

    kill_help = "seconds from SIGTERM to SIGKILL when the command is stopped (default 10)"
    p = add("run", cmd_run, "claim a slot and run CMD under it (gctl run --run ID -- CMD...)")
    p.add_argument("--run", type=int, required=True, help="the run's id")
    p.add_argument("--slot", type=int, help="this slot (default: the lowest open one)")
    p.add_argument("--wait", type=float, metavar="S", help=claim_wait_help)
    p.add_argument("--kill-after", type=float, default=10.0, help=kill_help)
    p.add_argument(
        "--await-ci",
        type=float,
        default=0.0,
        metavar="S",
        help="when the run needs evidence seen by ci, keep the slot (heartbeating) and retry "
        "the finish for up to S seconds until CI attests its URL (default: 0, release at once)",
    )
    p = add(
        "hold",
        cmd_hold,
        "hold a resource lease, or a member of a pool, while CMD runs "
        "(gctl hold RES -- CMD..., gctl hold --pool POOL -- CMD...)",
    )
    p.add_argument("resource", nargs="?", help=resource_help)
    p.add_argument(
        "--pool",
        help="hold the first free member of this pool instead of a resource; CMD sees it as "
        "GC_MEMBER (and its lease as GC_RESOURCE and GC_FENCE)",
    )
    p.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, help=ttl_help)
    p.add_argument("--wait", type=float, metavar="S", help=lease_wait_help)
    p.add_argument("--shared", action="store_true", help=shared_help)
    p.add_argument("--take-over", action="store_true", help=take_over_help)
    p.add_argument("--kill-after", type=float, default=10.0, help=kill_help)
    p = add(
        "mcp",
        cmd_mcp,
        "serve the Model Context Protocol on stdio (gctl mcp; gctl mcp --wrap -- CMD... serves "
        "another MCP server's tools through Ground Control)",
    )
    p.add_argument(
        "--wrap",
        action="store_true",
        help="start CMD (after --), an MCP server on stdio, and serve its tools beside Ground "
        "Control's: each write-shaped call takes a lease on its paths first (docs/agents.md)",
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        help="with --wrap: relative paths are taken from DIR (default: CMD's first argument "
        "that is an existing directory, else the working directory); lease names are paths "
        "relative to the file's git repository",
    )
    p.add_argument(
        "--write-tool",
        action="append",
        default=[],
        metavar="NAME=ARG[,ARG...]",
        help="with --wrap: CMD's tool NAME writes the paths in these arguments (adds to or "
        "replaces the filesystem server's table; NAME= makes NAME a read); repeatable",
    )
    p.add_argument(
        "--ttl",
        type=float,
        default=120.0,
        help="with --wrap: seconds a write's lease lasts without renewal (renewed in the "
        "background while the session lasts; default 120)",
    )
    p = add(
        "hook",
        cmd_hook,
        "an agent harness's hook: the event on stdin, the answer on stdout (docs/agents.md)",
    )
    p.add_argument(
        "harness",
        choices=[*HARNESSES, "install"],
        help="whose hook protocol; `install HARNESS` writes that harness's hooks into a project",
    )
    p.add_argument("installed", nargs="?", choices=HARNESSES, help="with install: the harness")
    p.add_argument(
        "--release-on-stop",
        action="store_true",
        help="release the session's leases on Stop too, not only on SessionEnd",
    )
    p.add_argument(
        "--project", default=".", help="with install: the project's directory (default: here)"
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="with install claude-code: Claude Code posts each write to GC_URL itself (no "
        "process per write); shell commands and the session's start still run gctl",
    )
    p.add_argument(
        "--gctl", default="gctl", help="with install: the command the hooks run (default: gctl)"
    )
    p.set_defaults(offline=True)  # its client is its own: cli_wrappers.cmd_hook
    add_git_commands(sub, common)
    add_friction_command(sub, common)
    add_schedule_commands(sub, common, add)
    add_handoff_commands(sub, common)
    add_people_commands(sub, common)
    add_records_commands(sub, common)
    add_pool_commands(sub, common)
    add_attestation_commands(sub, common)
    return parser


WRAPPERS = ("run", "hold", "mcp")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Everything after the first `--` is the wrapped command of `run` and `hold` (argparse's
    REMAINDER would swallow the options that follow a positional)."""
    argv = list(argv)
    head, tail = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    args = parser.parse_args(head)
    if args.command in WRAPPERS:
        args.cmd = tail
    elif tail:
        args = parser.parse_args(argv)  # a `--` that only ends the options
    return args
