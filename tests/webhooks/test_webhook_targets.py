"""Webhook targets: no loopback, private, link-local or unspecified address in any spelling, no
credentials in the URL, unless the operator allows the host (GC_WEBHOOK_ALLOWED_HOSTS); and the
same rule again at delivery, against what the name resolves to then (DNS rebinding), with the
request made to the address that was checked. Nothing with credentials is ever logged."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from datetime import datetime
from io import StringIO
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from apikit.errors import ValidationFailed
from leases.models import Refusal
from webhooks import services as webhooks
from webhooks.models import Webhook, WebhookDelivery

pytestmark = [pytest.mark.security, pytest.mark.django_db]

PASSWORD = "s3cr3t-pa55"

REFUSED = [
    "http://127.0.0.1/hook",
    "http://127.0.0.1:8080/hook",
    "http://10.0.0.1/hook",
    "http://172.16.5.4/hook",
    "http://192.168.1.1:8443/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/hook",
    "http://[::1]:9000/hook",
    "http://0.0.0.0/hook",
    "http://[::]/hook",
    "http://2130706433/hook",  # 127.0.0.1 as one integer
    "http://0x7f000001/hook",  # ... in hex
    "http://0177.0.0.1/hook",  # ... with an octal part
    "http://127.1/hook",  # ... short
    "http://0x7f.1/hook",
    "http://017700000001/hook",
    "http://2852039166/hook",  # 169.254.169.254
    "http://127.0.0.1./hook",  # a trailing dot
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped IPv6
    "http://[::ffff:a9fe:a9fe]/hook",  # 169.254.169.254, mapped, in hex
    "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of 169.254.169.254
    "http://[fe80::1]/hook",
    "http://[fd00::1]/hook",
    "http://100.64.0.1/hook",  # shared address space: not public
    "http://224.0.0.1/hook",
    "http://240.0.0.1/hook",
    "https://LOCALHOST/hook",
    "https://api.localhost/hook",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/hook",  # fullwidth digits: 127.0.0.1
    "http://127\u30020\u30020\u30021/hook",  # ideographic full stops
]

CREDENTIALS = [
    f"https://user:{PASSWORD}@hooks.example.com/gc",
    f"https://{PASSWORD}@hooks.example.com/gc",
    f"https://:{PASSWORD}@hooks.example.com/gc",
    f"http://admin:{PASSWORD}@127.0.0.1:8080/gc",
]


def create(workspace, url: str) -> Webhook:  # noqa: ANN001
    return webhooks.webhook_create(
        workspace=workspace, url=url, kinds=["late"], actor="boss", secret="whsec_" + "x" * 20
    ).webhook


def add(url: str) -> str:
    out = StringIO()
    call_command("webhook_add", "--workspace", "acme", "--url", url, "--kind", "late", stdout=out)
    return out.getvalue()


# --- Registration -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", REFUSED)
def test_registration_refuses_a_non_public_address_in_any_spelling(workspace, url: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        create(workspace, url)
    assert (refused.value.code, refused.value.http_status) == ("validation_error", 400)
    assert "url" in refused.value.fields["fields"]
    assert "GC_WEBHOOK_ALLOWED_HOSTS" in refused.value.message
    with pytest.raises(CommandError, match="validation_error"):
        add(url)
    assert Webhook.objects.count() == 0
    assert Refusal.objects.filter(code="validation_error").count() == 2


def test_registration_accepts_public_hosts(workspace) -> None:
    for url in [
        "https://hooks.example.com/gc",
        "https://93.184.216.34/gc",
        "http://[2606:4700:4700::1111]:8080/gc",
        "https://xn--bcher-kva.example/gc",
    ]:
        assert create(workspace, url).url == url
    assert "hooks2.example.com" in add("https://hooks2.example.com/gc")


@pytest.mark.parametrize(
    ("allowed", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080/hook"),
        ("127.0.0.1", "http://2130706433/hook"),  # the address, however spelled
        ("127.0.0.1", "http://127.1/hook"),
        ("127.0.0.1", "http://[::ffff:127.0.0.1]/hook"),
        ("2130706433", "http://127.0.0.1/hook"),
        ("[::1]", "http://[::1]:9000/hook"),
        ("::1", "http://[::1]/hook"),
        ("10.0.0.0/8", "http://10.20.30.40/hook"),
        ("169.254.169.254", "http://169.254.169.254/hook"),
        ("0.0.0.0", "http://0.0.0.0/hook"),
        ("LocalHost", "http://localhost:8000/hook"),
    ],
)
def test_the_setting_allows_listed_hosts(workspace, allowed: str, url: str) -> None:
    with pytest.raises(ValidationFailed):
        create(workspace, url)
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["hooks.internal", allowed]):
        assert create(workspace, url).url == url
        add(url)
        # Only what is listed: another private address is still refused.
        with pytest.raises(ValidationFailed):
            create(workspace, "http://192.168.7.7/hook")
    assert Webhook.objects.count() == 2


@pytest.mark.parametrize("url", CREDENTIALS)
def test_urls_with_credentials_are_refused_and_never_repeated(
    workspace, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"]):
        with pytest.raises(ValidationFailed) as refused:
            create(workspace, url)
        with pytest.raises(CommandError) as command_refused:
            add(url)
    assert (refused.value.code, refused.value.http_status) == ("validation_error", 400)
    assert "credentials" in str(refused.value.fields["fields"]["url"])
    assert "validation_error" in str(command_refused.value)
    assert Webhook.objects.count() == 0
    recorded = list(Refusal.objects.values_list("message", "details"))
    assert len(recorded) == 2
    for text in [
        refused.value.message,
        str(refused.value.fields),
        str(command_refused.value),
        str(recorded),
        caplog.text,
    ]:
        assert PASSWORD not in text


# --- Delivery -----------------------------------------------------------------------------------


class Resolver:
    """socket.getaddrinfo with chosen answers for some names, the real one for the rest."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.answers: dict[str, list[str]] = {}
        self.asked: list[str] = []

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self.answers:
            return self.real(host, port, *args, **kwargs)
        self.asked.append(name)
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port, 0, 0) if ":" in address else (address, port),
            )
            for address in self.answers[name]
        ]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    fake = Resolver(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


@pytest.fixture
def sent() -> Iterator[tuple[httpx.Client, list[httpx.Request]]]:
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, text="thanks")

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        yield client, requests


def deliver(webhook: Webhook, at: datetime, event_id: int) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        workspace_id=webhook.workspace_id,
        webhook=webhook,
        event_id=event_id,
        kind="late",
        body='{"kind":"late"}',
        next_attempt_at=at,
    )


def test_a_public_name_that_resolves_to_a_private_address_is_refused_at_delivery(
    workspace, resolver: Resolver, sent, frozen_clock: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    client, requests = sent
    resolver.answers["hooks.example.com"] = ["93.184.216.34"]
    webhook = create(workspace, "https://hooks.example.com:8443/gc?x=1")

    first = deliver(webhook, frozen_clock, 1)
    assert webhooks.deliveries_send(client=client).delivered == 1
    [request] = requests
    # Sent to the address that was checked, with the name for the Host header and TLS.
    assert str(request.url) == "https://93.184.216.34:8443/gc?x=1"
    assert request.headers["host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"
    first.refresh_from_db()
    assert first.status == "delivered"

    # The name now answers with the metadata service, then with a mix: refused, nothing sent.
    answers = [["169.254.169.254"], ["93.184.216.34", "10.0.0.7"], ["::ffff:127.0.0.1"]]
    for event_id, answer in enumerate(answers, start=2):
        resolver.answers["hooks.example.com"] = answer
        delivery = deliver(webhook, frozen_clock, event_id)
        assert webhooks.deliveries_send(client=client).retrying == 1
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (
            "pending",
            1,
            None,
        )
        [entry] = delivery.log
        assert entry["error"].startswith("refused, nothing sent: ")
        assert "hooks.example.com" in entry["error"]
        assert "GC_WEBHOOK_ALLOWED_HOSTS" in entry["error"]
        assert delivery.last_error == entry["error"]
    assert len(requests) == 1
    assert "hooks.example.com" in caplog.text


def test_a_host_on_the_allow_list_is_delivered_to_at_its_private_address(
    workspace, resolver: Resolver, sent, frozen_clock: datetime
) -> None:
    client, requests = sent
    resolver.answers["hooks.internal"] = ["10.1.2.3"]
    with pytest.raises(ValidationFailed):
        create(workspace, "http://10.1.2.3/gc")
    webhook = create(workspace, "http://hooks.internal/gc")  # a name: judged at delivery
    deliver(webhook, frozen_clock, 1)
    assert webhooks.deliveries_send(client=client).retrying == 1
    assert requests == []
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["hooks.internal"]):
        deliver(webhook, frozen_clock, 2)
        assert webhooks.deliveries_send(client=client).delivered == 1
    [request] = requests
    assert (str(request.url), request.headers["host"]) == ("http://10.1.2.3/gc", "hooks.internal")


def test_an_address_allowed_at_registration_and_no_longer_is_refused_at_delivery(
    workspace, sent, frozen_clock: datetime
) -> None:
    client, requests = sent
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"]):
        webhook = create(workspace, "http://127.0.0.1:9/gc")
    deliver(webhook, frozen_clock, 1)
    assert webhooks.deliveries_send(client=client).retrying == 1
    assert requests == []
    assert "127.0.0.1 is a loopback address" in WebhookDelivery.objects.get().last_error


def test_a_stored_url_with_credentials_is_never_sent_nor_logged(
    workspace, sent, frozen_clock: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client, requests = sent
    # A row from before registration refused credentials.
    webhook = Webhook.objects.create(
        workspace=workspace,
        url=f"https://user:{PASSWORD}@hooks.example.com/gc",
        kinds=["late"],
        secret="whsec_" + "x" * 20,
    )
    deliver(webhook, frozen_clock, 1)
    with override_settings(GC_WEBHOOK_MAX_ATTEMPTS=1):
        assert webhooks.deliveries_send(client=client).failed == 1
    assert requests == []
    delivery = WebhookDelivery.objects.get()
    assert "credentials" in delivery.last_error
    assert PASSWORD not in f"{delivery.last_error} {delivery.log} {caplog.text}"
    assert PASSWORD not in str(webhook) and "***@hooks.example.com" in str(webhook)


def test_a_name_that_does_not_resolve_is_retried_with_the_reason(
    workspace, resolver: Resolver, sent, frozen_clock: datetime
) -> None:
    client, requests = sent
    resolver.answers["gone.example.com"] = []
    webhook = create(workspace, "https://gone.example.com/gc")
    deliver(webhook, frozen_clock, 1)
    assert webhooks.deliveries_send(client=client).retrying == 1
    assert requests == []
    assert "could not resolve" in WebhookDelivery.objects.get().last_error
