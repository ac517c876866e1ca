"""How the runtime keeps a tenure, as steps (`core.steps`): take it, renew it, report on it,
finish or release it, and decide when it is lost (`tenure.TenureClock`, where the rule lives).

Written once; the runtime's two shells run it: `runtime.hand` with a heartbeat thread, blocking,
and `runtime.async_hand` with a heartbeat task, awaiting. A shell gives a kept tenure its stop
event and its turn (a lock, so a renewal never races the finish or release: `Exclusive`), starts
and stops the heartbeats, and waits while paused; everything else is here. The public methods
below are calls (`@call`): `attempt.finish()` on a sync shell, `await attempt.finish()` on an
async one.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from groundcontrol_client.core.errors import (
    Denied,
    EvidenceMissing,
    GroundControlError,
    TenureLost,
    ValidationFailed,
)
from groundcontrol_client.core.handoffs import NoticesHandoffs
from groundcontrol_client.core.identity import process_identity
from groundcontrol_client.core.models import (
    Attempt,
    Brief,
    CheckpointFrom,
    Evidence,
    Lease,
    ReportResult,
)
from groundcontrol_client.core.steps import Exclusive, Sleep, Steps, call
from groundcontrol_client.core.tenure import (
    HEARTBEAT_FRACTION,
    AttemptView,
    TenureClock,
    clip_reason,
    exception_reason,
    is_local,
    is_transient,
    lease_grace_s,
    lost_reason,
    refused_reason,
    renewal_period,
    renewal_retryable,
)

if TYPE_CHECKING:
    from groundcontrol_client.core.calls import Calls

logger = logging.getLogger("groundcontrol_client")
T = TypeVar("T")


class Keeper(NoticesHandoffs):
    """A tenure kept alive by heartbeats; the tenure's clock decides when it is lost.

    A shell supplies `_stop` (an event: set once nothing may renew any more), `_turn` (the lock
    a renewal and an end take in turn), `perform`, `bind` (how a call runs), and
    `_begin_renewing`/`_stop_renewing` (the heartbeats' thread or task)."""

    _stop: Any
    _turn: Any

    def __init__(
        self,
        client: Calls,
        *,
        process_id: str,
        fraction: float,
        name: str,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id
        self.tenure = TenureClock(clock=clock)
        self._fraction = fraction
        self._name = name
        self._rand = random.random
        self._prepare()

    # --- what a shell gives -------------------------------------------------------------------

    def _prepare(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def bind(self, steps: Callable[..., Steps[Any]]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _begin_renewing(self) -> None:  # pragma: no cover
        raise NotImplementedError

    # --- what a kind of tenure gives: how it is taken, renewed and ended ---------------------

    def _taking(self) -> Steps[None]:  # pragma: no cover
        raise NotImplementedError

    def _renewal(self, *, give_up_at: float, timeout: float) -> Steps[None]:  # pragma: no cover
        raise NotImplementedError

    def _leaving(self, exc: BaseException | None) -> Steps[None]:  # pragma: no cover
        raise NotImplementedError

    # --- the tenure's life --------------------------------------------------------------------

    @call
    def open(self) -> Steps[Self]:
        """Take the tenure (a `with` block does) and start its heartbeats."""
        yield from self._taking()
        return self

    def _start(self, *, sent_at: float, interval: float, grace: float) -> Steps[None]:
        """Start the clock at the granting request's send time, and the heartbeats."""
        self.tenure.start(sent_at=sent_at, interval_s=interval, grace_s=grace)
        if self.tenure.waited(sent_at, self._fraction):
            # A grant that waited came late in the wait: a renewal now pins the clock at once.
            yield from self._renew_once(timeout=self.client.timeout)
        self._begin_renewing()

    def _heartbeat(self) -> Steps[bool | None]:
        """One heartbeat in the tenure's turn: whether it renewed, None once nothing may."""
        return (yield Exclusive(self._turn, self._heartbeat_in_turn()))

    def _heartbeat_in_turn(self) -> Steps[bool | None]:
        if self._stop.is_set() or self.lost:
            return None
        return (yield from self._renew_once())

    def _next_heartbeat(self, renewed: bool, failures: int) -> tuple[float, int]:
        """The delay before the next heartbeat, and the failures in a row so far: the period
        after a renewal, sooner while it fails (the give-up point is what counts)."""
        period = renewal_period(self.tenure.interval_s, self._fraction)
        if renewed:
            return period, 0
        return min(period, self._backoff(failures)), failures + 1

    def _backoff(self, failures: int) -> float:
        return self.tenure.backoff_s(self.client.retry, failures, self._rand)

    def _renew_once(self, *, timeout: float | None = None) -> Steps[bool]:
        sent_at = self.tenure.clock()
        try:
            yield from self._renewal(
                give_up_at=max(self.tenure.give_up_at, sent_at + (timeout or 0)),
                timeout=timeout or self.tenure.timeout_s(self.client.timeout),
            )
        except GroundControlError as error:
            if not renewal_retryable(error):
                self._mark_lost(error)
                return False
            logger.warning("%s: renewal failed (%s); retrying", self._name, error)
        except Exception:  # a bug must not end the heartbeats silently while the agent works
            logger.exception("%s: renewal crashed; retrying", self._name)
        else:
            self.tenure.accepted(sent_at)
            return True
        return False

    def _mark_lost(self, error: GroundControlError) -> None:
        self.tenure.mark_lost(error)
        self._stop.set()

    @property
    def lost(self) -> bool:
        """True once the server refused the tenure or the give-up point passed unrenewed."""
        if self.tenure.lost:
            self._stop.set()
            return True
        return False

    @property
    def lost_error(self) -> GroundControlError | None:
        """Why the tenure is lost: the server's refusal, or a local `LeaseLost`."""
        return self.tenure.lost_error

    @property
    def expires_in_s(self) -> float:
        """Seconds left in the current renewal window (negative once it has passed)."""
        return self.tenure.expires_in_s

    @property
    def give_up_in_s(self) -> float:
        """Seconds until the tenure is lost unless a renewal is accepted first."""
        return self.tenure.give_up_in_s

    def _raise_if_lost(self) -> None:
        if self.lost:
            self.tenure.raise_if_lost()

    def _call(self, steps: Steps[T]) -> Steps[T]:
        """A call on the tenure; a refusal that ends it marks it lost before it propagates."""
        try:
            return (yield from steps)
        except TenureLost as error:
            self._mark_lost(error)
            raise

    def _persist(self, what: str, attempt: Callable[[float], Steps[T]]) -> Steps[tuple[float, T]]:
        """`attempt(timeout)` until it is answered, retrying transient failures (backoff with
        jitter) up to the give-up point, then the local loss; the send time of the answered
        try."""
        failures = 0
        while True:
            sent_at = self.tenure.clock()
            try:
                self._raise_if_lost()
                answer = yield from self._call(attempt(self.tenure.timeout_s(self.client.timeout)))
                return sent_at, answer
            except GroundControlError as error:
                if not is_transient(error):
                    raise
                self.tenure.failed(error)
                logger.warning("%s: %s failed (%s); retrying", self._name, what, error)
                yield Sleep(self._backoff(failures))
                failures += 1
                self.tenure.failed(error)  # the loss, from the last failure, once it is too late

    def _end(self, steps: Steps[T]) -> Steps[T]:
        """End the tenure with `steps` (a finish or release), in its turn. The heartbeats stop
        only once the server has accepted the end: a refused finish (evidence missing) leaves
        the tenure alive to retry."""
        return (yield Exclusive(self._turn, self._ending(steps)))

    def _ending(self, steps: Steps[T]) -> Steps[T]:
        result = yield from self._call(steps)
        self.tenure.close()
        self._stop.set()
        return result


class CheckpointSource(Protocol):
    """Where a kept attempt's checkpoints come from besides `report(checkpoint=...)` (`gctl
    run`'s $GC_CHECKPOINT_FILE): the next heartbeat carries what `due()` gives (None: nothing
    new), and `reported()` hears each one the server took."""

    def due(self) -> Any: ...

    def reported(self, checkpoint: Any) -> None: ...


class AttemptKeeping(AttemptView, Keeper):
    """One tenure on a run's slot: claimed on `open()` (or `with`), heartbeated until it ends.

    `inherited_checkpoint`: the last checkpoint an earlier attempt on the slot reported, as the
    claim's answer said (None: none; `checkpoint_from` says which attempt, whose, when and how
    it ended). Named so beside `checkpoint()`, the call that obeys the directive."""

    inherited_checkpoint: Any = None
    checkpoint_from: CheckpointFrom | None = None
    # A source of checkpoints the heartbeats carry (`CheckpointSource`), if any.
    checkpoints: CheckpointSource | None = None

    def __init__(
        self,
        client: Calls,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
        fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._init_view(run_id, slot, wait)
        self.on_wait = on_wait
        Keeper.__init__(
            self,
            client,
            process_id=process_id,
            fraction=fraction,
            name=f"gc-run-{run_id}",
            clock=clock,
        )

    def _changed(self) -> None:  # pragma: no cover
        """Wake a checkpoint that waits (the shell's)."""
        raise NotImplementedError

    def _update(self, attempt: Attempt) -> None:
        changed = self._record(attempt)
        if changed:
            logger.info("attempt %s: directive is now %s", attempt.id, changed)
        self._changed()

    def _mark_lost(self, error: GroundControlError) -> None:
        super()._mark_lost(error)
        self._changed()

    def _taking(self) -> Steps[None]:
        waiting: dict[str, Any] = {}
        if self.wait is not None:
            waiting["wait_s"] = self.wait
        if self.on_wait is not None:
            waiting["on_wait"] = self.on_wait
        sent_at = self.tenure.clock()
        attempt = yield from self.client.claim.steps(
            self.run_id, process_id=self.process_id, slot=self.requested_slot, **waiting
        )
        self.inherited_checkpoint = attempt.checkpoint
        self.checkpoint_from = attempt.checkpoint_from
        self._update(attempt)
        yield from self._start(
            sent_at=sent_at,
            interval=attempt.lease.heartbeat_interval_s,
            grace=attempt.lease.grace_s,
        )

    def _renewal(self, *, give_up_at: float, timeout: float) -> Steps[None]:
        # A new checkpoint from the source rides on the heartbeat (then it is recorded, not
        # once a minute); one the server did not take is due again at the next.
        checkpoint = self.checkpoints.due() if self.checkpoints is not None else None
        result = yield from self.client.report.steps(
            self.id,
            fence=self.fence,
            kind="heartbeat",
            process_id=self.process_id,
            checkpoint=checkpoint,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        if checkpoint is not None and self.checkpoints is not None:
            self.checkpoints.reported(checkpoint)
        self._update(result.attempt)
        self._noticed(result.handoff_requests, self.attempt.lease.resource)

    # --- what the agent does ----------------------------------------------------------------

    @call
    def brief(self) -> Steps[Brief]:
        """The run's brief; retried through an outage like a report."""
        _, brief = yield from self._persist(
            "brief", lambda timeout: self.client.brief.steps(self.id)
        )
        return brief

    @call
    def report(
        self,
        message: str,
        *,
        percent: float | None = None,
        kind: str = "progress",
        details: Mapping[str, Any] | None = None,
        checkpoint: Any = None,
        **cost: Any,
    ) -> Steps[ReportResult]:
        """Progress, a blocker or a note (`cost`: as Client.report); renews, riding out outages.
        `checkpoint`: where the work stands (any JSON value; None: none), which the next
        attempt on the slot inherits if this one does not finish."""
        sent_at, result = yield from self._persist(
            "report",
            lambda timeout: self.client.report.steps(
                self.id,
                fence=self.fence,
                kind=kind,
                process_id=self.process_id,
                message=message,
                percent=percent,
                details=details,
                checkpoint=checkpoint,
                **cost,
                give_up_at=self.tenure.give_up_at,
                timeout=timeout,
            ),
        )
        self._update(result.attempt)
        if result.renewed:
            self.tenure.accepted(sent_at)
        return result

    @call
    def report_due_checkpoint(self) -> Steps[bool]:
        """Report the source's new checkpoint now, if it has one (before a finish or a
        release, so that nothing it wrote is lost with the tenure); whether one was sent."""
        checkpoint = self.checkpoints.due() if self.checkpoints is not None else None
        if checkpoint is None or self.checkpoints is None:
            return False
        yield from self.report.steps("", kind="heartbeat", checkpoint=checkpoint)
        self.checkpoints.reported(checkpoint)
        return True

    @call
    def finish(
        self, evidence: Iterable[Evidence] | None = None, summary: str | None = None
    ) -> Steps[Attempt]:
        """Finish with `evidence` (default: what was attached); heartbeats stop once it is
        (retried through an outage up to the give-up point; a retried finish acts once)."""
        self._raise_if_lost()
        body = self._finish_body(evidence, summary)
        _, attempt = yield from self._persist(
            "finish",
            lambda timeout: self._end(
                self.client.finish.steps(
                    self.id, fence=self.fence, process_id=self.process_id, **body
                )
            ),
        )
        self._update(attempt)
        self.ended = "finished"
        return attempt

    @call
    def release(self, reason: str) -> Steps[Attempt]:
        """Give the slot back now; it is open to other hands at once."""
        attempt: Attempt = yield from self._end(
            self.client.release.steps(
                self.id, fence=self.fence, process_id=self.process_id, reason=clip_reason(reason)
            )
        )
        self._update(attempt)
        self.ended = "released"
        return attempt

    @call
    def release_quietly(self, reason: str) -> Steps[bool]:
        """Release, swallowing refusals (the tenure may already be gone); True if it released.
        A tenure given up locally is left to the server (see `AttemptView`)."""
        if self._quiet_release_skipped():
            return False
        try:
            yield from self.release.steps(reason)
        except GroundControlError as error:
            logger.warning("attempt %s: release failed: %s", self._attempt and self.id, error)
            return False
        return True

    def _leaving(self, exc: BaseException | None) -> Steps[None]:
        if self.ended:
            return
        if exc is not None:
            yield from self.release_quietly.steps(exception_reason(exc))
            return
        if self.lost:
            # The work may already belong to someone else: never finish it, say so.
            yield from self.release_quietly.steps(lost_reason(self.lost_error))
            self._raise_if_lost()
        try:
            yield from self.finish.steps()
        except (EvidenceMissing, ValidationFailed) as error:
            yield from self.release_quietly.steps(refused_reason(error))
            raise


class LeaseKeeping(Keeper):
    """A resource lease kept alive while it is held; `fence` and `check()` for fenced writes."""

    def __init__(
        self,
        client: Calls,
        resource: str,
        *,
        ttl_s: float,
        process_id: str,
        wait_s: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
        ticket: int | None = None,
        fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.resource = resource
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.mode = mode
        # Take the lease from another process of this hand that holds it (`lease_acquire`).
        self.take_over = take_over
        # A denial's place in line, to be served from (`Calls.lease_acquire`).
        self.ticket = ticket
        self.released = False
        self._lease: Lease | None = None
        super().__init__(
            client,
            process_id=process_id,
            fraction=fraction,
            name=f"gc-lease-{resource}",
            clock=clock,
        )

    @property
    def lease(self) -> Lease:
        if self._lease is None:
            raise RuntimeError(
                "not acquired yet: use `with hand.lease(resource, ttl=...) as lease:`"
            )
        return self._lease

    @property
    def fence(self) -> int:
        return self.lease.fence

    def _taking(self) -> Steps[None]:
        sent_at = self.tenure.clock()
        asked: dict[str, Any] = {"ttl_s": self.ttl_s, "wait_s": self.wait_s, "mode": self.mode}
        if self.take_over:
            asked["take_over"] = True
        if self.ticket is not None:
            asked["ticket"] = self.ticket
        self._lease = yield from self.client.lease_acquire.steps(
            self.resource, process_id=self.process_id, **asked
        )
        yield from self._start(
            sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease)
        )

    def _renewal(self, *, give_up_at: float, timeout: float) -> Steps[None]:
        self._lease = yield from self.client.lease_renew.steps(
            self.resource,
            fence=self.fence,
            process_id=self.process_id,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        self._noticed(self._lease.handoff_requests, self.resource)

    @call
    def check(self) -> Steps[Lease]:
        """Raise unless `fence` is still the current tenure: locally first, then on the server.
        Call it right before a write that a stale holder must not make. Locally it refuses
        (`LeaseUnconfirmed`) once the renewal window has passed without an accepted renewal,
        though the tenure is not given up until later: the client cannot vouch for the fence."""
        self._raise_if_lost()
        self.tenure.raise_unless_vouched(self.resource)
        return (
            yield from self._call(self.client.lease_check.steps(self.resource, fence=self.fence))
        )

    @call
    def release(self) -> Steps[None]:
        yield from self._end(
            self.client.lease_release.steps(
                self.resource, fence=self.fence, process_id=self.process_id
            )
        )
        self.released = True

    @call
    def release_quietly(self) -> Steps[bool]:
        """Release, swallowing refusals; a lease given up locally is left to the server."""
        if self.lost and is_local(self.lost_error):
            logger.warning("lease %s: not released (%s)", self.resource, self.lost_error)
            return False
        try:
            yield from self.release.steps()
        except GroundControlError as error:
            logger.warning("lease %s: release failed: %s", self.resource, error)
            return False
        return True

    def _leaving(self, exc: BaseException | None) -> Steps[None]:
        if self.released:
            return
        lost = self.lost
        if lost or exc is not None:
            yield from self.release_quietly.steps()
        else:
            # Refused though the client thought it held: the caller hears why.
            yield from self.release.steps()
        if exc is None and lost:
            self._raise_if_lost()


class PoolKeeping(LeaseKeeping):
    """One member of `pool`, taken on `open()` (or `with`) and kept alive while it is held:
    the pool grants a concrete member (`member`) whose tenure is a lease of its own
    (`resource`, `pool/<pool>/<member>`, with its `fence`), renewed, checked and released by
    that name."""

    def __init__(self, client: Calls, pool: str, **options: Any) -> None:
        super().__init__(client, f"pool/{pool}/", **options)  # the pool's node, until granted
        self.pool = pool

    @property
    def member(self) -> str:
        """The member granted (`8001`, `test_3`)."""
        return self.lease.member or self.lease.resource.rsplit("/", 1)[-1]

    def _taking(self) -> Steps[None]:
        sent_at = self.tenure.clock()
        self._lease = yield from self.client.lease_from_pool.steps(
            self.pool, ttl_s=self.ttl_s, process_id=self.process_id, wait_s=self.wait_s
        )
        # From here on it is the member's own lease: renewed, checked and released by name.
        self.resource = self._lease.resource
        self._name = f"gc-lease-{self.resource}"
        yield from self._start(
            sent_at=sent_at, interval=self.ttl_s, grace=lease_grace_s(self._lease)
        )


class Hands:
    """One agent identity: a client and a process identity, for claims and resource leases.
    A shell names its kinds of tenure (`attempts`, `leases`, `pools`) and its client."""

    attempts: type[AttemptKeeping]
    leases: type[LeaseKeeping]
    pools: type[PoolKeeping]
    clients: type[Calls]

    def __init__(
        self,
        client: Any,
        *,
        process_id: str | None = None,
        heartbeat_fraction: float = HEARTBEAT_FRACTION,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.process_id = process_id or process_identity()
        self.heartbeat_fraction = heartbeat_fraction
        self._clock = clock

    @classmethod
    def from_env(cls, **client_kwargs: Any) -> Self:
        """From `GC_URL` and `GC_KEY`; `GC_PROCESS_ID` overrides the process identity."""
        import os

        client = cls.clients.from_env(**client_kwargs)
        return cls(client, process_id=os.environ.get("GC_PROCESS_ID"))

    def claim(
        self,
        run_id: int,
        *,
        slot: int | None = None,
        wait: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> Any:
        """A claim on `run_id` (taken on `open()` or `with`); `wait` seconds for an open slot."""
        return self.attempts(
            self.client, run_id, slot=slot, wait=wait, on_wait=on_wait, **self._keeping()
        )

    def lease(
        self,
        resource: str,
        *,
        ttl: float,
        wait: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
    ) -> Any:
        """Hold `resource` (`mode="shared"` beside other shared holders) while the block runs;
        `take_over`: from another process of this hand that holds it."""
        asked = {"ttl_s": ttl, "wait_s": wait, "mode": mode, "take_over": take_over}
        return self.leases(self.client, resource, **asked, **self._keeping())

    def lease_from_pool(self, pool: str, *, ttl: float = 60.0, wait: float | None = None) -> Any:
        """A free member of `pool`, held like `lease` (`member`, `resource`, `fence`, `check`)."""
        return self.pools(self.client, pool, ttl_s=ttl, wait_s=wait, **self._keeping())

    def _keeping(self) -> dict[str, Any]:
        """How this hand's tenures are kept: its process, heartbeat fraction and clock."""
        return {
            "process_id": self.process_id,
            "fraction": self.heartbeat_fraction,
            "clock": self._clock,
        }
