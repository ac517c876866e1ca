"""What a gctl command speaks for when not told: the process identity, attempt and fence come
from the options, else the environment (`gctl claim --export` and `gctl hold` set it), else the
server."""

from __future__ import annotations

import argparse
import os

from groundcontrol_client.cli.output import UsageError
from groundcontrol_client.core.identity import process_identity
from groundcontrol_client.http import Client


def process_id_for(args: argparse.Namespace) -> str:
    return args.process_id or os.environ.get("GC_PROCESS_ID") or process_identity(os.getppid())


def attempt_id_for(args: argparse.Namespace) -> int:
    value = args.attempt or os.environ.get("GC_ATTEMPT")
    if not value:
        raise UsageError("which attempt? give its id or set GC_ATTEMPT")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"an attempt id is a number, not {value!r}") from None


def attempt_fence_for(client: Client, args: argparse.Namespace, attempt_id: int) -> int:
    """--fence, else GC_ATTEMPT_FENCE for the attempt GC_ATTEMPT names, else the server's."""
    if args.fence is not None:
        return int(args.fence)
    if os.environ.get("GC_ATTEMPT") == str(attempt_id) and os.environ.get("GC_ATTEMPT_FENCE"):
        return int(os.environ["GC_ATTEMPT_FENCE"])
    # The attempt's lease fence: if the slot has moved on, the server refuses it as stale.
    return client.attempt(attempt_id).fence


def lease_fence_for(args: argparse.Namespace) -> int:
    """--fence, else GC_FENCE when GC_RESOURCE names this resource (as `gctl hold` exports)."""
    if args.fence is not None:
        return int(args.fence)
    if os.environ.get("GC_RESOURCE") == args.resource and os.environ.get("GC_FENCE"):
        return int(os.environ["GC_FENCE"])
    raise UsageError("--fence is required (the fence your acquire returned)")


def wrapper_process_id(args: argparse.Namespace) -> str:
    # The wrapper lives as long as the lease: it is the process, not its parent.
    return args.process_id or process_identity()
