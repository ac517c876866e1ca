"""The OpenAPI schema of the presenters' JSON (`fleet.api.presenters`): documentation only, never
used to render an answer."""

from __future__ import annotations

from rest_framework import serializers

from apikit.concealing import CONCEALED
from fleet.api.inputs import SLOT_STATES
from fleet.attempts import selectors as attempt_selectors
from fleet.models import GRADE_ORDER, MAX_PRIORITY, AttemptEnd, Directive, PlanState, RunState
from leases import selectors as lease_selectors
from leases.models import EventKind, LeaseMode


class AttemptLeaseOut(serializers.Serializer):
    resource = serializers.CharField()
    fence = serializers.IntegerField(help_text="This attempt's fence: carry it on every write.")
    current_fence = serializers.IntegerField(help_text="The slot lease's fence now.")
    holder = serializers.CharField(allow_null=True, help_text=CONCEALED)
    heartbeat_interval_s = serializers.FloatField()
    grace_s = serializers.FloatField()
    expires_at = serializers.DateTimeField(allow_null=True)
    expires_in_s = serializers.FloatField(allow_null=True)
    server_time = serializers.DateTimeField()
    late_at = serializers.DateTimeField(allow_null=True)
    stalled_at = serializers.DateTimeField(allow_null=True)
    lost_at = serializers.DateTimeField(allow_null=True)


class BudgetNoticeOut(serializers.Serializer):
    budget = serializers.IntegerField()
    lane = serializers.CharField()
    period = serializers.ChoiceField(choices=["day", "week"])
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    spent_usd = serializers.CharField(help_text="A decimal, as text: what was spent when reached.")
    limit_usd = serializers.CharField(allow_null=True)
    spent_tokens = serializers.IntegerField()
    limit_tokens = serializers.IntegerField(allow_null=True)
    action = serializers.ChoiceField(choices=["pause", "stop"])
    message = serializers.CharField()


class AttemptOut(serializers.Serializer):
    id = serializers.IntegerField()
    run = serializers.IntegerField()
    slot = serializers.IntegerField()
    hand = serializers.CharField(allow_null=True, help_text=CONCEALED)
    lane = serializers.CharField()
    process_id = serializers.CharField(allow_null=True, help_text=CONCEALED)
    fence = serializers.IntegerField()
    state = serializers.ChoiceField(choices=attempt_selectors.ATTEMPT_STATES)
    directive = serializers.ChoiceField(choices=Directive.choices)
    lease = AttemptLeaseOut()
    claimed_at = serializers.DateTimeField()
    last_report_at = serializers.DateTimeField(allow_null=True)
    progress_percent = serializers.FloatField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField(allow_null=True)
    summary = serializers.CharField(allow_null=True)
    progress_timeout_s = serializers.IntegerField(
        allow_null=True, help_text="The run's progress timeout when this attempt was claimed."
    )
    last_progress_at = serializers.DateTimeField(
        allow_null=True, help_text="The last report that was not a bare heartbeat."
    )
    idle = serializers.BooleanField(
        help_text="Live, but no progress for progress_timeout_s (computed now, by the "
        "database clock)."
    )
    idle_since = serializers.DateTimeField(
        allow_null=True, help_text="When the idle sweep flagged it (cleared by progress)."
    )
    budget = BudgetNoticeOut(
        allow_null=True,
        help_text="The lane budget reached in the current period, while it lasts; else null.",
    )


class CheckpointFromOut(serializers.Serializer):
    attempt = serializers.IntegerField(help_text="The earlier attempt that reported it.")
    hand = serializers.CharField(allow_null=True, help_text=CONCEALED)
    at = serializers.DateTimeField(help_text="When it was reported.")
    end = serializers.ChoiceField(
        choices=AttemptEnd.choices, allow_null=True, help_text="How that attempt ended."
    )
    withheld = serializers.BooleanField(
        help_text="True when a hand of another lane reported it: to a lane-limited key the "
        "checkpoint is then null (docs/api.md, Checkpoints)."
    )


CHECKPOINT_HELP = (
    "The last checkpoint an earlier attempt on this slot reported (docs/api.md, Checkpoints); "
    "null if none did."
)


class ClaimOut(AttemptOut):
    checkpoint = serializers.JSONField(allow_null=True, help_text=CHECKPOINT_HELP)
    checkpoint_from = CheckpointFromOut(allow_null=True)


class LeaseOut(serializers.Serializer):
    resource = serializers.CharField()
    kind = serializers.CharField()
    mode = serializers.ChoiceField(choices=LeaseMode.choices)
    holder = serializers.CharField(allow_null=True)
    process_id = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField()
    state = serializers.ChoiceField(choices=lease_selectors.LEASE_STATES)
    ttl_s = serializers.FloatField()
    grace_s = serializers.FloatField()
    acquired_at = serializers.DateTimeField(allow_null=True)
    renewed_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    expires_in_s = serializers.FloatField(allow_null=True)
    released_at = serializers.DateTimeField(allow_null=True)
    queued_at = serializers.DateTimeField(
        allow_null=True, help_text="When the call joined the resource's queue, if it waited."
    )
    server_time = serializers.DateTimeField()


class WaiterOut(serializers.Serializer):
    resource = serializers.CharField()
    holder = serializers.CharField(allow_null=True, help_text=CONCEALED)
    mode = serializers.ChoiceField(choices=LeaseMode.choices)
    position = serializers.IntegerField(
        help_text="Its place in the queue: 1 + the waiters that joined before it on its line of "
        "the tree and conflict with it; 1: next once the holders in the way let go."
    )
    queued_at = serializers.DateTimeField()


class SlotOut(serializers.Serializer):
    index = serializers.IntegerField()
    state = serializers.ChoiceField(choices=SLOT_STATES)
    holder = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField()
    expires_in_s = serializers.FloatField(allow_null=True)


class BriefRunOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    brief = serializers.CharField(help_text="Markdown.")
    evidence_required = serializers.ListField(child=serializers.CharField())
    evidence_grades = serializers.DictField(
        child=serializers.ChoiceField(choices=GRADE_ORDER),
        help_text="The least grade (hand < wrapper < ci) a finish's evidence of each kind needs.",
    )


class BriefPackageOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    key = serializers.CharField()
    external_ref = serializers.CharField(allow_null=True)


class BriefLaneOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()


class BriefOut(serializers.Serializer):
    attempt = AttemptOut()
    run = BriefRunOut()
    work_package = BriefPackageOut()
    lane = BriefLaneOut()
    checkpoint = serializers.JSONField(allow_null=True, help_text=CHECKPOINT_HELP)
    checkpoint_from = CheckpointFromOut(allow_null=True)


class PendingHandoffOut(serializers.Serializer):
    """An open handoff request on the tenure, as a renewal or heartbeat answer shows it."""

    id = serializers.IntegerField()
    # `from` is a Python keyword: the field's name in the JSON is set below.
    from_ = serializers.CharField(allow_null=True, help_text=f"The asking hand. {CONCEALED}")
    resource = serializers.CharField(help_text="The tenure's name.")
    wanted = serializers.CharField(help_text="What the asker was refused.")
    reason = serializers.CharField()
    at = serializers.DateTimeField()


# The JSON field is `from` (a keyword in Python).
PendingHandoffOut._declared_fields["from"] = PendingHandoffOut._declared_fields.pop("from_")

HANDOFF_REQUESTS_HELP = (
    "Open handoff requests on this tenure (other hands asking for it): release it when you "
    "can, decline with a reason (POST /leases/handoff/{id}/decline), or ignore them."
)


class ReportOut(serializers.Serializer):
    renewed = serializers.BooleanField()
    attempt = AttemptOut()
    handoff_requests = PendingHandoffOut(many=True, help_text=HANDOFF_REQUESTS_HELP)


class RenewedLeaseOut(LeaseOut):
    handoff_requests = PendingHandoffOut(many=True, help_text=HANDOFF_REQUESTS_HELP)


class ReleasedOut(serializers.Serializer):
    released = serializers.BooleanField()
    lease = LeaseOut()


class NotRenewedOut(serializers.Serializer):
    resource = serializers.CharField(help_text="The tenure not renewed: its resource.")
    fence = serializers.IntegerField(help_text="The tenure not renewed: its fence.")
    lease = LeaseOut(
        allow_null=True,
        help_text="Its row as it stands (the node's, once the node moved on: for a tenure taken "
        "over, the other process's); null for a name in held that was never leased.",
    )
    code = serializers.CharField(
        help_text="Why it was not renewed: lease_lost (lost, or taken over by another process "
        "of the hand); for a tenure in held also stale_fence, not_holder or not_found."
    )
    message = serializers.CharField()


class RenewedAllOut(serializers.Serializer):
    renewed = RenewedLeaseOut(many=True)
    not_renewed = NotRenewedOut(many=True)


class CheckOut(serializers.Serializer):
    valid = serializers.BooleanField()
    lease = LeaseOut()


class WorkPackageOut(serializers.Serializer):
    id = serializers.IntegerField()
    lane = serializers.CharField()
    key = serializers.CharField()
    title = serializers.CharField()
    external_ref = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(choices=PlanState.choices)
    created_at = serializers.DateTimeField()


class SlotsByStateOut(serializers.Serializer):
    open = serializers.IntegerField()
    held = serializers.IntegerField()
    done = serializers.IntegerField()


class RunOut(serializers.Serializer):
    id = serializers.IntegerField()
    work_package = serializers.IntegerField()
    lane = serializers.CharField()
    title = serializers.CharField()
    brief = serializers.CharField()
    evidence_required = serializers.ListField(child=serializers.CharField())
    evidence_grades = serializers.DictField(
        child=serializers.ChoiceField(choices=GRADE_ORDER),
        help_text="The least grade (hand < wrapper < ci) a finish's evidence of each kind needs.",
    )
    capabilities = serializers.ListField(
        child=serializers.CharField(),
        help_text="The tags a hand must have to claim a slot (capability_missing otherwise).",
    )
    slots = serializers.IntegerField()
    heartbeat_interval_s = serializers.IntegerField()
    grace_s = serializers.IntegerField()
    progress_timeout_s = serializers.IntegerField(
        allow_null=True, help_text="No progress this long flags a live hand idle; null: never."
    )
    idle_directive = serializers.ChoiceField(
        choices=["none", "pause", "stop"], help_text="What an attempt that turns idle is told."
    )
    state = serializers.ChoiceField(
        choices=RunState.choices,
        help_text="open; closed by a supervisor; done once every slot was finished.",
    )
    created_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was closed, or became done."
    )
    work_package_key = serializers.CharField()
    work_package_title = serializers.CharField()
    priority = serializers.IntegerField(
        min_value=0, max_value=MAX_PRIORITY, help_text="The ready queue's order: 0 first."
    )
    depends_on = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="The runs it waits for, ascending (a run of another lane, to a lane-limited "
        "key: null).",
    )
    waiting_for = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="Those of depends_on not done yet (a claim is refused run_waiting).",
    )
    slots_by_state = SlotsByStateOut(
        required=False, help_text="How many slots are open, held and done now (lists of runs)."
    )


class RefusalOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    code = serializers.CharField()
    message = serializers.CharField()
    hand = serializers.CharField(allow_null=True)
    key_prefix = serializers.CharField(allow_null=True)
    method = serializers.CharField()
    path = serializers.CharField()
    request_id = serializers.CharField()
    details = serializers.DictField()


class EventOut(serializers.Serializer):
    id = serializers.IntegerField()
    workspace = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=EventKind.choices)
    at = serializers.DateTimeField()
    actor = serializers.CharField(allow_null=True)
    actor_key = serializers.CharField(
        allow_null=True,
        help_text="The prefix of the key that acted (null: a person in the dashboard or "
        "admin, or the system)",
    )
    hand = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    resource = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField(allow_null=True)
    data = serializers.DictField()
