"""The work: the plan (work packages in lanes, runs, slots) and the attempts hands make on slots,
with their reports. Slots and attempts stand on `leases.Lease`; nothing here is imported by it."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models.functions import Now

from hands.models import Hand, Lane, Workspace
from hands.scoping import InLane
from leases.models import Lease

DEFAULT_HEARTBEAT_INTERVAL_S = 3600
DEFAULT_GRACE_S = 1800
# A run's priority: 0 (first) to 4, as beads numbers it.
DEFAULT_PRIORITY = 2
MAX_PRIORITY = 4


class PlanState(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class RunState(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"  # by a supervisor: takes no claims; its attempts go on
    DONE = "done"  # every slot finished, set by the last finish itself


class WorkPackage(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="work_packages")
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=200)
    external_ref = models.CharField(max_length=500, blank=True, default="")
    state = models.CharField(max_length=8, choices=PlanState.choices, default=PlanState.OPEN)
    created_at = models.DateTimeField(db_default=Now())

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        constraints = [
            # Creating a work package is idempotent on its key: a retry never makes a second.
            # The workspace last (shardable: docs/scale.md) keeps the look-ups' leading columns.
            models.UniqueConstraint(
                fields=["lane", "key", "workspace"], name="work_package_unique_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.lane.slug}/{self.key}"


class EvidenceGrade(models.TextChoices):
    """Who observed a piece of evidence, weakest first: the hand said so; `gctl run` saw the
    command exit 0 and read what it wrote (the client's word: the server cannot tell a wrapper
    from a hand); a separate key with the `attest` scope (CI) posted a passing result for its
    URL. Here, not in `evidence`, because a run names the grade it requires."""

    HAND = "hand"
    WRAPPER = "wrapper"
    CI = "ci"


GRADE_ORDER = [grade.value for grade in EvidenceGrade]


class IdleDirective(models.TextChoices):
    NONE = "none"
    PAUSE = "pause"
    STOP = "stop"


class Run(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    work_package = models.ForeignKey(WorkPackage, on_delete=models.CASCADE, related_name="runs")
    title = models.CharField(max_length=200)
    brief = models.TextField(blank=True, default="")
    evidence_required = models.JSONField(default=list, blank=True)
    # The least grade (EvidenceGrade) a finish's evidence of a kind must have, by kind; every
    # kind named is also in `evidence_required`.
    evidence_grades = models.JSONField(default=dict, blank=True)
    # The tags a hand must have to claim a slot (`hands.capabilities`): python, browser, gpu.
    capabilities = models.JSONField(default=list, blank=True)
    heartbeat_interval_s = models.PositiveIntegerField(default=DEFAULT_HEARTBEAT_INTERVAL_S)
    grace_s = models.PositiveIntegerField(default=DEFAULT_GRACE_S)
    slot_count = models.PositiveIntegerField(default=1)
    # A live hand that reports no progress this long is idle (fleet/attempts/idle.py); None: never.
    # Copied into each attempt at its claim, as the interval and grace are into its lease.
    progress_timeout_s = models.PositiveIntegerField(null=True, blank=True)
    # What the idle sweep sets on an attempt that turns idle (never weakening a stop).
    idle_directive = models.CharField(max_length=8, choices=IdleDirective.choices, default="none")
    state = models.CharField(max_length=8, choices=RunState.choices, default=RunState.OPEN)
    # The ready queue's order (`GET /runs?ready=true`), as beads orders work: 0 first, then 1, ...
    # 4; among equals, the oldest first.
    priority = models.PositiveSmallIntegerField(
        default=DEFAULT_PRIORITY, db_default=DEFAULT_PRIORITY
    )
    created_at = models.DateTimeField(db_default=Now())
    closed_at = models.DateTimeField(null=True, blank=True)
    # The runs this one waits for: its slots take no claim until each of them is done.
    depends_on = models.ManyToManyField(
        "self",
        through="RunDependency",
        through_fields=("run", "depends_on"),
        symmetrical=False,
        related_name="dependents",
        blank=True,
    )

    LANE = "work_package__lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        indexes = [
            # The ready queue's order (`GET /runs?ready=true`) over the runs that take claims.
            models.Index(
                fields=["workspace", "priority", "created_at", "id"],
                name="run_ready_idx",
                condition=models.Q(state="open"),
            )
        ]

    def __str__(self) -> str:
        return self.title


class RunDependency(models.Model):
    """Run `run` waits for run `depends_on` (done). Written with the run, and replaced by a
    PATCH of its `depends_on` (`fleet.plan.dependencies`): a new run names only runs that exist
    before it, so it closes no cycle; a change that would close one is refused, and the
    workspace's changes take turns under an advisory lock, so none can form."""

    # The run's, denormalised: every table carries the distribution key (docs/scale.md).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    depends_on = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "depends_on", "workspace"], name="run_dependency_unique"
            ),
            models.CheckConstraint(
                condition=~models.Q(run=models.F("depends_on")), name="run_dependency_not_self"
            ),
        ]
        indexes = [models.Index(fields=["depends_on"], name="run_dependency_on_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id} waits for run {self.depends_on_id}"


class SlotState(models.TextChoices):
    """open -> held -> done (finished), or back to open (released, lost, broken). Read from the
    slot's lease (`fleet.plan.selectors.slot_state`): done is its retired status, held a tenure that
    is not lost."""

    OPEN = "open"
    HELD = "held"
    DONE = "done"


class Slot(models.Model):
    """A place in a run that one hand at a time holds, through the lease on `run/<id>/slot/<n>`."""

    # The run's, denormalised: every table carries the distribution key (docs/scale.md).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="slots")
    index = models.PositiveIntegerField()
    # One slot per lease: the unique constraint below (with the workspace, shardable) and not a
    # one-to-one field, whose unique index could not include it; that index serves the look-ups.
    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="slot", db_index=False)

    class Meta:
        # The workspace last in each (docs/scale.md, "Sharding"): the leading columns serve the
        # look-ups as before.
        constraints = [
            models.UniqueConstraint(fields=["run", "index", "workspace"], name="slot_unique_index"),
            models.UniqueConstraint(fields=["lease", "workspace"], name="slot_unique_lease"),
        ]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"run {self.run_id} slot {self.index}"


class Directive(models.TextChoices):
    CONTINUE = "continue"
    PAUSE = "pause"
    STOP = "stop"


class AttemptEnd(models.TextChoices):
    FINISHED = "finished"
    RELEASED = "released"
    LOST = "lost"


class Attempt(models.Model):
    """One hand's tenure on one slot: the slot lease at `fence`, plus the work record."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    slot = models.ForeignKey(Slot, on_delete=models.CASCADE, related_name="attempts")
    hand = models.ForeignKey(Hand, on_delete=models.CASCADE, related_name="attempts")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="+")
    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    process_id = models.CharField(max_length=200)
    directive = models.CharField(
        max_length=8, choices=Directive.choices, default=Directive.CONTINUE
    )
    claimed_at = models.DateTimeField()
    last_report_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # NULL while the tenure runs: "end IS NULL" is the open-attempt filter every index serves.
    end = models.CharField(  # noqa: DJ001
        max_length=8, choices=AttemptEnd.choices, null=True, blank=True
    )
    end_reason = models.CharField(max_length=2000, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    progress_percent = models.FloatField(null=True, blank=True)
    # Idle (fleet/attempts/idle.py): the run's progress_timeout_s at the claim, the last report
    # that was not a bare heartbeat, and the sticky flag the idle sweep sets (a progress report
    # clears it).
    progress_timeout_s = models.PositiveIntegerField(null=True, blank=True)
    last_progress_at = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    # The lane budget reached while this attempt was open (fleet/budgets.py): what every answer
    # to the hand says until `budget_until`, the end of the budget's period.
    budget_notice = models.JSONField(null=True, blank=True)
    budget_until = models.DateTimeField(null=True, blank=True)

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        constraints = [
            # A tenure is one fence of one slot's lease.
            models.UniqueConstraint(
                fields=["lease", "fence", "workspace"], name="attempt_unique_tenure"
            )
        ]
        indexes = [
            models.Index(fields=["workspace", "end", "lane"], name="attempt_open_idx"),
            models.Index(fields=["hand", "-id"], name="attempt_hand_idx"),
            models.Index(fields=["run", "slot"], name="attempt_run_idx"),
            # The idle sweep's candidates: open, with a timeout, not yet flagged.
            models.Index(
                fields=["claimed_at"],
                name="attempt_idle_idx",
                condition=models.Q(end=None, idle_since=None, progress_timeout_s__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.pk} ({self.hand_id} on {self.slot_id})"


class ReportKind(models.TextChoices):
    HEARTBEAT = "heartbeat"
    PROGRESS = "progress"
    BLOCKER = "blocker"
    NOTE = "note"


class Report(models.Model):
    # The attempt's, denormalised: every table carries the distribution key (docs/scale.md).
    # No index of its own (the hot report's INSERT writes no more than before), and no cascade
    # of its own: a workspace's reports go with their attempts.
    workspace = models.ForeignKey(
        Workspace, on_delete=models.DO_NOTHING, related_name="+", db_index=False
    )
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="reports")
    kind = models.CharField(max_length=16, choices=ReportKind.choices)
    at = models.DateTimeField(db_default=Now())
    process_id = models.CharField(max_length=200, blank=True, default="")
    renewed = models.BooleanField(default=False)
    message = models.TextField(blank=True, default="")
    percent = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)
    # Where the work stands, for a successor: a small JSON document (its size in
    # `fleet.attempts.checkpoints`); the next attempt on the slot reads the last one in its brief.
    # Text, not jsonb: the compact JSON as reported and measured, read back value for value
    # (jsonb's numerics would turn 1e300 into an integer of 301 digits). Null is none: "" is
    # no JSON, and the partial index holds the reports that carry one.
    checkpoint = models.TextField(null=True, blank=True)  # noqa: DJ001
    # What the hand says the work cost since its last report (fleet/costs/spend.py sums them on
    # read).
    # The database's default serves the renewing statement's INSERT, which leaves them out; the
    # Python one, an unsaved report (the admin's add page shows it).
    tokens_in = models.BigIntegerField(default=0, db_default=0)
    tokens_out = models.BigIntegerField(default=0, db_default=0)
    cost_usd = models.DecimalField(
        max_digits=14, decimal_places=6, default=Decimal(0), db_default=Decimal(0)
    )
    # A supervisor's void of the report's cost (fleet/costs/voids.py): when, who (the hand and
    # its key's prefix) and why. The figures stay as the hand said them; no sum counts them.
    voided_at = models.DateTimeField(null=True, blank=True)
    voided_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    voided_key = models.CharField(max_length=32, blank=True, default="", db_default="")
    void_reason = models.TextField(blank=True, default="", db_default="")

    LANE = "attempt__lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["attempt", "-id"], name="report_attempt_idx"),
            models.Index(fields=["at"], name="report_at_idx"),
            # The last checkpoint of a slot's attempts (a successor's brief).
            models.Index(
                fields=["attempt", "-id"],
                name="report_checkpoint_idx",
                condition=models.Q(checkpoint__isnull=False),
            ),
            # The costed reports only (a heartbeat costs nothing and pays nothing for it): the
            # totals and the budgets' spend read them by time.
            models.Index(
                fields=["at", "attempt"],
                name="report_cost_idx",
                condition=models.Q(cost_usd__gt=0)
                | models.Q(tokens_in__gt=0)
                | models.Q(tokens_out__gt=0),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on attempt {self.attempt_id}"


class BudgetPeriod(models.TextChoices):
    DAY = "day"
    WEEK = "week"  # ISO weeks, from Monday 00:00 UTC


class BudgetAction(models.TextChoices):
    PAUSE = "pause"
    STOP = "stop"


class Budget(models.Model):
    """A lane's spend limit per UTC day or week: cost, tokens (in + out), or both; reached when
    either is. Enforced by the report that reaches it (fleet/budgets.py)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(max_length=8, choices=BudgetPeriod.choices)
    limit_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    limit_tokens = models.BigIntegerField(null=True, blank=True)
    action = models.CharField(max_length=8, choices=BudgetAction.choices)
    created_at = models.DateTimeField(db_default=Now())

    LANE = "lane_id"  # `hands.scoping.InLane`
    objects = InLane.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "lane", "period"], name="budget_unique_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.lane_id} {self.period}"


class BudgetHit(models.Model):
    """A budget reached in one period: inserted once (its unique key), by the report that
    reached it, with what was spent then."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="hits")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    at = models.DateTimeField()
    spent_usd = models.DecimalField(max_digits=14, decimal_places=6)
    spent_tokens = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "budget", "period_start"], name="budget_hit_once"
            )
        ]

    def __str__(self) -> str:
        return f"budget {self.budget_id} at {self.period_start:%Y-%m-%d}"
