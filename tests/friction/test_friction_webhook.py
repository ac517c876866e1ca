"""The webhook kind `friction` (issue 22.1): a filed report's event is delivered after commit,
and a report refused before it was written leaves no event to deliver."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.test import override_settings

from apikit.errors import ValidationFailed
from friction import services as friction_services
from hands import services as hand_services
from webhooks import services as webhooks

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

SECRET = "whsec_test_0123456789abcdef"


@pytest.fixture(autouse=True)
def _local_receivers() -> Iterator[None]:
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"]):
        yield


def test_a_filed_report_is_delivered_as_a_friction_webhook(workspace, owner, receiver) -> None:  # noqa: ANN001
    webhooks.webhook_create(
        workspace=workspace, url=receiver.url, kinds=["friction"], actor="boss", secret=SECRET
    )
    key = hand_services.key_issue(hand=owner, scopes=["work"], actor="test").key
    with pytest.raises(ValidationFailed):
        friction_services.friction_file(hand=owner, key=key, what="", minutes=3)
    report = friction_services.friction_file(hand=owner, key=key, what="slow CI", minutes=3)
    assert webhooks.webhooks_run()["delivered"] == 1
    [(headers, body)] = receiver.received
    assert headers["x-groundcontrol-event"] == "friction"
    payload = json.loads(body)
    assert payload["kind"] == "friction" and payload["hand"] == "hand-a"
    assert payload["data"]["report"] == report.pk and payload["data"]["what"] == "slow CI"
    assert webhooks.webhooks_run()["dispatched"] == 0
