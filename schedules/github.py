"""A lane's GitHub integrations and the deliveries they receive.

A delivery is trusted by its `X-Hub-Signature-256`: `sha256=` and the hex HMAC-SHA256 of the raw
body with the integration's secret, compared in constant time (`signature_valid`). What it does:

An integration names its repository (`owner/name`); a delivery of any other repository is
ignored. Creating or deleting one needs the `attest` scope (the secret attests), from a key
not limited to another lane (`integration_create`).

- `issues`, action `opened` or `reopened`: a work package in the lane, its key the issue's
  repository and number (`acme/app#12`), its title the issue's, `external_ref` its html_url.
  With a `label` set on the integration, only issues carrying that label, and `labeled` with
  that label does it too (an issue labelled after it was opened). Idempotent on the issue (the
  key) and on the delivery (`X-GitHub-Delivery`: a redelivery answers as the first did).
- `pull_request`, action `closed` with `merged: true`: a passing attestation of its html_url,
  which must be `https://github.com/<repository>/pull/<number>` (`evidence.services.
  attestation_observe`), observed at its `merged_at`, confined to the integration's lane and
  never grading the evidence of the hand whose key created the integration; it grades the
  evidence of one attempt with that URL `ci`, now or at a later finish, by the attestations'
  own rule. The same merge delivered again under another delivery id is the same observation:
  it records nothing new (`existing`).
- `ping`: answered; any other event or action: ignored (recorded, so a redelivery is too).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from apikit.errors import NotFound, ScopeDenied, ValidationFailed
from evidence.models import AttestationResult
from evidence.services import attestation_observe, validate_evidence_url
from fleet.models import WorkPackage
from fleet.plan import services as plan_services
from hands.models import Hand, Lane, Scope
from leases.services import MAX_NAME_LENGTH
from schedules.errors import SignatureInvalid
from schedules.models import GitHubDelivery, GitHubIntegration

SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
MAX_LABEL_LENGTH = 100
MAX_DELIVERY_ID = 64
ISSUE_ACTIONS = ("opened", "reopened")
MAX_REPOSITORY_LENGTH = 140
# GitHub's rules: an owner is 1 to 39 letters, digits and inner hyphens; a repository's name is
# 1 to 100 letters, digits, `.`, `-` and `_`, and not `.` or `..`.
_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?/[A-Za-z0-9._-]{1,100}")


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


def validate_repository(value: object) -> str:
    """`owner/name` as GitHub spells a repository (compared without case, as GitHub does)."""
    if (
        not isinstance(value, str)
        or len(value) > MAX_REPOSITORY_LENGTH
        or not _REPOSITORY.fullmatch(value)
        or value.split("/")[1] in (".", "..")
    ):
        raise ValidationFailed(
            "repository must be a GitHub repository's owner/name, e.g. acme/app",
            fields={"repository": ["owner/name, e.g. acme/app."]},
        )
    return value


def integration_authority(*, lane: Lane, key_lane_id: int | None) -> None:
    """A key limited to a lane manages only that lane's integrations: never another lane's (nor
    one of the whole workspace, were there such)."""
    if key_lane_id is not None and key_lane_id != lane.pk:
        raise ScopeDenied(
            f"this key is limited to another lane: it cannot manage lane {lane.slug!r}'s "
            "GitHub integrations",
            required_scope=Scope.ATTEST.value,
            lane=lane.slug,
        )


def integration_create(
    *,
    lane: Lane,
    repository: object,
    label: object = "",
    actor: str,
    actor_hand: Hand | None = None,
    key_lane_id: int | None = None,
) -> IssuedIntegration:
    """An integration of `repository` for `lane`, made by `actor` (with `actor_hand`, the hand
    whose key calls: its own evidence is never graded by the deliveries). The caller has checked
    the `attest` scope or the admin role; `key_lane_id` is the calling key's lane limit."""
    integration_authority(lane=lane, key_lane_id=key_lane_id)
    repository = validate_repository(repository)
    if label is None:
        label = ""
    if not isinstance(label, str) or len(label) > MAX_LABEL_LENGTH:
        raise ValidationFailed(
            f"label must be a string of at most {MAX_LABEL_LENGTH} characters",
            fields={"label": [f"At most {MAX_LABEL_LENGTH} characters."]},
        )
    secret = f"ghsec_{secrets.token_urlsafe(32)}"
    integration = GitHubIntegration.objects.create(
        workspace_id=lane.workspace_id,
        lane=lane,
        repository=repository,
        secret=secret,
        label=label,
        created_by=actor,
        created_by_hand=actor_hand,
    )
    return IssuedIntegration(integration=integration, secret=secret)


def integration_delete(*, lane: Lane, integration_id: int, key_lane_id: int | None = None) -> None:
    integration_authority(lane=lane, key_lane_id=key_lane_id)
    if not GitHubIntegration.objects.filter(lane=lane, pk=integration_id).delete()[0]:
        raise NotFound(f"lane {lane.slug!r} has no GitHub integration {integration_id}")


# What GitHub sends: `sha256=` and the HMAC's 64 lowercase hex digits (`signature_valid` compares
# with exactly that). A header of any other shape signs no body, so a delivery that carries none
# is refused on its headers, before its body is read (issue 33): a body that trickles in would
# hold a web thread.
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")


def signature_shaped(header: str) -> bool:
    """True when `header` could be a signature (whose body must then be read to judge it)."""
    return _SIGNATURE.fullmatch(header) is not None


def signature_refusal() -> SignatureInvalid:
    """The one answer to a delivery that is not signed by an active integration's secret."""
    return SignatureInvalid(
        f"{SIGNATURE_HEADER} is missing or is not the HMAC-SHA256 of the body with this "
        "integration's secret"
    )


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
        raise signature_refusal()
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
        if not _of_repository(integration, body):
            return None, 0, Outcome.IGNORED
        return _issue(integration, action, body)
    if event == "pull_request" and action == "closed":
        pull = _object(body.get("pull_request"), "pull_request")
        if pull.get("merged") is True and _of_repository(integration, body):
            return _merged(integration, body, pull)
    return None, 0, Outcome.IGNORED


def _of_repository(integration: GitHubIntegration, body: dict[str, Any]) -> bool:
    """Whether the delivery is of the integration's repository (an integration made before
    repositories were named has none, and takes nothing)."""
    repository = _object(body.get("repository"), "repository")
    full_name = _text(repository.get("full_name"), "repository.full_name", MAX_REPOSITORY_LENGTH)
    return bool(integration.repository) and full_name.lower() == integration.repository.lower()


def _merged(
    integration: GitHubIntegration, body: dict[str, Any], pull: dict[str, Any]
) -> tuple[WorkPackage | None, int, str]:
    """A merge of one of the repository's pull requests: attested pass, observed at its
    merged_at. The html_url must be that pull request's on github.com: nothing else is."""
    number = pull.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValidationFailed(
            "the payload's pull_request.number must be a positive integer",
            fields={"pull_request.number": ["A positive integer."]},
        )
    if body.get("number", number) != number:
        raise ValidationFailed(
            "the payload's number is not its pull_request.number",
            fields={"number": ["The pull request's number."]},
        )
    full_name = body["repository"]["full_name"]
    expected = f"https://github.com/{full_name}/pull/{number}"
    url = pull.get("html_url")
    if not isinstance(url, str) or url.lower() != expected.lower():
        raise ValidationFailed(
            f"the payload's pull_request.html_url must be {expected}: only the repository's "
            "own pull requests are attested",
            fields={"pull_request.html_url": [f"{expected}."]},
        )
    url = validate_evidence_url(url, field="pull_request.html_url")
    merged_at = _time(pull.get("merged_at"), "pull_request.merged_at")
    observed = attestation_observe(
        workspace_id=integration.workspace_id,
        observer=f"github-integration-{integration.pk}",
        attester_id=integration.created_by_hand_id,
        key_prefix="",
        lane_id=integration.lane_id,
        url=url,
        result=AttestationResult.PASS.value,
        kind="pull_request",
        note="merged (GitHub pull_request delivery)",
        observed_at=merged_at,
    )
    return None, observed.graded, Outcome.ATTESTED if observed.created else Outcome.EXISTING


def _time(value: object, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ValidationFailed(
            f"the payload's {field} must be an ISO 8601 time with its offset",
            fields={field: ["An ISO 8601 time, e.g. 2019-05-15T15:21:18Z."]},
        )
    return moment


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
