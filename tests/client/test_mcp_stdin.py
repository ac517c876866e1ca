"""stdin read by the event loop (groundcontrol_client/mcp/stdin.py): lines as the SDK reads
them, a read cancelled at once, and the descriptor as it was afterwards."""

from __future__ import annotations

import os
import tempfile

import anyio
from groundcontrol_client.mcp.stdin import loop_stdin


def test_it_reads_lines_cancels_a_read_at_once_and_leaves_the_descriptor_as_it_was() -> None:
    read, write = os.pipe()  # a descriptor of its own: the test's stdin stays alone
    os.write(write, b'{"a": 1}\n{"b": "\xc3\xa9"}\n')

    async def main() -> list[str]:
        lines = []
        async with loop_stdin(read) as stdin:
            assert stdin is not None
            assert os.readlink(f"/proc/self/fd/{read}") == os.devnull  # nothing else reads it
            async for line in stdin:
                lines.append(line)
                if len(lines) == 2:
                    break
            with anyio.move_on_after(0.2) as waited:  # nothing more is written: cancelled
                await stdin.__anext__()
            assert waited.cancelled_caught
        return lines

    assert anyio.run(main) == ['{"a": 1}\n', '{"b": "é"}\n']
    assert os.readlink(f"/proc/self/fd/{read}").startswith("pipe:")
    assert os.get_blocking(read)
    os.write(write, b"after\n")
    assert os.read(read, 100) == b"after\n"
    os.close(write)
    os.close(read)


def test_the_end_of_the_pipe_ends_the_lines() -> None:
    read, write = os.pipe()
    os.write(write, b"only\n")
    os.close(write)

    async def main() -> list[str]:
        async with loop_stdin(read) as stdin:
            assert stdin is not None
            return [line async for line in stdin]

    assert anyio.run(main) == ["only\n"]
    os.close(read)


def test_a_file_is_left_to_the_sdk() -> None:
    with tempfile.TemporaryFile() as file:

        async def main() -> object:
            async with loop_stdin(file.fileno()) as stdin:
                return stdin

        assert anyio.run(main) is None
