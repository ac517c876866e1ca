"""gctl's commands that last as long as something else does: `run` and `hold` keep a claim or a
lease alive while a command runs, `mcp` while a model's session does. Each speaks for its own
process, not its parent's: it lives as long as what it holds."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from groundcontrol_client.cli.environment import wrapper_process_id
from groundcontrol_client.cli.output import UsageError, waiting_notice, wrapper_log
from groundcontrol_client.core.errors import EvidenceMissing, ValidationFailed, describe
from groundcontrol_client.hooks import command
from groundcontrol_client.http import Client
from groundcontrol_client.runtime import wrappers
from groundcontrol_client.runtime.hand import ClaimedAttempt, HeldLease, PoolLease
from groundcontrol_client.runtime.wrappers import EXIT_ERROR, EXIT_OK, EXIT_USAGE


def _wrapped_command(args: argparse.Namespace) -> list[str]:
    if not args.cmd:
        raise UsageError("give the command to run after --")
    return list(args.cmd)


def cmd_run(client: Client, args: argparse.Namespace) -> int:
    cmd = _wrapped_command(args)
    log = wrapper_log(args)
    attempt = ClaimedAttempt(
        client,
        args.run,
        process_id=wrapper_process_id(args),
        slot=args.slot,
        on_wait=waiting_notice(args, f"a slot of run {args.run}"),
    )
    try:
        # run_claimed claims (waiting up to --wait for an open slot), then runs the command.
        outcome = wrappers.run_claimed(
            attempt,
            cmd,
            kill_after_s=args.kill_after,
            log=log,
            wait=args.wait,
            await_ci_s=args.await_ci,
        )
    except (EvidenceMissing, ValidationFailed) as error:
        if not attempt.claimed:
            raise  # the claim itself was refused: the main handler says why
        # The wrapper released the attempt: the finish it tried was refused.
        graded = error.get("grades_needed") if isinstance(error, EvidenceMissing) else None
        absent = [k for k in error.get("missing") or [] if k not in (graded or {})]
        missing = ", ".join(map(str, absent))
        log(
            f"attempt {attempt.id} released: the finish was refused: {describe(error)}"
            + (
                f" Write it to $GC_EVIDENCE_FILE, one kind=url a line ({missing}=…)."
                if missing
                else ""
            )
            + (" Pass --await-ci S to wait for CI's attestation." if graded else "")
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
    if (args.resource is None) == (args.pool is None):
        raise UsageError("give a resource, or --pool POOL, to hold while the command runs")
    cmd = _wrapped_command(args)
    log = wrapper_log(args)
    options = {"ttl_s": args.ttl, "process_id": wrapper_process_id(args), "wait_s": args.wait}
    if args.pool is not None and args.shared:
        raise UsageError("a pool's member is held alone: --shared does not go with --pool")
    lease = (
        PoolLease(client, args.pool, **options)
        if args.pool is not None
        else HeldLease(
            client,
            args.resource,
            mode="shared" if args.shared else None,
            take_over=args.take_over,
            **options,
        )
    )
    lease.open()
    held = {"resource": lease.resource, "fence": lease.fence}
    if isinstance(lease, PoolLease):
        held.update(pool=lease.pool, member=lease.member)
        log(f"holding {lease.member} of pool {lease.pool} at fence {lease.fence}", held)
    else:
        log(f"holding {lease.resource} at fence {lease.fence}", held)
    outcome = wrappers.hold_lease(lease, cmd, kill_after_s=args.kill_after, log=log)
    log(f"{lease.resource} {outcome.status}", {"status": outcome.status, **outcome.detail})
    return outcome.exit_code


def cmd_hook(client: Client | None, args: argparse.Namespace) -> int:
    # Offline to `main`: the hook makes its client itself, only for an event that needs one,
    # so that a failure there (GC_URL missing, say) fails closed like every other one.
    env = dict(os.environ)
    if args.url:
        env["GC_URL"] = args.url
    if args.harness == "install":
        return _install(args, env)
    if args.installed:
        raise UsageError(f"gctl hook {args.harness} takes no harness after it")
    return command.main(args.harness, release_on_stop=args.release_on_stop, env=env)


def _install(args: argparse.Namespace, env: dict[str, str]) -> int:
    from groundcontrol_client.hooks.install import InstallError, install

    if not args.installed:
        raise UsageError("gctl hook install HARNESS: which harness's hooks to write")
    url = env.get("GC_URL") if args.http else None
    if args.http and not url:
        raise UsageError("--http writes GC_URL into the hooks: set GC_URL (or --url)")
    try:
        written = install(args.installed, Path(args.project), gctl=args.gctl, url=url)
    except InstallError as error:
        print(f"gctl hook install: {error}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


def cmd_mcp(client: Client, args: argparse.Namespace) -> int:
    # Imported here: only `gctl mcp` needs the MCP SDK; the other commands start without it.
    from groundcontrol_client.mcp.server import serve, serve_wrapping

    if not args.wrap:
        if args.cmd:
            raise UsageError("to serve another MCP server's tools: gctl mcp --wrap -- CMD...")
        serve(client, process_id=wrapper_process_id(args))
        return EXIT_OK
    from groundcontrol_client.mcp.proxy import write_tools

    cmd = _wrapped_command(args)
    try:
        table = write_tools(args.write_tool)
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        return serve_wrapping(
            client,
            cmd,
            process_id=wrapper_process_id(args),
            root=args.root,
            table=table,
            ttl_s=args.ttl,
        )
    except OSError as error:  # CMD could not be started
        print(f"gctl mcp: could not start {cmd[0]}: {error.strerror or error}", file=sys.stderr)
        return EXIT_ERROR
