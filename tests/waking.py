"""How a wait in line's pauses end, recorded (`leases.waiting.listening`'s wait says True when a
notification ended it), with the timers that would end a pause by themselves (the listen's own,
the queue's stay-alive renewal) beyond any test's wait: a pause that ended before its call's
`wait_s` ran out was ended by a notification, however slow the machine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

from leases import queue, waiting


@dataclass
class Pauses:
    woken: list[bool] = field(default_factory=list)  # each ended pause: woken by a notification
    began: threading.Event = field(default_factory=threading.Event)  # a first pause has begun


@contextmanager
def pauses_recorded() -> Iterator[Pauses]:
    pauses = Pauses()
    listening = waiting.listening

    @contextmanager
    def recorded(channels: list[str]) -> Iterator[waiting.Waiter]:
        with listening(channels) as wait:

            def recording(pause: float, backoff: float) -> bool:
                pauses.began.set()
                pauses.woken.append(wait(pause, backoff))
                return pauses.woken[-1]

            yield recording

    with (
        mock.patch.object(waiting, "listening", recorded),
        mock.patch.object(waiting, "_LISTEN_MAX_S", 120.0),
        mock.patch.object(queue, "WAITER_TTL_S", 240.0),
    ):
        yield pauses
