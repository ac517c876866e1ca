"""An in-memory stand-in for the contract's hand and lease calls, behind `httpx.MockTransport`,
for unit tests of the client and its runtime (the live-server tests use the real API)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from groundcontrol_client import Client, RetryPolicy

URL = "http://gc.test"
KEY = "gc_abc123_secret"


def error(status: int, code: str, message: str = "refused", **fields: Any) -> httpx.Response:
    body = {"error": {"code": code, "message": message, "request_id": "req-1", **fields}}
    return httpx.Response(status, json=body)


class FakeServer:
    """One run with one slot, and resource leases, answering as the contract says.

    Knobs: `down` makes every call fail to connect; `gateway` (502, 504, ...) answers every call
    with that status and an HTML page, as a reverse proxy does while the server behind it
    restarts; `report_answer` replaces the answer to reports (a refusal, say); `before_answer`
    runs inside each call (to move a fake clock); `handoff_requests` are the open requests a
    heartbeat's or a renewal's answer shows its holder.
    """

    def __init__(self, *, interval_s: float = 0.3, grace_s: float = 0.3) -> None:
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        # When each of `requests` reached the fake (time.monotonic), to judge a runtime's renewals
        # by the windows they kept, not by how many fit in a stretch of wall clock.
        self.arrivals: list[float] = []
        self.directive = "continue"
        self.evidence_required: list[str] = []
        self.down = False
        self.gateway: int | None = None
        self.report_answer: httpx.Response | None = None
        self.before_answer: Callable[[httpx.Request], None] | None = None
        self.fence = 0
        self.process_id = ""
        self.state = "live"
        self.leases: dict[str, dict[str, Any]] = {}
        self.handoff_requests: list[dict[str, Any]] = []

    # --- helpers for tests ------------------------------------------------------------------

    def client(self, **kwargs: Any) -> Client:
        kwargs.setdefault("retry", RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.02))
        return Client(URL, KEY, transport=httpx.MockTransport(self.handle), **kwargs)

    def calls(self, path_end: str, kind: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                body
                for _, path, body in self.requests
                if path.endswith(path_end) and (kind is None or body.get("kind") == kind)
            ]

    def record(self, method: str, path: str, body: dict[str, Any]) -> None:
        """A call that reached the fake (or a proxy in front of it), and when."""
        with self.lock:
            self.requests.append((method, path, body))
            self.arrivals.append(time.monotonic())

    def times(self, *path_ends: str, **fields: Any) -> list[float]:
        """When the calls to any of `path_ends` whose body holds `fields` arrived, in order."""
        with self.lock:
            return [
                at
                for (_, path, body), at in zip(self.requests, self.arrivals, strict=True)
                if path.endswith(path_ends) and all(body.get(k) == v for k, v in fields.items())
            ]

    def attempt(self) -> dict[str, Any]:
        return {
            "id": 41,
            "run": 12,
            "slot": 0,
            "hand": "hand-a",
            "process_id": self.process_id,
            "state": self.state,
            "directive": self.directive,
            "lease": {
                "resource": "run/12/slot/0",
                "fence": self.fence,
                "holder": "hand-a",
                "heartbeat_interval_s": self.interval_s,
                "grace_s": self.grace_s,
                "expires_at": "2030-01-01T12:00:00+00:00",
                "expires_in_s": self.interval_s,
                "server_time": "2030-01-01T12:00:00+00:00",
            },
            "claimed_at": "2030-01-01T12:00:00+00:00",
            "last_report_at": None,
            "ended_at": None,
            "end_reason": None,
        }

    def lease(self, resource: str) -> dict[str, Any]:
        lease = self.leases[resource]
        return {
            "resource": resource,
            "holder": lease["holder"],
            "process_id": lease["process_id"],
            "fence": lease["fence"],
            "state": "live",
            "ttl_s": lease["ttl_s"],
            "expires_in_s": lease["ttl_s"],
            "server_time": "2030-01-01T12:00:00+00:00",
        }

    def slot(self) -> dict[str, Any]:
        """Slot 0 of run 12: held while an attempt is live, done once finished, else open."""
        state = {"finished": "done"}.get(self.state, "held" if self.fence else "open")
        if self.state in ("released", "lost"):
            state = "open"
        held = state == "held"
        return {
            "index": 0,
            "state": state,
            "holder": "hand-a" if held else None,
            "fence": self.fence,
            "expires_in_s": self.interval_s if held else None,
        }

    def run(self) -> dict[str, Any]:
        slot = self.slot()["state"]
        return {
            "id": 12,
            "title": "Fix the login redirect",
            "state": "done" if slot == "done" else "open",
            "lane": "rewalk",
            "work_package": {"id": 7, "key": "rewalk-1", "title": "Daily rewalk"},
            "evidence_required": self.evidence_required,
            "heartbeat_interval_s": self.interval_s,
            "grace_s": self.grace_s,
            "slots": {"total": 1, **{s: int(slot == s) for s in ("open", "held", "done")}},
            "created_at": "2030-01-01T12:00:00Z",
        }

    @staticmethod
    def _listed(
        items: list[dict[str, Any]], request: httpx.Request, by: str | None
    ) -> httpx.Response:
        wanted = request.url.params.get(by) if by else None
        return httpx.Response(200, json=[i for i in items if not wanted or i["state"] == wanted])

    # --- the transport ----------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        path = request.url.path
        self.record(request.method, path, body)
        if self.before_answer is not None:
            self.before_answer(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.gateway is not None:
            page = f"<html><body><h1>{self.gateway} Bad Gateway</h1>nginx</body></html>"
            return httpx.Response(self.gateway, text=page, headers={"content-type": "text/html"})
        assert request.headers["authorization"] == f"Bearer {KEY}"
        route = path.removeprefix("/api/v1/")
        if route == "runs/12/claim":
            if self.state == "live" and self.fence:
                return error(409, "no_open_slot", "run 12 has no open slot", slots=1)
            self.fence += 1
            self.process_id = body["process_id"]
            return httpx.Response(201, json=self.attempt())
        if route == "attempts/41/reports":
            if self.report_answer is not None:
                return self.report_answer
            renewed = body.get("process_id") == self.process_id
            answer = {"renewed": renewed, "attempt": self.attempt()}
            return httpx.Response(200, json={**answer, "handoff_requests": self.handoff_requests})
        if route == "attempts/41/brief":
            run = {"id": 12, "title": "Run", "brief": "Do it", "evidence_required": []}
            return httpx.Response(200, json={"attempt": self.attempt(), "run": run})
        if route == "attempts/41/finish":
            kinds = {item["kind"] for item in body["evidence"]}
            missing = [k for k in self.evidence_required if k not in kinds]
            if missing:
                return error(422, "evidence_missing", "evidence missing", missing=missing)
            self.state = "finished"
            return httpx.Response(200, json=self.attempt())
        if route == "attempts/41/release":
            self.state = "released"
            return httpx.Response(200, json=self.attempt())
        if route.startswith("leases/"):
            return self._lease_call(route.removeprefix("leases/"), body)
        if route == "runs/12/slots" and request.method == "GET":
            return self._listed([self.slot()], request, "state")
        if route == "runs" and request.method == "GET":
            return self._listed([self.run()], request, "state")
        if route == "leases" and request.method == "GET":
            leases = [self.lease(resource) for resource in self.leases]
            return self._listed(leases, request, None)
        return error(404, "not_found", f"no route {route}")

    def _lease_call(self, action: str, body: dict[str, Any]) -> httpx.Response:
        resource = body["resource"]
        lease = self.leases.get(resource)
        if action == "acquire":
            if lease and lease["holder"] != "hand-a":
                return error(
                    409,
                    "lease_held",
                    f"held by hand '{lease['holder']}' (fence {lease['fence']}) for 40 s",
                    holder=lease["holder"],
                    fence=lease["fence"],
                    expires_in_s=40.0,
                    state="live",
                    resource=resource,
                )
            fence = (lease["fence"] if lease else 0) + 1
            self.leases[resource] = {
                "holder": "hand-a",
                "process_id": body["process_id"],
                "fence": fence,
                "ttl_s": body["ttl_s"],
            }
            return httpx.Response(201, json=self.lease(resource))
        if lease is None:
            return error(404, "not_found", f"no lease on {resource!r}")
        if body["fence"] != lease["fence"]:
            return error(409, "stale_fence", "stale", current_fence=lease["fence"])
        if action == "renew":
            renewed = {**self.lease(resource), "handoff_requests": self.handoff_requests}
            return httpx.Response(200, json=renewed)
        if action == "check":
            return httpx.Response(200, json={"valid": True, "lease": self.lease(resource)})
        if action == "release":
            lease["holder"] = ""
            return httpx.Response(200, json={"released": True})
        return error(404, "not_found", action)


def gaps(times: list[float]) -> list[float]:
    """The time between each call and the next."""
    return [later - earlier for earlier, later in itertools.pairwise(times)]
