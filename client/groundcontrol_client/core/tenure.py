"""A tenure's clock on the client, and what the sync and the async runtimes share (pure logic: no
threads, no tasks, no I/O).

The rule, in this one place. On the monotonic clock, from the *send* time of the last accepted
renewal (the claim or acquire counts as one):

    window_ends_at = renewed + interval                  the server's deadline, at the earliest
    give_up_at     = renewed + interval + grace - margin the server calls it lost soon after
    margin         = min(MAX_MARGIN_S, MARGIN_FRACTION * (interval + grace))

The server stamps a renewal when it handles it, never before it was sent, so both instants are
on the safe side of the server's own. Until `window_ends_at` the tenure is live. Between the two
the server sees it late or stalled, but nobody else can take it: the runtime keeps retrying
renewals, reports and the finish (backoff with jitter), the work goes on, and only a fenced
check refuses locally (`LeaseUnconfirmed`), because the client can no longer vouch for the fence
of a write. Past `give_up_at` the tenure is lost (a local `LeaseLost`), and lost is final. A
connection that failed never ends a tenure before that, and never releases it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from groundcontrol_client.core import errors
from groundcontrol_client.core.errors import GroundControlError, LeaseLost, ServerError, Unavailable
from groundcontrol_client.core.limits import LIMITS
from groundcontrol_client.core.models import Attempt, Evidence, Lease
from groundcontrol_client.core.sending import RetryPolicy

logger = logging.getLogger("groundcontrol_client")

# Renew three times per interval: two renewals in a row can fail and the window still holds.
HEARTBEAT_FRACTION = 1 / 3
# Give up a little before the server would call the tenure lost, so the work (and a wrapped
# command's TERM) stops before another holder can start.
MARGIN_FRACTION = 0.1
MAX_MARGIN_S = 5.0
MAX_REASON_LENGTH = int(LIMITS["reason_length"])
# The shortest wait between two tries, and the least time a request is given.
MIN_DELAY_S = 0.01
MIN_TIMEOUT_S = 0.05
# Backoff steps past this add nothing (the delay is capped long before) but an overflow.
MAX_BACKOFF_STEP = 30


def safety_margin(interval_s: float, grace_s: float) -> float:
    return min(MAX_MARGIN_S, MARGIN_FRACTION * (interval_s + grace_s))


def window_ends_at(renewed_at: float, interval_s: float) -> float:
    return renewed_at + interval_s


def give_up_at(renewed_at: float, interval_s: float, grace_s: float) -> float:
    """When the client calls a tenure lost that was last renewed (sent) at `renewed_at`."""
    return renewed_at + interval_s + grace_s - safety_margin(interval_s, grace_s)


class StopRequested(Exception):
    """The supervisor's directive for this attempt is `stop`."""


class LeaseUnconfirmed(Unavailable):
    """A fenced check the client refused on its own: no renewal was accepted within the window,
    so it cannot vouch for the fence (the tenure is not lost yet; renewals go on)."""

    code = "lease_unconfirmed"


def local_lease_lost(reason: str) -> LeaseLost:
    """A `LeaseLost` the client concluded on its own (no answer from the server)."""
    return LeaseLost(reason, fields={"local": True})


def is_local(error: GroundControlError | None) -> bool:
    return error is not None and error.get("local") is True


def clip_reason(reason: str, default: str = "released") -> str:
    return reason[:MAX_REASON_LENGTH] or default


def exception_reason(exc: BaseException) -> str:
    """A release reason for the exception that ended a `with` block."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _monotonic() -> float:
    return time.monotonic()  # looked up per call, so a test can replace time.monotonic


class TenureClock:
    """One tenure's deadline arithmetic and its sticky end, on the monotonic clock.

    Lost is sticky: once the give-up point has passed or the server has refused the tenure, a
    renewal accepted later does not bring it back. Closed (finished or released on purpose)
    means the deadline no longer matters. The lock guards a few assignments and is never held
    across a call to the server, so the async runtime shares this class as it is.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or _monotonic
        self._lock = threading.Lock()
        self.interval_s = 0.0
        self.grace_s = 0.0
        self.renewed_at: float | None = None
        self.closed = False
        self._lost_error: GroundControlError | None = None

    # --- what happened --------------------------------------------------------------------------

    def start(self, *, sent_at: float, interval_s: float, grace_s: float) -> None:
        """The claim or acquire sent at `sent_at` was granted with this interval and grace."""
        with self._lock:
            self.interval_s = float(interval_s)
            self.grace_s = max(float(grace_s), 0.0)
            self.renewed_at = sent_at

    def accepted(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` was accepted (answers may come back out of order)."""
        with self._lock:
            if self._lost_error is None and self.renewed_at is not None:
                self.renewed_at = max(self.renewed_at, sent_at)

    def mark_lost(self, error: GroundControlError) -> None:
        with self._lock:
            if self._lost_error is None:
                self._lost_error = error

    def close(self) -> None:
        self.closed = True

    # --- the rule -------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.renewed_at is not None

    @property
    def window_ends_at(self) -> float:
        return window_ends_at(self.renewed_at or 0.0, self.interval_s)

    @property
    def give_up_at(self) -> float:
        return give_up_at(self.renewed_at or 0.0, self.interval_s, self.grace_s)

    @property
    def expires_in_s(self) -> float:
        """Seconds left in the current renewal window (negative once it has passed)."""
        return self.window_ends_at - self.clock()

    @property
    def give_up_in_s(self) -> float:
        """Seconds until the client would call the tenure lost without an accepted renewal."""
        return self.give_up_at - self.clock()

    @property
    def lost(self) -> bool:
        """True once the server refused the tenure or the give-up point passed unrenewed."""
        if self._lost_error is not None:
            return True
        if self.started and not self.closed and self.clock() > self.give_up_at:
            margin = safety_margin(self.interval_s, self.grace_s)
            self.mark_lost(
                local_lease_lost(
                    f"no renewal was accepted for {self.give_up_at - (self.renewed_at or 0):g} s "
                    f"(interval {self.interval_s:g} s + grace {self.grace_s:g} s, less a "
                    f"{margin:g} s margin): the server may give it to someone else now"
                )
            )
            return True
        return False

    @property
    def lost_error(self) -> GroundControlError | None:
        """Why the tenure is lost: the server's refusal, or a local `LeaseLost`."""
        return self._lost_error if self.lost else None

    def raise_if_lost(self) -> None:
        if self.lost:
            assert self._lost_error is not None
            raise self._lost_error

    def raise_unless_vouched(self, what: str) -> None:
        """Before a fenced write: raise if lost, or if the renewal window has passed without an
        accepted renewal (`LeaseUnconfirmed`, while the tenure itself is still held)."""
        self.raise_if_lost()
        if self.started and not self.closed and self.clock() > self.window_ends_at:
            raise LeaseUnconfirmed(
                f"{what}: no renewal was accepted within the {self.interval_s:g} s window, so "
                "the client cannot vouch for its fence; do not write until a renewal gets "
                f"through (the tenure is given up in {max(self.give_up_in_s, 0):.1f} s)",
                fields={"local": True, "give_up_in_s": round(max(self.give_up_in_s, 0), 3)},
            )

    # --- retrying -------------------------------------------------------------------------------

    def timeout_s(self, default: float) -> float:
        """A request's timeout: no longer than what is left before the give-up point."""
        return max(min(default, self.give_up_in_s), MIN_TIMEOUT_S)

    def retry_delay(self, delay: float) -> float:
        """`delay` (a backoff's), cut so the next try still starts before the give-up point."""
        return max(min(delay, self.give_up_in_s), MIN_DELAY_S)

    def failed(self, error: GroundControlError) -> None:
        """A try failed transiently: raise the loss (from `error`) if it is too late to retry."""
        if self.lost:
            assert self._lost_error is not None
            raise self._lost_error from error

    def backoff_s(self, policy: RetryPolicy, failures: int, rand: Callable[[], float]) -> float:
        """The wait before the next try after `failures` in a row: the client's backoff (with
        jitter), cut at the give-up point."""
        step = min(failures, MAX_BACKOFF_STEP)
        return self.retry_delay(policy.delay(step, hint=None, rand=rand))

    def waited(self, sent_at: float, fraction: float) -> bool:
        """Whether the grant sent at `sent_at` took longer than a renewal period (it waited for
        a slot or a lease): then it was granted late, and a renewal sent now pins the clock."""
        return self.clock() - sent_at > self.interval_s * fraction


def renewal_period(interval_s: float, fraction: float) -> float:
    return max(interval_s * fraction, MIN_DELAY_S)


def is_transient(error: GroundControlError) -> bool:
    """A failure worth trying again until the give-up point: what `errors.is_transient` calls
    transient (the server unreachable, a proxy's 502 or 504 while it restarts, a 503, a 429),
    the client's own retries used up. A 500 is not: the same call would fail the same way. Nor
    is the client's own `LeaseUnconfirmed`, which only time (a renewal) changes."""
    return errors.is_transient(error) and not isinstance(error, LeaseUnconfirmed)


def renewal_retryable(error: GroundControlError) -> bool:
    """A renewal that failed this way is tried again (a 500 too: the next tick may differ);
    any other refusal ends the tenure."""
    return isinstance(error, Unavailable | ServerError)


def lost_reason(error: GroundControlError | None) -> str:
    return f"lease lost: {error}"


def refused_reason(error: GroundControlError) -> str:
    return f"finish refused: {error}"


# --- what an attempt and a resource lease know, whichever runtime keeps them ----------------


class AttemptView:
    """The pure side of a claimed attempt: the server's last word on it, the evidence to finish
    with, and what the directive asks of the agent."""

    run_id: int
    tenure: TenureClock
    _attempt: Attempt | None

    def _init_view(self, run_id: int, slot: int | None, wait: float | None) -> None:
        self.run_id = run_id
        self.requested_slot = slot
        # Seconds to wait for an open slot (the client polls for one).
        self.wait = wait
        self.evidence: list[Evidence] = []
        self.summary: str | None = None
        # Who saw the evidence, as the finish says: None (the hand's word) or "wrapper", which
        # `gctl run` sets after the command exited 0 and it read the evidence file.
        self.observed_by: str | None = None
        self.ended: str | None = None  # finished | released, once this runtime ended it
        self._attempt = None

    @property
    def claimed(self) -> bool:
        return self._attempt is not None

    @property
    def attempt(self) -> Attempt:
        """The attempt as the server last described it."""
        if self._attempt is None:
            raise RuntimeError("not claimed yet: use `with hand.claim(run_id) as attempt:`")
        return self._attempt

    @property
    def id(self) -> int:
        return self.attempt.id

    @property
    def fence(self) -> int:
        return self.attempt.fence

    @property
    def slot(self) -> int:
        return self.attempt.slot

    @property
    def directive(self) -> str:
        """continue | pause | stop, as of the last heartbeat's answer."""
        return self.attempt.directive

    def attach(self, kind: str, url: str, note: str = "") -> None:
        """Evidence to finish with when the `with` block ends without an exception."""
        self.evidence.append(Evidence(kind=kind, url=url, note=note))

    def _record(self, attempt: Attempt) -> str | None:
        """Keep the server's answer; the directive if it changed."""
        previous = self._attempt.directive if self._attempt else None
        self._attempt = attempt
        return attempt.directive if previous not in (None, attempt.directive) else None

    def _must_wait(self) -> bool:
        """For checkpoint: raise if lost or told to stop; True while paused."""
        self.tenure.raise_if_lost()
        if self.directive == "stop":
            raise StopRequested(f"attempt {self.id}: the supervisor asked to stop")
        return self.directive == "pause"

    def _finish_body(
        self, evidence: Iterable[Evidence] | None, summary: str | None
    ) -> dict[str, Any]:
        return {
            "evidence": list(evidence) if evidence is not None else list(self.evidence),
            "summary": summary if summary is not None else self.summary,
            "observed_by": self.observed_by,
        }

    def _quiet_release_skipped(self) -> bool:
        """A tenure given up locally is not released: the server cannot be reached, and it
        ends the tenure by itself within the margin. Nothing is released for a failed link."""
        if self.tenure.lost and is_local(self.tenure.lost_error):
            logger.warning(
                "attempt %s: not released (%s); the server ends it by itself",
                self._attempt and self.id,
                self.tenure.lost_error,
            )
            return True
        return False


def lease_grace_s(lease: Lease) -> float:
    """A resource lease's grace (0 today: it goes live -> lost), if the server names one."""
    grace = lease.raw.get("grace_s")
    return float(grace) if isinstance(grace, int | float) and not isinstance(grace, bool) else 0.0
