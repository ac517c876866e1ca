"""The bodies the fleet's endpoints accept."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from apikit.inputs import (
    StrictBooleanField,
    StrictCharField,
    StrictDecimalField,
    StrictFloatField,
    StrictIntegerField,
)
from fleet.costs.spend import COST_PLACES, MAX_COST_USD, MAX_TOKENS
from fleet.models import (
    DEFAULT_PRIORITY,
    GRADE_ORDER,
    MAX_PRIORITY,
    Directive,
    IdleDirective,
    PlanState,
    ReportKind,
    RunState,
    SlotState,
)
from fleet.plan import dependencies
from fleet.plan import services as plan_services
from hands import capabilities as hand_capabilities
from hands.api import capabilities_field
from hands.views import MAX_INTERVAL, name_field, reason_field
from leases import services as lease_services
from leases.fences import FENCE_MAX
from leases.models import LeaseMode
from leases.waiting import MAX_WAIT_S

SLOT_STATES = [state.value for state in SlotState]


RUN_STATES = [state.value for state in RunState]


class ResourceField(StrictCharField):
    """A resource's name exactly as sent (no trimming). Whether it is canonical (`leases.names`)
    is the service's to say, in a message that says how to fix it: DRF's own NUL and surrogate
    checks, which would answer only "invalid input", are left to that rule too."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        dropped = (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)
        self.validators = [v for v in self.validators if not isinstance(v, dropped)]


def resource_field(**kwargs: Any) -> serializers.CharField:
    return ResourceField(
        **kwargs,
        max_length=lease_services.MAX_RESOURCE_LENGTH,
        trim_whitespace=False,
        help_text="A canonical name of 1 to 512 characters (a path like src/auth/ is normal): "
        "no control or invisible format characters, in Unicode NFC, no leading or trailing "
        "whitespace, no empty, '.' or '..' segments (so no leading '/'); one trailing '/' is "
        "allowed; no character that looks like '/' (U+FF0F, U+2215, ...) and no segment of "
        "dots spelled with a look-alike of '.' (U+FF0E, U+2024, ...).",
    )


def fence_field() -> serializers.IntegerField:
    return StrictIntegerField(min_value=0, max_value=FENCE_MAX)


class ClaimIn(serializers.Serializer):
    process_id = name_field(
        help_text="The hand's process identity (host:pid, or any stable string)."
    )
    slot = StrictIntegerField(required=False, allow_null=True, min_value=0)


class ReportIn(serializers.Serializer):
    fence = fence_field()
    process_id = name_field(required=False, allow_null=True)
    kind = serializers.ChoiceField(choices=ReportKind.choices)
    message = reason_field(required=False, allow_blank=True)
    percent = StrictFloatField(required=False, allow_null=True, min_value=0, max_value=100)
    details = serializers.DictField(required=False, allow_null=True)
    checkpoint = serializers.JSONField(
        required=False,
        help_text="Where the work stands, for the next attempt on this slot: any JSON value but "
        "null (leave it out to report none), at most the `checkpoint_bytes` limit as compact JSON "
        "in UTF-8. The next attempt on the slot reads the last one in its brief.",
    )
    tokens_in = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_TOKENS,
        help_text="Input tokens the work used since the last report.",
    )
    tokens_out = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_TOKENS,
        help_text="Output tokens the work used since the last report.",
    )
    cost_usd = StrictDecimalField(
        required=False,
        allow_null=True,
        max_digits=12,
        decimal_places=COST_PLACES,
        min_value=Decimal(0),
        max_value=MAX_COST_USD,
        coerce_to_string=True,
        help_text="What the work cost since the last report, in US dollars: a JSON number or a "
        "decimal string of ASCII digits (at most 6 places), from 0 to the `cost_usd` limit.",
    )


class ReleaseIn(serializers.Serializer):
    fence = fence_field()
    process_id = name_field()
    reason = reason_field()


class AcquireIn(serializers.Serializer):
    resource = resource_field()
    ttl_s = StrictFloatField(min_value=1, max_value=lease_services.MAX_TTL_S)
    process_id = name_field()
    wait_s = StrictFloatField(required=False, default=0, min_value=0, max_value=MAX_WAIT_S)
    mode = serializers.ChoiceField(
        choices=LeaseMode.choices, required=False, default=LeaseMode.EXCLUSIVE.value
    )
    take_over = StrictBooleanField(
        required=False,
        default=False,
        help_text="Take the tenure of this name from another process of the same hand (never "
        "another hand's): it ends (lease_taken_over) and this process holds it at a new fence; "
        "the other process's next renewal answers lease_lost.",
    )
    ticket = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=FENCE_MAX,
        help_text="A denial's ticket: the place in line its wait kept (for ticket_kept_s after "
        "that denial). Passed back, the request is served from that place, not the back of the "
        "line; a place no longer kept, or another request's, is a newcomer's.",
    )


class RenewIn(serializers.Serializer):
    resource = resource_field()
    fence = fence_field()
    process_id = name_field()


class HeldIn(serializers.Serializer):
    resource = resource_field()
    fence = fence_field()


class RenewAllIn(serializers.Serializer):
    process_id = name_field()
    held = HeldIn(
        many=True,
        required=False,
        max_length=lease_services.MAX_HELD,
        help_text="The tenures this process believes it holds: each of them not renewed is in "
        "not_renewed with its reason (lease_lost when taken over by another process of the "
        "hand).",
    )


class FencedResourceIn(serializers.Serializer):
    resource = resource_field()
    fence = fence_field()


class LeaseReleaseIn(FencedResourceIn):
    process_id = name_field(
        required=False,
        help_text="The releasing process: when given, only that process's tenure is ended "
        "(another process of the hand is refused `process_mismatch`).",
    )


class BreakIn(serializers.Serializer):
    resource = resource_field()
    reason = reason_field()


class WorkPackageIn(serializers.Serializer):
    title = name_field()
    key = name_field(
        help_text="Unique in the lane: creating a package whose key exists returns it."
    )
    external_ref = StrictCharField(
        max_length=plan_services.MAX_EXTERNAL_REF_LENGTH,
        required=False,
        allow_blank=True,
        allow_null=True,
    )


def PROGRESS_TIMEOUT() -> StrictIntegerField:  # noqa: N802 - a field factory
    return StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=plan_services.MIN_PROGRESS_TIMEOUT_S,
        max_value=plan_services.MAX_PROGRESS_TIMEOUT_S,
        help_text="A live hand that reports no progress (any report but a bare heartbeat) "
        "this long is flagged idle; null: never. Copied into each attempt at its claim.",
    )


def IDLE_DIRECTIVE() -> serializers.ChoiceField:  # noqa: N802 - a field factory
    return serializers.ChoiceField(
        choices=IdleDirective.choices,
        required=False,
        help_text="What an attempt that turns idle is told: none, pause or stop (never "
        "weakening a stop).",
    )


def PRIORITY(**kwargs: Any) -> StrictIntegerField:  # noqa: N802 - a field factory
    return StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_PRIORITY,
        help_text=f"The ready queue's order: 0 first, {MAX_PRIORITY} last (default "
        f"{DEFAULT_PRIORITY}); among equals, the oldest run first.",
        **kwargs,
    )


def DEPENDS_ON(help_text: str = "", **kwargs: Any) -> serializers.ListField:  # noqa: N802
    return serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=dependencies.MAX_RUN_ID),
        required=False,
        max_length=dependencies.MAX_DEPENDENCIES,
        help_text=help_text
        or "The runs this one waits for (ids of runs of the workspace the key can see, at "
        f"most {dependencies.MAX_DEPENDENCIES}, none twice): its slots take no claim "
        "(run_waiting) until each is done.",
        **kwargs,
    )


class RunIn(serializers.Serializer):
    title = name_field()
    brief = StrictCharField(
        max_length=plan_services.MAX_BRIEF_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
    )
    slots = StrictIntegerField(
        required=False, default=1, min_value=1, max_value=plan_services.MAX_SLOTS
    )
    evidence_required = serializers.ListField(
        child=StrictCharField(max_length=plan_services.MAX_EVIDENCE_KIND_LENGTH),
        required=False,
        default=list,
        max_length=plan_services.MAX_EVIDENCE_KINDS,
    )
    evidence_grades = serializers.DictField(
        child=serializers.ChoiceField(choices=GRADE_ORDER),
        required=False,
        default=dict,
        help_text="The least grade each kind's evidence must have at finish (hand < wrapper "
        '< ci), e.g. {"pull_request": "ci"}. A kind named here is required too.',
    )
    heartbeat_interval_s = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INTERVAL
    )
    grace_s = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_INTERVAL
    )
    capabilities = capabilities_field(
        required=False,
        default=list,
        help_text="Tags a hand must have to claim a slot (python, browser, gpu). "
        + hand_capabilities.TAG_HELP,
    )
    progress_timeout_s = PROGRESS_TIMEOUT()
    idle_directive = IDLE_DIRECTIVE()
    priority = PRIORITY()


class RunCreateIn(RunIn):
    """A run created by a call (a schedule's runs name no dependencies: `RunIn`)."""

    depends_on = DEPENDS_ON(default=list)


class RunPatchIn(serializers.Serializer):
    state = serializers.ChoiceField(
        required=False,
        choices=PlanState.choices,
        help_text="closed: no more claims. open: claims again (a run whose slots are all done "
        "reopens as done: reopen a slot or add slots to work on it again).",
    )
    capabilities = capabilities_field(
        required=False,
        help_text="Replace the tags a hand must have to claim a slot (attempts already "
        "claimed go on).",
    )
    progress_timeout_s = PROGRESS_TIMEOUT()
    idle_directive = IDLE_DIRECTIVE()
    priority = PRIORITY()
    depends_on = DEPENDS_ON(
        help_text="Replace the runs this one waits for (at most "
        f"{dependencies.MAX_DEPENDENCIES}; [] waits for none). A change that would close a "
        "cycle is refused (dependency_cycle) and nothing is changed."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "give state, capabilities, progress_timeout_s, idle_directive, priority or "
                "depends_on (or several)"
            )
        return attrs


class SlotsAddIn(serializers.Serializer):
    count = StrictIntegerField(min_value=1, max_value=plan_services.MAX_SLOTS)
    reason = reason_field()


class SlotReopenIn(serializers.Serializer):
    reason = reason_field()


class DirectiveIn(serializers.Serializer):
    directive = serializers.ChoiceField(choices=Directive.choices)
