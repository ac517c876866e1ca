"""The history harness: many client processes against a real server, every operation recorded,
and checkers over that history and the server's event log.

    python -m tests.reliability.harness --clients 32 --seconds 600 [--report out.json]

Standalone, it makes a fresh PostgreSQL database on DATABASE_URL's server (dropped afterwards),
migrates it, bootstraps a supervisor, and serves it with the production web server (several
workers, each running the periodic jobs, so several sweeps race); `--url URL --key KEY` points it
at a running server instead. tests/reliability/test_history.py runs it for a bounded time in CI.

What happens:

1. Each client is its own OS process (`python -m tests.reliability.harness client ...`). It
   acquires, renews, re-acquires and releases a few flat resources (exclusive), the nodes of a
   small tree (`repo`, `repo/src/`, `repo/src/auth/login.py`, ...) in shared or exclusive mode,
   and members of a pool (capacity 3, created by the coordinator with the supervisor's key);
   it claims the slots of one run, heartbeats and finishes or releases them, sometimes abandons
   a tenure, sometimes sleeps longer than its TTL, sometimes waits (`wait_s`) in the queue, and
   writes through a small protected store. Every call is recorded with its invoke and complete
   times (the client's clock) and its result, including the database's times the server
   reported.
2. The coordinator freezes random clients with SIGSTOP for longer than a TTL and thaws them
   with SIGCONT (a GC pause, a swapped-out laptop), and a supervisor breaks a lease now and then
   (a flat resource, a node of the tree with its shared tenures, a pool's member).
3. The store applies a write only after `POST /leases/check` says its fence is current; it holds
   a per-node lock from the check to the apply, so writes are applied in check order.
4. When the clients are done, every tenure is left to expire and the sweeps to record it; then
   the checkers (tests/reliability/checkers.py, which lists them) read the history, the store's
   log, the freezers' pauses and the whole event log and report anomalies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from leases.names import node_of
from tests.reliability.checkers import END_KINDS, GRANT_KINDS, WATCHED_KINDS, check, paused_clients
from tests.reliability.live import ROOT, Api, WebServer, migrate_and_bootstrap, server_env

TREE = [
    "repo",
    "repo/src/",
    "repo/src/auth/",
    "repo/src/auth/login.py",
    "repo/src/web.py",
    "repo/docs/",
    "repo/docs/guide.md",
]


@dataclass
class Config:
    clients: int = 32
    seconds: float = 40.0
    resources: list[str] = field(default_factory=lambda: ["src/auth/", "migrations", "dev-server"])
    tree: list[str] = field(default_factory=lambda: list(TREE))  # shared or exclusive
    pool_capacity: int = 3
    # A client's next round: a flat resource, a node of the tree, a pool's member, or a slot.
    rounds: dict[str, float] = field(
        default_factory=lambda: {"flat": 0.2, "tree": 0.3, "pool": 0.15, "slot": 0.35}
    )
    slots: int = 3
    ttl_s: float = 2.0  # resource leases (grace 0)
    interval_s: int = 2  # slot heartbeat interval (whole seconds, the API's bound)
    grace_s: int = 2
    freezers: int = 4  # threads that SIGSTOP clients, one at a time each
    stop_every_s: float = 0.5  # each freezer's mean wait between two SIGSTOPs
    break_every_s: float = 1.5  # mean time between supervisor breaks
    seed: int = 7

    @property
    def slot_lost_after_s(self) -> float:
        return self.interval_s + self.grace_s


# --- A client process ----------------------------------------------------------------------------


class Recorder:
    """One client's history, a JSON line per operation, flushed as it goes."""

    def __init__(self, path: Path, index: int) -> None:
        self.out = path.open("a", buffering=1)
        self.index = index

    def call(self, kind: str, send: Any, **fields: Any) -> tuple[str, dict[str, Any]]:
        """Run `send()` (an httpx call), record it, and return (outcome, body).

        outcome: ok (2xx), fail (a refusal with a code), info (no answer: the outcome is
        unknown, as for a timeout).
        """
        invoke = time.time()
        status: int | None = None
        body: dict[str, Any] = {}
        try:
            response = send()
            status = response.status_code
            try:
                body = response.json()
            except ValueError:
                body = {"raw": response.text[:200]}
            outcome = "ok" if status < 300 else "fail"
        except httpx.HTTPError as error:
            body = {"exception": type(error).__name__}
            outcome = "info"
        record = {
            "c": self.index,
            "kind": kind,
            "invoke": invoke,
            "complete": time.time(),
            "status": status,
            "outcome": outcome,
            **fields,
        }
        if outcome == "fail":
            error = body.get("error", {}) if isinstance(body, dict) else {}
            record["code"] = error.get("code")
            record["error"] = {
                k: error.get(k)
                for k in ("holder", "fence", "current_fence", "expires_in_s", "state")
                if k in error
            }
        elif outcome == "ok":
            record["body"] = body
        else:
            record["exception"] = body.get("exception")
        self.out.write(json.dumps(record, default=str) + "\n")
        return outcome, body

    def note(self, kind: str, **fields: Any) -> None:
        self.out.write(
            json.dumps({"c": self.index, "kind": kind, "at": time.time(), **fields}) + "\n"
        )


def client_main(spec: dict[str, Any], index: int, out: Path) -> None:
    """One hand's life: rounds on resources, the tree, the pool and slots until the deadline."""
    config = Config(**spec["config"])
    rng = random.Random(config.seed * 1000 + index)
    api = Api(spec["url"], spec["keys"][index], timeout=30)
    store = httpx.Client(base_url=spec["store_url"], timeout=30)
    rec = Recorder(out, index)
    process = f"harness-{index}:{os.getpid()}"
    deadline = spec["deadline"]
    seq = 0

    def dawdle(limit: float) -> None:
        # One pause in eight outlasts the lease: its holder comes back to find it gone.
        if rng.random() < 0.125:
            pause = rng.uniform(limit * 1.1, limit * 1.6)
            rec.note("sleep", seconds=pause)
        else:
            pause = rng.uniform(0, limit / 10)
        time.sleep(pause)

    def acquire(
        target: tuple[str, str] | None, wait: float, held: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Take (or, `held`, take again) a `(resource, mode)`, or (None) a member of the pool."""
        if target is None:
            pool = spec["pool"]
            return rec.call(
                "pool_acquire",
                lambda: api.post(
                    f"/pools/{pool}/acquire",
                    {"process_id": process, "ttl_s": config.ttl_s, "wait_s": wait},
                ),
                pool=pool,
                wait_s=wait,
                **({"resource": held["resource"], "held_fence": held["fence"]} if held else {}),
            )
        resource, mode = target
        return rec.call(
            "acquire",
            lambda: api.post(
                "/leases/acquire",
                {
                    "resource": resource,
                    "ttl_s": config.ttl_s,
                    "process_id": process,
                    "wait_s": wait,
                    "mode": mode,
                },
            ),
            resource=resource,
            mode=mode,
            wait_s=wait,
            **({"held_fence": held["fence"]} if held else {}),
        )

    def resource_round(kind: str) -> None:
        """A flat resource (exclusive), a node of the tree (shared or exclusive), or a member of
        the pool: take it, renew, write, take again, then release or abandon it."""
        nonlocal seq
        target = None  # the pool
        if kind == "flat":
            target = (rng.choice(config.resources), "exclusive")
        elif kind == "tree":
            target = (rng.choice(config.tree), rng.choice(["shared", "shared", "exclusive"]))
        outcome, body = acquire(target, rng.choice([0, 0, 0, 0.5, config.ttl_s]))
        if outcome != "ok":
            time.sleep(rng.uniform(0, 0.1))
            return
        resource, fence = body["resource"], body["fence"]
        for _ in range(rng.randint(0, 3)):
            dawdle(config.ttl_s)
            action = rng.choice(["renew", "write", "write", "reacquire"])
            if action == "write":
                seq += 1
                payload = {"resource": resource, "fence": fence, "client": index, "seq": seq}
                rec.call(
                    "write",
                    lambda p=payload: store.post("/write", json=p),
                    resource=resource,
                    fence=fence,
                    seq=seq,
                )
                continue
            if action == "renew":
                outcome, body = rec.call(
                    "renew",
                    lambda f=fence, r=resource: api.post(
                        "/leases/renew", {"resource": r, "fence": f, "process_id": process}
                    ),
                    resource=resource,
                    fence=fence,
                )
            else:
                outcome, body = acquire(target, 0, held={"resource": resource, "fence": fence})
            if outcome != "ok":
                return
            # A re-acquire after losing it is a new tenure (of another member, maybe).
            resource, fence = body["resource"], body["fence"]
        if rng.random() < 0.8:
            rec.call(
                "release",
                lambda: api.post("/leases/release", {"resource": resource, "fence": fence}),
                resource=resource,
                fence=fence,
            )
        else:
            rec.note("abandon", resource=resource, fence=fence)

    def slot_round() -> None:
        outcome, body = rec.call(
            "claim", lambda: api.post(f"/runs/{spec['run_id']}/claim", {"process_id": process})
        )
        if outcome != "ok":
            time.sleep(rng.uniform(0, 0.1))
            return
        attempt, fence, resource = body["id"], body["fence"], body["lease"]["resource"]
        for _ in range(rng.randint(0, 3)):
            dawdle(config.slot_lost_after_s)
            outcome, body = rec.call(
                "report",
                lambda: api.post(
                    f"/attempts/{attempt}/reports",
                    {"fence": fence, "process_id": process, "kind": "heartbeat"},
                ),
                resource=resource,
                fence=fence,
                attempt=attempt,
            )
            if outcome != "ok":
                return
        choice = rng.random()
        if choice < 0.45:
            rec.call(
                "finish",
                lambda: api.post(
                    f"/attempts/{attempt}/finish",
                    {
                        "fence": fence,
                        "process_id": process,
                        "evidence": [
                            {"kind": "pull_request", "url": f"https://x.example/pr/{index}"}
                        ],
                    },
                ),
                resource=resource,
                fence=fence,
                attempt=attempt,
            )
        elif choice < 0.85:
            rec.call(
                "release_slot",
                lambda: api.post(
                    f"/attempts/{attempt}/release",
                    {"fence": fence, "process_id": process, "reason": "harness"},
                ),
                resource=resource,
                fence=fence,
                attempt=attempt,
            )
        else:
            rec.note("abandon", resource=resource, fence=fence, attempt=attempt)

    kinds, weights = list(config.rounds), list(config.rounds.values())
    while time.time() < deadline:
        kind = rng.choices(kinds, weights)[0]
        if kind == "slot":
            slot_round()
        else:
            resource_round(kind)
    rec.note("done")


# --- The protected store --------------------------------------------------------------------------


class FencedStore:
    """A tiny storage service that applies a write only after Ground Control's `check` says its
    fence is current. A per-node lock covers the check and the apply, so writes land in the
    order of their checks."""

    def __init__(self, gc_url: str, key: str) -> None:
        self.gc_url, self.key = gc_url, key
        self.locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self.guard = threading.Lock()
        self.log: list[dict[str, Any]] = []
        self.data: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self._local = threading.local()
        store = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = store.write(payload)
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def _api(self) -> Api:
        if not hasattr(self._local, "api"):
            self._local.api = Api(self.gc_url, self.key, timeout=30)
        return self._local.api

    def write(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        resource, fence = payload["resource"], payload["fence"]
        with self.guard:
            lock = self.locks[node_of(resource)]  # one node, however it is spelled
        with lock:
            entry = {**payload, "checked_at": None, "applied": False}
            try:
                response = self._api().post("/leases/check", {"resource": resource, "fence": fence})
                body = response.json()
                entry["check_status"] = response.status_code
            except (httpx.HTTPError, ValueError) as error:
                entry["check_status"], body = None, {"error": {"code": type(error).__name__}}
            if entry["check_status"] == 200 and body.get("valid") is True:
                entry["checked_at"] = body["lease"]["server_time"]
                entry["applied"] = True
                self.data[resource].append((fence, payload["client"], payload["seq"]))
            else:
                entry["code"] = body.get("error", {}).get("code")
            with self.guard:
                self.log.append(entry)
        if entry["applied"]:
            return 200, {"applied": True}
        return 409, {"error": {"code": entry.get("code") or "check_failed"}}

    def __enter__(self) -> FencedStore:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- The coordinator ------------------------------------------------------------------------------


@dataclass
class Setup:
    run_id: int
    hands: list[str]
    keys: list[str]
    store_key: str
    pool: str

    def names(self, config: Config) -> list[str]:
        """Every name a client may hold: what the supervisor breaks."""
        members = [f"pool/{self.pool}/{n}" for n in range(1, config.pool_capacity + 1)]
        return [*config.resources, *config.tree, *members]


def setup_fleet(boss: Api, config: Config, tag: str) -> Setup:
    """A lane, a package, a run with a few short slots, a pool, one hand and key per client,
    and the store's key, all through the API."""
    boss.ok("post", "/lanes", {"slug": f"harness-{tag}", "name": "Harness"})
    package = boss.ok(
        "post", f"/lanes/harness-{tag}/work-packages", {"title": "History", "key": f"history-{tag}"}
    )
    run = boss.ok(
        "post",
        f"/work-packages/{package['id']}/runs",
        {
            "title": "Slots under fire",
            "brief": "Claim, heartbeat, finish.",
            "slots": config.slots,
            "heartbeat_interval_s": config.interval_s,
            "grace_s": config.grace_s,
            "evidence_required": [],
        },
    )
    hands, keys = [], []
    for i in range(config.clients):
        name = f"h{tag}-{i}"
        boss.ok("post", "/hands", {"name": name})
        keys.append(boss.ok("post", f"/hands/{name}/keys", {"scopes": ["work", "leases"]})["key"])
        hands.append(name)
    boss.ok("post", "/hands", {"name": f"store-{tag}"})
    store_key = boss.ok("post", f"/hands/store-{tag}/keys", {"scopes": ["leases"]})["key"]
    pool = boss.ok("post", "/pools", {"name": f"ports-{tag}", "capacity": config.pool_capacity})
    return Setup(run_id=run["id"], hands=hands, keys=keys, store_key=store_key, pool=pool["name"])


@dataclass
class Faults:
    sigstops: int = 0
    stopped_s: float = 0.0
    breaks: int = 0
    slots_added: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _freezer(
    pids: list[int], config: Config, stop: threading.Event, faults: Faults, rng: random.Random
) -> None:
    """SIGSTOP one client (not already frozen) for longer than a TTL, then SIGCONT it."""
    while not stop.wait(rng.expovariate(1 / config.stop_every_s)):
        with faults.lock:
            candidates = [pid for pid in pids if pid not in faults.frozen]
            if not candidates:
                continue
            pid = rng.choice(candidates)
            faults.frozen.add(pid)
        pause = rng.uniform(config.ttl_s * 1.2, config.slot_lost_after_s * 1.5)
        started = time.time()
        try:
            os.kill(pid, signal.SIGSTOP)
            stop.wait(pause)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        with faults.lock:
            faults.frozen.discard(pid)
            faults.sigstops += 1
            faults.stopped_s += time.time() - started
            faults.log.append({"pid": pid, "from": started, "to": time.time()})


def _breaker(
    boss_url: str,
    key: str,
    config: Config,
    names: list[str],
    stop: threading.Event,
    faults: Faults,
    history: list[dict[str, Any]],
    rng: random.Random,
) -> None:
    """A supervisor breaks a random name's lease now and then: every tenure of its node ends
    (shared ones too), and its fence moves on."""
    boss = Api(boss_url, key)
    while not stop.wait(rng.expovariate(1 / config.break_every_s)):
        resource = rng.choice(names)
        invoke = time.time()
        response = boss.post("/leases/break", {"resource": resource, "reason": "harness"})
        history.append(
            {
                "c": -1,
                "kind": "break",
                "resource": resource,
                "invoke": invoke,
                "complete": time.time(),
                "status": response.status_code,
                "outcome": "ok" if response.status_code < 300 else "fail",
                "code": None if response.status_code < 300 else response.json()["error"]["code"],
            }
        )
        if response.status_code == 200:
            faults.breaks += 1
    boss.close()


def _planner(
    boss_url: str, key: str, run_id: int, config: Config, stop: threading.Event, faults: Faults
) -> None:
    """A supervisor adds slots whenever the run is done, so the fight for its slots lasts the
    whole history: else its first few finishes end the run, every later claim is `run_closed`,
    and on a slow machine no claim ever finds every slot held (`no_open_slot`)."""
    boss = Api(boss_url, key)
    while not stop.wait(0.2):
        try:
            run = boss.get(f"/runs/{run_id}")
            if run.status_code == 200 and run.json()["state"] == "done":
                added = boss.post(
                    f"/runs/{run_id}/slots", {"count": config.slots, "reason": "harness: more"}
                )
                if added.status_code == 201:
                    faults.slots_added += config.slots
        except httpx.HTTPError:
            # The server is down for a moment (tests/ha kills its primary): ask again.
            continue
    boss.close()


def run_history(
    url: str,
    boss_key: str,
    config: Config,
    workdir: Path,
    during: Callable[[threading.Event], None] | None = None,
    checker: Callable[..., dict[str, Any]] = check,
) -> dict[str, Any]:
    """Run the clients against `url`, inject pauses and breaks, then check. Returns the report
    (its `anomalies` list is empty when every promise held). `during(stop)` runs in a thread of
    its own beside the freezers (another fault: tests/ha kills the primary); `checker` is called
    as `check` is."""
    workdir.mkdir(parents=True, exist_ok=True)
    tag = secrets.token_hex(3)
    boss = Api(url, boss_key)
    setup = setup_fleet(boss, config, tag)
    faults = Faults()
    breaks: list[dict[str, Any]] = []
    started = time.time()
    with FencedStore(url, setup.store_key) as store:
        spec = {
            "url": url,
            "keys": setup.keys,
            "store_url": store.url,
            "run_id": setup.run_id,
            "pool": setup.pool,
            "config": asdict(config),
            "deadline": started + config.seconds,
        }
        spec_path = workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        clients = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.reliability.harness",
                    "client",
                    "--spec",
                    str(spec_path),
                    "--index",
                    str(i),
                    "--out",
                    str(workdir / f"client-{i}.jsonl"),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=(workdir / f"client-{i}.err").open("w"),
            )
            for i in range(config.clients)
        ]
        stop = threading.Event()
        # A few freezers, each pausing one client at a time: several are frozen at once.
        threads = [
            threading.Thread(
                target=_freezer,
                args=(
                    [c.pid for c in clients],
                    config,
                    stop,
                    faults,
                    random.Random(config.seed + n),
                ),
            )
            for n in range(1, config.freezers + 1)
        ]
        threads += [
            threading.Thread(
                target=_breaker,
                args=(
                    url,
                    boss_key,
                    config,
                    setup.names(config),
                    stop,
                    faults,
                    breaks,
                    random.Random(config.seed),
                ),
            ),
        ]
        threads.append(
            threading.Thread(
                target=_planner, args=(url, boss_key, setup.run_id, config, stop, faults)
            )
        )
        if during is not None:
            threads.append(threading.Thread(target=during, args=(stop,)))
        for thread in threads:
            thread.start()
        try:
            time.sleep(config.seconds)
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
            for client in clients:  # never leave one frozen
                try:
                    os.kill(client.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            crashed = []
            for i, client in enumerate(clients):
                try:
                    client.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    client.kill()
                    client.wait()
                if client.returncode != 0:
                    crashed.append((i, (workdir / f"client-{i}.err").read_text()[-2000:]))
        store_log = list(store.log)
    # Let every tenure run out and the sweeps record it before reading the event log.
    time.sleep(max(config.ttl_s, config.slot_lost_after_s) + 3)
    history = load_history(workdir, config.clients) + breaks
    events = [
        e for e in boss.pages("/events") if e["kind"] in (*GRANT_KINDS, *END_KINDS, *WATCHED_KINDS)
    ]
    boss.close()
    (workdir / "events.json").write_text(json.dumps(events))
    (workdir / "store.json").write_text(json.dumps(store_log))
    paused = paused_clients(faults.log, {client.pid: i for i, client in enumerate(clients)})
    report = checker(history, store_log, events, config, setup.hands, paused)
    report["anomalies"] += [f"client {i} crashed: {err}" for i, err in crashed]
    report["faults"] = {
        "sigstops": faults.sigstops,
        "stopped_s": round(faults.stopped_s, 1),
        "breaks": faults.breaks,
        "slots_added": faults.slots_added,
        "sleeps_past_ttl": sum(1 for op in history if op["kind"] == "sleep"),
    }
    report["config"] = asdict(config)
    report["wall_s"] = round(time.time() - started, 1)
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def load_history(workdir: Path, clients: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for i in range(clients):
        path = workdir / f"client-{i}.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    try:
                        history.append(json.loads(line))
                    except ValueError:  # a line cut short by a kill: it recorded nothing
                        pass
    return history


# --- Standalone -------------------------------------------------------------------------------


def _standalone(args: argparse.Namespace, config: Config) -> dict[str, Any]:
    """A fresh database on DATABASE_URL's server, migrated, served by the production web server."""
    import psycopg

    base = args.database_url or os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"gc_harness_{os.getpid()}"
    admin_url = base.rsplit("/", 1)[0] + "/postgres"
    database = base.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gc-harness-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = server_env(database)
    try:
        key = migrate_and_bootstrap(env, "harness")
        with WebServer(env=env, log=workdir / "server.log", workers=args.workers) as server:
            return run_history(server.url, key, config, workdir)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.harness")
    sub = parser.add_subparsers(dest="command")
    client = sub.add_parser("client", help="(internal) one client process")
    client.add_argument("--spec", required=True)
    client.add_argument("--index", type=int, required=True)
    client.add_argument("--out", required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=3, help="web server workers")
    parser.add_argument("--url", help="a running server (with --key)")
    parser.add_argument("--key", help="a key with every scope on that server")
    parser.add_argument("--database-url", help="PostgreSQL server for a fresh database")
    parser.add_argument("--workdir", help="where histories and the report go")
    parser.add_argument("--report", help="also write the report here")
    args = parser.parse_args(argv)
    if args.command == "client":
        client_main(json.loads(Path(args.spec).read_text()), args.index, Path(args.out))
        return 0
    config = Config(clients=args.clients, seconds=args.seconds, seed=args.seed)
    if args.url:
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gc-harness-"))
        report = run_history(args.url, args.key, config, workdir)
    else:
        report = _standalone(args, config)
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text)
    return 1 if report["anomalies"] else 0


if __name__ == "__main__":
    sys.exit(main())
