"""Both shells of the client against the live server: a test parametrised with `shell` runs each
call through `Client` (blocking) and through `AsyncClient` (awaited), the same steps either way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from groundcontrol_client import AsyncClient, Client

from tests.support.live import Fleet


class Shell:
    """`shell.call_name(...)`: one call through the kind of client this test runs, opened for
    the call and closed after it."""

    def __init__(self, kind: str, url: str, key: str) -> None:
        self.kind, self.url, self.key = kind, url, key

    def with_key(self, key: str) -> Shell:
        return Shell(self.kind, self.url, key)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if self.kind == "Client":
                with Client(self.url, self.key) as client:
                    return getattr(client, name)(*args, **kwargs)

            async def awaited() -> Any:
                async with AsyncClient(self.url, self.key) as client:
                    return await getattr(client, name)(*args, **kwargs)

            return asyncio.run(awaited())

        return run


def shell_for(kind: str, gc: Fleet, key: str) -> Shell:
    return Shell(kind, gc.url, key)
