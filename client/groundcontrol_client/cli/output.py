"""How gctl says what happened: a result as JSON or a sentence, a refusal with its exit code,
and the lines that `claim --export` and the wrappers print."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any

from groundcontrol_client.core.errors import (
    AuthFailed,
    ConfigError,
    Denied,
    GroundControlError,
    ProcessMismatch,
    TenureLost,
    describe,
)
from groundcontrol_client.core.loop import attempt_notices
from groundcontrol_client.core.models import Attempt, describe_window
from groundcontrol_client.runtime import wrappers
from groundcontrol_client.runtime.wrappers import (
    EXIT_AUTH,
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_LOST,
    EXIT_USAGE,
)

Result = tuple[Any, str]  # (what --json prints, what a person reads)


# --- refusals and their exit codes -----------------------------------------------------------


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


def label_for(error: GroundControlError) -> str:
    if isinstance(error, Denied):
        return "denied"
    if isinstance(error, ProcessMismatch):
        # Not lost: the claim is alive, held by another process (often the wrapper).
        return "wrong process"
    if isinstance(error, TenureLost):
        return "lease lost"
    return "error"


# --- presenting -----------------------------------------------------------------------------


def attempt_line(attempt: Attempt) -> str:
    """The attempt in a line, and each notice its answer carries (idle, a budget) on its own."""
    return (
        f"attempt {attempt.id}: run {attempt.run} slot {attempt.slot}, fence {attempt.fence}, "
        f"{attempt.state}, directive {attempt.directive}"
        + describe_window(attempt.lease.expires_in_s)
        + "".join(f"\n{notice}" for notice in attempt_notices(attempt.raw))
    )


def export_line(**values: object) -> str:
    """One line a POSIX shell can eval: every value quoted."""
    return "export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())


def commented(text: str) -> str:
    """Human lines around exports start with '#', so `eval` of the whole output is safe too."""
    return "\n".join(f"# {line}" for line in text.splitlines())


def waiting_notice(args: argparse.Namespace, what: str) -> Callable[[Denied], None]:
    """How `--wait` says each new answer while it waits (stderr: stdout is for the result)."""

    def say(denied: Denied) -> None:
        if args.json:
            line = json.dumps({"gctl": f"waiting for {what}", "error": denied.to_dict()})
            wrappers.eprint(line)
        else:
            wrappers.eprint(f"gctl: waiting for {what}: {describe(denied)}")

    return say


def wrapper_log(args: argparse.Namespace) -> Callable[[str, dict[str, Any]], None]:
    """Wrappers talk on stderr: the command owns stdout."""

    def log(text: str, data: dict[str, Any]) -> None:
        wrappers.eprint(json.dumps({"gctl": text, **data}) if args.json else f"gctl: {text}")

    return log


def print_result(args: argparse.Namespace, result: Result) -> None:
    data, text = result
    print(json.dumps(data, indent=2, default=str) if args.json else text, flush=True)


def print_error(
    args: argparse.Namespace, error: GroundControlError, sentence: str | None = None
) -> None:
    if args.json:
        print(json.dumps({"error": error.to_dict()}, default=str), flush=True)
    else:
        text = sentence or describe(error, subject=_subject(args))
        print(f"gctl: {label_for(error)}: {text} ({error.code})", file=sys.stderr, flush=True)


def _subject(args: argparse.Namespace) -> str | None:
    """What the command asked for, for a refusal that does not name it."""
    if getattr(args, "resource", None):
        return str(args.resource)
    if getattr(args, "run", None) is not None and getattr(args, "slot", None) is not None:
        return f"slot {args.slot} of run {args.run}"
    return None
