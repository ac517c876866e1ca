"""gctl's commands for a supervisor's plan (a `plan` key; reads also with `supervise`) and hand
on the fleet (a `supervise` key):

    gctl lanes [list] | gctl lanes create SLUG [--name N] [--heartbeat S] [--grace S]
    gctl packages list LANE | create LANE --key K --title T [--ref URL] | runs PACKAGE
    gctl runs [--lane L] [--all | --ready]          (bare: the list, as before)
    gctl runs show|close|reopen RUN | ready [--lane L] | timeline RUN [--jsonl]
    gctl runs create PACKAGE --title T [--depends-on RUN ...] [--priority 0..4] [...]
    gctl runs update RUN [--priority N] [--depends-on RUN ... | --no-depends-on] [...]
    gctl slots RUN [--all]                          (bare: the list, as before)
    gctl slots add RUN --count N --reason R | gctl slots reopen RUN INDEX --reason R
    gctl attempts [list] [--state S] [--lane L] [--hand H] [--run RUN] [--idle | --busy]
    gctl attempts show ATTEMPT | directive ATTEMPT continue|pause|stop
    gctl break RESOURCE --reason R

Each says what it did in a sentence; `--json` prints the server's JSON. A grant of a handoff
request is `gctl handoff grant` (cli.handoffs)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from groundcontrol_client.cli.attempts import cmd_runs, cmd_slots
from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.core.models import Run, describe_run, describe_slot
from groundcontrol_client.core.planning import DIRECTIVES, UNCHANGED
from groundcontrol_client.core.plans import (
    describe_attempt,
    describe_break,
    describe_entry,
    describe_lane,
    describe_package,
    describe_run_settings,
    describe_run_standing,
)
from groundcontrol_client.http import Client
from groundcontrol_client.runtime.wrappers import EXIT_OK

ATTEMPT_STATES = ("live", "late", "stalled", "lost", "finished", "released")
IDLE_DIRECTIVES = ("none", "pause", "stop")
GRADES = ("hand", "wrapper", "ci")
PRIORITIES = range(5)


# --- reading the options ----------------------------------------------------------------------


def run_ids(values: Iterable[str]) -> list[int]:
    """`--depends-on 10 --depends-on 11` or `--depends-on 10,11`: run ids, in the order given."""
    ids: list[int] = []
    for value in values:
        for part in value.split(","):
            text = part.strip().removeprefix("run ").strip()
            if not text.isdigit():
                raise UsageError(f"--depends-on takes run ids (e.g. 10,11), not {part!r}")
            ids.append(int(text))
    return ids


def _grades(values: Iterable[str]) -> dict[str, str]:
    grades = {}
    for value in values:
        kind, sep, grade = value.partition("=")
        if not sep or not kind.strip() or grade.strip() not in GRADES:
            raise UsageError(f"--grade takes KIND=hand|wrapper|ci, not {value!r}")
        grades[kind.strip()] = grade.strip()
    return grades


def _brief(args: argparse.Namespace) -> str:
    if args.brief is not None and args.brief_file:
        raise UsageError("give --brief TEXT or --brief-file FILE, not both")
    if not args.brief_file:
        return args.brief or ""
    try:
        return sys.stdin.read() if args.brief_file == "-" else Path(args.brief_file).read_text()
    except OSError as error:
        raise UsageError(f"--brief-file: cannot read {args.brief_file}: {error.strerror}") from None


def _number(text: str, what: str) -> int:
    if not text.isdigit():
        raise UsageError(f"{what} is a number, not {text!r}")
    return int(text)


def dependencies_of(client: Client, run: Run) -> dict[int, Run]:
    """The runs `run` depends on, by id, to name them in its sentence (each one call: a run
    depends on at most 20). One this key cannot read is left out: named by its id alone."""
    from groundcontrol_client.core.errors import NotFound

    found: dict[int, Run] = {}
    for run_id in run.depends_on:
        if run_id is None:
            continue
        try:
            found[run_id] = client.run(run_id)
        except NotFound:
            continue
    return found


def _run_sentence(client: Client, run: Run, *, slots: bool = False) -> str:
    listed = client.slots(run.id, state=None) if slots else None
    return describe_run_standing(run, dependencies_of(client, run), listed)


# --- lanes and work packages ------------------------------------------------------------------


def cmd_lanes(client: Client, args: argparse.Namespace) -> Result:
    lanes = client.lanes()
    text = "\n".join(map(describe_lane, lanes)) or "no lanes yet (gctl lanes create SLUG)"
    return [lane.raw for lane in lanes], text


def cmd_lane_create(client: Client, args: argparse.Namespace) -> Result:
    lane = client.lane_create(
        args.slug, name=args.name, heartbeat_interval_s=args.heartbeat, grace_s=args.grace
    )
    return lane.raw, describe_lane(lane)


def cmd_packages(client: Client, args: argparse.Namespace) -> Result:
    packages = client.work_packages(args.lane)
    text = "\n".join(map(describe_package, packages))
    return [p.raw for p in packages], text or f"lane {args.lane} has no work packages"


def cmd_package_create(client: Client, args: argparse.Namespace) -> Result:
    package = client.work_package_create(
        args.lane, key=args.key, title=args.title, external_ref=args.ref
    )
    return package.raw, describe_package(package)


def cmd_package_runs(client: Client, args: argparse.Namespace) -> Result:
    runs = client.package_runs(args.package)
    text = "\n".join(describe_run_standing(run) for run in runs)
    return [run.raw for run in runs], text or f"work package {args.package} has no runs"


# --- runs -------------------------------------------------------------------------------------


def cmd_runs_list(client: Client, args: argparse.Namespace) -> Result:
    """The runs list as before (`gctl runs [--lane L] [--all]`), or the ready queue."""
    if args.ready and args.all:
        raise UsageError(
            "--ready lists the ready queue (open runs only); it does not mix with --all"
        )
    if not args.ready:
        return cmd_runs(client, args)
    return _ready(client, args)


def _ready(client: Client, args: argparse.Namespace) -> Result:
    runs = client.runs(ready=True, lane=args.lane)
    where = f" in lane {args.lane}" if args.lane else ""
    empty = f"nothing is ready{where}: every open run waits for another, or has no open slot"
    lines = [f"{place}. {describe_run(run)}" for place, run in enumerate(runs, start=1)]
    return [run.raw for run in runs], "\n".join(lines) or empty


def cmd_runs_ready(client: Client, args: argparse.Namespace) -> Result:
    return _ready(client, args)


def cmd_run_show(client: Client, args: argparse.Namespace) -> Result:
    run = client.run(args.run)
    slots = client.slots(run.id, state=None)
    lines = [
        describe_run_standing(run, dependencies_of(client, run), slots),
        describe_run_settings(run),
        *map(describe_slot, slots),
    ]
    return run.raw, "\n".join(lines)


def cmd_run_create(client: Client, args: argparse.Namespace) -> Result:
    run = client.run_create(
        args.package,
        title=args.title,
        brief=_brief(args),
        slots=args.slots,
        evidence_required=args.evidence,
        evidence_grades=_grades(args.grade) or None,
        capabilities=args.capability or None,
        heartbeat_interval_s=args.heartbeat,
        grace_s=args.grace,
        progress_timeout_s=args.progress_timeout,
        idle_directive=args.idle_directive,
        priority=args.priority,
        depends_on=run_ids(args.depends_on) or None,
    )
    return run.raw, f"created {_run_sentence(client, run)}"


def cmd_run_update(client: Client, args: argparse.Namespace) -> Result:
    if args.depends_on and args.no_depends_on:
        raise UsageError("give --depends-on RUN... or --no-depends-on, not both")
    if args.capability and args.no_capabilities:
        raise UsageError("give --capability TAG... or --no-capabilities, not both")
    if args.progress_timeout is not None and args.never_idle:
        raise UsageError("give --progress-timeout S or --never-idle, not both")
    changes: dict[str, Any] = {
        "priority": args.priority,
        "idle_directive": args.idle_directive,
        "depends_on": [] if args.no_depends_on else (run_ids(args.depends_on) or None),
        "capabilities": [] if args.no_capabilities else (args.capability or None),
        "progress_timeout_s": (
            None
            if args.never_idle
            else UNCHANGED
            if args.progress_timeout is None
            else args.progress_timeout
        ),
    }
    unchanged = [name for name, value in changes.items() if value is None]
    if changes["progress_timeout_s"] is UNCHANGED and len(unchanged) == len(changes) - 1:
        raise UsageError(
            "nothing to change: give --priority, --depends-on/--no-depends-on, "
            "--capability/--no-capabilities, --progress-timeout/--never-idle or --idle-directive"
        )
    run = client.run_update(args.run, **changes)
    return run.raw, f"updated {_run_sentence(client, run, slots=True)}"


def cmd_run_close(client: Client, args: argparse.Namespace) -> Result:
    run = client.run_close(args.run)
    return run.raw, (
        f"closed {_run_sentence(client, run, slots=True)}\n"
        "it takes no more claims; the attempts under way go on"
    )


def cmd_run_reopen(client: Client, args: argparse.Namespace) -> Result:
    run = client.run_reopen(args.run)
    return run.raw, f"reopened {_run_sentence(client, run, slots=True)}"


def cmd_run_timeline(client: Client, args: argparse.Namespace) -> Result | int:
    if args.jsonl:
        # One entry a line, as the server exported it (its own JSON, key for key).
        for entry in client.run_timeline_export(args.run):
            print(json.dumps(entry.raw, separators=(",", ":")), flush=False)
        sys.stdout.flush()
        return EXIT_OK
    entries = client.run_timeline(args.run)
    text = "\n".join(map(describe_entry, entries)) or f"nothing has happened under run {args.run}"
    return [entry.raw for entry in entries], text


# --- slots ------------------------------------------------------------------------------------


def cmd_slots_words(client: Client, args: argparse.Namespace) -> Result:
    """`gctl slots RUN [--all]` lists as before; `add RUN` and `reopen RUN INDEX` act."""
    words = list(args.words)
    action = words[0] if words and not words[0].isdigit() else "list"
    if action == "list":
        if len(words) != 1:
            raise UsageError("gctl slots RUN [--all] lists a run's slots")
        if args.count is not None or args.reason is not None:
            raise UsageError("--count and --reason go with gctl slots add or reopen")
        args.run = _number(words[0], "a run's id")
        return cmd_slots(client, args)
    if args.all:
        raise UsageError("--all goes with gctl slots RUN (the list)")
    if not args.reason:
        raise UsageError(f"gctl slots {action} takes --reason: the record keeps it")
    if action == "add" and len(words) == 2:
        if args.count is None:
            raise UsageError("gctl slots add RUN takes --count N")
        run = client.slots_add(
            _number(words[1], "a run's id"), count=args.count, reason=args.reason
        )
        added = f"added {args.count} slot{'' if args.count == 1 else 's'} to run {run.id}"
        return run.raw, f"{added}: {describe_run_standing(run)}"
    if action == "reopen" and len(words) == 3:
        run_id, index = _number(words[1], "a run's id"), _number(words[2], "a slot's index")
        slot = client.slot_reopen(run_id, index, reason=args.reason)
        return slot.raw, f"reopened slot {slot.index} of run {run_id}: {describe_slot(slot)}"
    raise UsageError(
        "gctl slots RUN [--all] | gctl slots add RUN --count N --reason R | "
        "gctl slots reopen RUN INDEX --reason R"
    )


# --- the supervisor's hand --------------------------------------------------------------------


def cmd_attempts(client: Client, args: argparse.Namespace) -> Result:
    attempts = client.attempts(
        state=args.state, lane=args.lane, hand=args.hand, run_id=args.run, idle=args.idle
    )
    text = "\n".join(map(describe_attempt, attempts)) or "no attempts match"
    return [attempt.raw for attempt in attempts], text


def cmd_attempt_show(client: Client, args: argparse.Namespace) -> Result:
    attempt = client.attempt(args.attempt)
    return attempt.raw, describe_attempt(attempt)


def cmd_directive(client: Client, args: argparse.Namespace) -> Result:
    attempt = client.set_directive(args.attempt, args.directive)
    heard = "its hand hears it in its next report's answer"
    return attempt.raw, f"told attempt {attempt.id} to {args.directive} ({heard}): " + (
        describe_attempt(attempt)
    )


def cmd_break(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_break(args.resource, reason=args.reason)
    return lease.raw, describe_break(lease)


# --- the parser -------------------------------------------------------------------------------


def _actions(parser: argparse.ArgumentParser) -> Any:
    return parser.add_subparsers(
        dest="action", title="actions", metavar="ACTION", help="an action (default: list)"
    )


def _twice(
    parent: argparse.ArgumentParser, child: argparse.ArgumentParser, *flags: str, **kw: Any
) -> None:
    """An option of a noun's bare form (`gctl runs --all`) that its `list` action takes too
    (`gctl runs list --all`); the action's is SUPPRESSed, so it never overwrites the bare one."""
    parent.add_argument(*flags, **kw)
    child.add_argument(*flags, **{**kw, "default": argparse.SUPPRESS})


def add_planning_commands(
    sub: Any,
    common: argparse.ArgumentParser,
    add: Callable[..., argparse.ArgumentParser],
) -> None:
    def action(
        actions: Any, name: str, handler: Callable[..., Any], help_text: str
    ) -> argparse.ArgumentParser:
        p = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    run_help = "the run's id"
    lane_help = "the lane's slug"
    reason_help = "why, for the record (the run's timeline and the events keep it)"
    heartbeat_help = "seconds between a hand's renewals (default: the lane's)"
    grace_help = "seconds a late hand has before it is lost (default: the lane's)"

    # gctl lanes
    lanes = add("lanes", cmd_lanes, "the workspace's lanes; `gctl lanes create SLUG` makes one")
    acts = _actions(lanes)
    action(acts, "list", cmd_lanes, "the workspace's lanes (a lane-limited key: its own)")
    p = action(acts, "create", cmd_lane_create, "make a lane (one that exists is answered)")
    p.add_argument("slug", help="its slug: letters, digits, - and _")
    p.add_argument("--name", help="its name, for people (default: the slug)")
    p.add_argument("--heartbeat", type=int, metavar="S", help="its runs' " + heartbeat_help)
    p.add_argument("--grace", type=int, metavar="S", help="its runs' " + grace_help)

    # gctl packages
    packages = sub.add_parser(
        "packages", help="a lane's work packages", description="a lane's work packages"
    )
    acts = packages.add_subparsers(
        dest="action", required=True, title="actions", metavar="ACTION", help="an action"
    )
    p = action(acts, "list", cmd_packages, "a lane's work packages")
    p.add_argument("lane", help=lane_help)
    p = action(
        acts, "create", cmd_package_create, "make a work package (one with that key is answered)"
    )
    p.add_argument("lane", help=lane_help)
    p.add_argument("--key", required=True, help="unique in the lane, e.g. GC-12")
    p.add_argument("--title", required=True, help="what it is")
    p.add_argument("--ref", help="where it comes from (an issue's URL)")
    p = action(acts, "runs", cmd_package_runs, "a work package's runs")
    p.add_argument("package", type=int, help="the work package's id")

    # gctl runs (bare: the list, as before)
    runs = add(
        "runs",
        cmd_runs_list,
        "the runs this key may claim (open ones unless --all); with an action, a supervisor's "
        "runs: show, create, update, close, reopen, ready, timeline",
    )
    acts = _actions(runs)
    listing = action(acts, "list", cmd_runs_list, "the runs (open ones unless --all)")
    _twice(runs, listing, "--lane", help="only this lane's runs (a lane's slug)")
    _twice(runs, listing, "--all", action="store_true", help="every run: open, closed and done")
    _twice(
        runs,
        listing,
        "--ready",
        action="store_true",
        help="the ready queue: open runs that wait for nothing and have an open slot, by "
        "priority (0 first), then oldest",
    )
    p = action(acts, "ready", cmd_runs_ready, "the ready queue (as gctl runs --ready)")
    p.add_argument("--lane", help="only this lane's runs (a lane's slug)")
    p = action(acts, "show", cmd_run_show, "a run: how it stands, what it waits for, its slots")
    p.add_argument("run", type=int, help=run_help)
    p = action(acts, "create", cmd_run_create, "plan a run in a work package (a plan key)")
    p.add_argument("package", type=int, help="the work package's id")
    p.add_argument("--title", required=True, help="what the run is")
    p.add_argument("--brief", help="what a hand is to do (Markdown)")
    p.add_argument("--brief-file", metavar="FILE", help="the brief from a file (- for stdin)")
    p.add_argument("--slots", type=int, default=1, help="how many hands may work it (default 1)")
    p.add_argument(
        "--evidence",
        action="append",
        default=[],
        metavar="KIND",
        help="evidence a finish must carry (pull_request, commit, ...); repeatable",
    )
    p.add_argument(
        "--grade",
        action="append",
        default=[],
        metavar="KIND=GRADE",
        help="the least grade a kind's evidence needs (hand < wrapper < ci); repeatable",
    )
    _run_settings(p, heartbeat_help, grace_help)
    p = action(acts, "update", cmd_run_update, "change a run's priority, dependencies or rules")
    p.add_argument("run", type=int, help=run_help)
    _run_settings(p, None, None)
    p.add_argument("--no-depends-on", action="store_true", help="it waits for no run from now on")
    p.add_argument(
        "--no-capabilities", action="store_true", help="any hand may claim it from now on"
    )
    p.add_argument(
        "--never-idle", action="store_true", help="no progress timeout: never flagged idle"
    )
    p = action(acts, "close", cmd_run_close, "close a run: no more claims (attempts go on)")
    p.add_argument("run", type=int, help=run_help)
    p = action(acts, "reopen", cmd_run_reopen, "reopen a closed run: it takes claims again")
    p.add_argument("run", type=int, help=run_help)
    p = action(
        acts,
        "timeline",
        cmd_run_timeline,
        "everything that happened under a run, oldest first",
    )
    p.add_argument("run", type=int, help=run_help)
    p.add_argument(
        "--jsonl",
        action="store_true",
        help="the whole timeline as JSON Lines (one entry a line), as the server exports it",
    )

    # gctl slots RUN [--all] (as before) | add RUN | reopen RUN INDEX
    p = add(
        "slots",
        cmd_slots_words,
        "a run's slots (open ones unless --all); `gctl slots add RUN --count N --reason R` "
        "adds slots, `gctl slots reopen RUN INDEX --reason R` reopens a done one",
    )
    p.add_argument(
        "words",
        nargs="+",
        metavar="RUN | add RUN | reopen RUN INDEX",
        help="a run's id to list its slots; add RUN to add slots; reopen RUN INDEX to reopen a "
        "done slot",
    )
    p.add_argument("--all", action="store_true", help="every slot: open, held and done")
    p.add_argument("--count", type=int, help="with add: how many slots to add")
    p.add_argument("--reason", help="with add or reopen: " + reason_help)

    # gctl attempts
    attempts = add(
        "attempts",
        cmd_attempts,
        "every attempt, newest first (a supervise key); `show ATTEMPT`, "
        "`directive ATTEMPT continue|pause|stop`",
    )
    acts = _actions(attempts)
    listing = action(acts, "list", cmd_attempts, "every attempt, newest first")
    _twice(attempts, listing, "--state", choices=ATTEMPT_STATES, help="only in this state")
    _twice(attempts, listing, "--lane", help="only this lane's (a lane's slug)")
    _twice(attempts, listing, "--hand", help="only this hand's (a hand's name)")
    _twice(attempts, listing, "--run", type=int, help="only this run's (its id)")
    _twice(
        attempts,
        listing,
        "--idle",
        action="store_const",
        const=True,
        default=None,
        help="only idle ones (live, but no progress within the run's progress timeout)",
    )
    _twice(
        attempts,
        listing,
        "--busy",
        dest="idle",
        action="store_const",
        const=False,
        default=None,
        help="only those that are not idle",
    )
    p = action(acts, "show", cmd_attempt_show, "one attempt")
    p.add_argument("attempt", type=int, help="the attempt's id")
    p = action(
        acts,
        "directive",
        cmd_directive,
        "tell an attempt to continue, pause or stop (its hand hears it in its next report)",
    )
    p.add_argument("attempt", type=int, help="the attempt's id")
    p.add_argument("directive", choices=DIRECTIVES, help="continue, pause or stop")

    # gctl break
    p = add(
        "break",
        cmd_break,
        "break a lease (a supervise key): it is free at once and its fence moves on, so its "
        "holder's later writes are stale; a slot's (run/12/slot/0) ends its attempt as lost",
    )
    p.add_argument("resource", help="the lease's name (a path like src/auth/, run/12/slot/0)")
    p.add_argument("--reason", required=True, help=reason_help)


def _run_settings(
    p: argparse.ArgumentParser, heartbeat_help: str | None, grace_help: str | None
) -> None:
    """The options `runs create` and `runs update` share (None: `create` only)."""
    p.add_argument(
        "--priority",
        type=int,
        choices=PRIORITIES,
        metavar="0..4",
        help="its place in the ready queue: 0 first (default 2)",
    )
    p.add_argument(
        "--depends-on",
        action="append",
        default=[],
        metavar="RUN",
        help="a run whose end its slots wait for (repeatable, or 10,11); with update, the "
        "whole list (it replaces the old one)",
    )
    p.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="TAG",
        help="a tag a hand needs to claim it (python, gpu, ...); repeatable",
    )
    p.add_argument(
        "--progress-timeout",
        type=int,
        metavar="S",
        help="a live hand with no progress this long is idle",
    )
    p.add_argument(
        "--idle-directive",
        choices=IDLE_DIRECTIVES,
        help="what an idle attempt is told: none, pause or stop",
    )
    if heartbeat_help is not None:
        p.add_argument("--heartbeat", type=int, metavar="S", help=heartbeat_help)
    if grace_help is not None:
        p.add_argument("--grace", type=int, metavar="S", help=grace_help)
