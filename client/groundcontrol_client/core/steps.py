"""Calls written once, sent by either shell.

A call of the contract is a generator of steps: it yields `Send` (one try of one request),
`Sleep` (a backoff, a poll's pause) and `Exclusive` (steps that hold a lock), and the shell that
runs it answers each `Send` with the `httpx.Response`, or the `httpx.TransportError` that
stopped the try, and carries out each `Sleep` and `Exclusive`. Everything a call decides (its
body, retries, backoff, polling, the answer it reads and the error it raises) lives in the
steps; a shell only sends, sleeps and locks, blocking (`groundcontrol_client.http.Client`) or
awaiting (`AsyncClient`). Steps compose with `yield from`: the runtime's heartbeats and finishes
(`core.keeping`) are steps built on these.

    class Calls:
        @call
        def me(self) -> Steps[Me]:
            return Me.from_wire((yield from self._request("GET", "me")))

    client.me()              # a sync shell: the answer
    await async_client.me()  # an async shell: the same steps, awaited
    client.me.steps()        # the steps themselves, to compose
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Send:
    """One try of one request, relative to the shell's base URL (or a page's absolute URL)."""

    method: str
    url: str
    json: Any
    params: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    timeout: float


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Exclusive:
    """`steps` run while holding `lock` (the shell's own kind: a `threading.Lock` or an
    `asyncio.Lock`); their answer, or their error raised where this step was yielded."""

    lock: Any
    steps: Generator[Any, Any, Any]


Step = Send | Sleep | Exclusive
# A shell answers a `Send` with the response or the transport failure, a `Sleep` with None, an
# `Exclusive` with its steps' answer.
Steps = Generator[Step, Any, T]


class call(Generic[T]):  # noqa: N801 (a decorator, named as one)
    """Marks a method written as steps as a call: on a shell, `shell.method(...)` runs it there
    (`shell.bind`: `shell.perform` carries the steps out), and `shell.method.steps(...)` gives
    the steps, to compose."""

    def __init__(self, steps: Callable[..., Steps[T]]) -> None:
        self.steps = steps
        functools.update_wrapper(self, steps)

    def __get__(self, shell: Any, owner: type | None = None) -> Any:
        if shell is None:
            return self
        return shell.bind(self.steps)


def bound(shell: Any, steps: Callable[..., Steps[T]], runner: Callable[..., Any]) -> Any:
    """`steps` of `shell`, run by `runner` (the shell's `bind` hands it a sync or async one)."""
    runner = functools.wraps(steps)(runner)
    runner.steps = functools.partial(steps, shell)  # type: ignore[attr-defined]
    return runner
