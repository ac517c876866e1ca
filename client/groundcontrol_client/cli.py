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
    EvidenceMissing,
    GroundControlError,
    ProcessMismatch,
    TenureLost,
    ValidationFailed,
    describe,
)
from groundcontrol_client.identity import process_identity
from groundcontrol_client.models import (
    Attempt,
    Evidence,
    describe_lease,
    describe_run,
    describe_slot,
    describe_window,
)
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
# `gctl hold` and `gctl lease acquire` take a lease for this long unless told (seconds).
DEFAULT_TTL_S = 60.0


class UsageError(Exception):
    pass


class Explained(Exception):
    """A refusal that gctl can say better than the server, knowing where it runs (a `gctl
    report` inside `gctl run`): printed as `sentence`, with the refusal's code and exit code."""

    def __init__(self, error: GroundControlError, sentence: str) -> None:
        super().__init__(sentence)
        self.error = error
        self.sentence = sentence


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
    if isinstance(error, ProcessMismatch):
        # Not lost: the claim is alive, held by another process (often the wrapper).
        return "wrong process"
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
    return (
        f"attempt {attempt.id}: run {attempt.run} slot {attempt.slot}, fence {attempt.fence}, "
        f"{attempt.state}, directive {attempt.directive}"
        + describe_window(attempt.lease.expires_in_s)
    )


def _exports(**values: object) -> str:
    """One line a POSIX shell can eval: every value quoted."""
    return "export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())


def _comment(text: str) -> str:
    """Human lines around exports start with '#', so `eval` of the whole output is safe too."""
    return "\n".join(f"# {line}" for line in text.splitlines())


def _waiting(args: argparse.Namespace, what: str) -> Callable[[Denied], None]:
    """How `--wait` says each new answer while it waits (stderr: stdout is for the result)."""

    def say(denied: Denied) -> None:
        if args.json:
            line = json.dumps({"gctl": f"waiting for {what}", "error": denied.to_dict()})
            wrappers.eprint(line)
        else:
            wrappers.eprint(f"gctl: waiting for {what}: {describe(denied)}")

    return say


# --- commands -------------------------------------------------------------------------------


def cmd_me(client: Client, args: argparse.Namespace) -> Result:
    me = client.me()
    text = (
        f"hand {me.hand} in workspace {me.workspace}; key {me.key_prefix} "
        f"(scopes: {', '.join(me.scopes)}); lane: {me.lane or 'any'}"
    )
    return me.raw, text


def cmd_runs(client: Client, args: argparse.Namespace) -> Result:
    runs = client.runs(state=None if args.all else "open", lane=args.lane)
    empty = "no runs" if args.all else "no open runs"
    empty += f" in lane {args.lane}" if args.lane else ""
    text = "\n".join(map(describe_run, runs)) or empty
    return [run.raw for run in runs], text


def cmd_slots(client: Client, args: argparse.Namespace) -> Result:
    slots = client.slots(args.run, state=None if args.all else "open")
    empty = f"run {args.run} has no open slot (`gctl slots {args.run} --all` lists every slot)"
    return [s.raw for s in slots], "\n".join(map(describe_slot, slots)) or empty


def cmd_claim(client: Client, args: argparse.Namespace) -> Result:
    if args.export and args.json:
        raise UsageError("--export prints shell lines; it does not mix with --json")
    process_id = _process_id(args)
    attempt = client.claim(
        args.run,
        process_id=process_id,
        slot=args.slot,
        wait_s=args.wait,
        on_wait=_waiting(args, f"a slot of run {args.run}"),
    )
    lease = attempt.lease
    exports = _exports(
        GC_ATTEMPT=attempt.id, GC_ATTEMPT_FENCE=attempt.fence, GC_PROCESS_ID=process_id
    )
    if args.export:
        return attempt.raw, exports
    summary = (
        f"claimed run {attempt.run} slot {attempt.slot}: attempt {attempt.id}, fence "
        f"{attempt.fence}; renew it at least every {lease.heartbeat_interval_s:g} s "
        f"(grace {lease.grace_s:g} s), e.g. with `gctl report`\n"
        "the line below makes `gctl report` renew this claim; "
        f'`eval "$(gctl claim --export {args.run})"` claims and sets it in one step'
    )
    return attempt.raw, f"{_comment(summary)}\n{exports}"


def cmd_brief(client: Client, args: argparse.Namespace) -> Result:
    brief = client.brief(_attempt_id(args))
    required = ", ".join(brief.evidence_required) or "none"
    text = f"# {brief.title}\n\n{brief.brief.strip()}\n\nevidence required: {required}"
    return brief.raw, text


def _inside_wrapper(args: argparse.Namespace, attempt_id: int) -> bool:
    """Run by the command of `gctl run` for its own attempt: the wrapper exports GC_ATTEMPT and
    no GC_PROCESS_ID, since the wrapper's process, not the command's, holds the claim."""
    return (
        os.environ.get("GC_ATTEMPT") == str(attempt_id)
        and not args.process_id
        and not os.environ.get("GC_PROCESS_ID")
    )


def cmd_report(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = _attempt_id(args)
    process_id = None if args.no_renew else _process_id(args)
    try:
        result = client.report(
            attempt_id,
            fence=_attempt_fence(client, args, attempt_id),
            kind=args.kind,
            process_id=process_id,
            message=args.message,
            percent=args.percent,
        )
    except ProcessMismatch as error:
        if not _inside_wrapper(args, attempt_id):
            raise
        holder = error.get("process_id")
        raise Explained(
            error,
            f"attempt {attempt_id} is held by the wrapper's process"
            + (f" ({holder})" if holder else "")
            + f", not this one ({process_id}), so this report was refused; the claim is "
            "fine. Report with --no-renew (recorded; the wrapper keeps renewing), or from "
            "the wrapper's identity.",
        ) from error
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
    if args.export and args.json:
        raise UsageError("--export prints shell lines; it does not mix with --json")
    process_id = _process_id(args)
    lease = client.lease_acquire(
        args.resource, ttl_s=args.ttl, process_id=process_id, wait_s=args.wait
    )
    exports = _exports(GC_RESOURCE=lease.resource, GC_FENCE=lease.fence)
    if args.export:
        return lease.raw, exports
    summary = (
        f"acquired {describe_lease(lease)}\n"
        f"it lapses unless renewed within {lease.ttl_s:g} s (`gctl lease renew`); "
        "`gctl hold` renews it for as long as a command runs"
    )
    return lease.raw, f"{_comment(summary)}\n{exports}"


def cmd_lease_renew(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_renew(
        args.resource, fence=_lease_fence(args), process_id=_process_id(args)
    )
    return lease.raw, f"renewed {describe_lease(lease)}"


def cmd_lease_release(client: Client, args: argparse.Namespace) -> Result:
    client.lease_release(args.resource, fence=_lease_fence(args))
    return {"released": True}, f"released {args.resource}"


def cmd_lease_check(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_check(args.resource, fence=_lease_fence(args))
    return {"valid": True, "lease": lease.raw}, f"valid: {describe_lease(lease)}"


def cmd_lease_list(client: Client, args: argparse.Namespace) -> Result:
    leases = client.leases(prefix=args.prefix, holder=args.holder, state=args.state)
    return [lease.raw for lease in leases], "\n".join(map(describe_lease, leases)) or "no leases"


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
        client,
        args.run,
        process_id=_process_id_for_wrapper(args),
        slot=args.slot,
        on_wait=_waiting(args, f"a slot of run {args.run}"),
    )
    try:
        # run_claimed claims (waiting up to --wait for an open slot), then runs the command.
        outcome = wrappers.run_claimed(
            attempt, cmd, kill_after_s=args.kill_after, log=log, wait=args.wait
        )
    except (EvidenceMissing, ValidationFailed) as error:
        if not attempt.claimed:
            raise  # the claim itself was refused: the main handler says why
        # The wrapper released the attempt: the finish it tried was refused.
        missing = ", ".join(map(str, error.get("missing") or []))
        log(
            f"attempt {attempt.id} released: the finish was refused: {describe(error)}"
            + (
                f" Write it to $GC_EVIDENCE_FILE, one kind=url a line ({missing}=…)."
                if missing
                else ""
            )
            + f" ({error.code})",
            {"status": "released", "error": error.to_dict()},
        )
        return EXIT_ERROR
    reason = outcome.detail.get("reason")
    log(
        f"attempt {attempt.id} {outcome.status}" + (f": {reason}" if reason else ""),
        {"status": outcome.status, **outcome.detail},
    )
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
    p = add("runs", cmd_runs, "the runs this key may claim (open ones unless --all)")
    p.add_argument("--lane", help="only this lane's runs (a lane's slug)")
    p.add_argument("--all", action="store_true", help="every run: open, closed and done")
    p = add("slots", cmd_slots, "a run's slots (open ones unless --all)")
    p.add_argument("run", type=int, help="the run's id")
    p.add_argument("--all", action="store_true", help="every slot: open, held and done")
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
    lease_wait_help = "if it is held, wait up to this many seconds (0 to 60) for it to free"
    p = add_lease("acquire", cmd_lease_acquire, "take a resource lease")
    p.add_argument("resource", help=resource_help)
    p.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, help=ttl_help)
    p.add_argument("--wait", type=float, metavar="S", help=lease_wait_help)
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

    kill_help = "seconds from SIGTERM to SIGKILL when the command is stopped (default 10)"
    p = add("run", cmd_run, "claim a slot and run CMD under it (gctl run --run ID -- CMD...)")
    p.add_argument("--run", type=int, required=True, help="the run's id")
    p.add_argument("--slot", type=int, help="this slot (default: the lowest open one)")
    p.add_argument("--wait", type=float, metavar="S", help=claim_wait_help)
    p.add_argument("--kill-after", type=float, default=10.0, help=kill_help)
    p = add("hold", cmd_hold, "hold a resource lease while CMD runs (gctl hold RES -- CMD...)")
    p.add_argument("resource", help=resource_help)
    p.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, help=ttl_help)
    p.add_argument("--wait", type=float, metavar="S", help=lease_wait_help)
    p.add_argument("--kill-after", type=float, default=10.0, help=kill_help)
    add("mcp", cmd_mcp, "serve the Model Context Protocol on stdio")
    return parser


def _print_result(args: argparse.Namespace, result: Result) -> None:
    data, text = result
    print(json.dumps(data, indent=2, default=str) if args.json else text, flush=True)


def _print_error(
    args: argparse.Namespace, error: GroundControlError, sentence: str | None = None
) -> None:
    if args.json:
        print(json.dumps({"error": error.to_dict()}, default=str), flush=True)
    else:
        text = sentence or describe(error, subject=_subject(args))
        print(f"gctl: {_label(error)}: {text} ({error.code})", file=sys.stderr, flush=True)


def _subject(args: argparse.Namespace) -> str | None:
    """What the command asked for, for a refusal that does not name it."""
    if getattr(args, "resource", None):
        return str(args.resource)
    if getattr(args, "run", None) is not None and getattr(args, "slot", None) is not None:
        return f"slot {args.slot} of run {args.run}"
    return None


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
    except Explained as explained:
        _print_error(args, explained.error, explained.sentence)
        return exit_code_for(explained.error)
    except GroundControlError as error:
        _print_error(args, error)
        return exit_code_for(error)
    if isinstance(outcome, int):
        return outcome
    _print_result(args, outcome)
    return EXIT_OK


def entry() -> None:
    sys.exit(main())
