"""The MCP host's messages on stdin, read by the event loop.

The SDK reads stdin in a worker thread, and a read in a thread cannot be cancelled: a server
that ends on its own (the proxy, when its claim is stopped or lost or its key refused) would
wait for the host's next line before it could stop CMD and release what it holds, and a quiet
host sends none. Read as a pipe by the event loop, the read is cancelled at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator

# The longest message line read (a tool call's arguments carry whole files): far above any real
# one, and a bound on what one line may buffer.
MAX_LINE_BYTES = 256 * 1024 * 1024


class LoopStdin:
    """stdin's lines as the SDK's `stdio_server` iterates them (`async for line in stdin`)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LoopStdin:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def loop_stdin(fd: int = 0) -> AsyncIterator[LoopStdin | None]:
    """stdin read by the running asyncio loop while the block runs, or None where it is no pipe
    (a file, a terminal: then the SDK reads it as it does). As the SDK does, `fd` points at the
    null device meanwhile, so that nothing the tools run reads the host's messages; the loop
    reads a private copy, made non-blocking, and `fd` is as it was afterwards."""
    if not _is_pipe(fd):
        yield None
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except (NotImplementedError, ValueError, OSError):  # a loop without pipes
        pipe.close()
        yield None
        return
    saved = os.dup(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, fd)
    os.close(null)
    try:
        yield LoopStdin(reader)
    finally:
        transport.close()  # and the private copy with it
        os.set_blocking(saved, True)  # one open file: the copy's flag was the original's
        os.dup2(saved, fd)
        os.close(saved)
