"""Evidence and CI's word on it: `gctl attestations` (newest first; an `attest` or `supervise`
key) and `gctl evidence ATTEMPT` (what an attempt's finish left, each piece with its grade). An
attestation is made with `gctl attest` (`cli.git`)."""

from __future__ import annotations

import argparse
from typing import Any

from groundcontrol_client.cli.output import Result
from groundcontrol_client.cli.records import DEFAULT_LIMIT, limit_of
from groundcontrol_client.core.attestations import describe_attestation
from groundcontrol_client.core.grades import describe_evidence
from groundcontrol_client.http import Client


def cmd_attestations(client: Client, args: argparse.Namespace) -> Result:
    found = client.attestations(url=args.attested_url, limit=limit_of(args))
    text = "\n".join(map(describe_attestation, found))
    return [a.raw for a in found], text or "no attestations match"


def cmd_evidence(client: Client, args: argparse.Namespace) -> Result:
    pieces = client.evidence(args.attempt)
    text = "\n".join(map(describe_evidence, pieces))
    return [e.raw for e in pieces], text or f"attempt {args.attempt} left no evidence"


def add_attestation_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "attestations",
        parents=[common],
        help="CI's attestations, newest first (an attest or supervise key)",
        description="CI's attestations, newest first: who said which URL passed or failed, "
        "when CI observed it, and the attempt it backs (make one with gctl attest)",
    )
    p.set_defaults(handler=cmd_attestations)
    # Not `--url`: that is the server's (--url, GC_URL).
    p.add_argument(
        "attested_url", nargs="?", metavar="URL", help="only this commit's or pull request's"
    )
    p.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"only the newest N (default {DEFAULT_LIMIT})",
    )
    p.add_argument("--all", action="store_true", help="every one kept")

    p = sub.add_parser(
        "evidence",
        parents=[common],
        help="the evidence an attempt's finish left, each piece with its grade",
        description="the evidence an attempt's finish left, each piece with its grade (the "
        "hand's word, seen by the wrapper, seen by CI) and the attestation that decided it",
    )
    p.set_defaults(handler=cmd_evidence)
    p.add_argument("attempt", type=int, help="the attempt's id")
