"""gctl's repository commands: `gctl git install|pre-commit|commit-msg|pre-push` (the hooks),
`gctl verify` (CI: by the receipts pushes left), over `groundcontrol_client.git.fences`, and
`gctl attest` (CI's result for a commit or pull request URL, which grades the evidence carrying
it `ci`)."""

from __future__ import annotations

import argparse
import json
import sys

from groundcontrol_client.cli.environment import process_id_for
from groundcontrol_client.cli.output import UsageError
from groundcontrol_client.git import fences as git_fences
from groundcontrol_client.http import Client


def cmd_git(client: Client | None, args: argparse.Namespace) -> int:
    try:
        if args.action == "install":
            for line in git_fences.install(args.repo):
                print(line)
            return 0
        assert client is not None
        if args.action == "pre-commit":
            return git_fences.pre_commit(client)
        if args.action == "commit-msg":
            if not args.hook_args:
                raise UsageError("commit-msg takes the message file")
            return git_fences.commit_msg(args.hook_args[0])
        remote = args.hook_args[0] if args.hook_args else "origin"
        url = args.hook_args[1] if len(args.hook_args) > 1 else None
        return git_fences.pre_push(
            client, remote, sys.stdin, url=url, process_id=process_id_for(args)
        )
    except git_fences.GitError as error:
        print(f"gctl git: {error}", file=sys.stderr)
        return 1


def cmd_verify(client: Client | None, args: argparse.Namespace) -> int:
    assert client is not None
    if args.commit and args.range:
        raise UsageError("give --commit REV or --range A..B, not both")
    try:
        data, text, code = git_fences.verify(
            client, commit=args.commit, range_=args.range, remote=args.remote
        )
    except git_fences.GitError as error:
        print(f"gctl verify: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(text, file=sys.stderr if code else sys.stdout)
    return code


def cmd_attest(client: Client | None, args: argparse.Namespace) -> int:
    assert client is not None
    made = client.attest(
        args.attested_url,
        result=args.result,
        kind=args.kind,
        note=args.note,
        observed_at=args.observed_at,
    )
    if args.json:
        print(json.dumps(made.raw, indent=2, default=str))
    elif made.duplicate:
        print(
            f"{made.result} for {made.url} was attested already (the same observation): no change"
        )
    else:
        pieces = "piece" if made.graded == 1 else "pieces"
        print(
            f"attested {made.result} for {made.url} as hand {made.hand}: "
            f"{made.graded} {pieces} of evidence regraded"
        )
    return 0


def add_git_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    git = sub.add_parser(
        "git",
        help="fences at the repository: hooks that refuse a commit or push without them",
        description="fences at the repository (docs/agents.md)",
    ).add_subparsers(dest="action", required=True, title="actions", help="an action")
    p = git.add_parser(
        "install",
        parents=[common],
        help="put the pre-commit, commit-msg and pre-push hooks into a repository",
    )
    p.add_argument("--repo", help="the repository (default: the current directory's)")
    p.set_defaults(handler=cmd_git, offline=True)
    for name, help_text in (
        ("pre-commit", "the pre-commit hook: refuse paths under another hand's lease"),
        ("commit-msg", "the commit-msg hook: add the Ground-Control-Fence trailers"),
        (
            "pre-push",
            "the pre-push hook: record each commit's fences with the server, and refuse a push "
            "carrying a stale fence or touching a path it may not",
        ),
    ):
        p = git.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.add_argument("hook_args", nargs="*", help="what git passes the hook")
        p.set_defaults(handler=cmd_git)
    p = sub.add_parser(
        "verify",
        parents=[common],
        help="were a commit's fences current when it was pushed? (exit 4 if not)",
        description="for CI: judge a commit (or a range) by the receipt its push left, or, "
        "without one, by its fences and files now; exit 4 on a stale one",
    )
    p.add_argument("--commit", help="the commit (default: HEAD)")
    p.add_argument("--range", help="every commit of A..B")
    p.add_argument(
        "--remote",
        default="origin",
        help="the remote whose URL names the repository the receipts are under (default: origin)",
    )
    p.set_defaults(handler=cmd_verify)
    p = sub.add_parser(
        "attest",
        parents=[common],
        help="for CI (scope attest): say a commit or pull request URL passed or failed",
        description="for CI: record a result for a URL; a pass grades its evidence ci",
    )
    # Not `url`: that is the server's (--url, GC_URL).
    p.add_argument(
        "attested_url",
        metavar="URL",
        help="the commit or pull request URL, as the hand's evidence has it",
    )
    p.add_argument("--result", required=True, choices=["pass", "fail"], help="what CI saw")
    p.add_argument("--kind", help="what the URL is (commit, pull_request): recorded only")
    p.add_argument("--note", help="e.g. the CI job's link")
    p.add_argument(
        "--observed-at",
        metavar="TIME",
        help="when CI observed the result (ISO 8601 with offset; default: now): a URL's "
        "attestations are ordered by it, and the same observation again changes nothing",
    )
    p.set_defaults(handler=cmd_attest)
