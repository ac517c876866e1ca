"""The ground floor: leases, and the append-only record of events and refusals.

This app imports nothing from `fleet` or `evidence`. A lease names its tenant by `workspace_id`
and its holder by the hand's name (unique per workspace): the engine treats both as opaque
identities, so the same statements serve slot leases and resource leases.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Case, F, Q, When
from django.db.models.functions import Length, Now, Substr
from django.db.models.lookups import GreaterThan


class LeaseKind(models.TextChoices):
    RESOURCE = "resource"
    SLOT = "slot"


class LeaseStatus(models.TextChoices):
    """The sticky part of a lease's state. Live/late/stalled/lost is computed from timestamps."""

    HELD = "held"
    FREE = "free"
    # Ended for good: takes no further holder until reopened (a finished slot). Nobody holds it,
    # so its state reads as free; only a reopen makes it free again.
    RETIRED = "retired"


class LeaseMode(models.TextChoices):
    """An exclusive tenure conflicts with every other tenure on its node, above it and below it;
    a shared one only with exclusive ones there."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


class LeaseState(models.TextChoices):
    LIVE = "live"
    LATE = "late"
    STALLED = "stalled"
    LOST = "lost"
    FREE = "free"


def _node_expression() -> Case:
    """`leases.names.node_of` as SQL: the name without its trailing `/`."""
    return Case(
        When(
            Q(resource__endswith="/") & Q(GreaterThan(Length("resource"), 1)),
            then=Substr("resource", 1, Length("resource") - 1),
        ),
        default=F("resource"),
    )


class Lease(models.Model):
    """A node's row per (workspace, node), kept after release so its fence never goes back: it
    holds the node's exclusive tenure, if any. Each shared tenure of the node is a row of its own
    (`shared_by` = its holder), at the fence the node's row counted out for it."""

    workspace_id = models.BigIntegerField()
    # As the current (or last) tenure spelled it: `src/auth/` and `src/auth` are one node.
    resource = models.CharField(max_length=512)
    node = models.GeneratedField(
        expression=_node_expression(),
        output_field=models.CharField(max_length=512),
        db_persist=True,
    )
    mode = models.CharField(max_length=16, choices=LeaseMode.choices, default=LeaseMode.EXCLUSIVE)
    # '' for the node's row; the holder's name for a shared tenure's row.
    shared_by = models.CharField(max_length=200, blank=True, default="")
    # How long tenures on the node have lasted (a moving average, updated on release): the queue's
    # estimate of a wait.
    tenure_mean_s = models.FloatField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=LeaseKind.choices, default=LeaseKind.RESOURCE)
    status = models.CharField(max_length=8, choices=LeaseStatus.choices, default=LeaseStatus.FREE)
    holder = models.CharField(max_length=200, blank=True, default="")
    process_id = models.CharField(max_length=200, blank=True, default="")
    fence = models.BigIntegerField(default=0)
    # Seconds a renewal buys (a resource lease's ttl, a slot's heartbeat interval), and grace.
    interval_s = models.FloatField(default=60)
    grace_s = models.FloatField(default=0)
    acquired_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    # Set only when the holder released the lease (not on break or expiry), so that a retried
    # release of the same tenure can answer as the first did.
    released_at = models.DateTimeField(null=True, blank=True)
    # What the sweeper last recorded, and when the next threshold (late, stalled, lost) falls.
    # Correctness never reads these (DESIGN rule 3): they only let the sweep record each
    # transition once and touch only rows whose threshold has passed.
    noticed_state = models.CharField(
        max_length=8, choices=LeaseState.choices, default=LeaseState.FREE
    )
    next_check_at = models.DateTimeField(null=True, blank=True)
    # Open handoff requests on the current tenure (`leases.handoffs`): set and cleared only by
    # the statements that open and answer them, reset by every grant. A renewal returns it with
    # the row it already writes, and reads the requests only when it is not 0. Not indexed, so
    # renewals stay heap-only updates (RENEWAL_NOTE in leases/engine.py). `db_default`: the
    # engine's raw INSERTs leave it out.
    handoff_open = models.IntegerField(default=0, db_default=0)
    # The key the current tenure was taken with (a hand's key's id, opaque here like the holder's
    # name; NULL for a tenure taken without one, and for a row nobody has held). Set by every
    # statement that grants, so that revoking the key ends the tenures it holds
    # (`leases.services.key_tenures_end`).
    key_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace_id", "node", "shared_by"], name="lease_unique_node"
            ),
        ]
        indexes = [
            # A revocation's WHERE: the held tenures taken with the revoked keys. The predicate
            # names key_id too, so that a renewal's `status = 'held'` alone never implies it
            # (see lease_due_idx); a renewal leaves key_id alone, so it stays a heap-only update.
            models.Index(
                fields=["key_id"],
                name="lease_held_key_idx",
                condition=models.Q(status="held", key_id__isnull=False),
            ),
            # The sweep's WHERE: held leases whose next threshold has passed. The predicate
            # names next_check_at too, so that only a condition on it (the sweep's `<`) implies
            # it: with `status = 'held'` alone, a plan made while the table was small could read
            # every held lease per renewal through it (docs/performance.md).
            models.Index(
                fields=["next_check_at"],
                name="lease_due_idx",
                condition=models.Q(status="held", next_check_at__isnull=False),
            ),
            # With the resource last, a statement that names holder and resource finds its one
            # row through this index too. Without it the planner, whose statistics lag behind a
            # hand that has just taken thousands of leases, could pick this index for a renewal
            # and filter every lease of the hand (docs/performance.md).
            models.Index(fields=["workspace_id", "holder", "resource"], name="lease_holder_idx"),
            # A renew-all's (leases.engine.RENEW_ALL, HELD_LOST): the leases one holder's process
            # holds; `kind` in the predicate for the reason below.
            models.Index(
                fields=["workspace_id", "holder", "process_id"],
                name="lease_process_idx",
                condition=models.Q(status="held", kind="resource"),
            ),
            # The tree's conflict lookups (leases.engine): held tenures on a node's line, and the
            # range of its descendants (code point order: the column is COLLATE "C" on PostgreSQL).
            # `kind` in the predicate, which only those lookups state, keeps every other
            # statement's `status = 'held'` from implying it (see lease_due_idx).
            models.Index(
                fields=["workspace_id", "node"],
                name="lease_held_node_idx",
                condition=models.Q(status="held", kind="resource"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource} (fence {self.fence}, {self.status})"


class EventKind(models.TextChoices):
    CLAIMED = "claimed"
    LATE = "late"
    STALLED = "stalled"
    LOST = "lost"
    FINISHED = "finished"
    RELEASED = "released"
    DIRECTIVE_SET = "directive_set"
    KEY_ISSUED = "key_issued"
    KEY_REVOKED = "key_revoked"
    LEASE_ACQUIRED = "lease_acquired"
    LEASE_RELEASED = "lease_released"
    LEASE_EXPIRED = "lease_expired"
    LEASE_BROKEN = "lease_broken"
    # Another process of the same hand took the tenure over (`take_over` on acquire).
    LEASE_TAKEN_OVER = "lease_taken_over"
    RUN_CLOSED = "run_closed"
    RUN_DONE = "run_done"
    # A supervisor changed a run's priority, what it waits for, capabilities or idle settings
    # (`data.changed`: each field's `from` and `to`; fleet.plan.services.run_update).
    RUN_CHANGED = "run_changed"
    SLOT_REOPENED = "slot_reopened"
    SLOTS_ADDED = "slots_added"
    ATTESTED = "attested"
    # A friction report was filed (friction.services.friction_file).
    FRICTION = "friction"
    HANDOFF_REQUESTED = "handoff_requested"
    HANDOFF_DECLINED = "handoff_declined"
    HANDOFF_RELEASED = "handoff_released"
    HANDOFF_GRANTED = "handoff_granted"
    HANDOFF_WITHDRAWN = "handoff_withdrawn"
    IDLE = "idle"
    BUDGET = "budget"
    # A supervisor voided a costed report's cost (fleet.costs.voids.report_void): `hand` the
    # report's, `actor` the supervisor; `data`: the report, its figures, the reason.
    COST_VOIDED = "cost_voided"
    # A harness session's shell command changed a file another holder has (harnesses.services).
    WRITE_OUTSIDE_LEASE = "write_outside_lease"


class Event(models.Model):
    """The append-only record of every transition, written in the transaction that made it."""

    workspace_id = models.BigIntegerField()
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    at = models.DateTimeField(db_default=Now())
    actor = models.CharField(max_length=200, blank=True, default="")
    # The prefix of the key that acted ('' for a person in the dashboard or admin, or the
    # system): beside `actor`, so the record says which of a hand's keys made the call.
    actor_key = models.CharField(max_length=32, blank=True, default="")
    hand = models.CharField(max_length=200, blank=True, default="")
    attempt_id = models.BigIntegerField(null=True, blank=True)
    resource = models.CharField(max_length=512, blank=True, default="")
    fence = models.BigIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    # Set once a notifier (webhooks) has handled the event; claimed with a conditional update.
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace_id", "-id"], name="event_ws_idx"),
            models.Index(fields=["workspace_id", "kind", "-id"], name="event_ws_kind_idx"),
            models.Index(fields=["at"], name="event_at_idx"),
            # A fence's end, for `POST /fences/verify` (leases.verification): the events that
            # end a tenure or take its node past it, by name and fence. Partial, so that only
            # acquires, releases, expiries and breaks pay for it (a renewal writes no event).
            models.Index(
                fields=["workspace_id", "resource", "fence"],
                name="event_fence_idx",
                condition=models.Q(
                    kind__in=["lease_acquired", "lease_released", "lease_expired", "lease_broken"]
                ),
            ),
            # The webhook dispatcher's WHERE: events no notifier has claimed yet.
            models.Index(
                fields=["id"],
                name="event_undispatched_idx",
                condition=models.Q(dispatched_at=None),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.resource or self.hand} at {self.at:%Y-%m-%d %H:%M:%S}"


class FenceStatus(models.TextChoices):
    CURRENT = "current"
    SUPERSEDED = "superseded"
    UNKNOWN = "unknown"
    # Current, but not the tenure of the holder its trailer names (or, in a push receipt, of the
    # hand that pushed it): a commit cannot borrow another's fence.
    NOT_HOLDER = "not_holder"


class FenceVerification(models.Model):
    """One fence a key asked about (`POST /fences/verify`), and the answer it was given: the
    record of what CI (or a push) was told about a commit's fences."""

    workspace_id = models.BigIntegerField()
    at = models.DateTimeField(db_default=Now())
    key_prefix = models.CharField(max_length=32, blank=True, default="")
    hand = models.CharField(max_length=200, blank=True, default="")
    resource = models.CharField(max_length=512)
    fence = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=FenceStatus.choices)
    current_fence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace_id", "-id"], name="fence_verification_ws_idx"),
            # Retention's WHERE and ORDER BY (`ops.jobs.records_prune`).
            models.Index(fields=["at"], name="fence_verification_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.resource}@{self.fence} {self.status}"


class FenceReceipt(models.Model):
    """What a push was told about one commit (`POST /fences/receipts`, `leases.receipts`): each
    fence it carried and where that fence stood when it was pushed, the paths it touched that
    another hand held (or this hand had lost), and whether the push was accepted. Signed with a
    key derived from SECRET_KEY, so CI (`gctl verify`) trusts a row only as the server wrote it.

    One row per (workspace, repository, commit): an accepted receipt is final (a re-push answers
    with it); a refused one is judged again by the next push of the commit."""

    workspace_id = models.BigIntegerField()
    # The repository as the client names it (its remote's URL, normalised: `leases.receipts`).
    repository = models.CharField(max_length=512)
    sha = models.CharField(max_length=64)
    accepted = models.BooleanField()
    # The database's time when the push was judged.
    at = models.DateTimeField()
    hand = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=32, blank=True, default="")
    process_id = models.CharField(max_length=200, blank=True, default="")
    fences = models.JSONField(default=list, blank=True)
    refusals = models.JSONField(default=list, blank=True)
    signature = models.CharField(max_length=64)

    class Meta:
        constraints = [
            # The upsert's conflict target, and CI's lookup by repository and commit.
            models.UniqueConstraint(
                fields=["workspace_id", "repository", "sha"], name="fence_receipt_unique"
            ),
        ]
        indexes = [models.Index(fields=["at"], name="fence_receipt_at_idx")]

    def __str__(self) -> str:
        return (
            f"{self.sha[:12]} in {self.repository} ({'accepted' if self.accepted else 'refused'})"
        )


class Refusal(models.Model):
    """Every refused call: who, what, when and the contract's code."""

    workspace_id = models.BigIntegerField(null=True, blank=True)
    at = models.DateTimeField(db_default=Now())
    hand = models.CharField(max_length=200, blank=True, default="")
    key_prefix = models.CharField(max_length=32, blank=True, default="")
    method = models.CharField(max_length=10, blank=True, default="")
    path = models.CharField(max_length=1024, blank=True, default="")
    code = models.CharField(max_length=64)
    message = models.TextField(blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace_id", "-id"], name="refusal_ws_idx"),
            models.Index(fields=["workspace_id", "code", "-id"], name="refusal_ws_code_idx"),
            # A friction report links refused calls by request id (friction.services).
            models.Index(fields=["workspace_id", "request_id"], name="refusal_ws_request_idx"),
            models.Index(fields=["at"], name="refusal_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.code} {self.method} {self.path}"


class AddressRefusal(models.Model):
    """Refused calls that reached no workspace (no key, a malformed, unknown or wrong one, an
    unknown path, and their 429s), counted: one row per client address, code and minute.

    A flood of such calls from one address grows a count, not the table. `minute` is the
    database's clock truncated to the minute, so every web process agrees which row a call joins;
    the one statement that writes a row (`leases.audit.record_address_refusal`) inserts it or adds
    one to its count. The method, path and key prefix are the first call's, as a sample.
    """

    address = models.CharField(max_length=64)
    code = models.CharField(max_length=64)
    minute = models.DateTimeField()
    count = models.BigIntegerField(default=1)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    method = models.CharField(max_length=10, blank=True, default="")
    path = models.CharField(max_length=200, blank=True, default="")
    key_prefix = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        constraints = [
            # The upsert's conflict target: it is what makes concurrent calls add to one row.
            models.UniqueConstraint(
                fields=["address", "code", "minute"], name="address_refusal_unique_minute"
            ),
        ]
        indexes = [
            # Retention's WHERE and ORDER BY (`ops.jobs.records_prune`); `minute` never changes
            # once written, so the upsert's updates leave this index alone.
            models.Index(fields=["minute"], name="address_refusal_minute_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.code} x{self.count} from {self.address} at {self.minute:%Y-%m-%d %H:%M}"


class KeyRecord(models.TextChoices):
    REFUSAL = "refusal"  # a refused call of the key (`Refusal`)
    VERIFICATION = "verification"  # a fence the key asked about (`FenceVerification`)


class KeyTally(models.Model):
    """One key's records of one kind in one minute, counted: its refused calls, or the fences it
    asked about (`POST /fences/verify`).

    The first `leases.audit.KEPT_PER_KEY_MINUTE` of each kind a key makes in a minute keep rows
    of their own (`Refusal`, `FenceVerification`); the rest only add to this row, so that no
    key can write more than that many rows (and this one) a minute, however fast it calls.
    `count` is every record of the minute, kept or not; `past_limit` those without a row of
    their own, by code (a refusal's) or status (a verification's). One statement writes a row
    (`leases.audit.key_tally`): it inserts it or adds to it, and says how many of the call's
    records may keep rows. `minute` is the database's clock truncated to the minute, as
    `AddressRefusal`'s is.
    """

    workspace_id = models.BigIntegerField()
    key_prefix = models.CharField(max_length=32)
    record = models.CharField(max_length=16, choices=KeyRecord.choices)
    minute = models.DateTimeField()
    count = models.BigIntegerField(default=0)
    past_limit = models.JSONField(default=dict, blank=True)
    hand = models.CharField(max_length=200, blank=True, default="")
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        constraints = [
            # The upsert's conflict target: concurrent calls of one key add to one row.
            models.UniqueConstraint(
                fields=["workspace_id", "key_prefix", "record", "minute"],
                name="key_tally_unique_minute",
            ),
        ]
        indexes = [
            # Retention's WHERE and ORDER BY (`ops.jobs.records_prune`); `minute` never changes.
            models.Index(fields=["minute"], name="key_tally_minute_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.record} x{self.count} by {self.key_prefix} at {self.minute:%Y-%m-%d %H:%M}"


class Waiter(models.Model):
    """A `wait_s` acquire in line for a resource (`leases.queue`): while it stays (it refreshes
    `expires_at` as it waits), no request on its line of the tree that it conflicts with and
    that joined after it, or never joined, is granted before it. A waiter whose process died
    leaves the line when its `expires_at` passes; nothing else needs to notice."""

    workspace_id = models.BigIntegerField()
    resource = models.CharField(max_length=512)
    node = models.GeneratedField(
        expression=_node_expression(),
        output_field=models.CharField(max_length=512),
        db_persist=True,
    )
    mode = models.CharField(max_length=16, choices=LeaseMode.choices, default=LeaseMode.EXCLUSIVE)
    holder = models.CharField(max_length=200)
    process_id = models.CharField(max_length=200, blank=True, default="")
    queued_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [
            # The grants' queue check and a waiter's standing: waiters on a node's line, by node
            # and by the range of its descendants (COLLATE "C" on PostgreSQL, as the lease's).
            models.Index(fields=["workspace_id", "node"], name="waiter_node_idx"),
            models.Index(fields=["expires_at"], name="waiter_expiry_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.holder} waiting for {self.resource} ({self.mode})"


class HandoffStatus(models.TextChoices):
    """A handoff request's answer as stored. `lapsed` is never stored: an open request whose
    tenure has ended otherwise (expired, lost, taken over) reads as lapsed (`leases.handoffs`)."""

    OPEN = "open"
    RELEASED = "released"
    DECLINED = "declined"
    GRANTED = "granted"
    WITHDRAWN = "withdrawn"


class HandoffRequest(models.Model):
    """One hand asking the holder of one tenure (a lease at its fence) to let it go."""

    workspace_id = models.BigIntegerField()
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="+")
    fence = models.BigIntegerField()
    # The tenure's name and holder as they were when asked; `wanted`: what the asker was
    # refused (a name below or above a held directory, or the slot's own name).
    resource = models.CharField(max_length=512)
    kind = models.CharField(max_length=16, choices=LeaseKind.choices, default=LeaseKind.RESOURCE)
    holder = models.CharField(max_length=200)
    asker = models.CharField(max_length=200)
    wanted = models.CharField(max_length=512)
    reason = models.TextField()
    status = models.CharField(
        max_length=16, choices=HandoffStatus.choices, default=HandoffStatus.OPEN
    )
    # How a released request's tenure ended (released, finished, broken), and the holder's or
    # the supervisor's words with a decline or a grant.
    ended_by = models.CharField(max_length=16, blank=True, default="")
    answer = models.TextField(blank=True, default="")
    answered_by = models.CharField(max_length=200, blank=True, default="")
    asked_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One open request per asker and tenure: a repeated ask returns it.
            models.UniqueConstraint(
                fields=["workspace_id", "lease", "fence", "asker"],
                name="handoff_one_open",
                condition=models.Q(status="open"),
            ),
        ]
        indexes = [
            models.Index(fields=["workspace_id", "asker", "-id"], name="handoff_asker_idx"),
            models.Index(fields=["workspace_id", "holder", "-id"], name="handoff_holder_idx"),
            # The board's open requests.
            models.Index(
                fields=["workspace_id", "-id"],
                name="handoff_open_idx",
                condition=models.Q(status="open"),
            ),
            # Retention's WHERE and ORDER BY (`ops.jobs.records_prune`).
            models.Index(fields=["asked_at"], name="handoff_asked_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.asker} asks {self.holder} for {self.resource}@{self.fence} ({self.status})"


class ClockEpoch(models.Model):
    """One primary's time as the source of truth: a (system identifier, timeline) pair of the
    PostgreSQL cluster, recorded by the first connection that found it new (`leases.epochs`).
    A promoted replica starts a new timeline on another machine's clock: its epoch's `shift_s`
    is how far every held lease was moved so that it keeps the time it had left."""

    system_identifier = models.BigIntegerField()
    timeline = models.BigIntegerField()
    started_at = models.DateTimeField()  # the new primary's clock when the epoch was recorded
    # The latest promise (grant or renewal) a held lease carried, on the previous primary's clock.
    last_promise_at = models.DateTimeField(null=True, blank=True)
    shift_s = models.FloatField(default=0)
    leases_shifted = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["system_identifier", "timeline"], name="clock_epoch_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"timeline {self.timeline} of {self.system_identifier} (shift {self.shift_s:+.3f}s)"
