"""The benchmark, in one run (`bench/run`, which installs the `bench` extra and calls this).

1. Starts on loopback: a database of its own on the machine's PostgreSQL (created, migrated and
   dropped), a redis-server and an etcd on spare ports (etcd from Debian's `etcd-server`,
   installed when missing; without it the etcd rows say so), and the production web server
   (`python -m groundcontrol.server`: granian, with PostgreSQL, Redis, DEBUG off) while Ground
   Control is measured.
2. For each repeat and each concurrency, measures every row for `--seconds` after a warm-up:
   Ground Control over HTTP (heartbeat, acquire, renew), the same statements as raw SQL, Redis
   (Lua CAS with a fence counter), etcd (lease grant + txn, keepalive) and Ground Control's
   renew-all: each client holds 20 leases of one process and renews them in one call, or one
   single renewal at a time (issue 21, item 7). The order of the blocks rotates with each
   repeat, so drift of the shared machine hits all of them alike.
   Before each of Ground Control's and raw SQL's rows the database is vacuumed and analyzed when
   its server runs without autovacuum (this machine's does), as autovacuum would have by then in
   production.
   At the targets' concurrency (16 clients) each repeat also measures `--cost-pairs` pairs of
   short heartbeat and renewal windows back to back, the order alternating, for the target
   "a heartbeat costs no more than a renewal": the machine's speed drifts by a fifth from one
   window to the next, and a ratio of windows measured seconds apart cancels most of it. The
   renew-all block does the same for its two rows.
3. Reports the median of the repeats (p50 and p99 from the median run), the ratios, the targets
   (`bench.report.ratios`: at 16 clients, at 64, and the sweep's from the scale figures),
   the scale figures (`bench.scale`, on a fresh database of their own) and the web server's
   workers' memory, and writes `results.csv`, `throughput.png`, `scale.json` and `results.md`
   into `--out`.

The `pooler` block (bench/pooler.py) measures the same hot calls through PgBouncer in
transaction mode beside a direct connection, each on a web server of its own.

`--only renew-all` (or any of `BLOCKS`, comma-separated) runs those blocks alone and writes
`only-<blocks>.md` and `only-<blocks>.csv` beside the full run's outputs instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import drivers, hooks, load, pooler, report, services, wrk

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# What `--only` selects: the measured blocks, and the scale figures.
BLOCKS = (
    "ground-control",
    "raw-sql",
    "redis",
    "etcd",
    "renew-all",
    "tree",
    "hooks",
    "pooler",
    "wrk",
    "scale",
)
DATABASE = "gc_bench"
SCALE_DATABASE = "gc_bench_scale"
GC_OPS = ("heartbeat", "acquire", "renew")
MANY_OPS = (report.RENEW_ALL_OP, report.RENEW_ONE_OP)


class Bench:
    def __init__(self, args: argparse.Namespace, procs: services.Processes) -> None:
        self.args = args
        self.procs = procs
        self.concurrencies = [int(c) for c in args.clients.split(",")]
        self.samples: dict[tuple[str, str, int], list[load.Sample]] = {}
        self.missing: dict[str, str] = {}
        self.memory: list[dict[str, Any]] = []
        self.runs = 0
        self.repeat = 0
        # (heartbeat, renewal) server CPU per call of back-to-back windows (`cost_pairs`).
        self.cost_pairs: list[tuple[float, float]] = []
        # The same for (renew-all of 20, single renewal), in the renew-all block.
        self.renew_all_pairs: list[tuple[float, float]] = []
        # The wrk block's (bench/wrk.py) HTTP and SQL figures, one pair per repeat.
        self.wrk_pairs: list[dict[str, wrk.Figure]] = []

    def setup(self) -> None:
        print("== starting redis-server, etcd and the benchmark database", flush=True)
        self.redis_url = services.start_redis(self.procs)
        if self.redis_url is None:
            raise SystemExit("bench: redis-server is needed (apt-get install redis-server)")
        try:
            self.etcd_url = services.start_etcd(self.procs)
        except RuntimeError as exc:
            self.etcd_url = None
            print(f"   etcd did not start: {exc}", flush=True)
        if self.etcd_url is None:
            self.missing["etcd"] = "etcd-server could not be installed or started"
        self.database = services.create_database(self.args.server_url, DATABASE)
        self.bouncer = (
            pooler.start(self.procs, self.args.server_url) if "pooler" in self.args.blocks else None
        )
        if "wrk" in self.args.blocks and (reason := wrk.missing()) is not None:
            self.missing[wrk.WRK] = reason
            print(f"   no wrk block: {reason}", flush=True)
        if "pooler" in self.args.blocks and self.bouncer is None:
            for system in pooler.SYSTEMS:
                self.missing[system] = "PgBouncer could not be started here"
        # Ground Control's cache (the rate limiter's counts) in db 1, the Redis rows in db 0.
        self.env = services.gc_env(self.database, self.redis_url.replace("/0", "/1"))
        services.migrate(self.env)
        clients = max(self.concurrencies)
        made = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "bench.fixtures", "--clients", str(clients)],
            cwd=services.ROOT,
            env=self.env,
            capture_output=True,
            check=True,
        )
        self.fixtures = json.loads(made.stdout)
        # The raw-SQL driver renders the engine's own statements: Django, on the same database.
        # (With the web server's SECRET_KEY: the settings refuse PostgreSQL without one.)
        os.environ.update(
            {
                "DATABASE_URL": self.database,
                "DJANGO_SETTINGS_MODULE": "groundcontrol.settings",
                "SECRET_KEY": self.env["SECRET_KEY"],
            }
        )
        import django

        django.setup()

    # --- one measurement --------------------------------------------------------------------

    def measure(
        self,
        system: str,
        operation: str,
        c: int,
        factory: load.ClientFactory,
        meter: load.Meter,
    ) -> None:
        sample = load.run(
            factory,
            concurrency=c,
            seconds=self.args.seconds,
            warmup_s=self.args.warmup,
            meter=meter,
        )
        self.samples.setdefault((system, operation, c), []).append(sample)
        self.runs += 1
        note = f"  first error: {sample.first_error}" if sample.errors else ""
        print(
            f"   {system:>14} {operation:<10} c={c:<3} {sample.ops_per_s:>9,.0f} ops/s  "
            f"p50 {sample.percentile_ms(0.5):6.1f} ms  p99 {sample.percentile_ms(0.99):7.1f} ms  "
            f"cpu {sample.cpu_us_per_op:6.0f} µs/op  errors {sample.errors}{note}",
            flush=True,
        )

    def ops(self) -> tuple[str, ...]:
        """Ground Control's operations, rotated with each repeat like the systems: the first
        measured after the web server starts, or the one after the acquires have grown the lease
        table, is not always the same."""
        turn = self.repeat % len(GC_OPS)
        return GC_OPS[turn:] + GC_OPS[:turn]

    def _process_meter(self, name: str) -> load.Meter:
        """The CPU of the process the benchmark started as `name` (and its session)."""
        pid = next(proc.pid for started, proc in self.procs.procs if started == name)
        return lambda: {name: services.tree_cpu_seconds(pid)}

    def tag(self) -> str:
        return f"r{self.runs}-{time.monotonic_ns()}"

    # --- the systems, one block each ----------------------------------------------------------

    @contextlib.contextmanager
    def web_server(
        self, extra: dict[str, str] | None = None
    ) -> Iterator[tuple[str, load.Meter, int]]:
        """The production web server for one block (with `extra` environment): its URL, its
        meter and its main pid.

        It runs only while measured: its persistent connections (workers x threads) would
        otherwise count against max_connections while raw SQL opens 64 of its own."""
        url = services.start_web(self.procs, self.env, extra or {})
        master = self.procs.procs[-1][1]

        def meter() -> dict[str, float]:
            parts = {
                "granian": services.tree_cpu_seconds(master.pid),
                "postgres": services.postgres_cpu_seconds(),
            }
            if extra and "GC_DB_POOLER" in extra:
                parts["pgbouncer"] = pooler.cpu_seconds()
            return parts

        try:
            # Every worker thread opens its database and Redis connections on its first
            # request: open them all before anything is measured.
            warm = drivers.gc_http(url, self.fixtures, "renew", self.tag(), self.args.http_client)
            load.run(warm, concurrency=len(self.fixtures["clients"]), seconds=0.5, warmup_s=0.5)
            yield url, meter, master.pid
        finally:
            self.procs.stop(master)
            self.procs.procs.pop()

    def ground_control(self, c: int) -> None:
        with self.web_server() as (url, meter, master_pid):
            for operation in self.ops():
                factory = drivers.gc_http(
                    url, self.fixtures, operation, self.tag(), self.args.http_client
                )
                # Each row on a freshly analyzed database: an acquire row adds thousands of
                # leases in seconds, and a renewal planned on the table before them would scan
                # them all (measured: 816 renewals/s against 2,800 in the next repeat).
                services.vacuum_if_autovacuum_is_off(self.database)
                self.measure("Ground Control", operation, c, factory, meter)
            if c == report.target_concurrency(self.concurrencies):
                self.measure_cost_pairs(url, c, meter)
            sizes = services.children_rss_mib(master_pid)
            self.memory.append(
                {
                    "figure": "memory",
                    "clients": c,
                    "workers": len(sizes),
                    "max_rss_mib": max(sizes, default=0.0),
                    "total_rss_mib": sum(sizes),
                }
            )

    def measure_cost_pairs(self, url: str, c: int, meter: load.Meter) -> None:
        """Pairs of short heartbeat and renewal windows back to back, the order alternating."""
        services.vacuum_if_autovacuum_is_off(self.database)
        seconds = min(self.args.seconds, 2.0)
        for pair in range(self.args.cost_pairs):
            order = (
                ("heartbeat", "renew") if (pair + self.repeat) % 2 == 0 else ("renew", "heartbeat")
            )
            cpu = {}
            for operation in order:
                factory = drivers.gc_http(
                    url, self.fixtures, operation, self.tag(), self.args.http_client
                )
                sample = load.run(
                    factory, concurrency=c, seconds=seconds, warmup_s=0.5, meter=meter
                )
                cpu[operation] = sample.cpu_us_per_op if not sample.errors else float("nan")
            self.cost_pairs.append((cpu["heartbeat"], cpu["renew"]))
            print(
                f"   cost pair: heartbeat {cpu['heartbeat']:6.0f} µs/op, "
                f"renew {cpu['renew']:6.0f} µs/op",
                flush=True,
            )

    def renew_all(self, c: int) -> None:
        """Each of `c` clients holds 20 leases of one process (its own process identity, so the
        acquire rows' leases are not among them); renewed in one call, or one at a time. The two
        rows alternate which goes first with each repeat; at the targets' concurrency,
        `--cost-pairs` pairs of short windows back to back as for the heartbeat's target."""
        http_client = self.args.http_client
        with self.web_server() as (url, meter, _):
            held = drivers.hold_many(url, self.fixtures, c, http_client)
            try:
                assert all(len(mine) == report.RENEW_ALL_LEASES for mine in held)
                factories = {
                    report.RENEW_ALL_OP: drivers.gc_many(
                        url, self.fixtures, "renew-all", held, http_client
                    ),
                    report.RENEW_ONE_OP: drivers.gc_many(
                        url, self.fixtures, "renew-one", held, http_client
                    ),
                }
                order = MANY_OPS if self.repeat % 2 == 0 else MANY_OPS[::-1]
                for operation in order:
                    services.vacuum_if_autovacuum_is_off(self.database)
                    self.measure("Ground Control", operation, c, factories[operation], meter)
                if c == report.target_concurrency(self.concurrencies):
                    services.vacuum_if_autovacuum_is_off(self.database)
                    seconds = min(self.args.seconds, 2.0)
                    for pair in range(self.args.cost_pairs):
                        cpu = {}
                        turn = (pair + self.repeat) % 2 == 0
                        for operation in MANY_OPS if turn else MANY_OPS[::-1]:
                            sample = load.run(
                                factories[operation],
                                concurrency=c,
                                seconds=seconds,
                                warmup_s=0.5,
                                meter=meter,
                            )
                            cpu[operation] = (
                                sample.cpu_us_per_op if not sample.errors else float("nan")
                            )
                        every, one = cpu[report.RENEW_ALL_OP], cpu[report.RENEW_ONE_OP]
                        self.renew_all_pairs.append((every, one))
                        print(
                            f"   cost pair: renew-all {every:6.0f} µs/call, single {one:6.0f} "
                            f"µs/call, ratio {every / one:5.2f}",
                            flush=True,
                        )
            finally:
                drivers.let_go(url, self.fixtures, held, http_client)

    def tree(self, c: int) -> None:
        """Issue 20: at the targets' concurrency, acquires of new names of no tree, then of new
        files in a workspace holding `report.TREE_LEASES` leases in a tree (seeded before the
        first tree row, kept after), each row on a freshly analyzed database."""
        if c != report.target_concurrency(self.concurrencies):
            return
        with self.web_server() as (url, meter, _):
            for operation in report.TREE_OPS:
                if operation == "acquire-tree":
                    seeded = services.seed_tree(
                        self.database,
                        self.fixtures["workspace_id"],
                        report.TREE_LEASES,
                        drivers.TREE_DIRECTORIES,
                    )
                    assert seeded >= report.TREE_LEASES, seeded
                services.vacuum_if_autovacuum_is_off(self.database)
                factory = drivers.gc_http(
                    url, self.fixtures, operation, self.tag(), self.args.http_client
                )
                self.measure("Ground Control", operation, c, factory, meter)

    def hooks(self, c: int) -> None:
        """Issue 32: at the targets' concurrency, Claude Code's writes answered by the server
        (`bench.hooks`), then `gctl hook` from a cold start, one process at a time."""
        if c != report.target_concurrency(self.concurrencies):
            return
        with self.web_server() as (url, meter, _):
            for operation, new in zip(report.HOOK_WRITE_OPS, (False, True), strict=True):
                services.vacuum_if_autovacuum_is_off(self.database)
                factory = hooks.hook_writes(
                    url, self.fixtures, self.tag(), new=new, http_client=self.args.http_client
                )
                self.measure("Ground Control", operation, c, factory, meter)
            for operation, new in zip(report.HOOK_PACED_OPS, (False, True), strict=True):
                factory = hooks.hook_writes(
                    url, self.fixtures, self.tag(), new=new, http_client=self.args.http_client
                )
                sample = hooks.paced(
                    factory,
                    sessions=c,
                    per_s=hooks.PACED_PER_S,
                    seconds=self.args.seconds,
                    warmup_s=self.args.warmup,
                )
                self.samples.setdefault(("Ground Control", operation, c), []).append(sample)
                print(
                    f"   {operation}: p50 {sample.percentile_ms(0.5):.1f} ms, "
                    f"p99 {sample.percentile_ms(0.99):.1f} ms, errors {sample.errors}",
                    flush=True,
                )
            sample = load.run(
                hooks.cold_start(url, self.fixtures),
                concurrency=1,
                seconds=self.args.seconds,
                warmup_s=self.args.warmup,
            )
            self.samples.setdefault(("Ground Control", report.HOOK_COLD_OP, c), []).append(sample)
            print(
                f"   gctl hook cold start: p50 {sample.percentile_ms(0.5):.0f} ms, "
                f"p99 {sample.percentile_ms(0.99):.0f} ms, errors {sample.errors}",
                flush=True,
            )

    def pooler(self, c: int) -> None:
        """The hot calls through PgBouncer beside a direct connection (bench/pooler.py), the
        side that goes first alternating with each repeat."""
        if self.bouncer is None:
            return
        sides = pooler.variants(self.bouncer, self.database)
        for system, extra in sides if self.repeat % 2 == 0 else sides[::-1]:
            with self.web_server(extra) as (url, meter, _):
                for operation in self.ops():
                    services.vacuum_if_autovacuum_is_off(self.database)
                    factory = drivers.gc_http(
                        url, self.fixtures, operation, self.tag(), self.args.http_client
                    )
                    self.measure(system, operation, c, factory, meter)

    def wrk(self, c: int) -> None:
        """A renewal driven by wrk over HTTP and by pgbench as SQL (bench/wrk.py), at the
        targets' concurrency, the side that goes first alternating with each repeat."""
        if c != report.target_concurrency(self.concurrencies) or wrk.WRK in self.missing:
            return
        pair: dict[str, wrk.Figure] = {}
        with self.web_server() as (url, meter, _):
            sides = [wrk.WRK, wrk.PGBENCH] if self.repeat % 2 == 0 else [wrk.PGBENCH, wrk.WRK]
            for side in sides:
                services.vacuum_if_autovacuum_is_off(self.database)
                if side == wrk.WRK:
                    before = meter()
                    figure = wrk.run_wrk(url, self.fixtures, c, self.args.seconds, self.procs.tmp)
                    used = sum(meter().values()) - sum(before.values())
                    figure.cpu_us = used / max(figure.requests, 1) * 1e6
                else:
                    figure = wrk.run_pgbench(
                        self.database, self.fixtures, c, self.args.seconds, self.procs.tmp
                    )
                pair[side] = figure
                print(
                    f"   {side:>14} renew      c={c:<3} {figure.ops_per_s:>9,.0f} ops/s  "
                    f"p50 {figure.p50_ms:6.2f} ms  p99 {figure.p99_ms:7.2f} ms  "
                    f"errors {figure.errors}",
                    flush=True,
                )
        self.wrk_pairs.append(pair)

    def raw_sql(self, c: int) -> None:
        for operation in self.ops():
            services.vacuum_if_autovacuum_is_off(self.database)  # as for Ground Control's rows
            self.measure(
                "raw SQL",
                operation,
                c,
                drivers.sql(self.database, self.fixtures, operation, self.tag()),
                lambda: {"postgres": services.postgres_cpu_seconds()},
            )

    def redis(self, c: int) -> None:
        for operation in ("acquire", "renew"):
            self.measure(
                "Redis",
                operation,
                c,
                drivers.redis_driver(self.redis_url, operation, self.tag()),
                self._process_meter("redis"),
            )

    def etcd(self, c: int) -> None:
        if self.etcd_url is None:
            return
        for operation in ("acquire", "keepalive"):
            factory = drivers.etcd_driver(
                self.etcd_url, operation, self.tag(), self.args.http_client
            )
            self.measure("etcd", operation, c, factory, self._process_meter("etcd"))

    def run(self) -> None:
        blocks: list[Callable[[int], None]] = [
            block
            for name, block in [
                ("ground-control", self.ground_control),
                ("raw-sql", self.raw_sql),
                ("redis", self.redis),
                ("etcd", self.etcd),
                ("renew-all", self.renew_all),
                ("tree", self.tree),
                ("hooks", self.hooks),
                ("pooler", self.pooler),
                ("wrk", self.wrk),
            ]
            if name in self.args.blocks
        ]
        if not blocks:  # `--only scale`: its figures are made on their own (`Bench.scale`)
            return
        for repeat in range(self.args.repeats):
            self.repeat = repeat
            # Rotate the order so that no system always runs first (or last) in a round.
            order = blocks[repeat % len(blocks) :] + blocks[: repeat % len(blocks)]
            for c in self.concurrencies:
                print(f"== repeat {repeat + 1}/{self.args.repeats}, {c} client(s)", flush=True)
                for block in order:
                    block(c)

    # --- results ------------------------------------------------------------------------------

    def rows(self) -> list[report.Row]:
        out = []
        layouts = {
            "ground-control": [("Ground Control", op) for op in GC_OPS],
            "raw-sql": [("raw SQL", op) for op in GC_OPS],
            "redis": [("Redis", "acquire"), ("Redis", "renew")],
            "etcd": [("etcd", "acquire"), ("etcd", "keepalive")],
            "renew-all": [("Ground Control", op) for op in MANY_OPS],
            "tree": [("Ground Control", op) for op in report.TREE_OPS],
            "hooks": [("Ground Control", op) for op in hooks.OPS],
            "pooler": [(system, op) for op in GC_OPS for system in pooler.SYSTEMS],
        }
        layout = [row for name, rows in layouts.items() if name in self.args.blocks for row in rows]
        for c in self.concurrencies:
            for system, operation in layout:
                samples = self.samples.get((system, operation, c), [])
                if not samples:
                    nan = float("nan")
                    out.append(
                        report.Row(
                            system,
                            operation,
                            c,
                            nan,
                            nan,
                            nan,
                            [],
                            0,
                            self.missing.get(system, "not measured"),
                        )
                    )
                    continue
                middle = load.median_sample(samples)
                out.append(
                    report.Row(
                        system,
                        operation,
                        c,
                        load.median([s.ops_per_s for s in samples]),
                        middle.percentile_ms(0.5),
                        middle.percentile_ms(0.99),
                        [s.ops_per_s for s in samples],
                        sum(s.errors for s in samples),
                        cpu_us=load.median([s.cpu_us_per_op for s in samples]),
                        cpu_parts={
                            part: load.median([s.cpu_s[part] / s.ops * 1e6 for s in samples])
                            for part in middle.cpu_s
                        }
                        if all(s.ops for s in samples)
                        else {},
                        cpu_runs=[s.cpu_us_per_op for s in samples],
                    )
                )
        return out

    def scale(self) -> list[dict[str, Any]]:
        """The scale figures, on a database of their own: in the load's database the sweep would
        also meet the leases the acquire runs left behind (their 60 s run out meanwhile)."""
        print(f"== scale figures: sizes {self.args.sizes}", flush=True)
        database = services.create_database(self.args.server_url, SCALE_DATABASE)
        env = {**self.env, "DATABASE_URL": database}
        try:
            services.migrate(env)
            made = subprocess.run(  # noqa: S603
                [sys.executable, "-m", "bench.scale", "--sizes", self.args.sizes],
                cwd=services.ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if made.returncode:
                sys.exit(f"bench.scale failed:\n{made.stderr}")
        finally:
            services.drop_database(self.args.server_url, SCALE_DATABASE)
        figures = [json.loads(line) for line in made.stdout.splitlines() if line.startswith("{")]
        for figure in figures:
            print("   " + json.dumps(figure), flush=True)
        return figures


def parse(description: str) -> argparse.Namespace:
    """`bench/run`'s options, with the defaults of the mode asked for (full, quick, check-only)."""
    parser = argparse.ArgumentParser(prog="bench/run", description=description)
    parser.add_argument("--quick", action="store_true", help="a ~3-minute smoke run")
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="seconds-long runs that only check every driver works (no figures worth keeping)",
    )
    parser.add_argument("--seconds", type=float, help="measured seconds per run (default 4)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    parser.add_argument("--repeats", type=int, help="runs per row; the median counts (default 3)")
    parser.add_argument("--clients", default=None, help="concurrencies (default 1,16,64)")
    parser.add_argument(
        "--cost-pairs",
        type=int,
        help="heartbeat and renewal pairs per repeat at 16 clients, for the cost target (6)",
    )
    parser.add_argument("--sizes", default=None, help="scale sizes (default 1000,10000,100000)")
    parser.add_argument("--http-client", choices=["raw", "httpx"], default="raw")
    parser.add_argument(
        "--server-url",
        default=os.environ.get("BENCH_POSTGRES_URL", ADMIN_URL),
        help="the PostgreSQL server the benchmark's own database is made on",
    )
    parser.add_argument("--out", default="bench/results", help="where the outputs go")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated blocks to run alone, of: {', '.join(BLOCKS)} (default: all)",
    )
    args = parser.parse_args()
    args.blocks = list(BLOCKS) if args.only is None else args.only.split(",")
    unknown = [name for name in args.blocks if name not in BLOCKS]
    if unknown or not args.blocks:
        parser.error(f"--only: unknown block(s) {', '.join(unknown)}; choose from {BLOCKS}")
    if args.check_only:
        defaults = {
            "seconds": 0.5,
            "repeats": 1,
            "clients": "1,4",
            "sizes": "200",
            "cost_pairs": 1,
        }
        args.warmup = 0.2
    elif args.quick:
        defaults = {
            "seconds": 2.0,
            "repeats": 1,
            "clients": "1,16,64",
            "sizes": "1000,10000",
            "cost_pairs": 3,
        }
    else:
        defaults = {
            "seconds": 4.0,
            "repeats": 3,
            "clients": "1,16,64",
            "sizes": "1000,10000,100000",
            "cost_pairs": 6,
        }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main() -> int:
    args = parse(__doc__.splitlines()[0])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    procs = services.Processes()
    bench = Bench(args, procs)
    try:
        bench.setup()
        bench.run()
        figures = (bench.scale() if "scale" in args.blocks else []) + bench.memory
    finally:
        procs.close()
        try:
            services.drop_database(args.server_url, DATABASE)
        except Exception as exc:  # noqa: BLE001 - say so, do not hide the run's own error
            print(f"bench: could not drop {DATABASE}: {exc}", file=sys.stderr)
    rows = bench.rows()
    ratio_table, targets = report.ratios(
        rows, bench.concurrencies, bench.cost_pairs, figures, bench.renew_all_pairs
    )
    mode = "check-only" if args.check_only else "quick" if args.quick else "full"
    if args.only is not None:
        # A partial run judges only what it measured.
        mode += f" --only {args.only}"
        targets = [t for t in targets if t.holds is not None]
    header = (
        f"{mode} run, {args.repeats} repeat(s) of {args.seconds:g} s after {args.warmup:g} s of "
        f"warm-up, {os.cpu_count()} cores, HTTP client: {args.http_client}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.monotonic() - started:.0f} s in all"
    )
    target_lines = "\n".join(
        f"- {t.text}: {t.value} -> "
        + {True: "holds", False: "DOES NOT HOLD", None: "not measured"}[t.holds]
        for t in targets
    )
    comparisons = {"ground-control", "raw-sql", "redis", "etcd"} & set(args.blocks)
    sections = [
        f"Ground Control benchmark: {header}",
        report.table(rows),
        ratio_table if comparisons else "",
        report.renew_all_table(rows, bench.concurrencies) if "renew-all" in args.blocks else "",
        wrk.table(bench.wrk_pairs),
        target_lines,
        report.scale_tables(figures) if "scale" in args.blocks or bench.memory else "",
    ]
    text = "\n\n".join(section for section in sections if section)
    print("\n" + text)
    if args.only is None:
        report.write_csv(rows, out / "results.csv")
        (out / "scale.json").write_text(json.dumps(figures, indent=1) + "\n")
        (out / "results.md").write_text(text + "\n")
        report.chart(
            rows, bench.concurrencies, out / "throughput.png", f"Ground Control benchmark: {header}"
        )
        print(f"\nwrote {out}/results.csv, results.md, scale.json, throughput.png")
    else:
        # Beside the full run's outputs, not over them.
        stem = "only-" + "+".join(args.blocks)
        report.write_csv(rows, out / f"{stem}.csv")
        (out / f"{stem}.md").write_text(text + "\n")
        print(f"\nwrote {out}/{stem}.csv, {stem}.md")
    failed = [row for row in rows if row.errors and not args.quick]
    if args.check_only:
        target = report.target_concurrency(bench.concurrencies)
        # The tree's rows are measured at the targets' concurrency alone (`Bench.tree`).
        skipped = {(op, c) for op in report.TREE_OPS for c in bench.concurrencies if c != target}
        broken = [
            r
            for r in rows
            if r.errors
            or (
                not r.runs
                and r.system not in bench.missing
                and (r.operation, r.concurrency) not in skipped
            )
        ]
        for row in broken:
            print(f"bench: {row.name} at {row.concurrency} client(s) failed", file=sys.stderr)
        return 1 if broken else 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
