"""gctl in process against the fake server: its options (every one explained, the same default
TTL for `lease acquire` and `hold`), the sentences it prints for slots, leases and runs, and
`--wait` saying each new answer while it waits."""

from __future__ import annotations

import argparse
from typing import Any

import httpx
import pytest
from groundcontrol_client import Client, Lease, RetryPolicy, Slot, cli
from groundcontrol_client.cli import parser as cli_parser
from groundcontrol_client.core.models import describe_lease, describe_slot

from tests.client.fakes import KEY, URL, FakeServer, error


def every_parser(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += every_parser(child)
    return found


def test_it_explains_every_option_of_every_command() -> None:
    undocumented = [
        f"{prog}: {action.option_strings or action.dest}"
        for prog, parser in every_parser(cli_parser.build_parser())
        for action in parser._actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert undocumented == []
    # And each subcommand is listed with a line of its own.
    for _, parser in every_parser(cli_parser.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions)


def test_it_takes_a_lease_for_as_long_by_default_with_acquire_as_with_hold() -> None:
    parser = cli_parser.build_parser()
    acquire = cli_parser.parse(parser, ["lease", "acquire", "src/"])
    hold = cli_parser.parse(parser, ["hold", "src/", "--", "true"])
    assert acquire.ttl == hold.ttl == cli_parser.DEFAULT_TTL_S == 60


def slot(**data: Any) -> Slot:
    return Slot.from_wire({"index": 0, "state": "open", "holder": None, "fence": 0, **data})


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({}, "slot 0: open"),
        ({"fence": 1, "holder": None}, "slot 0: open (fence 1)"),
        ({"fence": 2}, "slot 0: open (fence 2)"),
        (
            {"index": 1, "state": "held", "holder": "b", "fence": 3, "expires_in_s": 40.2},
            "slot 1: held by hand b at fence 3, live, its current window ends in 40 s",
        ),
        (
            {"state": "held", "holder": "b", "fence": 3, "expires_in_s": -4.0},
            "slot 0: held by hand b at fence 3, late: its window ended 4 s ago",
        ),
        ({"index": 2, "state": "done", "fence": 1}, "slot 2: done (fence 1)"),
        (
            # A holder of another lane is not named to a lane-limited key (issue 33, item 6).
            {"state": "held", "holder": None, "fence": 3, "expires_in_s": 40.2},
            "slot 0: held by a hand of another lane at fence 3, live, its current window ends "
            "in 40 s",
        ),
    ],
)
def test_it_says_a_slot_as_a_sentence(data: dict[str, Any], line: str) -> None:
    assert describe_slot(slot(**data)) == line


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"holder": "a", "state": "live", "expires_in_s": 40},
            "src/auth/: held by hand a at fence 1, live, its current window ends in 40 s",
        ),
        (
            # Today's "held by None at fence 1, free".
            {"holder": None, "state": "free", "expires_in_s": None},
            "src/auth/: free (fence 1; the next holder gets a higher one)",
        ),
        (
            {"holder": "a", "state": "lost", "expires_in_s": -9},
            "src/auth/: lost by hand a at fence 1 (it stopped renewing; anyone may take it)",
        ),
        (
            # Held by a hand of another lane, unnamed to a lane-limited key: held, not free.
            {"holder": None, "state": "live", "expires_in_s": 40},
            "src/auth/: held by a hand of another lane at fence 1, live, its current window "
            "ends in 40 s",
        ),
    ],
)
def test_it_says_a_lease_as_a_sentence(data: dict[str, Any], line: str) -> None:
    lease = Lease.from_wire({"resource": "src/auth/", "fence": 1, "ttl_s": 60, **data})
    assert describe_lease(lease) == line


# --- in process, against the fake -------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    server = FakeServer(interval_s=60)

    def from_env(env: Any = None, **kwargs: Any) -> Client:
        return Client(
            URL,
            KEY,
            transport=httpx.MockTransport(server.handle),
            retry=RetryPolicy(retries=0),
            sleep=lambda s: None,
        )

    monkeypatch.setattr(Client, "from_env", from_env)
    return server


def test_it_says_each_new_answer_while_claim_waits(
    fake: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fence = 1  # slot 0 is held by someone
    answers = iter(
        [
            error(
                409,
                "no_open_slot",
                "run 12 has no open slot",
                slots=1,
                held=1,
                done=0,
                next_expires_in_s=30.0,
            ),
            error(
                409,
                "no_open_slot",
                "run 12 has no open slot",
                slots=1,
                held=1,
                done=0,
                next_expires_in_s=29.0,
            ),
        ]
    )
    original = fake.handle

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/claim"):
            answer = next(answers, None)
            if answer is not None:
                return answer
            fake.state, fake.fence = "released", 1
        return original(request)

    fake.handle = handle  # type: ignore[method-assign]
    code = cli.main(["claim", "12", "--wait", "30", "--export", "--process-id", "p-1"])
    out, err = capsys.readouterr()
    assert code == 0
    assert out == "export GC_ATTEMPT=41 GC_ATTEMPT_FENCE=2 GC_PROCESS_ID=p-1\n"
    # Said once: the second answer differed only by the clock.
    assert err.splitlines() == [
        "gctl: waiting for a slot of run 12: run 12 has no open slot (1 slot: 1 held; the "
        "soonest holder's current window ends in 30 s): wait, pick other work, or escalate."
    ]


def test_it_prints_only_comments_and_exports_for_a_plain_claim(
    fake: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["claim", "12", "--process-id", "it's mine"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("# ") for line in lines[:-1])
    # Quoted for the shell: the identity holds a quote.
    assert lines[-1] == "export GC_ATTEMPT=41 GC_ATTEMPT_FENCE=1 GC_PROCESS_ID='it'\"'\"'s mine'"


def test_it_refuses_export_with_json(fake: FakeServer) -> None:
    assert cli.main(["--json", "claim", "12", "--export"]) == 2
    assert fake.calls("/claim") == []


def test_it_names_the_resource_and_the_window_in_a_denial(
    fake: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.leases["migrations"] = {"holder": "b", "process_id": "x", "fence": 4, "ttl_s": 40}
    assert cli.main(["lease", "acquire", "migrations"]) == 3
    assert capsys.readouterr().err == (
        "gctl: denied: migrations is held by hand b (fence 4), renewing; its current window "
        "ends in 40 s: wait, pick other work, or escalate. (lease_held)\n"
    )


def test_it_prints_the_servers_field_messages_for_invalid_input(
    fake: FakeServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    invalid = error(
        400, "validation_error", "invalid input: wait_s", fields={"wait_s": ["At most 60."]}
    )
    monkeypatch.setattr(fake, "handle", lambda request: invalid)
    assert cli.main(["lease", "acquire", "migrations", "--wait", "90"]) == 1
    assert capsys.readouterr().err == (
        "gctl: error: invalid input: wait_s: At most 60. Fix the call and try again. "
        "(validation_error)\n"
    )


def test_it_lists_runs_as_sentences(fake: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake.evidence_required = ["pull_request"]
    assert cli.main(["runs", "--lane", "rewalk"]) == 0
    assert capsys.readouterr().out == (
        "run 12: Fix the login redirect (lane rewalk, work package rewalk-1): 1 of 1 slot open; "
        "evidence: pull_request; heartbeat every 60 s, grace 0.3 s\n"
    )
    fake.state, fake.fence = "finished", 1
    assert cli.main(["runs"]) == 0
    assert capsys.readouterr().out == "no open runs\n"


def test_gctl_run_finishes_through_a_proxys_502_on_the_finish(
    fake: FakeServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper's finish meets a reverse proxy's 502 twice (the server restarting): it is
    tried again until it gets through, and the attempt finishes instead of being released."""
    original = fake.handle
    bad = {"left": 2}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/finish") and bad["left"]:
            bad["left"] -= 1
            return httpx.Response(502, text="<html>502 Bad Gateway</html>")
        return original(request)

    monkeypatch.setattr(fake, "handle", handle)
    script = 'echo "pull_request=https://git.test/pr/7" >> "$GC_EVIDENCE_FILE"'
    assert cli.main(["run", "--run", "12", "--", "sh", "-c", script]) == 0
    assert fake.state == "finished" and fake.calls("/release") == []
    assert bad["left"] == 0
    assert "attempt 41 finished" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value"), [("run", "twelve"), ("slot", 1.5), ("run", {}), ("slot", [0])]
)
def test_it_says_a_malformed_answer_plainly_instead_of_a_traceback(
    fake: FakeServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    field: str,
    value: Any,
) -> None:
    attempt = dict(fake.attempt(), fence=1, **{field: value})
    monkeypatch.setattr(fake, "handle", lambda request: httpx.Response(201, json=attempt))
    assert cli.main(["claim", "12", "--process-id", "p"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"gctl: error: the server's answer is not a valid attempt: {field} is {value!r}, not a "
        "whole number (malformed_answer)\n"
    )
    assert "Traceback" not in err


def test_it_says_a_malformed_list_item_plainly(
    fake: FakeServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    slots = [{"index": "first", "state": "open"}]
    monkeypatch.setattr(fake, "handle", lambda request: httpx.Response(200, json=slots))
    assert cli.main(["slots", "12"]) == 1
    assert capsys.readouterr().err == (
        "gctl: error: the server's answer is not a valid slot: index is 'first', not a whole "
        "number (malformed_answer)\n"
    )
    monkeypatch.setattr(fake, "handle", lambda request: httpx.Response(200, json=[{"id": 1}]))
    assert cli.main(["--json", "slots", "12"]) == 1
    out = capsys.readouterr().out
    assert '"code": "malformed_answer"' in out and "it has no index" in out
