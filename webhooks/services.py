"""Webhooks: a workspace registers URLs for event kinds; each event is delivered, signed, after
the transaction that wrote it has committed, retried with exponential backoff, and recorded.

1. Dispatch (`events_dispatch`) claims undispatched events with one conditional UPDATE
   (`dispatched_at IS NULL`, SKIP LOCKED on PostgreSQL) and writes one delivery per matching
   webhook in the same transaction; a unique (webhook, event) pair makes a repeat harmless.
   Only committed events are visible to it, so nothing is ever sent for a change that rolled
   back.
2. Sending (`deliveries_send`) claims due deliveries the same way, pushing `next_attempt_at`
   past the request's timeout so no other worker sends it meanwhile, then posts outside any
   transaction (no lock is held across HTTP) and records the attempt with a conditional update
   on the attempt number it claimed.

Targets (webhooks/targets.py): a URL with credentials, or whose host is a loopback, private,
link-local or otherwise non-public address, is refused at registration unless the host is in
`GC_WEBHOOK_ALLOWED_HOSTS`; each delivery resolves the host again, refuses (an attempt recorded,
nothing sent) when any address it resolves to fails the same rule, and connects to a vetted one.

The signature: header `X-GroundControl-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is
HMAC-SHA256 with the webhook's secret over `"<t>." + body`. A receiver recomputes it, compares in
constant time, and refuses a `t` far from its own clock (`webhook_verify`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from celery import current_app
from django.conf import settings
from django.db import connection, transaction

from apikit.errors import NotFound, ValidationFailed
from hands.models import Workspace
from leases.audit import event_payload, refusals_recorded
from leases.clock import now_sql, parse_timestamp, plus_seconds_sql
from leases.jobs import seconds_param, skip_locked
from leases.models import Event, EventKind
from webhooks.models import DeliveryStatus, Webhook, WebhookDelivery
from webhooks.targets import TargetRefused, redact, target_check, target_resolve

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-GroundControl-Signature"
EVENT_HEADER = "X-GroundControl-Event"
DELIVERY_HEADER = "X-GroundControl-Delivery"
USER_AGENT = "GroundControl-Webhooks/1"
WEBHOOK_KINDS = [kind.value for kind in EventKind]
MAX_URL_LENGTH = 2000
RESPONSE_EXCERPT = 1000
DISPATCH_BATCH = 500
SEND_BATCH = 20
# A run of the sender stops taking new deliveries after this long; the next run goes on.
SEND_BUDGET_S = 30.0


# --- Signatures ---------------------------------------------------------------------------------


def webhook_signature(*, secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def webhook_verify(
    *, secret: str, header: str, body: bytes, tolerance_s: float = 300, now: float | None = None
) -> bool:
    """What a receiver does: recompute the HMAC, compare in constant time, refuse old replays."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = webhook_signature(secret=secret, timestamp=timestamp, body=body)
    return hmac.compare_digest(expected, f"t={timestamp},v1={parts.get('v1', '')}")


# --- Registration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedWebhook:
    webhook: Webhook
    secret: str  # shown once at registration


def _validate_url(url: object) -> str:
    """An http(s) URL without credentials whose host may receive webhooks (webhooks/targets.py);
    the refusal never repeats the URL, which may hold a password."""
    if (
        not isinstance(url, str)
        or not url
        or len(url) > MAX_URL_LENGTH
        or any(ch.isspace() for ch in url)
    ):
        raise ValidationFailed(
            "url must be an http(s) URL", fields={"url": ["An http or https URL."]}
        )
    try:
        target_check(url)
    except TargetRefused as refused:
        raise ValidationFailed(f"url refused: {refused}", fields={"url": [f"{refused}."]}) from None
    return url


def _validate_kinds(kinds: object) -> list[str]:
    if (
        not isinstance(kinds, list | tuple)
        or not kinds
        or not all(kind in WEBHOOK_KINDS for kind in kinds)
    ):
        raise ValidationFailed(
            f"kinds must be a non-empty list of: {', '.join(WEBHOOK_KINDS)}",
            fields={"kinds": [f"A non-empty list of: {', '.join(WEBHOOK_KINDS)}."]},
        )
    return list(dict.fromkeys(kinds))


def workspace_named(name: str) -> Workspace:
    try:
        return Workspace.objects.get(name=name)
    except Workspace.DoesNotExist:
        raise NotFound(f"no workspace {name!r}") from None


@refusals_recorded
def webhook_create(
    *,
    workspace: Workspace,
    url: str,
    kinds: list[str],
    actor: str,
    description: str = "",
    secret: str | None = None,
) -> IssuedWebhook:
    """Register `url` for the workspace's events of `kinds`; the signing secret is returned
    once (generated unless given)."""
    url = _validate_url(url)
    kinds = _validate_kinds(kinds)
    if secret is not None and (not isinstance(secret, str) or not 16 <= len(secret) <= 128):
        raise ValidationFailed(
            "secret must be 16 to 128 characters", fields={"secret": ["16 to 128 characters."]}
        )
    if not isinstance(description, str) or len(description) > 200:
        raise ValidationFailed(
            "description must be at most 200 characters",
            fields={"description": ["At most 200 characters."]},
        )
    secret = secret or f"whsec_{secrets.token_urlsafe(32)}"
    webhook = Webhook.objects.create(
        workspace=workspace,
        url=url,
        kinds=kinds,
        secret=secret,
        description=description,
        created_by=actor,
    )
    return IssuedWebhook(webhook=webhook, secret=secret)


@refusals_recorded
def webhook_set_active(*, workspace_id: int, webhook_id: int, active: bool) -> Webhook:
    """Pause or resume a webhook; a paused one gets no new deliveries."""
    if not Webhook.objects.filter(pk=webhook_id, workspace_id=workspace_id).update(active=active):
        raise NotFound(f"no webhook {webhook_id}")
    return Webhook.objects.get(pk=webhook_id)


# --- Dispatch: events to deliveries -------------------------------------------------------------


def events_dispatch(*, batch: int = DISPATCH_BATCH) -> int:
    """Claim up to `batch` undispatched events and write their deliveries; returns how many
    deliveries were written."""
    table = Event._meta.db_table
    now = now_sql()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET dispatched_at = {now} WHERE id IN (SELECT id FROM {table} "
                f"WHERE dispatched_at IS NULL ORDER BY id LIMIT %(batch)s{skip_locked()}) "
                f"AND dispatched_at IS NULL RETURNING id, {now}",
                {"batch": batch},
            )
            claimed = cursor.fetchall()
        if not claimed:
            return 0
        at = parse_timestamp(claimed[0][1])
        events = list(Event.objects.filter(pk__in=[row[0] for row in claimed]).order_by("pk"))
        hooks: dict[int, list[Webhook]] = {}
        for webhook in Webhook.objects.filter(
            active=True, workspace_id__in={event.workspace_id for event in events}
        ):
            hooks.setdefault(webhook.workspace_id, []).append(webhook)
        deliveries = [
            WebhookDelivery(
                workspace_id=webhook.workspace_id,
                webhook=webhook,
                event_id=event.pk,
                kind=event.kind,
                body=json.dumps(event_payload(event), separators=(",", ":"), sort_keys=True),
                next_attempt_at=at,
            )
            for event in events
            for webhook in hooks.get(event.workspace_id, [])
            if event.kind in webhook.kinds
        ]
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
    return len(deliveries)


# --- Sending ------------------------------------------------------------------------------------


@dataclass
class SendResult:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


def _claim_deliveries(batch: int) -> list[tuple[int, int, Any]]:
    """Claim due deliveries: attempts + 1, and `next_attempt_at` pushed past the request's
    timeout, so a worker that dies mid-request only delays the next attempt."""
    table = WebhookDelivery._meta.db_table
    now = now_sql()
    hold_s = settings.GC_WEBHOOK_TIMEOUT_S + 30
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET attempts = attempts + 1, "
            f"next_attempt_at = {plus_seconds_sql(now, seconds_param('hold_s'))} "
            f"WHERE id IN (SELECT id FROM {table} WHERE status = 'pending' "
            f"AND next_attempt_at <= {now} ORDER BY next_attempt_at "
            f"LIMIT %(batch)s{skip_locked()}) AND status = 'pending' "
            f"RETURNING id, attempts, {now}",
            {"batch": batch, "hold_s": hold_s},
        )
        return [(int(pk), int(attempts), at) for pk, attempts, at in cursor.fetchall()]


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed attempt: base, 2 x base, 4 x base, ..."""
    return min(
        settings.GC_WEBHOOK_BACKOFF_S * 2 ** (attempts - 1), settings.GC_WEBHOOK_BACKOFF_MAX_S
    )


def _outcome(started: float, error: str) -> dict[str, Any]:
    return {
        "status_code": None,
        "error": redact(error)[:RESPONSE_EXCERPT],
        "response": "",
        "duration_ms": round((time.monotonic() - started) * 1000),
    }


def _post(client: httpx.Client, delivery: WebhookDelivery) -> dict[str, Any]:
    """Resolve the webhook's host, check every address (webhooks/targets.py), then post to a
    vetted address; nothing is sent when the check refuses."""
    started = time.monotonic()
    try:
        target = target_resolve(delivery.webhook.url)
    except TargetRefused as refused:
        logger.warning("webhook delivery %s refused: %s", delivery.pk, refused)
        return _outcome(started, f"refused, nothing sent: {refused}")
    except (OSError, UnicodeError) as error:
        return _outcome(started, f"could not resolve the host: {error}")
    body = delivery.body.encode()
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: delivery.kind,
        DELIVERY_HEADER: str(delivery.pk),
        SIGNATURE_HEADER: webhook_signature(
            secret=delivery.webhook.secret, timestamp=timestamp, body=body
        ),
        **target.headers,
    }
    for index, address in enumerate(target.addresses):
        try:
            response = client.post(
                target.request_url(address),
                content=body,
                headers=headers,
                extensions=target.extensions,
            )
        except httpx.ConnectError as error:
            if index + 1 < len(target.addresses):
                continue  # the name's next address
            return _outcome(started, f"{type(error).__name__}: {error}")
        except httpx.HTTPError as error:
            return _outcome(started, f"{type(error).__name__}: {error}")
        break
    ok = 200 <= response.status_code < 300
    return {
        "status_code": response.status_code,
        "error": "" if ok else f"HTTP {response.status_code}",
        "response": response.text[:RESPONSE_EXCERPT],
        "duration_ms": round((time.monotonic() - started) * 1000),
    }


def _record(delivery: WebhookDelivery, attempts: int, at: Any, outcome: dict[str, Any]) -> str:
    """Record one attempt; only the worker holding this attempt number may write it."""
    sent_at = parse_timestamp(at)
    assert sent_at is not None
    updates: dict[str, Any] = {
        "last_status_code": outcome["status_code"],
        "last_error": outcome["error"],
        "log": [*delivery.log, {"attempt": attempts, "at": sent_at.isoformat(), **outcome}],
    }
    if not outcome["error"]:
        status = DeliveryStatus.DELIVERED
        updates.update(delivered_at=sent_at, next_attempt_at=None)
    elif attempts >= settings.GC_WEBHOOK_MAX_ATTEMPTS:
        status = DeliveryStatus.FAILED
        updates.update(next_attempt_at=None)
    else:
        status = DeliveryStatus.PENDING
        updates.update(next_attempt_at=sent_at + timedelta(seconds=backoff_s(attempts)))
    WebhookDelivery.objects.filter(pk=delivery.pk, attempts=attempts).update(
        status=status, **updates
    )
    return status


def deliveries_send(*, batch: int = SEND_BATCH, client: httpx.Client | None = None) -> SendResult:
    """Send the due deliveries, batch by batch, until none is due or the run's budget is spent."""
    result = SendResult()
    own_client = client is None
    client = client or httpx.Client(timeout=settings.GC_WEBHOOK_TIMEOUT_S, follow_redirects=False)
    deadline = time.monotonic() + SEND_BUDGET_S
    try:
        while time.monotonic() < deadline:
            claimed = _claim_deliveries(batch)
            if not claimed:
                break
            by_id = WebhookDelivery.objects.select_related("webhook").in_bulk(
                [pk for pk, _, _ in claimed]
            )
            for pk, attempts, at in claimed:
                delivery = by_id[pk]
                status = _record(delivery, attempts, at, _post(client, delivery))
                if status == DeliveryStatus.DELIVERED:
                    result.delivered += 1
                elif status == DeliveryStatus.FAILED:
                    result.failed += 1
                    logger.warning("webhook delivery %s failed after %s attempts", pk, attempts)
                else:
                    result.retrying += 1
            if len(claimed) < batch:
                break
    finally:
        if own_client:
            client.close()
    return result


# --- The periodic job ---------------------------------------------------------------------------


def webhooks_run(*, client: httpx.Client | None = None) -> dict[str, int]:
    """Dispatch every undispatched event, then send what is due."""
    dispatched = 0
    while True:
        count = events_dispatch()
        dispatched += count
        if count == 0:
            break
    sent = deliveries_send(client=client)
    return {"dispatched": dispatched, **sent.__dict__}


def webhooks_kick() -> None:
    """After the current transaction commits, ask a worker to deliver now instead of on the
    next tick. Only with Celery workers: the embedded scheduler delivers on its own timer. A
    broker that is down only delays notifications; the periodic run catches up."""
    if not settings.GC_NOTIFY_ON_COMMIT:
        return

    def enqueue() -> None:
        try:
            current_app.send_task(
                "fleet.deliver_webhooks", expires=settings.GC_WEBHOOK_INTERVAL_S * 5
            )
        except Exception:  # the broker is down: notifications wait, nothing else does
            logger.warning("could not enqueue webhook delivery; the next tick will send it")

    transaction.on_commit(enqueue)
