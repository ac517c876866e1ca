"""gctl's handoff commands: ask the holder of what refused you (`gctl handoff RESOURCE --reason
...`, `gctl handoff --slot RUN/INDEX --reason ...`), read the answer (`gctl handoff show ID`),
decline a request for your tenure (`gctl handoff decline ID --reason ...`), withdraw yours
(`gctl handoff withdraw ID`), grant one as a supervisor (`gctl handoff grant ID --reason ...`),
and list yours (`gctl handoffs`)."""

from __future__ import annotations

import argparse

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.handoffs import Handoff
from groundcontrol_client.http import Client

ACTIONS = ("show", "decline", "withdraw", "grant")
# After a request's sentence in a renewal's output: how to answer it besides releasing.
DECLINE = "; to keep it: gctl handoff decline ID --reason ..."


def slot_of(text: str) -> tuple[int, int]:
    """`RUN/INDEX` as two integers."""
    run, sep, index = text.partition("/")
    if not sep or not run.isdigit() or not index.isdigit():
        raise UsageError(f"--slot takes RUN/INDEX (e.g. 12/0), not {text!r}")
    return int(run), int(index)


def _id(text: str) -> int:
    if not text.isdigit():
        raise UsageError(f"a handoff request's id is a number, not {text!r}")
    return int(text)


def cmd_handoff(client: Client, args: argparse.Namespace) -> Result:
    words = list(args.words)
    if words and words[0] in ACTIONS and len(words) == 2 and args.slot is None:
        action, handoff_id = words[0], _id(words[1])
        if action in ("decline", "grant") and not args.reason:
            raise UsageError(f"gctl handoff {action} takes --reason")
        if action == "show":
            handoff = client.handoff(handoff_id)
        elif action == "decline":
            handoff = client.decline_handoff(handoff_id, reason=args.reason)
        elif action == "withdraw":
            handoff = client.withdraw_handoff(handoff_id)
        else:
            handoff, lease = client.grant_handoff(handoff_id, reason=args.reason)
            return (
                {"handoff": handoff.raw, "lease": lease.raw},
                f"{handoff.sentence()} (the lease's fence is now {lease.fence})",
            )
        return handoff.raw, handoff.sentence()
    if not args.reason:
        raise UsageError("gctl handoff takes --reason: the holder reads it")
    if args.slot is not None:
        if words:
            raise UsageError("give a RESOURCE or --slot RUN/INDEX, not both")
        run, index = slot_of(args.slot)
        handoff = client.ask_handoff(reason=args.reason, run=run, slot=index)
    elif len(words) == 1:
        mode = "shared" if args.shared else None
        handoff = client.ask_handoff(reason=args.reason, resource=words[0], mode=mode)
    else:
        raise UsageError("gctl handoff RESOURCE --reason ... (or --slot RUN/INDEX)")
    return handoff.raw, asked_line(handoff)


def asked_line(handoff: Handoff) -> str:
    return (
        f"asked (request {handoff.id}): {handoff.sentence()}\n"
        f"the holder sees it on its next renewal; read the answer with "
        f"`gctl handoff show {handoff.id}` or `gctl handoffs`"
    )


def cmd_handoffs(client: Client, args: argparse.Namespace) -> Result:
    role = "asked" if args.asked else "received" if args.received else None
    if args.workspace:
        role = "workspace"
    found = client.handoffs(role=role, status="open" if args.open else None)
    lines = [f"{h.id}: {h.status}: {h.sentence()}" for h in found]
    return [h.raw for h in found], "\n".join(lines) or "no handoff requests"


def add_handoff_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "handoff",
        parents=[common],
        help="ask the holder of a resource or slot to let it go; or show, decline, withdraw, "
        "grant a request",
        description="gctl handoff RESOURCE --reason ...; gctl handoff --slot RUN/INDEX --reason "
        "...; gctl handoff show|withdraw ID; gctl handoff decline|grant ID --reason ...",
    )
    p.set_defaults(handler=cmd_handoff)
    p.add_argument("words", nargs="*", metavar="RESOURCE | ACTION ID", help="what to do")
    p.add_argument("--slot", metavar="RUN/INDEX", help="ask for a slot of a run")
    p.add_argument("--reason", help="why (the holder or the asker reads it)")
    p.add_argument("--shared", action="store_true", help="you were refused a shared lease")
    p = sub.add_parser(
        "handoffs",
        parents=[common],
        help="your handoff requests: asked and received, newest first",
        description="your handoff requests: asked and received, newest first",
    )
    p.set_defaults(handler=cmd_handoffs)
    p.add_argument("--asked", action="store_true", help="only those you asked")
    p.add_argument("--received", action="store_true", help="only those for your tenures")
    p.add_argument("--workspace", action="store_true", help="every one (scope supervise)")
    p.add_argument("--open", action="store_true", help="only those still open")
