"""gctl: Ground Control from a shell. Human output by default, `--json` for scripts.

Exit codes (the same for every command):

    0  ok
    1  error: the server refused for another reason, failed, or could not be reached
    2  usage or configuration: bad arguments, GC_URL or GC_KEY missing
    3  denied: someone else holds it (lease_held, no_open_slot, slot_taken, run_closed)
    4  lease lost: the tenure is over or not yours (lease_lost, stale_fence, process_mismatch,
       not_holder), or the client's own deadline passed
    5  auth: the key is invalid, revoked, expired, or lacks the scope
    6  stopped: `gctl run` stopped the command because the supervisor's directive was stop
    127  `gctl run` or `gctl hold` could not start the command (the claim or lease is released)

`gctl run` and `gctl hold` exit with the command's own status when it ran to its end and failed
(128 + N when a signal N killed it); `--json` prints how it ended as the last line on stderr.

One-shot commands speak for a process identity: `--process-id`, else `GC_PROCESS_ID`, else the
identity of the process that runs gctl (a shell, an agent). `gctl claim` prints the lines to
export so that later reports renew the same claim.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from groundcontrol_client import wrappers
from groundcontrol_client.client import Client
from groundcontrol_client.errors import (
    AuthFailed,
    ConfigError,
    Denied,
    GroundControlError,
    TenureLost,
)
from groundcontrol_client.identity import process_identity
from groundcontrol_client.models import Attempt, Evidence, Lease
from groundcontrol_client.runtime import ClaimedAttempt, HeldLease
from groundcontrol_client.wrappers import (
    EXIT_AUTH,
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_LOST,
    EXIT_OK,
    EXIT_USAGE,
)

Result = tuple[Any, str]  # (what --json prints, what a person reads)


class UsageError(Exception):
    pass


def exit_code_for(error: GroundControlError) -> int:
    if isinstance(error, ConfigError):
        return EXIT_USAGE
    if isinstance(error, Denied):
        return EXIT_DENIED
    if isinstance(error, TenureLost):
        return EXIT_LOST
    if isinstance(error, AuthFailed):
        return EXIT_AUTH
    return EXIT_ERROR


def _label(error: GroundControlError) -> str:
    if isinstance(error, Denied):
        return "denied"
    if isinstance(error, TenureLost):
        return "lease lost"
    return "error"


# --- defaults from the environment ----------------------------------------------------------


def _process_id(args: argparse.Namespace) -> str:
    return args.process_id or os.environ.get("GC_PROCESS_ID") or process_identity(os.getppid())


def _attempt_id(args: argparse.Namespace) -> int:
    value = args.attempt or os.environ.get("GC_ATTEMPT")
    if not value:
        raise UsageError("which attempt? give its id or set GC_ATTEMPT")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"an attempt id is a number, not {value!r}") from None


def _attempt_fence(client: Client, args: argparse.Namespace, attempt_id: int) -> int:
    """--fence, else GC_ATTEMPT_FENCE for the attempt GC_ATTEMPT names, else the server's."""
    if args.fence is not None:
        return int(args.fence)
    if os.environ.get("GC_ATTEMPT") == str(attempt_id) and os.environ.get("GC_ATTEMPT_FENCE"):
        return int(os.environ["GC_ATTEMPT_FENCE"])
    # The attempt's lease fence: if the slot has moved on, the server refuses it as stale.
    return client.attempt(attempt_id).fence


def _lease_fence(args: argparse.Namespace) -> int:
    """--fence, else GC_FENCE when GC_RESOURCE names this resource (as `gctl hold` exports)."""
    if args.fence is not None:
        return int(args.fence)
    if os.environ.get("GC_RESOURCE") == args.resource and os.environ.get("GC_FENCE"):
        return int(os.environ["GC_FENCE"])
    raise UsageError("--fence is required (the fence your acquire returned)")


# --- presenting -----------------------------------------------------------------------------


def _attempt_line(attempt: Attempt) -> str:
    lease = attempt.lease
    expires = f", expires in {lease.expires_in_s:.0f} s" if lease.expires_in_s is not None else ""
    return (
        f"attempt {attempt.id}: run {attempt.run} slot {attempt.slot}, fence {attempt.fence}, "
        f"{attempt.state}, directive {attempt.directive}{expires}"
    )


def _lease_line(lease: Lease) -> str:
    expires = f", expires in {lease.expires_in_s:.0f} s" if lease.expires_in_s is not None else ""
    return (
        f"{lease.resource}: held by {lease.holder or 'nobody'} at fence {lease.fence}, "
        f"{lease.state}{expires}"
    )


def _exports(**values: object) -> str:
    return "export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())


# --- commands -------------------------------------------------------------------------------


def cmd_me(client: Client, args: argparse.Namespace) -> Result:
    me = client.me()
    text = (
        f"hand {me.hand} in workspace {me.workspace}; key {me.key_prefix} "
        f"(scopes: {', '.join(me.scopes)}); lane: {me.lane or 'any'}"
    )
    return me.raw, text


def cmd_slots(client: Client, args: argparse.Namespace) -> Result:
    slots = client.slots(args.run, state=None if args.all else "open")
    lines = [
        f"slot {s.index}: {s.state}"
        + (f" (held by {s.holder}, fence {s.fence})" if s.holder else "")
        for s in slots
    ]
    return [s.raw for s in slots], "\n".join(lines) or f"run {args.run} has no open slot"


def cmd_claim(client: Client, args: argparse.Namespace) -> Result:
    process_id = _process_id(args)
    attempt = client.claim(args.run, process_id=process_id, slot=args.slot)
    lease = attempt.lease
    text = (
        f"claimed run {attempt.run} slot {attempt.slot}: attempt {attempt.id}, fence "
        f"{attempt.fence}; heartbeat every {lease.heartbeat_interval_s:g} s "
        f"(grace {lease.grace_s:g} s)\n"
        "so that `gctl report` renews this claim from here on:\n"
        + _exports(GC_ATTEMPT=attempt.id, GC_ATTEMPT_FENCE=attempt.fence, GC_PROCESS_ID=process_id)
    )
    return attempt.raw, text


def cmd_brief(client: Client, args: argparse.Namespace) -> Result:
    brief = client.brief(_attempt_id(args))
    required = ", ".join(brief.evidence_required) or "none"
    text = f"# {brief.title}\n\n{brief.brief.strip()}\n\nevidence required: {required}"
    return brief.raw, text


def cmd_report(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = _attempt_id(args)
    result = client.report(
        attempt_id,
        fence=_attempt_fence(client, args, attempt_id),
        kind=args.kind,
        process_id=None if args.no_renew else _process_id(args),
        message=args.message,
        percent=args.percent,
    )
    renewed = "renewed" if result.renewed else "recorded (not renewed)"
    return (
        {"renewed": result.renewed, "attempt": result.attempt.raw},
        f"{renewed}; {_attempt_line(result.attempt)}",
    )


def cmd_finish(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = _attempt_id(args)
    try:
        evidence = [Evidence.parse(item) for item in args.evidence]
    except ValueError as error:
        raise UsageError(str(error)) from None
    attempt = client.finish(
        attempt_id,
        fence=_attempt_fence(client, args, attempt_id),
        process_id=_process_id(args),
        evidence=evidence,
        summary=args.summary,
    )
    return attempt.raw, f"finished attempt {attempt.id} with {len(evidence)} evidence item(s)"


def cmd_release(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = _attempt_id(args)
    attempt = client.release(
        attempt_id,
        fence=_attempt_fence(client, args, attempt_id),
        process_id=_process_id(args),
        reason=args.reason,
    )
    return attempt.raw, f"released attempt {attempt.id}: {args.reason}"


def cmd_lease_acquire(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_acquire(
        args.resource, ttl_s=args.ttl, process_id=_process_id(args), wait_s=args.wait
    )
    text = f"acquired {_lease_line(lease)}\n" + _exports(
        GC_RESOURCE=lease.resource, GC_FENCE=lease.fence
    )
    return lease.raw, text


def cmd_lease_renew(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_renew(
        args.resource, fence=_lease_fence(args), process_id=_process_id(args)
    )
    return lease.raw, f"renewed {_lease_line(lease)}"


def cmd_lease_release(client: Client, args: argparse.Namespace) -> Result:
    client.lease_release(args.resource, fence=_lease_fence(args))
    return {"released": True}, f"released {args.resource}"


def cmd_lease_check(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_check(args.resource, fence=_lease_fence(args))
    return {"valid": True, "lease": lease.raw}, f"valid: {_lease_line(lease)}"


def cmd_lease_list(client: Client, args: argparse.Namespace) -> Result:
    leases = client.leases(prefix=args.prefix, holder=args.holder, state=args.state)
    return [lease.raw for lease in leases], "\n".join(map(_lease_line, leases)) or "no leases"


def _logger(args: argparse.Namespace) -> Callable[[str, dict[str, Any]], None]:
    """Wrappers talk on stderr: the command owns stdout."""

    def log(text: str, data: dict[str, Any]) -> None:
        wrappers.eprint(json.dumps({"gctl": text, **data}) if args.json else f"gctl: {text}")

    return log


def _wrapped_command(args: argparse.Namespace) -> list[str]:
    if not args.cmd:
        raise UsageError("give the command to run after --")
    return list(args.cmd)


def cmd_run(client: Client, args: argparse.Namespace) -> int:
    cmd = _wrapped_command(args)
    log = _logger(args)
    attempt = ClaimedAttempt(
        client, args.run, process_id=_process_id_for_wrapper(args), slot=args.slot
    )
    attempt.open()
    log(
        f"claimed run {args.run} slot {attempt.slot} (attempt {attempt.id}, fence {attempt.fence})",
        {"attempt": attempt.id, "fence": attempt.fence, "slot": attempt.slot},
    )
    outcome = wrappers.run_claimed(attempt, cmd, kill_after_s=args.kill_after, log=log)
    log(f"attempt {attempt.id} {outcome.status}", {"status": outcome.status, **outcome.detail})
    return outcome.exit_code


def cmd_hold(client: Client, args: argparse.Namespace) -> int:
    cmd = _wrapped_command(args)
    log = _logger(args)
    lease = HeldLease(
        client,
        args.resource,
        ttl_s=args.ttl,
        process_id=_process_id_for_wrapper(args),
        wait_s=args.wait,
    )
    lease.open()
    log(
        f"holding {args.resource} at fence {lease.fence}",
        {"resource": args.resource, "fence": lease.fence},
    )
    outcome = wrappers.hold_lease(lease, cmd, kill_after_s=args.kill_after, log=log)
    log(f"{args.resource} {outcome.status}", {"status": outcome.status, **outcome.detail})
    return outcome.exit_code


def _process_id_for_wrapper(args: argparse.Namespace) -> str:
    # The wrapper lives as long as the lease: it is the process, not its parent.
    return args.process_id or process_identity()


def cmd_mcp(client: Client, args: argparse.Namespace) -> int:
    from groundcontrol_client.mcp_server import serve

    serve(client, process_id=_process_id_for_wrapper(args))
    return EXIT_OK


# --- the parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gctl",
        description="Ground Control for agents. Configured by GC_URL and GC_KEY.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 denied, 4 lease lost, 5 auth, 6 stopped",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--url", help="the server (default: GC_URL)")
    # Options that each subcommand also accepts after its name; SUPPRESS keeps a value given
    # before the subcommand from being overwritten by the subparser's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    common.add_argument("--process-id", default=None, help="default: GC_PROCESS_ID")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str, handler: Callable[..., Any], help_text: str, **kw: Any
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text, **kw)
        p.set_defaults(handler=handler)
        return p

    add("me", cmd_me, "who this key is")
    p = add("slots", cmd_slots, "a run's slots (open ones unless --all)")
    p.add_argument("run", type=int)
    p.add_argument("--all", action="store_true")
    p = add("claim", cmd_claim, "claim an open slot of a run")
    p.add_argument("run", type=int)
    p.add_argument("--slot", type=int)
    p = add("brief", cmd_brief, "read an attempt's brief")
    p.add_argument("attempt", nargs="?", help="default: GC_ATTEMPT")
    p = add("report", cmd_report, "report progress (renews the lease with the claim's identity)")
    p.add_argument("attempt", nargs="?", help="default: GC_ATTEMPT")
    p.add_argument("--message", "-m")
    p.add_argument("--percent", type=float)
    p.add_argument(
        "--kind", default="progress", choices=["heartbeat", "progress", "blocker", "note"]
    )
    p.add_argument("--fence", type=int)
    p.add_argument(
        "--no-renew", action="store_true", help="record only, without a process identity"
    )
    p = add("finish", cmd_finish, "finish an attempt with evidence")
    p.add_argument("attempt", nargs="?", help="default: GC_ATTEMPT")
    p.add_argument("--evidence", action="append", default=[], metavar="KIND=URL")
    p.add_argument("--summary")
    p.add_argument("--fence", type=int)
    p = add("release", cmd_release, "give an attempt's slot back, with a reason")
    p.add_argument("attempt", nargs="?", help="default: GC_ATTEMPT")
    p.add_argument("--reason", required=True)
    p.add_argument("--fence", type=int)

    lease = sub.add_parser("lease", help="resource leases").add_subparsers(
        dest="action", required=True
    )

    def add_lease(
        name: str, handler: Callable[..., Any], help_text: str
    ) -> argparse.ArgumentParser:
        p = lease.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = add_lease("acquire", cmd_lease_acquire, "take a resource lease")
    p.add_argument("resource")
    p.add_argument("--ttl", type=float, required=True, help="seconds")
    p.add_argument("--wait", type=float, help="wait up to this many seconds for it to free")
    for name, handler, help_text in (
        ("renew", cmd_lease_renew, "renew a resource lease"),
        ("release", cmd_lease_release, "release a resource lease"),
        ("check", cmd_lease_check, "is this fence still the current tenure? (exit 4 if not)"),
    ):
        p = add_lease(name, handler, help_text)
        p.add_argument("resource")
        p.add_argument("--fence", type=int, help="default: GC_FENCE when GC_RESOURCE matches")
    p = add_lease("list", cmd_lease_list, "list resource leases")
    p.add_argument("--prefix")
    p.add_argument("--holder")
    p.add_argument("--state")

    p = add("run", cmd_run, "claim a slot and run CMD under it (gctl run --run ID -- CMD...)")
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--slot", type=int)
    p.add_argument("--kill-after", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL")
    p = add("hold", cmd_hold, "hold a resource lease while CMD runs (gctl hold RES -- CMD...)")
    p.add_argument("resource")
    p.add_argument("--ttl", type=float, default=60.0, help="seconds (default 60)")
    p.add_argument("--wait", type=float)
    p.add_argument("--kill-after", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL")
    add("mcp", cmd_mcp, "serve the Model Context Protocol on stdio")
    return parser


def _print_result(args: argparse.Namespace, result: Result) -> None:
    data, text = result
    print(json.dumps(data, indent=2, default=str) if args.json else text, flush=True)


def _print_error(args: argparse.Namespace, error: GroundControlError) -> None:
    if args.json:
        print(json.dumps({"error": error.to_dict()}, default=str), flush=True)
    else:
        print(f"gctl: {_label(error)}: {error.message} ({error.code})", file=sys.stderr, flush=True)


WRAPPERS = ("run", "hold")


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, sys.argv[1:] if argv is None else argv)
    args.json = getattr(args, "json", False)
    try:
        env = dict(os.environ)
        if args.url:
            env["GC_URL"] = args.url
        with Client.from_env(env) as client:
            outcome = args.handler(client, args)
    except UsageError as error:
        parser.print_usage(sys.stderr)
        print(f"gctl: {error}", file=sys.stderr)
        return EXIT_USAGE
    except GroundControlError as error:
        _print_error(args, error)
        return exit_code_for(error)
    if isinstance(outcome, int):
        return outcome
    _print_result(args, outcome)
    return EXIT_OK


def entry() -> None:
    sys.exit(main())
