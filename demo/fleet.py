"""The demo fleet: simulated hands that use the real REST API, so a new user sees every state.

`setup` prepares the demo workspace in-process through the services (a lane, a work package,
three runs with short intervals, four hands with fresh keys); `DemoFleet` then runs one thread per
hand that speaks to the server only over REST, through the project's own client
(`groundcontrol_client.Client`), as any agent would:

- healthy:  claims a slot, heartbeats and reports progress, and holds the `migrations` lock;
- quiet:    claims, heartbeats a little, then goes silent: late, stalled, then lost; then again;
- finisher: claims, reports progress, finishes with a pull-request link; then again, on a new
            run (a finished slot is done: it is never claimed again);
- waiter:   claims, is denied the `migrations` lock (lease_held) and waits, heartbeating; gives
            up after a while, files a friction report linking those denials
            (`demo_loop.demo_friction`) and releases its slot with a reason; then again, up to
            `WAITER_TENURES` times in its workspace's record, then it rests (see below);
- idle:     heartbeats and spends tokens but never reports progress (demo/loop.py).

When the finisher's run is done, the demo's planner (a key with the `plan` scope, over the same
REST API) plans a new run like it, as a supervisor would plan the next piece of work.

The demo's record stays small however long it runs: a demo left running for a day (or started
again every day) shows the refusals and friction reports of its first minutes and no more. Only
the waiter is refused on purpose, at most `WAITER_DENIALS` times a tenure and `MAX_REFUSALS`
times in all, and files at most `MAX_FRICTION` reports, both counted from the workspace's record
when the demo starts; a hand that finished has its next run planned before it claims again, so
it is never refused for a done run.

Each hand obeys its directive: a paused hand keeps heartbeating but makes no progress, a stopped
one releases its slot. With the default timings every state shows within about a minute.
"""

from __future__ import annotations

import abc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import groundcontrol_client as gc
import httpx
from groundcontrol_client.core.errors import describe_holder

from apikit.errors import GroundControlError
from demo import loop as demo_loop
from demo.loop import demo_friction, demo_handoff
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, Run
from fleet.plan import services as plan_services
from friction.models import FrictionReport
from hands import services as hand_services
from hands.models import Hand, HandKey, Scope
from leases.models import Lease, LeaseKind, LeaseStatus, Refusal

logger = logging.getLogger(__name__)

LANE_SLUG = "demo"
LOCK = "migrations"
ACTOR = "demo-fleet"
HAND_NAMES = ("demo-healthy", "demo-quiet", "demo-finisher", "demo-waiter")
WAITER = "demo-waiter"
PLANNER = "demo-planner"

# The bound on what the demo leaves in its workspace's refusals and friction (the module's
# docstring): the waiter is denied the lock, asks for it, is declined and files a friction report
# in at most WAITER_TENURES tenures, each given up after at most WAITER_DENIALS refused acquires;
# then it rests. Counted from the record, so a restarted demo adds nothing once they are there
# (retention, GC_RETENTION_REFUSALS_DAYS, eventually lets it show them again).
WAITER_TENURES = 3
WAITER_DENIALS = 10
MAX_REFUSALS = WAITER_TENURES * WAITER_DENIALS
MAX_FRICTION = WAITER_TENURES


@dataclass(frozen=True)
class Timings:
    """Seconds. The run's interval and grace decide when a silent hand is late, stalled, lost."""

    heartbeat_interval_s: int = 6
    grace_s: int = 24
    beat_every_s: float = 2.0
    quiet_beats_for_s: float = 10.0
    finish_after_s: float = 20.0
    waiter_gives_up_after_s: float = 40.0
    rest_s: float = 15.0
    lock_ttl_s: int = 20
    wait_s: float = 2.0


FAST = Timings(
    heartbeat_interval_s=1,
    grace_s=2,
    beat_every_s=0.3,
    quiet_beats_for_s=0.6,
    finish_after_s=1.5,
    waiter_gives_up_after_s=2.5,
    rest_s=1.0,
    lock_ttl_s=5,
    wait_s=0.2,
)


@dataclass(frozen=True)
class DemoPlan:
    workspace_id: int
    runs: dict[str, int]  # hand name -> the run it works on
    keys: dict[str, str]  # hand name -> its key's plaintext (in memory only)
    work_package_id: int = 0
    planner_key: str = ""  # the `plan` key that plans a new run when one is done
    # What the waiter may still add to the record (the bound above), counted at setup.
    waiter_refusals_left: int = MAX_REFUSALS
    waiter_friction_left: int = MAX_FRICTION


_RUNS = {
    # title: (slots, evidence required, brief)
    "Rewalk the API docs": (2, [], "Walk every page of `docs/api.md` and fix what is stale."),
    "Fix the flaky login test": (
        1,
        ["pull_request"],
        "Find why `test_login` fails one run in twenty and fix it.\n\n"
        "Leave a **pull request** as evidence.",
    ),
    "Add the audit index": (
        1,
        [],
        "Add the index on `audit(at)`. Take the `migrations` lock before you migrate.",
    ),
}
_WORK = {
    "demo-healthy": "Rewalk the API docs",
    "demo-quiet": "Rewalk the API docs",
    "demo-finisher": "Fix the flaky login test",
    "demo-waiter": "Add the audit index",
}


def setup(*, workspace_name: str = "demo", timings: Timings = Timings()) -> DemoPlan:
    """Idempotently prepare the demo plan and mint a fresh key per demo hand.

    Whatever a previous demo process left held (its hands' open attempts, the lock) is broken,
    and its keys revoked, so a restart begins clean instead of waiting for those to be lost.
    """
    workspace = hand_services.workspace_get_or_create(name=workspace_name)
    lane, _ = hand_services.lane_create(
        workspace=workspace,
        slug=LANE_SLUG,
        name="Demo fleet",
        heartbeat_interval_s=timings.heartbeat_interval_s,
        grace_s=timings.grace_s,
    )
    package, _ = plan_services.work_package_create(
        lane=lane, key="demo-week", title="Demo week", external_ref="https://example.com/issues/1"
    )
    runs: dict[str, Run] = {}
    for title, (slots, evidence, brief) in _RUNS.items():
        run = Run.objects.filter(work_package=package, title=title, state="open").first()
        if run is None or (run.heartbeat_interval_s, run.grace_s) != (
            timings.heartbeat_interval_s,
            timings.grace_s,
        ):
            run = plan_services.run_create(
                work_package=package,
                title=title,
                brief=brief,
                slots=slots,
                evidence_required=evidence,
                heartbeat_interval_s=timings.heartbeat_interval_s,
                grace_s=timings.grace_s,
            )
        runs[title] = run
    hands = {
        name: hand_services.hand_create(workspace=workspace, name=name, lane=lane)[0]
        for name in (*HAND_NAMES, PLANNER)
    }
    _tidy(workspace.pk, list(hands.values()))
    planner = hands.pop(PLANNER)
    keys = {
        name: hand_services.key_issue(
            hand=hand, scopes=[Scope.WORK, Scope.LEASES], actor=ACTOR
        ).plaintext
        for name, hand in hands.items()
    }
    planner_key = hand_services.key_issue(hand=planner, scopes=[Scope.PLAN], lane=lane, actor=ACTOR)
    refused, filed = _waiter_record(workspace.pk)
    return DemoPlan(
        workspace_id=workspace.pk,
        runs={name: runs[title].pk for name, title in _WORK.items()},
        keys=keys,
        work_package_id=package.pk,
        planner_key=planner_key.plaintext,
        waiter_refusals_left=max(0, MAX_REFUSALS - refused),
        waiter_friction_left=max(0, MAX_FRICTION - filed),
    )


def _waiter_record(workspace_id: int) -> tuple[int, int]:
    """The waiter's refusals and friction reports kept in the workspace's record (two counts,
    on the indexes by workspace)."""
    refused = Refusal.objects.filter(workspace_id=workspace_id, hand=WAITER).count()
    filed = FrictionReport.objects.filter(workspace_id=workspace_id, hand=WAITER).count()
    return refused, filed


def _tidy(workspace_id: int, hands: list[Hand]) -> None:
    names = [hand.name for hand in hands]
    held = Lease.objects.filter(
        workspace_id=workspace_id, holder__in=names, status=LeaseStatus.HELD
    )
    resources = set(held.filter(kind=LeaseKind.RESOURCE).values_list("resource", flat=True))
    resources |= set(
        Attempt.objects.filter(hand__in=hands, end=None).values_list("lease__resource", flat=True)
    )
    for resource in sorted(resources):
        try:
            attempt_services.lease_break(
                workspace_id=workspace_id,
                resource=resource,
                actor=ACTOR,
                reason="demo fleet restarted",
            )
        except GroundControlError:
            pass  # already free: nothing to tidy
    for prefix in HandKey.objects.filter(hand__in=hands, revoked_at=None).values_list(
        "prefix", flat=True
    ):
        hand_services.key_revoke(
            workspace_id=workspace_id, prefix=prefix, actor=ACTOR, reason="demo fleet restarted"
        )


# --- The hands -----------------------------------------------------------------------------------


def _client(url: str, key: str, stopping: threading.Event) -> gc.Client:
    """The project's own client (`groundcontrol_client`) with one hand's key. It rides out a
    brief outage with its retries; their backoff ends as soon as the fleet is stopping, so a
    stop does not wait on a server that has gone."""
    return gc.Client(url, key, timeout=15.0, sleep=stopping.wait)


class Planner:
    """The demo's supervisor: plans a new run like a done one, over REST with a `plan` key."""

    def __init__(
        self, url: str, key: str, work_package_id: int, *, stopping: threading.Event
    ) -> None:
        self.url, self.key, self.work_package_id = url, key, work_package_id
        self.stopping = stopping
        self._lock = threading.Lock()

    def run_like(self, run_id: int) -> int:
        with _client(self.url, self.key, self.stopping) as client, self._lock:
            return self._plan_like(client, client.run(run_id))

    def next_run(self, run_id: int) -> int | None:
        """A new run like `run_id` when that one is done, else None: asked before the hand
        claims again, so it is not refused for a done run."""
        with _client(self.url, self.key, self.stopping) as client, self._lock:
            run = client.run(run_id)
            return self._plan_like(client, run) if run.state == "done" else None

    def _plan_like(self, client: gc.Client, done: gc.Run) -> int:
        planned = client.run_create(
            self.work_package_id,
            title=done.title,
            brief=done.brief,
            evidence_required=done.evidence_required,
            heartbeat_interval_s=int(done.heartbeat_interval_s),
            grace_s=int(done.grace_s),
            slots=done.slots.total,
        )
        return planned.id


class DemoHand(threading.Thread, metaclass=abc.ABCMeta):
    """One simulated hand: a loop of tenures, each a `tenure()` call, with rests between.

    It speaks through the typed `groundcontrol_client.Client`, not the runtime's `Hand`: the
    runtime heartbeats from a background thread, and these hands script their own heartbeats
    (the quiet one stops on purpose, so its tenure goes late, stalled and lost)."""

    def __init__(
        self,
        name: str,
        *,
        url: str,
        key: str,
        run_id: int,
        timings: Timings,
        stopping: threading.Event,
        lock_taken: threading.Event,
        say: Callable[[str], None],
        planner: Planner | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.planner = planner
        self.client = _client(url, key, stopping)
        self.run_id = run_id
        self.t = timings
        self.stopping = stopping
        # Set once the healthy hand holds the lock, so the waiter is denied it, as the demo means.
        self.lock_taken = lock_taken
        self.say = say
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{name}"
        self.attempt: gc.Attempt | None = None

    # Helpers -------------------------------------------------------------------------------

    def pause(self, seconds: float) -> bool:
        """Sleep; False when the fleet is stopping."""
        return not self.stopping.wait(seconds)

    def claim(self) -> bool:
        try:
            self.attempt = self.client.claim(self.run_id, process_id=self.process_id)
        except gc.ConnectionFailed:
            raise
        except gc.GroundControlError as refused:
            if refused.get("run_state") == "done" and self.planner is not None:
                self.plan_next(self.planner.run_like(self.run_id))
                return self.claim()
            self.say(f"{self.name}: claim refused ({refused.code}); trying again soon")
            return False
        self.say(
            f"{self.name}: claimed slot {self.attempt.slot} of run {self.run_id} "
            f"(attempt {self.attempt.id}, fence {self.attempt.fence})"
        )
        return True

    def plan_next(self, run_id: int) -> None:
        self.run_id = run_id
        self.say(f"{self.name}: its run is done; the planner planned run {self.run_id}")

    def report(self, kind: str = "heartbeat", **fields: Any) -> str:
        """Heartbeat (or progress) with our process identity; returns the directive."""
        assert self.attempt is not None
        answer = self.client.report(
            self.attempt.id,
            fence=self.attempt.fence,
            process_id=self.process_id,
            kind=kind,
            **fields,
        )
        self.attempt = answer.attempt
        return self.attempt.directive

    def release(self, reason: str) -> None:
        assert self.attempt is not None
        self.client.release(
            self.attempt.id, fence=self.attempt.fence, process_id=self.process_id, reason=reason
        )
        self.say(f"{self.name}: released attempt {self.attempt.id}: {reason}")
        self.attempt = None

    def finish(self, evidence: list[gc.Evidence], summary: str) -> None:
        assert self.attempt is not None
        self.client.finish(
            self.attempt.id,
            fence=self.attempt.fence,
            process_id=self.process_id,
            evidence=evidence,
            summary=summary,
        )
        self.say(f"{self.name}: finished attempt {self.attempt.id}")
        self.attempt = None  # nothing left to give back
        # A run whose slots are all done takes no claim: plan its successor before claiming.
        if self.planner is not None:
            planned = self.planner.next_run(self.run_id)
            if planned is not None:
                self.plan_next(planned)

    def beat_until(self, seconds: float, *, progress: tuple[float, float] | None = None) -> str:
        """Heartbeat every beat for `seconds`; 'stop' as soon as a stop directive arrives.

        With `progress` (from, to), report progress along the way unless paused.
        """
        started = time.monotonic()
        directive = "continue"
        while (elapsed := time.monotonic() - started) < seconds:
            if progress and directive != "pause":
                low, high = progress
                percent = round(low + (high - low) * min(elapsed / seconds, 1.0), 1)
                directive = self.report("progress", percent=percent)
            else:
                directive = self.report()
            if directive == "stop" or not self.pause(self.t.beat_every_s):
                return directive if directive == "stop" else "exit"
        return directive

    # The loop ------------------------------------------------------------------------------

    def resting(self) -> bool:
        """True when the hand has done all the demo lets it do (the waiter's bound)."""
        return False

    def run(self) -> None:
        # The client is closed by `DemoFleet.stop` once every hand has ended, not here: the
        # waiter speaks through the healthy hand's client too (a handoff request's answer).
        while not self.stopping.is_set():
            if self.resting():
                return
            try:
                if self.claim():
                    self.tenure()
            except gc.ConnectionFailed as error:
                self.say(f"{self.name}: cannot reach the server ({error.message})")
            except gc.GroundControlError as refused:
                self.say(f"{self.name}: refused ({refused.code}): {refused.message}")
                self.give_back(f"gave up after {refused.code}")
            self.attempt = None
            if not self.pause(self.t.rest_s):
                break

    def acquire_lock(self, wait_s: float | None = None) -> gc.Lease:
        return self.client.lease_acquire(
            LOCK, ttl_s=self.t.lock_ttl_s, process_id=self.process_id, wait_s=wait_s
        )

    def give_back(self, reason: str) -> None:
        """Release a tenure cut short by a refusal, so its slot is open at once rather than
        after the tenure is lost; a release that is itself refused changes nothing."""
        if self.attempt is None:
            return
        try:
            self.release(reason)
        except gc.GroundControlError:
            self.attempt = None

    @abc.abstractmethod
    def tenure(self) -> None:
        """One tenure: from a successful claim to its end (finished, released or lost)."""

    def stopped(self) -> None:
        self.release("stopped by a supervisor")


class HealthyHand(DemoHand):
    """Heartbeats for ever and holds the `migrations` lock, renewing it as it goes."""

    def tenure(self) -> None:
        lock = self.acquire_lock()
        self.say(f"{self.name}: holds the {LOCK} lock (fence {lock.fence})")
        self.lock_taken.set()
        while not self.stopping.is_set():
            directive = self.beat_until(self.t.lock_ttl_s / 2, progress=(0, 99))
            if directive == "stop":
                self.stopped()
                return
            if directive == "exit":
                return
            self.acquire_lock()  # the holder acquiring again renews, same fence


class QuietHand(DemoHand):
    """Heartbeats a little, then goes silent until its tenure is lost."""

    def tenure(self) -> None:
        if self.beat_until(self.t.quiet_beats_for_s) == "stop":
            self.stopped()
            return
        self.say(f"{self.name}: going quiet (late, stalled, then lost)")
        silence = self.t.heartbeat_interval_s + self.t.grace_s + self.t.rest_s
        self.pause(silence)


class FinisherHand(DemoHand):
    """Reports progress, then finishes with a pull request as evidence."""

    def tenure(self) -> None:
        directive = self.beat_until(self.t.finish_after_s, progress=(10, 95))
        if directive == "stop":
            self.stopped()
            return
        if directive == "exit" or self.attempt is None:
            return
        pull_request = gc.Evidence(
            kind="pull_request",
            url=f"https://example.com/acme/app/pull/{self.attempt.id}",
            note="fixes the flaky login test",
        )
        self.finish([pull_request], "The test raced the session cleanup; it now waits for it.")


class WaiterHand(DemoHand):
    """Needs the `migrations` lock, is denied it, asks its holder for it (who declines, busy),
    waits (heartbeating), and gives up; within the demo's bound (WAITER_TENURES), then rests."""

    lock_holder: DemoHand | None = None  # the healthy hand, set by DemoFleet
    refusals_left = MAX_REFUSALS  # set by DemoFleet from the plan: what the record may still take
    friction_left = MAX_FRICTION

    def resting(self) -> bool:
        if self.refusals_left > 0 and self.friction_left > 0:
            return False
        self.say(
            f"{self.name}: has been refused and filed its friction reports (the demo keeps at most "
            f"{MAX_REFUSALS} refusals and {MAX_FRICTION} reports); it rests now"
        )
        return True

    def tenure(self) -> None:
        # Not longer than half an interval: the tenure is already running and must not go late.
        self.lock_taken.wait(self.t.heartbeat_interval_s / 2)
        started, asked = time.monotonic(), False
        denials: list[str] = []
        while (
            time.monotonic() - started < self.t.waiter_gives_up_after_s
            and len(denials) < WAITER_DENIALS
            and self.refusals_left > 0
        ):
            if self.report() == "stop":
                self.stopped()
                return
            try:
                lock = self.acquire_lock(wait_s=self.t.wait_s)
            except gc.LeaseHeld as held:
                self.refusals_left -= 1  # one refusal in the record, whatever its request id
                denials += [held.request_id] if held.request_id else []
                self.say(f"{self.name}: {LOCK} is held by {describe_holder(held.fields)}; waiting")
                holder = self.lock_holder
                if not asked and holder is not None and held.get("holder") == holder.name:
                    asked = True  # once per tenure: a handoff request (demo.loop)
                    demo_handoff(
                        self.client,
                        holder.client,
                        resource=LOCK,
                        fence=held.get("fence"),
                        holder_process=holder.process_id,
                        say=self.say,
                        asker_name=self.name,
                        holder_name=holder.name,
                    )
                if not self.pause(self.t.beat_every_s):
                    return
                continue
            # The lock came free: migrate, let go of it, and finish.
            self.say(f"{self.name}: got the {LOCK} lock (fence {lock.fence})")
            self.report("progress", percent=100, message="migrated")
            self.client.lease_release(LOCK, fence=lock.fence)
            self.finish([], "index added")
            return
        assert self.attempt is not None
        self.friction_left -= 1  # spent even if the filing is refused: the bound holds anyway
        if demo_friction(
            self.client,
            what=f"the {LOCK} lock was held the whole time I waited for it",
            instead="gave my slot back to pick it up later",
            waited_s=time.monotonic() - started,
            attempt_id=self.attempt.id,
            refusals=denials,
        ):
            self.say(f"{self.name}: filed a friction report ({len(denials)} refusals linked)")
        self.release(f"gave up waiting for the {LOCK} lock")


_BEHAVIOURS: dict[str, type[DemoHand]] = {
    "demo-healthy": HealthyHand,
    "demo-quiet": QuietHand,
    "demo-finisher": FinisherHand,
    "demo-waiter": WaiterHand,
}


class DemoFleet:
    """Start the five hands against `url` (the four of `setup`, and `demo_loop`'s idle hand);
    `stop()` ends them at their next pause."""

    def __init__(
        self,
        plan: DemoPlan,
        *,
        url: str,
        timings: Timings = Timings(),
        say: Callable[[str], None] = logger.info,
    ) -> None:
        self.stopping = threading.Event()
        lock_taken = threading.Event()
        planner = (
            Planner(url, plan.planner_key, plan.work_package_id, stopping=self.stopping)
            if plan.planner_key
            else None
        )
        self.hands = [
            _BEHAVIOURS[name](
                name,
                url=url,
                key=plan.keys[name],
                run_id=plan.runs[name],
                timings=timings,
                stopping=self.stopping,
                lock_taken=lock_taken,
                say=say,
                planner=planner,
            )
            for name in HAND_NAMES
        ]
        # The supervisor's loop (demo/loop.py): an idle hand, spending tokens.
        self.hands.append(
            demo_loop.demo_idle(
                workspace_id=plan.workspace_id,
                work_package_id=plan.work_package_id,
                url=url,
                timings=timings,
                stopping=self.stopping,
                say=say,
            )
        )
        by_name = {hand.name: hand for hand in self.hands}
        waiter = by_name[WAITER]
        assert isinstance(waiter, WaiterHand)
        waiter.lock_holder = by_name["demo-healthy"]  # type: ignore[assignment]
        waiter.refusals_left = plan.waiter_refusals_left
        waiter.friction_left = plan.waiter_friction_left

    def start(self) -> None:
        for hand in self.hands:
            hand.start()

    def stop(self, timeout_s: float = 20.0) -> None:
        self.stopping.set()
        for hand in self.hands:
            hand.join(timeout_s)
        for hand in self.hands:
            if isinstance(hand, DemoHand):
                hand.client.close()


def wait_for_server(url: str, *, timeout_s: float = 60.0) -> bool:
    """Wait until the server answers at all (any status), e.g. right after `runserver` starts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url.rstrip("/") + "/api/v1/me", timeout=2.0)
            return True
        except httpx.HTTPError:
            time.sleep(0.5)
    return False
