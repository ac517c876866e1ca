"""gctl's one-shot commands for work: who am I, the runs and their slots, and an attempt's
claim, brief, reports, finish and release."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from groundcontrol_client.cli.environment import (
    attempt_fence_for,
    attempt_id_for,
    process_id_for,
)
from groundcontrol_client.cli.handoffs import DECLINE
from groundcontrol_client.cli.output import (
    Explained,
    Result,
    UsageError,
    attempt_line,
    commented,
    export_line,
    waiting_notice,
)
from groundcontrol_client.core.checkpoints import describe_inherited, read_checkpoint
from groundcontrol_client.core.errors import ProcessMismatch
from groundcontrol_client.core.models import (
    Evidence,
    describe_required,
    describe_run,
    describe_slot,
)
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.http import Client


def cmd_me(client: Client, args: argparse.Namespace) -> Result:
    me = client.me()
    text = (
        f"hand {me.hand} in workspace {me.workspace}; key {me.key_prefix} "
        f"(scopes: {', '.join(me.scopes)}); lane: {me.lane or 'any'}; "
        f"capabilities: {', '.join(me.capabilities) or 'none'}"
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
    process_id = process_id_for(args)
    attempt = client.claim(
        args.run,
        process_id=process_id,
        slot=args.slot,
        wait_s=args.wait,
        on_wait=waiting_notice(args, f"a slot of run {args.run}"),
    )
    lease = attempt.lease
    exports = export_line(
        GC_ATTEMPT=attempt.id, GC_ATTEMPT_FENCE=attempt.fence, GC_PROCESS_ID=process_id
    )
    if args.export:
        return attempt.raw, exports
    summary = (
        f"claimed run {attempt.run} slot {attempt.slot}: attempt {attempt.id}, fence "
        f"{attempt.fence}; renew it at least every {lease.heartbeat_interval_s:g} s "
        f"(grace {lease.grace_s:g} s), e.g. with `gctl report`\n"
        "the line below makes `gctl report` renew this claim; "
        f'`eval "$(gctl claim --export {args.run})"` claims and sets it in one step\n'
        + describe_inherited(attempt.checkpoint, attempt.checkpoint_from, now_utc())
    )
    return attempt.raw, f"{commented(summary)}\n{exports}"


def cmd_brief(client: Client, args: argparse.Namespace) -> Result:
    brief = client.brief(attempt_id_for(args))
    required = describe_required(brief.evidence_required, brief.evidence_grades)
    text = f"# {brief.title}\n\n{brief.brief.strip()}\n\nevidence required: {required}"
    inherited = describe_inherited(brief.checkpoint, brief.checkpoint_from, now_utc())
    return brief.raw, f"{text}\n{inherited}"


def checkpoint_from_file(name: str) -> Any:
    """`--checkpoint-file F` (`-`: standard input): its JSON, checked as the server checks a
    checkpoint; a usage error says why it cannot be reported."""
    try:
        content = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as error:
        raise UsageError(f"--checkpoint-file {name}: {error.strerror or error}") from None
    try:
        checkpoint = read_checkpoint(content)
    except ValueError as error:
        raise UsageError(f"--checkpoint-file {name}: {error}") from None
    if checkpoint is None:
        raise UsageError(f"--checkpoint-file {name} is empty: there is no checkpoint to report")
    return checkpoint


def _inside_wrapper(args: argparse.Namespace, attempt_id: int) -> bool:
    """Run by the command of `gctl run` for its own attempt: the wrapper exports GC_ATTEMPT and
    no GC_PROCESS_ID, since the wrapper's process, not the command's, holds the claim."""
    return (
        os.environ.get("GC_ATTEMPT") == str(attempt_id)
        and not args.process_id
        and not os.environ.get("GC_PROCESS_ID")
    )


def cmd_report(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = attempt_id_for(args)
    process_id = None if args.no_renew else process_id_for(args)
    checkpoint = checkpoint_from_file(args.checkpoint_file) if args.checkpoint_file else None
    try:
        result = client.report(
            attempt_id,
            fence=attempt_fence_for(client, args, attempt_id),
            kind=args.kind,
            process_id=process_id,
            message=args.message,
            percent=args.percent,
            tokens_in=args.tokens_in,
            tokens_out=args.tokens_out,
            cost_usd=args.cost,
            checkpoint=checkpoint,
        )
    except ValueError as error:  # a --cost that is no amount
        raise UsageError(str(error)) from None
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
    renewed += " with its checkpoint" if checkpoint is not None else ""
    asks = "".join(
        f"\n{r.sentence(result.attempt.lease.resource)}{DECLINE}" for r in result.handoff_requests
    )
    return (
        {
            "renewed": result.renewed,
            "attempt": result.attempt.raw,
            "handoff_requests": [r.to_wire() for r in result.handoff_requests],
        },
        f"{renewed}; {attempt_line(result.attempt)}{asks}",
    )


def cmd_finish(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = attempt_id_for(args)
    try:
        evidence = [Evidence.parse(item) for item in args.evidence]
    except ValueError as error:
        raise UsageError(str(error)) from None
    attempt = client.finish(
        attempt_id,
        fence=attempt_fence_for(client, args, attempt_id),
        process_id=process_id_for(args),
        evidence=evidence,
        summary=args.summary,
    )
    return attempt.raw, f"finished attempt {attempt.id} with {len(evidence)} evidence item(s)"


def cmd_release(client: Client, args: argparse.Namespace) -> Result:
    attempt_id = attempt_id_for(args)
    attempt = client.release(
        attempt_id,
        fence=attempt_fence_for(client, args, attempt_id),
        process_id=process_id_for(args),
        reason=args.reason,
    )
    return attempt.raw, f"released attempt {attempt.id}: {args.reason}"
