"""Process identity: `<hostname>:<pid>:<process start time>`.

The start time makes the identity survive pid reuse: a new process that happens to get a dead
hand's pid is still a different process, and its reports are refused as `process_mismatch`
instead of renewing the dead hand's lease.
"""

from __future__ import annotations

import os
import socket
import time

# Fallback start time for this process where /proc is not available.
_IMPORTED_AT = int(time.time())


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def process_start_time(pid: int) -> int | None:
    """Seconds since the epoch at which `pid` started (Linux /proc), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text.rpartition(")")[2].split()
    boot = _boot_time()
    if boot is None or len(fields) < 20:
        return None
    ticks = int(fields[19])  # field 22 of stat(5): start time in clock ticks after boot
    return int(boot + ticks / os.sysconf("SC_CLK_TCK"))


def process_identity(pid: int | None = None) -> str:
    """The identity of `pid` (default: this process)."""
    own = pid is None or pid == os.getpid()
    pid = os.getpid() if pid is None else pid
    started = process_start_time(pid)
    if started is None:
        started = _IMPORTED_AT if own else 0
    return f"{socket.gethostname()}:{pid}:{started}"
