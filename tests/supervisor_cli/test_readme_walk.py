"""The README's "For supervisors" walk, run as written against the live server with the key
`manage.py bootstrap` printed: every `gctl` line in order, each as a subprocess that knows only
GC_URL and GC_KEY, as a supervisor would type it.

The README shows example ids (work package 7, runs 10 and 11, attempt 41, key gc_ab12cd34). The
walk learns the real ones (numbered apart: `ids_apart`) from the output lines the README shows
(the `#` lines under a command, matched against what it printed), and the attempt's from the
claim it makes as the agent would, with the minted key, before the first `gctl attempts`; it puts
them in each later command. Each command must exit 0 and print each line shown under it, in
order (`…` stands for any text), and what the comment beside it says must hold (`CLAIMS`). A
command or flag renamed on either side fails the walk: gctl refuses a command it does not know
(exit 2), and each flag must be one gctl has, spelled whole (`written_in_full`). The calls the
section names for Python are built with the arguments it writes."""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from groundcontrol_client import AsyncClient, Client, KeyRevoked, RunWaiting
from groundcontrol_client.cli.parser import build_parser
from groundcontrol_client.core.steps import Send

from fleet.models import Attempt, Run, WorkPackage
from hands.models import Workspace
from leases.models import Lease, LeaseStatus
from tests.support.live import GCTL

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## For supervisors"
# The README's example ids, each replaced by the real one once a command has printed it.
EXAMPLE_IDS = ("7", "10", "11", "41")
EXAMPLE_KEY = "gc_ab12cd34"
ELLIPSIS = ("…", "...")
_TOKEN = re.compile(
    "(" + "|".join(map(re.escape, ELLIPSIS)) + f"|{EXAMPLE_KEY}|"
    r"(?<![\w.])(?:" + "|".join(EXAMPLE_IDS) + r")(?![\w])" + ")"
)
SHELL_SYNTAX = ("|", ";", "<", ">>", "&", "||")


# --- the README's block, read ---------------------------------------------------------------------


@dataclass
class Step:
    """One line of the block: the commands on it (several when joined by `&&`), where its output
    goes (`> FILE`), and the output lines the README shows under it."""

    line: str
    commands: list[list[str]]
    redirect: str | None = None
    shown: list[str] = field(default_factory=list)


def the_block(text: str) -> list[str]:
    """The indented block of the section "For supervisors", its lines unindented."""
    assert f"\n{HEADING}\n" in text, f"README.md has no section {HEADING!r}"
    section = text.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    indented = [i for i, line in enumerate(lines) if line.startswith("    ")]
    assert indented, f"the section {HEADING!r} has no block of commands"
    start = indented[0]
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        if line.strip():
            block.append(line[4:])
    return block


def the_walk(block: list[str]) -> tuple[dict[str, str], list[Step]]:
    """The `export` line's names, and the steps."""
    exported: dict[str, str] = {}
    steps: list[Step] = []
    for line in block:
        if line.startswith("#"):
            assert steps, f"an output line before any command: {line!r}"
            steps[-1].shown.append(line.lstrip("#").strip())
            continue
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            assert not steps, "the export comes before the first command"
            for word in words[1:]:
                name, _, value = word.partition("=")
                exported[name] = value
            continue
        step = Step(line, [[]])
        tokens = iter(words)
        for word in tokens:
            assert word not in SHELL_SYNTAX and "$" not in word, f"the walk runs no {word!r}"
            if word == "&&":
                step.commands.append([])
            elif word == ">":
                step.redirect = next(tokens)
            else:
                step.commands[-1].append(word)
        for command in step.commands:
            assert command[0] == "gctl", f"the walk runs gctl only: {line!r}"
            del command[0]
        steps.append(step)
    return exported, steps


def written_in_full(argv: list[str]) -> None:
    """Each option of a README command is one gctl has, spelled whole: argparse would take a
    prefix (`--depends` for `--depends-on`), so a flag renamed `--depends-on-runs` would still
    run the README's `--depends-on` unless this says otherwise."""
    parser = build_parser()
    known = set(parser._option_string_actions)
    for word in argv:
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert option in known, f"gctl {' '.join(argv)}: gctl has no option {option}"
            continue
        below = [
            action.choices[word]
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) and word in action.choices
        ]
        if below:
            parser = below[0]
            known |= set(parser._option_string_actions)


# --- the ids: the README's, the server's ----------------------------------------------------------


class Ids:
    """Each example id of the README and the real one it stands for, once learned."""

    def __init__(self) -> None:
        self.real: dict[str, str] = {}

    def __getitem__(self, example: str) -> str:
        return self.real[example]

    def learn(self, example: str, real: str) -> None:
        assert self.real.setdefault(example, real) == real, (example, self.real[example], real)

    def put_in(self, text: str) -> str:
        """`text` (an argument, a file's name) with each example id replaced by its real one."""

        def real(found: re.Match[str]) -> str:
            token = found.group(0)
            if token in ELLIPSIS:
                return token
            assert token in self.real, f"{text!r} uses {token} before any command printed it"
            return self.real[token]

        return _TOKEN.sub(real, text)

    def pattern(self, shown: str) -> re.Pattern[str]:
        """A line the README shows as a pattern: `…` any text, an example id its real one, or,
        not learned yet, a group that learns it."""
        parts: list[str] = []
        groups: set[str] = set()
        for index, part in enumerate(_TOKEN.split(shown)):
            if index % 2 == 0:
                parts.append(re.escape(part))
            elif part in ELLIPSIS:
                parts.append(".*")
            elif part in self.real:
                parts.append(re.escape(self.real[part]))
            else:
                name = "key" if part == EXAMPLE_KEY else f"id{part}"
                if name in groups:
                    parts.append(f"(?P={name})")
                else:
                    groups.add(name)
                    body = r"gc_[0-9A-Za-z]+" if part == EXAMPLE_KEY else r"[0-9]+"
                    parts.append(f"(?P<{name}>{body})")
        return re.compile("".join(parts))

    def learn_from(self, found: re.Match[str]) -> None:
        for name, value in found.groupdict().items():
            self.learn(EXAMPLE_KEY if name == "key" else name.removeprefix("id"), value)


def shows(step: Step, stdout: str, ids: Ids) -> None:
    """Each line the README shows under `step` is a line it printed, in order; the ids in them
    learned."""
    printed = stdout.splitlines()
    at = 0
    for shown in step.shown:
        pattern = ids.pattern(shown)
        for index in range(at, len(printed)):
            found = pattern.fullmatch(printed[index])
            if found:
                ids.learn_from(found)
                at = index + 1
                break
        else:
            raise AssertionError(
                f"README.md shows under `{step.line}`:\n    {shown}\nbut it printed:\n{stdout}"
            )


# --- what the comments beside the commands say ----------------------------------------------------


@dataclass
class Walk:
    """What the walk knows: the ids, the agent's client (the minted key) and its tenure."""

    ids: Ids
    workdir: Path
    workspace: str
    agent: Client | None = None
    attempt: Any = None
    lease: Any = None


PROCESS = "builder-host:812"


def as_the_agent(walk: Walk) -> None:
    """What the agent does with the minted key before the supervisor looks: it claims the ready
    run, takes `src/auth/`, and tries the run that waits (refused `run_waiting`)."""
    assert walk.agent is not None, "no key was minted before `gctl attempts`"
    walk.attempt = walk.agent.claim(int(walk.ids["10"]), process_id=PROCESS)
    walk.ids.learn("41", str(walk.attempt.id))
    walk.lease = walk.agent.lease_acquire("src/auth/", ttl_s=600, process_id=PROCESS)
    with pytest.raises(RunWaiting):
        walk.agent.claim(int(walk.ids["11"]), process_id=PROCESS)


def ready_queue(walk: Walk, stdout: str) -> None:  # "run 10 now, run 11 once 10 is done"
    assert f"run {walk.ids['10']}:" in stdout and f"run {walk.ids['11']}:" not in stdout


def who_holds_what(walk: Walk, stdout: str) -> None:  # "live, late, stalled or lost"
    assert re.search(
        rf"^attempt {walk.ids['41']} of run {walk.ids['10']} slot 0: .*, (live|late|stalled|lost),",
        stdout,
        re.MULTILINE,
    ), stdout


def hears_the_directive(walk: Walk, stdout: str) -> None:  # "reads it on its next heartbeat"
    assert walk.agent is not None
    answer = walk.agent.report(walk.attempt.id, fence=walk.attempt.fence, process_id=PROCESS)
    assert answer.attempt.directive == "pause"


def refused_in_sentences(walk: Walk, stdout: str) -> None:  # "what it was refused"
    assert "hand 'builder' was refused run_waiting on POST " in stdout, stdout


def every_claim_and_lease(walk: Walk, stdout: str) -> None:  # "every claim, lease and end"
    assert re.search(rf"claimed by hand 'builder'.*: attempt {walk.ids['41']}\b", stdout), stdout
    assert re.search(r"lease_acquired by hand 'builder'.*src/auth/ at fence", stdout), stdout


def broken(walk: Walk, stdout: str) -> None:  # "its hand is gone": the lease is free, fenced on
    workspace = Workspace.objects.get(name=walk.workspace)
    lease = Lease.objects.get(workspace_id=workspace.pk, resource="src/auth/")
    assert (lease.fence, lease.status) == (walk.lease.fence + 1, LeaseStatus.FREE)


def the_whole_record(walk: Walk, stdout: str) -> None:  # the run's record, as JSON Lines
    [saved] = walk.workdir.glob("*.jsonl")
    entries = [json.loads(line) for line in saved.read_text().splitlines()]
    assert "refusal" in {entry["kind"] for entry in entries}, entries


def budget_set(walk: Walk, stdout: str) -> None:
    assert "lane rewalk's daily budget is $5.00, pause when reached" in stdout, stdout


def next_call_refused(walk: Walk, stdout: str) -> None:  # "its next call is refused"
    assert walk.agent is not None
    with pytest.raises(KeyRevoked):
        walk.agent.me()


# A command (its first words) and what the comment beside it promises; each must be in the walk.
CLAIMS: dict[tuple[str, ...], Callable[[Walk, str], None]] = {
    ("runs", "--ready"): ready_queue,
    ("attempts", "--run"): who_holds_what,
    ("attempts", "directive"): hears_the_directive,
    ("refusals",): refused_in_sentences,
    ("events",): every_claim_and_lease,
    ("break",): broken,
    ("runs", "timeline"): the_whole_record,
    ("budgets", "set"): budget_set,
    ("keys", "revoke"): next_call_refused,
}


def claim_of(argv: list[str]) -> tuple[str, ...] | None:
    found = [words for words in CLAIMS if tuple(argv[: len(words)]) == words]
    assert len(found) <= 1, found
    return found[0] if found else None


# --- the walk -------------------------------------------------------------------------------------


def ids_apart() -> None:
    """Work packages, runs and attempts numbered far apart, and apart from the README's
    examples: an id put where another kind's belongs (a run's for a package's) names nothing,
    and an example id left as written names nothing either."""
    with connection.cursor() as cursor:
        for model, start in ((WorkPackage, 700), (Run, 1000), (Attempt, 4100)):
            table = model._meta.db_table
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), GREATEST(%s, "
                f"(SELECT COALESCE(MAX(id), 0) FROM {connection.ops.quote_name(table)})))",
                [table, start],
            )


def bootstrap() -> dict[str, Any]:
    out = io.StringIO()
    call_command(
        "bootstrap",
        workspace="readme",
        username="walker",
        password="walk-pass-1",
        json=True,
        stdout=out,
    )
    return json.loads(out.getvalue())


def test_the_readme_walk_for_supervisors_runs_as_written(live_server: Any, tmp_path: Path) -> None:
    exported, steps = the_walk(the_block(README.read_text()))
    assert set(exported) == {"GC_URL", "GC_KEY"}
    ids_apart()
    made = bootstrap()
    # What the README exports, and nothing else of ours (no GC_* of this process leaks).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    env.update(GC_URL=live_server.url, GC_KEY=made["supervisor_key"])
    walk = Walk(ids=Ids(), workdir=tmp_path, workspace=made["workspace"])
    checked: list[tuple[str, ...]] = []
    try:
        for step in steps:
            for number, command in enumerate(step.commands):
                if command[0] == "attempts" and walk.attempt is None:
                    as_the_agent(walk)
                written_in_full(command)
                argv = [walk.ids.put_in(word) for word in command]
                done = subprocess.run(
                    [GCTL, *argv],
                    env=env,
                    cwd=tmp_path,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                # The transcript, which pytest shows when the walk fails.
                print(f"$ gctl {shlex.join(argv)}\n{done.stdout}{done.stderr}")
                assert done.returncode == 0, (step.line, argv, done.returncode, done.stderr)
                last = number == len(step.commands) - 1
                if last and step.redirect:
                    (tmp_path / walk.ids.put_in(step.redirect)).write_text(done.stdout)
                if last:
                    shows(step, done.stdout, walk.ids)
                if command[:2] == ["keys", "mint"]:
                    minted = re.search(r"shown once: (gc_\S+)", done.stdout)
                    assert minted, done.stdout
                    walk.agent = Client(live_server.url, minted.group(1))
                claim = claim_of(command)
                if claim is not None:
                    CLAIMS[claim](walk, done.stdout)
                    checked.append(claim)
    finally:
        if walk.agent is not None:
            walk.agent.close()
    assert sorted(checked) == sorted(CLAIMS), "each claim is the comment of one README command"
    assert set(walk.ids.real) == {*EXAMPLE_IDS, EXAMPLE_KEY}


def test_the_calls_the_section_names_take_their_arguments_as_written() -> None:
    section = README.read_text().split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    written = re.findall(r"`(client\.\w+\(.*?\))`", section, re.DOTALL)
    assert written, "the section names no call"
    # Nothing listens on port 9: each call only builds its first request, never sends it.
    with Client("http://127.0.0.1:9", "gc_nothing_here") as client:
        for text in written:
            call = ast.parse(text, mode="eval").body
            assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute), text
            args = [ast.literal_eval(arg) for arg in call.args]
            kwargs = {str(word.arg): ast.literal_eval(word.value) for word in call.keywords}
            steps = getattr(client, call.func.attr).steps(*args, **kwargs)
            first = next(steps)  # its request, built: a TypeError for an argument it lacks
            steps.close()
            assert isinstance(first, Send), (text, first)
            # AsyncClient sends the same steps.
            assert (
                getattr(AsyncClient, call.func.attr).steps is getattr(Client, call.func.attr).steps
            )
