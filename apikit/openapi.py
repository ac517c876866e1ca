"""OpenAPI: the error body every endpoint may answer, and which codes each endpoint answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from apikit.errors import error_codes


class CallerSerializer(serializers.Serializer):
    hand = serializers.CharField(help_text="The calling key's hand.")
    key_prefix = serializers.CharField(help_text="The calling key's prefix.")


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="A stable code from the contract's table.")
    message = serializers.CharField()
    request_id = serializers.CharField(help_text="Also in the X-Request-ID response header.")
    caller = CallerSerializer(
        required=False,
        help_text="Who was refused: the calling key's hand and prefix, on every refusal of a "
        "call whose key's secret matched (absent for no key or an unknown one).",
    )
    fields = serializers.DictField(
        required=False, help_text="validation_error: the messages for each invalid field."
    )
    required_scope = serializers.CharField(required=False, help_text="scope_denied")
    holder = serializers.CharField(required=False, help_text="lease_held, slot_taken")
    fence = serializers.IntegerField(
        required=False, help_text="lease_held, slot_taken; held_in_other_mode: the caller's tenure"
    )
    expires_in_s = serializers.FloatField(
        required=False,
        help_text="lease_held, slot_taken, held_in_other_mode: when the holder's CURRENT "
        "renewal window ends; a holder that keeps renewing keeps it longer",
    )
    lost_in_s = serializers.FloatField(
        required=False,
        help_text="lease_held, slot_taken: when the holder would be lost if it stopped "
        "renewing now (window end + grace)",
    )
    state = serializers.CharField(
        required=False, help_text="lease_held, slot_taken (done: a finished slot)"
    )
    current_fence = serializers.IntegerField(
        required=False, allow_null=True, help_text="stale_fence, lease_lost"
    )
    missing = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="evidence_missing: the kinds short; capability_missing: the tags the hand lacks",
    )
    backing_other_attempts = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="evidence_missing: the URLs whose passing attestation backs another "
        "attempt's finish already (each attempt needs an attestation of its own)",
    )
    url = serializers.CharField(
        required=False, help_text="attest_own_evidence: the URL of the hand's own evidence"
    )
    capabilities = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="capability_missing: every tag the run needs",
    )
    hand_capabilities = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="capability_missing: the tags the hand has",
    )
    retry_after_s = serializers.FloatField(required=False, help_text="rate_limited")
    waits_of = serializers.CharField(
        required=False,
        help_text="rate_limited, a wait_s acquire over a cap of waits: whose cap (key, "
        "workspace, process, or workspace_in_process: the workspace's half of a web process's)",
    )
    waits_limit = serializers.IntegerField(
        required=False, help_text="rate_limited with waits_of: that cap"
    )
    limit_per_minute = serializers.IntegerField(required=False, help_text="rate_limited")
    limit_bytes = serializers.IntegerField(required=False, help_text="payload_too_large")
    resource = serializers.CharField(
        required=False, help_text="lease_held, slot_taken, held_in_other_mode"
    )
    mode = serializers.CharField(
        required=False,
        help_text="lease_held: the mode of the tenure in the way; held_in_other_mode: the mode "
        "the caller holds it in",
    )
    others = serializers.IntegerField(
        required=False, help_text="lease_held: how many other tenures are in the way too"
    )
    position = serializers.IntegerField(
        required=False,
        help_text="lease_held: the caller's place among the resource's waiters (1: next once "
        "the way is clear)",
    )
    requested = serializers.CharField(
        required=False, help_text="lease_held: the resource the refused call asked for"
    )
    ahead = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="lease_held: the hands before the caller (holders in the way, then waiters "
        "ahead, in order; at most 10)",
    )
    estimated_wait_s = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="lease_held: an estimate of the wait, from the holders' windows and how long "
        "tenures of the resource have lasted",
    )
    pool = serializers.CharField(required=False, help_text="lease_held (a full pool), pool_exists")
    members = serializers.JSONField(
        required=False,
        help_text="lease_held (a full pool): every member, [{member, resource, holder, fence, "
        "state, expires_in_s}]; pool_exists: the existing pool's member names",
    )
    process_id = serializers.CharField(
        required=False,
        help_text="process_mismatch: the identity that holds the attempt; lease_held with "
        "own_hand: the process of the caller's own hand that holds the tenure in the way",
    )
    own_hand = serializers.BooleanField(
        required=False,
        help_text="lease_held: the tenure in the way is the caller's own hand's, held from "
        "another process (take it over with take_over: true)",
    )
    ticket = serializers.IntegerField(
        required=False,
        help_text="lease_held after a wait (wait_s): the place in line the wait kept; pass it "
        "back on the next acquire (ticket) within ticket_kept_s to be served from it",
    )
    ticket_kept_s = serializers.FloatField(
        required=False, help_text="lease_held with ticket: how long the place is kept"
    )
    session = serializers.CharField(
        required=False,
        help_text="lease_held: the tenure in the way is a harness session's (process identity "
        "`<harness>:<session>`), which keeps it for as long as the session works: its id",
    )
    since = serializers.DateTimeField(
        required=False, help_text="lease_held with session: when the session took the tenure"
    )
    end = serializers.CharField(required=False, help_text="lease_lost: how the attempt ended")
    revoked_at = serializers.DateTimeField(required=False, help_text="key_revoked")
    expired_at = serializers.DateTimeField(required=False, help_text="key_expired")
    slots = serializers.IntegerField(required=False, help_text="no_open_slot: the run's slots")
    held = serializers.IntegerField(required=False, help_text="no_open_slot: slots held now")
    done = serializers.IntegerField(required=False, help_text="no_open_slot: slots finished")
    next_expires_in_s = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="no_open_slot: the soonest end of a holder's current renewal window",
    )
    run_state = serializers.CharField(required=False, help_text="run_closed: closed or done")
    waiting_for = serializers.JSONField(
        required=False,
        help_text="run_waiting: each run the claimed run waits for, [{run, title, state}] "
        "(a run of another lane, to a lane-limited key: all three null)",
    )
    cycle = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        required=False,
        help_text="dependency_cycle: the runs of the cycle, from the changed run back to it "
        "(a run of another lane, to a lane-limited key: null)",
    )
    period = serializers.CharField(required=False, help_text="budget_reached: day or week")
    period_end = serializers.DateTimeField(
        required=False, help_text="budget_reached: when the period ends and claims resume"
    )
    action = serializers.CharField(
        required=False, help_text="budget_reached: the budget's action (pause or stop)"
    )
    lane = serializers.CharField(required=False, allow_null=True, help_text="scope_denied")
    idempotency_key = serializers.CharField(required=False, help_text="idempotency_conflict")


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


def error_codes_hook(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: the schema carries every error code the API answers,
    `x-error-codes: {code: {status, description}}` (`apikit.errors.error_codes`), so a client
    reads the contract's codes from the server."""
    result["x-error-codes"] = {
        code: {"status": status, "description": description}
        for code, (status, description) in error_codes().items()
    }
    return result


# Answered by every authenticated endpoint, whatever it does.
COMMON_CODES = (
    "key_invalid",
    "key_revoked",
    "key_expired",
    "rate_limited",
    "dependency_unavailable",
    "busy",
)


def error_responses(*codes: str, body: bool = False) -> dict[int, OpenApiResponse]:
    """The documented error answers of an endpoint: each status with the codes it may carry."""
    statuses = {code: status for code, (status, _) in error_codes().items()}
    every = [*COMMON_CODES, *codes]
    if body:
        every += ["validation_error", "payload_too_large", "unsupported_media_type"]
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(every):
        by_status.setdefault(statuses[code], []).append(code)
    return {
        status: OpenApiResponse(
            response=ErrorSerializer,
            description="Error body with code " + ", ".join(f"`{c}`" for c in status_codes) + ".",
        )
        for status, status_codes in sorted(by_status.items())
    }
