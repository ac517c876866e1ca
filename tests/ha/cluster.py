"""The Patroni cluster of scripts/ha, driven from tests: up and down in a state directory of
the test's own, members killed and started again, roles read from Patroni's REST API.

No Django imports (the failover run uses it before any settings exist, as the harness does).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.live import ROOT

SCRIPT = ROOT / "scripts" / "ha"
MEMBERS = (1, 2, 3)
PG_PORTS = {n: 5440 + n for n in MEMBERS}
REST_PORTS = {n: 8440 + n for n in MEMBERS}
ETCD_PORTS = (2479, 2480)
# scripts/ha's exit code when what it needs is missing and it cannot install it.
MISSING = 3


def busy_ports() -> list[int]:
    busy = []
    for port in (*PG_PORTS.values(), *REST_PORTS.values(), *ETCD_PORTS):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


def why_not() -> str | None:
    """Why this machine cannot run the cluster, or None when it can (installing as root)."""
    if os.name != "posix":
        return "scripts/ha needs a POSIX machine"
    installed = shutil.which("patroni") and shutil.which("etcd")
    if not installed and (os.geteuid() != 0 or not shutil.which("apt-get")):
        return "patroni and etcd are not installed, and installing them needs root and apt-get"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running PostgreSQL as root's delegate needs runuser"
    busy = busy_ports()
    if busy:
        return f"ports {busy} are in use (a cluster of scripts/ha is up? `scripts/ha down`)"
    return None


class Missing(RuntimeError):
    """What scripts/ha needs is missing and could not be installed (no root, no apt, no
    network)."""


@dataclass
class Cluster:
    state: Path
    log: list[str] = field(default_factory=list)

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(SCRIPT), *args],
            cwd=ROOT,
            env={**os.environ, "GC_HA_DIR": str(self.state)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.log.append(f"$ scripts/ha {' '.join(args)}\n{result.stdout}{result.stderr}")
        return result

    def up(self) -> None:
        result = self.run("up")
        if result.returncode == MISSING:
            raise Missing(result.stderr.strip())
        if result.returncode != 0:
            raise RuntimeError(f"scripts/ha up failed ({result.returncode}):\n{self.tail()}")

    def down(self) -> None:
        self.run("down", timeout=120)

    def url(self, database: str) -> str:
        return self.run("url", database).stdout.strip()

    def kill(self, member: int) -> None:
        """SIGKILL the member's Patroni and PostgreSQL: the machine is gone."""
        self.run("stop", str(member))

    def start(self, member: int) -> None:
        self.run("start", str(member))

    def wait_ready(self, timeout: float = 120) -> bool:
        return self.run("wait", str(int(timeout)), timeout=timeout + 10).returncode == 0

    def status(self) -> str:
        return self.run("status").stdout

    def members(self) -> list[dict[str, Any]]:
        """Patroni's member list (`GET /cluster`) from the first member that answers."""
        for member in MEMBERS:
            try:
                response = httpx.get(f"http://127.0.0.1:{REST_PORTS[member]}/cluster", timeout=1)
                if response.status_code == 200:
                    return response.json().get("members", [])
            except httpx.HTTPError:
                continue
        return []

    def leader(self, exclude: int | None = None) -> int | None:
        """The running leader's member number (other than `exclude`), if any."""
        for member in self.members():
            number = int(member["name"].removeprefix("pg"))
            if member["role"] == "leader" and member["state"] == "running" and number != exclude:
                return number
        return None

    def wait_leader(self, exclude: int | None, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader(exclude)
            if leader is not None:
                return leader
            time.sleep(0.1)
        return None

    def tail(self, chars: int = 6000) -> str:
        logs = "\n".join(self.log)
        for member in MEMBERS:
            path = self.state / f"pg{member}" / "patroni.log"
            if path.exists():
                logs += f"\n--- pg{member}\n" + path.read_text(errors="replace")[-1500:]
        return logs[-chars:]
