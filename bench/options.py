"""`bench/run`'s command line (bench/run.py): the blocks it runs alone, each mode's defaults."""

from __future__ import annotations

import argparse
import os

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# What `--only` selects: the measured blocks, and the scale figures.
BLOCKS = ("ground-control", "raw-sql", "redis", "etcd", "renew-all", "tree", "pooler", "scale")


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
