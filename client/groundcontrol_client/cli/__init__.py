"""gctl: Ground Control from a shell. Human output by default, `--json` for scripts.

Exit codes (the same for every command):

    0  ok
    1  error: the server refused for another reason, failed, or could not be reached
    2  usage or configuration: bad arguments, GC_URL or GC_KEY missing
    3  denied: someone else holds it (lease_held, no_open_slot, slot_taken, run_closed), or
       the run waits for runs not done (run_waiting)
    4  lease lost: the tenure is over or not yours (lease_lost, stale_fence, process_mismatch,
       not_holder), or the client's own deadline passed; `gctl verify`: a stale fence
    5  auth: the key is invalid, revoked, expired, or lacks the scope
    6  stopped: `gctl run` stopped the command because the supervisor's directive was stop
    127  `gctl run` or `gctl hold` could not start the command (the claim or lease is released)

`gctl hook HARNESS` exits 0 with the server's answer on stdout (a denial included); on any
failure it refuses the call the way the harness heeds (exit 2 with the reason on stderr, or a
refusal on stdout and exit 0: `hooks.command.FAILURE`), so a failed check never lets a write
through; at a stop, where a refusal would keep the model working, it exits 1.

`gctl run` and `gctl hold` exit with the command's own status when it ran to its end and failed
(128 + N when a signal N killed it); `--json` prints how it ended as the last line on stderr.

One-shot commands speak for a process identity: `--process-id`, else `GC_PROCESS_ID`, else the
identity of the process that runs gctl (a shell, an agent). `gctl claim` prints the lines to
export so that later reports renew the same claim.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

# `gctl hook HARNESS` runs for every tool call of an agent: it answers from a cold start, so it
# is sent on before anything else is imported (`entry`); the rest is imported by `main`.
__all__ = ["entry", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    from groundcontrol_client.cli.output import (
        Explained,
        UsageError,
        exit_code_for,
        print_error,
        print_result,
    )
    from groundcontrol_client.cli.parser import build_parser, parse
    from groundcontrol_client.core.errors import GroundControlError
    from groundcontrol_client.http import Client
    from groundcontrol_client.runtime.wrappers import EXIT_OK, EXIT_USAGE

    parser = build_parser()
    args = parse(parser, sys.argv[1:] if argv is None else argv)
    args.json = getattr(args, "json", False)
    try:
        env = dict(os.environ)
        if args.url:
            env["GC_URL"] = args.url
        # `gctl git install` asks no server; `gctl hook` makes its client itself (fail closed).
        if getattr(args, "offline", False):
            outcome = args.handler(None, args)
        else:
            with Client.from_env(env) as client:
                outcome = args.handler(client, args)
    except UsageError as error:
        parser.print_usage(sys.stderr)
        print(f"gctl: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Explained as explained:
        print_error(args, explained.error, explained.sentence)
        return exit_code_for(explained.error)
    except GroundControlError as error:
        print_error(args, error)
        return exit_code_for(error)
    if isinstance(outcome, int):
        return outcome
    print_result(args, outcome)
    return EXIT_OK


def entry() -> None:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "hook" and set(args[2:]) <= {"--release-on-stop"}:
        from groundcontrol_client.hooks import command

        if args[1] in command.HARNESSES:
            sys.exit(command.main(args[1], release_on_stop="--release-on-stop" in args))
    sys.exit(main())
