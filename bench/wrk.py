"""The `wrk` block: a renewal over HTTP driven by wrk against the same renewal as raw SQL driven by
pgbench, on the same PostgreSQL, at the same number of connections (issue 31's yardstick).

Both are load generators written in C, so neither side measures a Python client: wrk opens one
connection per thread (`-t c -c c`), and each thread renews its own client's lease with its own
key (the fixtures' client of the thread's number); pgbench runs the engine's own renewal
statement (`engine.renew`, captured as `drivers.engine_statement` does) prepared, each pgbench
client on its fixtures' client of the same number (`:client_id`). Debian's `wrk` is installed when
missing (as root); pgbench comes with the PostgreSQL client.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import drivers

WRK = "wrk (HTTP)"
PGBENCH = "pgbench (SQL)"
SYSTEMS = (WRK, PGBENCH)

# Each wrk thread takes the next client of the list in `setup`, and sends its renewal for ever.
LUA = """
local clients = {clients}
local taken = 0
function setup(thread)
  taken = taken + 1
  thread:set("me", taken)
end
function init(args)
  local client = clients[me]
  wrk.method = "POST"
  wrk.body = client.body
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. client.key
end
"""


@dataclass
class Figure:
    system: str
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    # Every answer in the run (wrk's "N requests in"), for the server CPU per call.
    requests: int = 0
    cpu_us: float = float("nan")


def missing() -> str | None:
    """Why this block cannot run here, or None; installs Debian's wrk when it can."""
    if shutil.which("wrk") is None and shutil.which("apt-get") is not None:
        subprocess.run(  # noqa: S603, S607
            ["apt-get", "install", "-y", "-qq", "wrk"], capture_output=True, check=False
        )
    for tool in ("wrk", "pgbench"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII is a Lua string literal


def lua(fixtures: dict[str, Any], clients: int) -> str:
    rows = []
    for me in fixtures["clients"][:clients]:
        body = json.dumps(
            {"resource": me["resource"], "fence": me["fence"], "process_id": me["process_id"]}
        )
        rows.append(f"{{key = {_lua_string(me['key'])}, body = {_lua_string(body)}}}")
    return LUA.replace("{clients}", "{" + ", ".join(rows) + "}")


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _wrk_ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNIT_MS[unit]


def parse_wrk(output: str) -> Figure:
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", output, re.M))
    refused = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    broken = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
        output,
    )
    errors = int(refused.group(1)) if refused else 0
    errors += sum(int(n) for n in broken.groups()) if broken else 0
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    return Figure(
        WRK, rate, _wrk_ms(percentiles["50"]), _wrk_ms(percentiles["99"]), errors, requests
    )


def run_wrk(url: str, fixtures: dict[str, Any], clients: int, seconds: float, tmp: Path) -> Figure:
    script = tmp / "renew.lua"
    script.write_text(lua(fixtures, clients))
    done = subprocess.run(  # noqa: S603, S607
        [
            "wrk",
            f"-t{clients}",
            f"-c{clients}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            f"{url}/api/v1/leases/renew",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    return parse_wrk(done.stdout)


def _per_client(values: list[Any]) -> str:
    """A pgbench expression for one parameter: a literal when every client has the same value,
    else the value of client `:client_id` written as its text with the number in it."""
    first = values[0]
    if all(value == first for value in values):
        if isinstance(first, int):
            return str(first)
        return "'" + str(first).replace("'", "''") + "'"
    shapes = {str(value).replace(str(i), "{}", 1) for i, value in enumerate(values)}
    if len(shapes) != 1 or not all(
        isinstance(v, str) and v == next(iter(shapes)).format(i) for i, v in enumerate(values)
    ):
        raise ValueError(f"pgbench cannot derive these values from :client_id: {values[:3]}")
    before, _, after = next(iter(shapes)).partition("{}")
    return f"(CAST('{before}' AS text) || CAST(:client_id AS text) || CAST('{after}' AS text))"


def pgbench_script(fixtures: dict[str, Any], clients: int) -> str:
    """The engine's renewal for each pgbench client, as one pgbench script."""
    from leases import engine

    rendered = [
        drivers.engine_statement(
            engine.renew,
            workspace_id=fixtures["workspace_id"],
            resource=me["resource"],
            holder=me["hand"],
            fence=me["fence"],
            process_id=me["process_id"],
        )
        for me in fixtures["clients"][:clients]
    ]
    statement = rendered[0][0]
    expressions = {name: _per_client([p[name] for _, p in rendered]) for name in rendered[0][1]}
    text = re.sub(r"%\((\w+)\)s", lambda m: expressions[m.group(1)], statement).replace("%%", "%")
    return " ".join(text.split()) + ";\n"


def parse_pgbench(output: str, logs: list[Path]) -> Figure:
    rate = float(re.search(r"tps = ([\d.]+)", output).group(1))  # type: ignore[union-attr]
    failed = re.search(r"number of failed transactions: (\d+)", output)
    latencies = sorted(
        int(line.split()[2]) for log in logs for line in log.read_text().splitlines() if line
    )

    def at(q: float) -> float:
        return latencies[min(len(latencies) - 1, round(q * (len(latencies) - 1)))] / 1000

    return Figure(PGBENCH, rate, at(0.5), at(0.99), int(failed.group(1)) if failed else 0)


def run_pgbench(
    dsn: str, fixtures: dict[str, Any], clients: int, seconds: float, tmp: Path
) -> Figure:
    script = tmp / "renew.sql"
    script.write_text(pgbench_script(fixtures, clients))
    for old in tmp.glob("pgbench_log*"):
        old.unlink()
    done = subprocess.run(  # noqa: S603, S607
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            f"-c{clients}",
            f"-j{clients}",
            f"-T{max(1, round(seconds))}",
            "-l",
            f"--log-prefix={tmp / 'pgbench_log'}",
            "-f",
            str(script),
            dsn,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + 60,
    )
    if done.returncode:
        raise RuntimeError(f"pgbench failed:\n{done.stderr[-2000:]}")
    return parse_pgbench(done.stdout, sorted(tmp.glob("pgbench_log*")))


def table(figures: list[dict[str, Figure]]) -> str:
    """The block's table: each repeat's pair, and the ratio of HTTP to SQL within each."""
    if not figures:
        return ""
    lines = [
        "| repeat | wrk renewals/s | p50 ms | p99 ms | µs CPU per renewal | pgbench renewals/s "
        "| p50 ms | p99 ms | errors (wrk, pgbench) | HTTP / SQL |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    ratios, p99s = [], []
    for n, pair in enumerate(figures, 1):
        http, sql = pair[WRK], pair[PGBENCH]
        ratio = http.ops_per_s / sql.ops_per_s if sql.ops_per_s else float("nan")
        ratios.append(ratio)
        p99s.append(http.p99_ms)
        lines.append(
            f"| {n} | {http.ops_per_s:,.0f} | {http.p50_ms:.1f} | {http.p99_ms:.1f} "
            f"| {http.cpu_us:,.0f} | {sql.ops_per_s:,.0f} | {sql.p50_ms:.2f} | {sql.p99_ms:.2f} "
            f"| {http.errors}, {sql.errors} | {ratio:.3f} |"
        )
    lines += [
        "",
        f"Median HTTP / SQL {_median(ratios):.3f} (the target: at least 0.20); median wrk p99 "
        f"{_median(p99s):.1f} ms (at most 25).",
    ]
    return "\n".join(lines) + "\n"


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]
