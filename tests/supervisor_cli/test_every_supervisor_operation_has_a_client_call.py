"""Every operation of the API's URL map that a `plan` or `supervise` key may call is sent by a
`Client` call and by a `gctl` command. Both are found by running them, not by a list kept beside
them: every public method of `Client`, and every command of `gctl`'s parser (each with its
required arguments, and the forms below that its words choose between), is run against a
transport that records what it sends and answers an empty body (so each ends at once, mostly in
a parse error); then each supervisor operation is looked for among the recorded requests."""

from __future__ import annotations

import argparse
import inspect
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import groundcontrol_client as gc
import groundcontrol_client.cli.parser as cli_parser
import groundcontrol_client.http as shells
import httpx
import pytest
from django.urls import Resolver404, resolve
from groundcontrol_client.cli import main as gctl

from groundcontrol.api_urls import urlpatterns

SUPERVISOR_SCOPES = {"plan", "supervise"}
METHODS = ("get", "post", "patch", "put", "delete")
# Not a supervisor's: the schema and its page, the GitHub webhook (signed, no key), the hooks
# of harnesses (a hand's, through `gctl hook`).
NOT_CALLS = {"api-schema", "api-docs", "api-not-found", "api-github-delivery", "api-hooks"}
# Arguments a call takes through **fields that it cannot do without.
EXTRA: dict[str, dict[str, Any]] = {"run_create": {"title": "x"}}
# A shell's own methods: `request` and `perform` send whatever they are given.
GENERIC = {"request", "perform", "close", "from_env", "bind"}
# gctl's commands that wrap a process, serve a protocol or install files: a hand's, never a
# supervisor's call, and not run here.
NOT_RUN = {("run",), ("hold",), ("mcp",), ("hook",), ("verify",), ("git",)}
# Forms a command's words or options choose between, beyond its required arguments.
FORMS = [
    ["slots", "1"],
    ["slots", "add", "1", "--count", "1", "--reason", "r"],
    ["slots", "reopen", "1", "0", "--reason", "r"],
    ["brief", "1"],
    ["lease", "check", "x", "--fence", "1"],
    ["lease", "queue", "x"],
    ["handoff", "show", "1"],
    ["handoff", "grant", "1", "--reason", "r"],
    ["friction", "x", "--minutes", "1", "--lane", "x"],
    ["friction", "--list"],
    ["friction", "--export", "md"],
    ["hands", "capabilities", "x", "python"],
    ["budgets", "set", "x", "--period", "day", "--action", "pause", "--usd", "1"],
    ["schedule", "update", "x", "1", "--on"],
    ["pools", "create", "x", "--capacity", "2"],
    ["runs", "timeline", "1", "--jsonl"],
]
# Sent only after an answer the recording cannot give (its answers are empty), each by the
# command named, which its own tests run against the live server.
AFTER_AN_ANSWER = {
    # `gctl budgets set` changes the budget it finds for the lane and period (else makes one).
    ("PATCH", "api-budget"),
    # `gctl verify` (CI's), in a repository: a commit's receipts, then its fences.
    ("GET", "api-fences-receipts"),
    ("POST", "api-fences-verify"),
}
# Operations with no gctl command of their own (none now; `gctl budgets show` reads one budget).
NO_COMMAND: set[tuple[str, str]] = set()


def _scopes(view: Any, method: str) -> set[str]:
    required = getattr(view, "required_scope", None)
    if isinstance(required, dict):
        required = required.get(method.upper())
    if required is None:
        return set()
    return {required} if isinstance(required, str) else set(required)


def supervisor_operations() -> set[tuple[str, str]]:
    """(method, URL name) of every operation a plan or supervise key may call."""
    found = set()
    for pattern in urlpatterns:
        view = getattr(pattern.callback, "view_class", None)
        if view is None or pattern.name in NOT_CALLS:
            continue
        for method in METHODS:
            if hasattr(view, method) and _scopes(view, method) & SUPERVISOR_SCOPES:
                found.add((method.upper(), str(pattern.name)))
    return found


@contextmanager
def _at_most(seconds: int) -> Iterator[None]:
    def stop(*_: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def recording(sent: set[tuple[str, str]]) -> httpx.MockTransport:
    """A server that notes (method, URL name) of each request and answers an empty body."""

    def answer(request: httpx.Request) -> httpx.Response:
        try:
            name = resolve(request.url.path).url_name
        except Resolver404:
            name = request.url.path
        sent.add((request.method, str(name)))
        return httpx.Response(200, json=[] if request.method == "GET" else {})

    return httpx.MockTransport(answer)


# --- the client -------------------------------------------------------------------------------


def _dummy(parameter: inspect.Parameter) -> Any:
    annotation = str(parameter.annotation)
    name = parameter.name
    if name in ("format", "fmt"):
        return "json"
    if "int" in annotation or name.endswith("id") or name in ("index", "count", "limit"):
        return 1
    if "list" in annotation or "Sequence" in annotation or "Iterable" in annotation:
        return ["x"]
    if "bool" in annotation:
        return False
    if "dict" in annotation or "Mapping" in annotation:
        return {}
    return "x"


def client_operations() -> set[tuple[str, str]]:
    sent: set[tuple[str, str]] = set()
    client = gc.Client(
        "http://gc.test",
        "gc_abcdefgh_" + "s" * 40,
        transport=recording(sent),
        retry=gc.RetryPolicy(retries=0),
        sleep=lambda _: None,
    )
    for name in dir(client):
        method = getattr(client, name)
        if name.startswith("_") or not callable(method) or name in GENERIC:
            continue
        # The calls are descriptors whose signature still names `self`.
        parameters = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
        args = [
            _dummy(p)
            for p in parameters
            if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty
        ]
        kwargs = {
            p.name: _dummy(p)
            for p in parameters
            if p.kind == p.KEYWORD_ONLY and p.default is p.empty
        }
        kwargs.update(EXTRA.get(name, {}))
        try:
            with _at_most(2):
                result = method(*args, **kwargs)
                if inspect.isgenerator(result):
                    next(result, None)
        except (Exception, TimeoutError):  # the empty answers: what was sent counts
            pass
    return sent


# --- gctl -------------------------------------------------------------------------------------


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command gctl runs: (its words, its parser), nouns' actions each on their own."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path and parser.get_default("handler") is not None:
        yield path, parser
    for action in nested:
        for word, sub in action.choices.items():
            yield from commands(sub, (*path, word))


def required_argv(parser: argparse.ArgumentParser) -> list[str]:
    """A value for each argument the command cannot do without: a number where it takes one,
    its first choice where it has choices, else "x"."""
    argv: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        positional = not action.option_strings
        if positional and action.nargs in ("?", "*"):
            continue
        if not positional and not action.required:
            continue
        value = (
            str(next(iter(action.choices)))
            if action.choices
            else "1"
            if action.type in (int, float)
            else "x"
        )
        argv += [value] if positional else [action.option_strings[0], value]
    return argv


def gctl_operations(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str]]:
    sent: set[tuple[str, str]] = set()
    transport = recording(sent)

    class Recorded(shells.Client):
        def __init__(self, url: str, key: str, **options: Any) -> None:
            super().__init__(url, key, **{**options, "transport": transport})

    monkeypatch.setattr(shells, "Client", Recorded)
    monkeypatch.setenv("GC_URL", "http://gc.test")
    monkeypatch.setenv("GC_KEY", "gc_abcdefgh_" + "s" * 40)
    monkeypatch.setenv("GC_RETRIES", "0")
    runs = [
        [*path, *required_argv(parser)]
        for path, parser in commands(cli_parser.build_parser())
        if path[:1] not in {words[:1] for words in NOT_RUN}
    ]
    for argv in [*runs, *FORMS]:
        try:
            with _at_most(2):
                gctl(argv)
        except (Exception, SystemExit, TimeoutError):  # a usage error sends nothing: no matter
            pass
    return sent


def test_every_supervisor_operation_has_a_client_call() -> None:
    wanted = supervisor_operations()
    assert len(wanted) > 30
    missing = sorted(wanted - client_operations())
    assert missing == [], f"no Client call sends: {missing}"


def test_every_supervisor_operation_has_a_gctl_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    every = supervisor_operations()
    assert AFTER_AN_ANSWER | NO_COMMAND <= every  # no exception outlives its operation
    sent = gctl_operations(monkeypatch)
    capsys.readouterr()  # what the commands said of the empty answers
    missing = sorted(every - AFTER_AN_ANSWER - NO_COMMAND - sent)
    assert missing == [], f"no gctl command sends: {missing}"
    assert not NO_COMMAND & sent, "a command sends it now: take it out of NO_COMMAND"


def test_the_recording_finds_an_operation_no_command_sends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The check itself: with `gctl pools` gone from the parser, its operations go unsent.
    real = cli_parser.build_parser

    def without_pools() -> argparse.ArgumentParser:
        parser = real()
        nested = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        del nested.choices["pools"]
        return parser

    monkeypatch.setattr(cli_parser, "build_parser", without_pools)
    sent = gctl_operations(monkeypatch)
    capsys.readouterr()
    assert ("GET", "api-pools") not in sent and ("GET", "api-pool") not in sent
    assert ("GET", "api-lease-queue") in sent
