"""A lane's GitHub integrations and the deliveries they receive.

A delivery is trusted by its `X-Hub-Signature-256`: `sha256=` and the hex HMAC-SHA256 of the raw
body with the integration's secret, compared in constant time (`signature_valid`). What it does:

- `issues`, action `opened` or `reopened`: a work package in the lane, its key the issue's
  repository and number (`acme/app#12`), its title the issue's, `external_ref` its html_url.
  With a `label` set on the integration, only issues carrying that label, and `labeled` with
  that label does it too (an issue labelled after it was opened). Idempotent on the issue (the
  key) and on the delivery (`X-GitHub-Delivery`: a redelivery answers as the first did).
- `pull_request`, action `closed` with `merged: true`: a passing attestation of its html_url
  (`evidence.services.attestation_observe`), which grades the workspace's evidence with that
  URL `ci`, now and at later finishes, by the attestations' own rule.
- `ping`: answered; any other event or action: ignored (recorded, so a redelivery is too).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from apikit.errors import NotFound, ValidationFailed
from evidence.models import AttestationResult
from evidence.services import attestation_observe, validate_evidence_url
from fleet.models import WorkPackage
from fleet.services import plan as plan_services
from hands.models import Lane
from leases.services import MAX_NAME_LENGTH
from schedules.errors import SignatureInvalid
from schedules.models import GitHubDelivery, GitHubIntegration

SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
MAX_LABEL_LENGTH = 100
MAX_DELIVERY_ID = 64
ISSUE_ACTIONS = ("opened", "reopened")


class Outcome:
    PONG = "pong"
    CREATED = "created"
    EXISTING = "existing"
    ATTESTED = "attested"
    IGNORED = "ignored"


@dataclass
class IssuedIntegration:
    integration: GitHubIntegration
    secret: str  # shown once at creation


@dataclass
class DeliveryAnswer:
    delivery_id: str
    event: str
    action: str
    outcome: str
    work_package: WorkPackage | None
    graded: int
    duplicate: bool


def integration_create(*, lane: Lane, label: object = "", actor: str) -> IssuedIntegration:
    if label is None:
        label = ""
    if not isinstance(label, str) or len(label) > MAX_LABEL_LENGTH:
        raise ValidationFailed(
            f"label must be a string of at most {MAX_LABEL_LENGTH} characters",
            fields={"label": [f"At most {MAX_LABEL_LENGTH} characters."]},
        )
    secret = f"ghsec_{secrets.token_urlsafe(32)}"
    integration = GitHubIntegration.objects.create(
        workspace_id=lane.workspace_id, lane=lane, secret=secret, label=label, created_by=actor
    )
    return IssuedIntegration(integration=integration, secret=secret)


def integration_delete(*, lane: Lane, integration_id: int) -> None:
    if not GitHubIntegration.objects.filter(lane=lane, pk=integration_id).delete()[0]:
        raise NotFound(f"lane {lane.slug!r} has no GitHub integration {integration_id}")


def signature_valid(*, secret: str, body: bytes, header: str) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def integration_verified(*, integration_id: int, body: bytes, signature: str) -> GitHubIntegration:
    """The active integration whose secret signed `body`; else `signature_invalid` (also for an
    id that names none, so that no one learns which ids exist)."""
    integration = (
        GitHubIntegration.objects.select_related("lane").filter(pk=integration_id, active=True)
    ).first()
    if integration is None or not signature_valid(
        secret=integration.secret, body=body, header=signature
    ):
        raise SignatureInvalid(
            f"{SIGNATURE_HEADER} is missing or is not the HMAC-SHA256 of the body with this "
            "integration's secret"
        )
    return integration


def _text(value: object, field: str, max_length: int) -> str:
    if not isinstance(value, str) or not value or len(value) > max_length:
        raise ValidationFailed(
            f"the payload's {field} must be a string of 1 to {max_length} characters",
            fields={field: ["Missing or not a string."]},
        )
    return value


def _object(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(f"the payload has no {field} object", fields={field: ["An object."]})
    return value


def delivery_receive(
    *, integration: GitHubIntegration, delivery_id: str, event: str, payload: object
) -> DeliveryAnswer:
    """Act on one verified delivery, once: the delivery's row is written in the transaction
    that acts, and a redelivery (or the same delivery twice at once, which queues on the row's
    unique index) answers with the first's outcome."""
    delivery_id = _text(delivery_id, DELIVERY_HEADER, MAX_DELIVERY_ID)
    event = _text(event, EVENT_HEADER, 64)
    body = _object(payload, "body")
    action = body.get("action") if isinstance(body.get("action"), str) else ""
    action = action[:64]
    if event == "ping":
        return DeliveryAnswer(delivery_id, event, action, Outcome.PONG, None, 0, False)
    try:
        with transaction.atomic():
            delivery = GitHubDelivery.objects.create(
                workspace_id=integration.workspace_id,
                integration=integration,
                delivery_id=delivery_id,
                event=event,
                action=action,
                outcome=Outcome.IGNORED,
            )
            package, graded, outcome = _act(integration, event, action, body)
            delivery.outcome, delivery.work_package, delivery.graded = outcome, package, graded
            delivery.save(update_fields=["outcome", "work_package", "graded"])
        return DeliveryAnswer(delivery_id, event, action, outcome, package, graded, False)
    except IntegrityError:
        first = GitHubDelivery.objects.select_related("work_package").get(
            workspace_id=integration.workspace_id,
            integration=integration,
            delivery_id=delivery_id,
        )
        return DeliveryAnswer(
            delivery_id,
            first.event,
            first.action,
            first.outcome,
            first.work_package,
            first.graded,
            True,
        )


def _act(
    integration: GitHubIntegration, event: str, action: str, body: dict[str, Any]
) -> tuple[WorkPackage | None, int, str]:
    if event == "issues":
        return _issue(integration, action, body)
    if event == "pull_request" and action == "closed":
        pull = _object(body.get("pull_request"), "pull_request")
        if pull.get("merged") is True:
            url = validate_evidence_url(pull.get("html_url"), field="pull_request.html_url")
            _, graded = attestation_observe(
                workspace_id=integration.workspace_id,
                observer=f"github-integration-{integration.pk}",
                key_prefix="",
                url=url,
                result=AttestationResult.PASS.value,
                kind="pull_request",
                note="merged (GitHub pull_request delivery)",
            )
            return None, graded, Outcome.ATTESTED
    return None, 0, Outcome.IGNORED


def _issue(
    integration: GitHubIntegration, action: str, body: dict[str, Any]
) -> tuple[WorkPackage | None, int, str]:
    issue = _object(body.get("issue"), "issue")
    labels = {label.get("name") for label in issue.get("labels") or [] if isinstance(label, dict)}
    if integration.label:
        wanted = (action in ISSUE_ACTIONS and integration.label in labels) or (
            action == "labeled"
            and isinstance(body.get("label"), dict)
            and body["label"].get("name") == integration.label
        )
    else:
        wanted = action in ISSUE_ACTIONS
    if not wanted:
        return None, 0, Outcome.IGNORED
    repository = _object(body.get("repository"), "repository")
    number = issue.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValidationFailed(
            "the payload's issue.number must be a positive integer",
            fields={"issue.number": ["A positive integer."]},
        )
    full_name = _text(repository.get("full_name"), "repository.full_name", 150)
    title = _text(issue.get("title"), "issue.title", 100_000)
    url = validate_evidence_url(issue.get("html_url"), field="issue.html_url")
    package, created = plan_services.work_package_create(
        lane=integration.lane,
        key=f"{full_name}#{number}",
        # An issue's title may be longer than a package's: the URL is the reference.
        title=title[:MAX_NAME_LENGTH],
        external_ref=url,
    )
    return package, 0, Outcome.CREATED if created else Outcome.EXISTING
