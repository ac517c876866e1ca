"""One driver per system: each makes clients (one connection each) that perform one operation.

- Ground Control over HTTP (keep-alive, a connection per client, bench/http.py): heartbeat,
  resource acquire (a new resource each time) and resource renew (the client's own lease).
- The same statements as raw SQL through psycopg on the same database, autocommit.
- Redis: a Lua compare-and-set with a fence counter (acquire) and a Lua check-and-extend (renew).
- etcd through its v3 JSON gateway over HTTP (the same client as Ground Control): acquire is a lease
  grant plus a transaction that creates the key only if it does not exist; keepalive renews.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

from bench import http
from bench.load import ClientFactory, Op
from bench.report import RENEW_ALL_LEASES

TIMEOUT_S = 30.0
ACQUIRE_TTL_S = 60


def _http(kind: str, base_url: str, headers: dict[str, str] | None = None) -> Any:
    return http.client(
        kind, base_url, {"Content-Type": "application/json", **(headers or {})}, TIMEOUT_S
    )


# --- Ground Control over HTTP ----------------------------------------------------------------


# Issue 20's tree block (`bench.report.TREE_OPS`): new names of no tree (`flat`), and new files
# in the directories of a workspace that holds `TREE_LEASES` leases (`services.seed_tree`).
TREE_DIRECTORIES = 50
TREE_NAMES = {
    "acquire-flat": "flat-{tag}-{i}-",
    "acquire-tree": "tree/d{d}/new-{tag}/{i}/",
}


def gc_http(
    base_url: str, fixtures: dict[str, Any], operation: str, tag: str, http_client: str = "raw"
) -> ClientFactory:
    """Clients for `heartbeat`, `acquire` or `renew`; `tag` keeps acquired names unique per run."""

    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        me = fixtures["clients"][i]
        client = _http(http_client, base_url, {"Authorization": f"Bearer {me['key']}"})
        post = client.post
        if operation == "heartbeat":
            path = f"/api/v1/attempts/{me['attempt_id']}/reports"
            body = json.dumps(
                {"fence": me["attempt_fence"], "process_id": me["process_id"], "kind": "heartbeat"}
            ).encode()

            def op() -> bool:
                return post(path, content=body).status_code == 200

        elif operation == "renew":
            body = json.dumps(
                {"resource": me["resource"], "fence": me["fence"], "process_id": me["process_id"]}
            ).encode()

            def op() -> bool:
                return post("/api/v1/leases/renew", content=body).status_code == 200

        elif operation in ("acquire", *TREE_NAMES):
            counter = itertools.count()
            prefix = TREE_NAMES.get(operation, "bench/acquire/{tag}/{i}/").format(
                tag=tag, i=i, d=i % TREE_DIRECTORIES
            )
            tail = f', "ttl_s": {ACQUIRE_TTL_S}, "process_id": "{me["process_id"]}"}}'

            def op() -> bool:
                body = f'{{"resource": "{prefix}{next(counter)}"{tail}'.encode()
                return post("/api/v1/leases/acquire", content=body).status_code == 201

        else:
            raise ValueError(operation)
        return op, client.close

    return factory


# --- Raw SQL through psycopg -------------------------------------------------------------------


def engine_statement(call: Callable[..., object], **kwargs: Any) -> tuple[str, dict[str, Any]]:
    """The exact SQL (and parameters) the lease engine sends for `call(**kwargs)`, rendered for
    the configured database without running it, so raw SQL runs what Ground Control runs."""
    from leases import engine

    captured: list[tuple[str, dict[str, Any]]] = []
    with mock.patch.object(engine, "one", lambda sql, params: captured.append((sql, params))):
        call(**kwargs)
    return captured[0]


def sql(dsn: str, fixtures: dict[str, Any], operation: str, tag: str) -> ClientFactory:
    """The statements behind each Ground Control operation, sent by psycopg in autocommit."""
    import psycopg

    from leases import engine, tree

    workspace_id = fixtures["workspace_id"]

    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        me = fixtures["clients"][i]
        conn = psycopg.connect(dsn, autocommit=True)
        execute = conn.execute
        if operation == "renew":
            statement, params = engine_statement(
                engine.renew,
                workspace_id=workspace_id,
                resource=me["resource"],
                holder=me["hand"],
                fence=me["fence"],
                process_id=me["process_id"],
            )

            def op() -> bool:
                return execute(statement, params).fetchone() is not None

        elif operation == "heartbeat":
            # A bare heartbeat: the fleet's one-statement renewing report (the slot lease's
            # renewal; the report row and the attempt's stamp at most once a minute), with the
            # caller as parameters, as the services send it.
            from fleet.attempts import reports as report_services

            statement = report_services.report_statement(
                with_percent=False,
                bare=True,
                caller=report_services.ReportCaller(hand="%(hand_id)s"),
            )
            params = {
                **report_services.report_params(
                    attempt_id=me["attempt_id"],
                    fence=me["attempt_fence"],
                    kind="heartbeat",
                    process_id=me["process_id"],
                    message="",
                    percent=None,
                    details=None,
                ),
                "hand_id": me["hand_id"],
                "workspace_id": workspace_id,
            }

            def op() -> bool:
                return execute(statement, params).fetchone() is not None

        elif operation == "acquire":
            statement, params = engine_statement(
                engine.insert,
                workspace_id=workspace_id,
                resource="",
                kind="resource",
                holder=me["hand"],
                process_id=me["process_id"],
                interval_s=ACQUIRE_TTL_S,
                grace_s=0,
            )
            counter = itertools.count()
            prefix = f"bench/sql-acquire/{tag}/{i}/"
            # Bound on the client, as Django sends it: bound by the server, the holder would be
            # text where it is written and varchar where it is compared, which PostgreSQL refuses.
            bound_here = psycopg.ClientCursor(conn)

            def op() -> bool:
                resource = f"{prefix}{next(counter)}"
                # The resource's node and lineage too: they are what the statement matches on.
                params.update(resource=resource, **tree.tree_params(resource))
                return bound_here.execute(statement, params).fetchone() is not None

        else:
            raise ValueError(operation)
        return op, conn.close

    return factory


# --- Redis -------------------------------------------------------------------------------------

# KEYS: the lock, the resource's fence counter. ARGV: holder, ttl in ms.
# Granted: {1, fence}; held: {0, "holder:fence"}.
REDIS_ACQUIRE = """
local current = redis.call('GET', KEYS[1])
if current then return {0, current} end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return {1, fence}
"""
# KEYS: the lock. ARGV: "holder:fence", ttl in ms. Extends only the current tenure.
REDIS_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def redis_driver(url: str, operation: str, tag: str) -> ClientFactory:
    import redis

    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        client = redis.Redis.from_url(url, single_connection_client=True)
        acquire = client.register_script(REDIS_ACQUIRE)
        ttl_ms = ACQUIRE_TTL_S * 1000
        holder = f"bench-{i}"
        if operation == "acquire":
            counter = itertools.count()
            prefix = f"bench:{tag}:{i}:"

            def op() -> bool:
                name = f"{prefix}{next(counter)}"
                return (
                    acquire(keys=[f"lock:{name}", f"fence:{name}"], args=[holder, ttl_ms])[0] == 1
                )

        elif operation == "renew":
            renew = client.register_script(REDIS_RENEW)
            name = f"bench:{tag}:renew:{i}"
            granted, fence = acquire(keys=[f"lock:{name}", f"fence:{name}"], args=[holder, ttl_ms])
            assert granted == 1
            token = f"{holder}:{fence}"

            def op() -> bool:
                return renew(keys=[f"lock:{name}"], args=[token, ttl_ms]) == 1

        else:
            raise ValueError(operation)
        return op, client.close

    return factory


# --- etcd v3 through its JSON gateway ----------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def etcd_driver(base_url: str, operation: str, tag: str, http_client: str = "raw") -> ClientFactory:
    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        client = _http(http_client, base_url)
        post = client.post

        def grant() -> str:
            answer = post("/v3/lease/grant", content=f'{{"TTL": {ACQUIRE_TTL_S}}}'.encode())
            if answer.status_code != 200:
                raise RuntimeError(f"lease grant answered {answer.status_code}")
            return str(answer.json()["ID"])

        if operation == "acquire":
            counter = itertools.count()
            prefix = f"bench/{tag}/{i}/"
            value = _b64(f"bench-{i}")

            def op() -> bool:
                lease_id = grant()
                key = _b64(f"{prefix}{next(counter)}")
                txn = {
                    "compare": [
                        {"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
                    ],
                    "success": [{"request_put": {"key": key, "value": value, "lease": lease_id}}],
                    "failure": [{"request_range": {"key": key}}],
                }
                answer = post("/v3/kv/txn", content=json.dumps(txn).encode())
                return answer.status_code == 200 and answer.json().get("succeeded") is True

        elif operation == "keepalive":
            body = json.dumps({"ID": grant()}).encode()

            def op() -> bool:
                answer = post("/v3/lease/keepalive", content=body)
                return answer.status_code == 200 and int(answer.json()["result"]["TTL"]) > 0

        else:
            raise ValueError(operation)
        return op, client.close

    return factory


# --- Ground Control: many leases of one process, renewed at once or one by one ----------------

# How many leases each client holds for the renew-all rows (issue 21, item 7: "renewing 20 leases
# in one call costs less than 3 single renewals").
MANY = RENEW_ALL_LEASES
MANY_TTL_S = 3600


def many_process_id(me: dict[str, Any]) -> str:
    """The client's process identity for its many leases: its own, so that the leases its acquire
    rows took (process `me["process_id"]`) are not among those a renew-all renews."""
    return f"{me['process_id']}/many"


def hold_many(
    base_url: str, fixtures: dict[str, Any], clients: int, http_client: str = "raw"
) -> list[list[tuple[str, int]]]:
    """Make each of the first `clients` clients acquire `MANY` resources (`bench/many/{i}/{n}`)
    with `many_process_id`: per client, its (resource, fence) pairs. `let_go` releases them."""
    held: list[list[tuple[str, int]]] = []
    for i in range(clients):
        me = fixtures["clients"][i]
        client = _http(http_client, base_url, {"Authorization": f"Bearer {me['key']}"})
        mine = []
        try:
            for n in range(MANY):
                resource = f"bench/many/{i}/{n:02}"
                body = json.dumps(
                    {"resource": resource, "ttl_s": MANY_TTL_S, "process_id": many_process_id(me)}
                ).encode()
                answer = client.post("/api/v1/leases/acquire", content=body)
                if answer.status_code != 201:
                    raise RuntimeError(
                        f"acquiring {resource} answered {answer.status_code}: {answer.content!r}"
                    )
                mine.append((resource, int(answer.json()["fence"])))
        finally:
            client.close()
        held.append(mine)
    return held


def let_go(
    base_url: str,
    fixtures: dict[str, Any],
    held: list[list[tuple[str, int]]],
    http_client: str = "raw",
) -> None:
    """Release what `hold_many` acquired (the next block acquires the same names anew)."""
    for i, mine in enumerate(held):
        me = fixtures["clients"][i]
        client = _http(http_client, base_url, {"Authorization": f"Bearer {me['key']}"})
        try:
            for resource, fence in mine:
                body = json.dumps({"resource": resource, "fence": fence}).encode()
                client.post("/api/v1/leases/release", content=body)
        finally:
            client.close()


def gc_many(
    base_url: str,
    fixtures: dict[str, Any],
    operation: str,
    held: list[list[tuple[str, int]]],
    http_client: str = "raw",
) -> ClientFactory:
    """Clients holding `MANY` leases each (`hold_many`): `renew-all` renews them all in one
    `POST /leases/renew-all` (granted when all `MANY` are renewed), `renew-one` renews them one
    `POST /leases/renew` at a time, in turn."""

    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        me = fixtures["clients"][i]
        client = _http(http_client, base_url, {"Authorization": f"Bearer {me['key']}"})
        post = client.post
        process_id = many_process_id(me)
        if operation == "renew-all":
            body = json.dumps({"process_id": process_id}).encode()
            count = len(held[i])

            def op() -> bool:
                answer = post("/api/v1/leases/renew-all", content=body)
                if answer.status_code != 200:
                    return False
                done = answer.json()
                return len(done["renewed"]) == count and not done["not_renewed"]

        elif operation == "renew-one":
            bodies = itertools.cycle(
                [
                    json.dumps(
                        {"resource": resource, "fence": fence, "process_id": process_id}
                    ).encode()
                    for resource, fence in held[i]
                ]
            )

            def op() -> bool:
                return post("/api/v1/leases/renew", content=next(bodies)).status_code == 200

        else:
            raise ValueError(operation)
        return op, client.close

    return factory
