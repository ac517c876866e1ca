"""gctl's commands for pools (a `supervise` key makes them; `leases` or `supervise` reads them):
`gctl pools list|show|create`. A member is taken with `gctl hold --pool POOL -- CMD...`."""

from __future__ import annotations

import argparse
from typing import Any

from groundcontrol_client.cli.output import Result, UsageError
from groundcontrol_client.cli.people import noun
from groundcontrol_client.core.pools import describe_pool_members, describe_pool_record
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.http import Client


def cmd_pools_list(client: Client, args: argparse.Namespace) -> Result:
    pools = client.pools()
    return [p.raw for p in pools], "\n".join(map(describe_pool_record, pools)) or "no pools"


def cmd_pools_show(client: Client, args: argparse.Namespace) -> Result:
    pool = client.pool(args.name)
    return pool.raw, describe_pool_members(pool, now_utc())


def cmd_pools_create(client: Client, args: argparse.Namespace) -> Result:
    if bool(args.member) == (args.capacity is not None):
        raise UsageError("give the members (--member M, repeatable) or --capacity N, not both")
    pool = client.pool_create(args.name, members=args.member or None, capacity=args.capacity)
    text = (
        f"{describe_pool_record(pool)}; a hand takes a member with "
        f"gctl hold --pool {pool.name} -- CMD..."
    )
    return pool.raw, text


def add_pool_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    pools = noun(
        sub, common, "pools", "pools: named sets of members, each handed out as its own lease"
    )
    pools("list", cmd_pools_list, "the workspace's pools, with how many members are free")
    p = pools("show", cmd_pools_show, "one pool: each member with its holder, fence and window")
    p.add_argument("name", help="the pool's name")
    p = pools(
        "create",
        cmd_pools_create,
        "make a pool (a supervise key); one that exists with the same members is answered as "
        "it is, with other members refused pool_exists (its members never change)",
    )
    p.add_argument("name", help="the pool's name: one segment, no '/' (e.g. ports)")
    p.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="M",
        help="a member, handed out in the order given (e.g. --member 8001 --member 8002); "
        "repeatable",
    )
    p.add_argument(
        "--capacity", type=int, metavar="N", help="N members named 1 to N, instead of --member"
    )
