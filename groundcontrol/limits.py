"""Every size and range the API enforces, in one table the OpenAPI schema carries
(`x-limits: {name: {value, description}}`), so a client reads the contract's limits from the
server (the client's own table is checked against it: tests/client/test_limits_contract.py).

Each limit is defined once, by the app that enforces it; this table names them. It lives here,
in the wiring, because it reads every app."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apikit.api import MAX_JSON_DEPTH, MAX_PAGE_SIZE
from evidence.services import MAX_EVIDENCE_ITEMS, MAX_SUMMARY_LENGTH, MAX_URL_LENGTH
from fleet.attempts.checkpoints import MAX_CHECKPOINT_BYTES
from fleet.attempts.reports import MAX_DETAILS_BYTES
from fleet.costs.spend import MAX_COST_USD, MAX_TOKENS
from fleet.models import MAX_PRIORITY
from fleet.plan.dependencies import MAX_DEPENDENCIES
from fleet.plan.services import (
    MAX_BRIEF_LENGTH,
    MAX_EVIDENCE_KIND_LENGTH,
    MAX_EVIDENCE_KINDS,
    MAX_EXTERNAL_REF_LENGTH,
    MAX_PROGRESS_TIMEOUT_S,
    MAX_SLOTS,
)
from friction.services import MAX_MINUTES, MAX_REFUSALS
from hands.capabilities import MAX_TAG_LENGTH, MAX_TAGS
from leases.audit import KEPT_PER_KEY_MINUTE
from leases.handoffs import MAX_OPEN_PER_TENURE
from leases.names import MAX_RESOURCE_LENGTH, MAX_SEGMENTS
from leases.receipts import MAX_RECEIPT_COMMITS, MAX_RECEIPT_NAMES
from leases.services import (
    MAX_HELD,
    MAX_INTERVAL_S,
    MAX_NAME_LENGTH,
    MAX_REASON_LENGTH,
    MAX_TTL_S,
)
from leases.verification import MAX_FENCES, MAX_PATHS
from leases.waiting import MAX_WAIT_S
from leasing.api import MAX_COVERING
from pools.services import MAX_MEMBERS
from schedules.periods import MIN_PERIOD_S
from schedules.services import (
    MAX_SCHEDULES_PER_LANE,
    MAX_SCHEDULES_PER_WORKSPACE,
    MAX_TEMPLATE_RUNS,
    MAX_TEMPLATE_SLOTS,
)


def limits() -> dict[str, tuple[int | float, str]]:
    """Each limit's name, value and meaning. `body_bytes` is the deployment's setting."""
    return {
        "body_bytes": (
            int(settings.GC_MAX_BODY_BYTES),
            "A request body, in bytes (GC_MAX_BODY_BYTES; over it: 413 payload_too_large).",
        ),
        "json_depth": (MAX_JSON_DEPTH, "How deep a body's objects and arrays may nest."),
        "page_size": (MAX_PAGE_SIZE, "A list's `limit`, at most."),
        "name_length": (
            MAX_NAME_LENGTH,
            "A name (a hand's, a process_id, a pool's or a member's, a title), in characters.",
        ),
        "reason_length": (
            MAX_REASON_LENGTH,
            "A reason or message (a release's, a break's, a report's), in characters.",
        ),
        "resource_length": (MAX_RESOURCE_LENGTH, "A resource's name, in characters."),
        "resource_segments": (MAX_SEGMENTS, "A resource's name, in `/`-separated segments."),
        "ttl_s": (MAX_TTL_S, "A lease's ttl_s, in seconds, at most."),
        "interval_s": (MAX_INTERVAL_S, "A heartbeat interval or grace, in seconds, at most."),
        "wait_s": (MAX_WAIT_S, "How long an acquire or claim may wait for its turn, in seconds."),
        "held": (MAX_HELD, "The tenures a renew-all's `held` may name."),
        "verified_fences": (MAX_FENCES, "The fences one verification may judge."),
        "verified_paths": (MAX_PATHS, "The paths one verification may ask about."),
        "receipt_commits": (
            MAX_RECEIPT_COMMITS,
            "The commits one push receipt call may judge, or one receipt lookup may ask for.",
        ),
        "receipt_names": (
            MAX_RECEIPT_NAMES,
            "The fences and paths of one push receipt call, every commit's together.",
        ),
        "covering": (MAX_COVERING, "The names one `covering` read may ask about."),
        "open_handoffs_per_tenure": (
            MAX_OPEN_PER_TENURE,
            "Open handoff requests on one tenure (more: 409 handoff_limit).",
        ),
        "details_bytes": (MAX_DETAILS_BYTES, "A report's `details`, in bytes of JSON."),
        "run_dependencies": (
            MAX_DEPENDENCIES,
            "The runs a run may wait for (`depends_on`), none named twice.",
        ),
        "run_priority": (MAX_PRIORITY, "A run's lowest priority (0 is the first)."),
        "checkpoint_bytes": (
            MAX_CHECKPOINT_BYTES,
            "A report's `checkpoint`, in bytes of compact JSON (UTF-8).",
        ),
        "tokens": (MAX_TOKENS, "A report's tokens_in or tokens_out, at most."),
        "cost_usd": (
            float(MAX_COST_USD),
            "A report's cost_usd (US dollars since the hand's last report), at most.",
        ),
        "slots": (MAX_SLOTS, "The slots of one run."),
        "brief_length": (MAX_BRIEF_LENGTH, "A run's brief (Markdown), in characters."),
        "external_ref_length": (
            MAX_EXTERNAL_REF_LENGTH,
            "A work package's external_ref, in characters.",
        ),
        "evidence_kinds": (MAX_EVIDENCE_KINDS, "The evidence kinds a run may require."),
        "evidence_kind_length": (MAX_EVIDENCE_KIND_LENGTH, "An evidence kind, in characters."),
        "evidence_items": (MAX_EVIDENCE_ITEMS, "The evidence items of one finish."),
        "url_length": (MAX_URL_LENGTH, "An evidence URL or note, in characters."),
        "summary_length": (MAX_SUMMARY_LENGTH, "A finish's summary, in characters."),
        "progress_timeout_s": (
            MAX_PROGRESS_TIMEOUT_S,
            "A run's progress_timeout_s, in seconds, at most.",
        ),
        "pool_members": (MAX_MEMBERS, "The members (or capacity) of one pool."),
        "capability_tags": (MAX_TAGS, "A hand's capabilities, or a run's required ones."),
        "capability_tag_length": (MAX_TAG_LENGTH, "One capability tag, in characters."),
        "friction_minutes": (MAX_MINUTES, "A friction report's minutes, at most."),
        "friction_refusals": (MAX_REFUSALS, "The refusals one friction report may cite."),
        "records_per_key_minute": (
            KEPT_PER_KEY_MINUTE,
            "A key's refused calls, and the fences it asks about, kept as rows of their own in "
            "one minute (each kind); the rest are counted, not kept.",
        ),
        "schedule_runs": (MAX_TEMPLATE_RUNS, "The runs one schedule's period makes."),
        "schedule_run_slots": (MAX_TEMPLATE_SLOTS, "The slots of each run a schedule makes."),
        "schedule_min_period_s": (
            MIN_PERIOD_S,
            "The shortest time between two periods of a schedule, in seconds.",
        ),
        "schedules_per_lane": (MAX_SCHEDULES_PER_LANE, "The schedules of one lane."),
        "schedules_per_workspace": (MAX_SCHEDULES_PER_WORKSPACE, "The schedules of one workspace."),
    }


def limits_hook(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: the schema carries every limit (`x-limits`)."""
    result["x-limits"] = {
        name: {"value": value, "description": description}
        for name, (value, description) in sorted(limits().items())
    }
    return result
