"""The demo fleet's pieces of the supervisor's loop (issue 22), each a self-contained function
that `fleet.demo` calls at its moment; the hands speak to the server only over REST through the
project's client, as any agent would.

`demo_friction`: a hand that gave up on something files a friction report saying what it hit,
what it does instead and the minutes lost, linked to the refused calls it means.
`demo_handoff`: a denied hand asks the holder for the resource; the holder declines.
`demo_idle`: plans its run in the demo's work package (in-process, through the services,
idempotently) and returns its hand's thread, not yet started: a hand that heartbeats and spends
tokens but never reports progress."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

import groundcontrol_client as gc

from apikit.errors import GroundControlError
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, IdleDirective, Run, WorkPackage
from fleet.plan import services as plan_services
from fleet.plan.services import MIN_PROGRESS_TIMEOUT_S
from hands import services as hand_services
from hands.models import HandKey, Scope

if TYPE_CHECKING:
    from fleet.demo import Timings

logger = logging.getLogger(__name__)

# A report links at most this many refused calls (friction.services.MAX_REFUSALS).
_MAX_LINKED = 20


def demo_friction(
    client: gc.Client,
    *,
    what: str,
    instead: str,
    waited_s: float,
    attempt_id: int | None,
    refusals: Sequence[str],
) -> gc.FrictionReport | None:
    """File the report (the latest refusals when there were many); a refused filing is logged
    and the demo goes on: the report is the demo's, not its hands' work."""
    try:
        return client.friction_file(
            what,
            instead=instead,
            minutes=max(1, round(waited_s / 60)),
            attempt=attempt_id,
            refusals=list(dict.fromkeys(refusals))[-_MAX_LINKED:],
        )
    except gc.ConnectionFailed:
        raise
    except gc.GroundControlError as refused:
        logger.warning("demo friction report refused: %s", refused)
        return None


def demo_handoff(
    asker: gc.Client,
    holder: gc.Client,
    *,
    resource: str,
    fence: int,
    holder_process: str,
    say: Callable[[str], None],
    asker_name: str = "the waiter",
    holder_name: str = "the holder",
) -> str | None:
    """A denied hand asks the holder of `resource` for it; the holder sees the request on its
    next renewal (its tenure at `fence`, renewed as `holder_process`) and declines, being
    mid-migration; the asker reads the answer. Returns the answer's status, or None when the
    step could not be shown (the tenure ended meanwhile, or a call was refused)."""
    try:
        asked = asker.ask_handoff(
            resource=resource, reason="the audit index waits on this lock; may I have it?"
        )
        say(f"{asker_name}: asked {asked.holder} for {resource} (handoff request {asked.id})")
        renewed = holder.lease_renew(resource, fence=fence, process_id=holder_process)
        for pending in renewed.handoff_requests:
            say(f"{holder_name}: {pending.sentence(resource)}")
        if any(pending.id == asked.id for pending in renewed.handoff_requests):
            holder.decline_handoff(asked.id, reason="mid-migration: ask again in a minute")
        answer = asker.handoff(asked.id)
    except gc.GroundControlError as refused:
        say(f"{asker_name}: the handoff step was refused ({refused.code}): {refused.message}")
        return None
    say(f"{asker_name}: {answer.sentence()}")
    return answer.status


IDLE_HAND = "demo-idle"
IDLE_RUN = "Summarise the incident log"
IDLE_ACTOR = "demo-fleet"
# What each of its costed heartbeats says the model spent (every third beat).
IDLE_TOKENS_IN, IDLE_TOKENS_OUT, IDLE_COST_USD = 1500, 400, Decimal("0.02")


def demo_idle(
    *,
    workspace_id: int,
    work_package_id: int,
    url: str,
    timings: Timings,
    stopping: threading.Event,
    say: Callable[[str], None],
) -> threading.Thread:
    """A hand that heartbeats (spending tokens, which is no progress) and never reports
    progress, on a run whose progress timeout is the shortest allowed: idle a minute after its
    claim, flagged by the idle sweep and told to pause (it keeps heartbeating, as a paused
    hand must). Its costed heartbeats are the lane's cost on the lane page."""
    package = WorkPackage.objects.select_related("lane").get(
        pk=work_package_id, workspace_id=workspace_id
    )
    run = Run.objects.filter(work_package=package, title=IDLE_RUN, state="open").first()
    if run is None or (run.heartbeat_interval_s, run.grace_s) != (
        timings.heartbeat_interval_s,
        timings.grace_s,
    ):
        run = plan_services.run_create(
            work_package=package,
            title=IDLE_RUN,
            brief="Read `incidents.log` and write a one-page summary of last week.",
            slots=1,
            heartbeat_interval_s=timings.heartbeat_interval_s,
            grace_s=timings.grace_s,
            progress_timeout_s=MIN_PROGRESS_TIMEOUT_S,
            idle_directive=IdleDirective.PAUSE,
        )
    hand, _ = hand_services.hand_create(
        workspace=package.lane.workspace, name=IDLE_HAND, lane=package.lane
    )
    # What a previous demo process left: its open tenure broken, its keys revoked.
    for resource in Attempt.objects.filter(hand=hand, end=None).values_list(
        "lease__resource", flat=True
    ):
        try:
            attempt_services.lease_break(
                workspace_id=workspace_id,
                resource=resource,
                actor=IDLE_ACTOR,
                reason="demo fleet restarted",
            )
        except GroundControlError:
            pass  # already free
    for prefix in HandKey.objects.filter(hand=hand, revoked_at=None).values_list(
        "prefix", flat=True
    ):
        hand_services.key_revoke(
            workspace_id=workspace_id, prefix=prefix, actor=IDLE_ACTOR, reason="demo restarted"
        )
    key = hand_services.key_issue(hand=hand, scopes=[Scope.WORK], actor=IDLE_ACTOR).plaintext
    return _IdleHand(url=url, key=key, run_id=run.pk, timings=timings, stopping=stopping, say=say)


class _IdleHand(threading.Thread):
    def __init__(
        self,
        *,
        url: str,
        key: str,
        run_id: int,
        timings: Timings,
        stopping: threading.Event,
        say: Callable[[str], None],
    ) -> None:
        super().__init__(name=IDLE_HAND, daemon=True)
        self.client = gc.Client(url, key, timeout=15.0, sleep=stopping.wait)
        self.run_id, self.t, self.stopping, self.say = run_id, timings, stopping, say
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{IDLE_HAND}"

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self._tenure()
                except gc.GroundControlError as refused:  # a connection failure too
                    self.say(f"{IDLE_HAND}: refused ({refused.code}): {refused.message}")
                if self.stopping.wait(self.t.rest_s):
                    break
        finally:
            self.client.close()

    def _tenure(self) -> None:
        attempt = self.client.claim(self.run_id, process_id=self.process_id)
        self.say(f"{IDLE_HAND}: claimed attempt {attempt.id}; heartbeats, never progress")
        beat, idle_said = 0, False
        while not self.stopping.wait(self.t.beat_every_s):
            beat += 1
            cost = (
                {
                    "tokens_in": IDLE_TOKENS_IN,
                    "tokens_out": IDLE_TOKENS_OUT,
                    "cost_usd": IDLE_COST_USD,
                }
                if beat % 3 == 0
                else {}
            )
            answer = self.client.report(
                attempt.id, fence=attempt.fence, process_id=self.process_id, **cost
            ).attempt
            if answer.raw.get("idle") and not idle_said:
                idle_said = True
                self.say(f"{IDLE_HAND}: idle (directive {answer.directive})")
            if answer.directive == "stop":
                self.client.release(
                    attempt.id,
                    fence=attempt.fence,
                    process_id=self.process_id,
                    reason="stopped by a supervisor",
                )
                return
