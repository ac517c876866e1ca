"""A call that carries no key is refused on its headers, before a byte of its body is read, and
counted against its address (issue 33, item 4): the hot calls (acquire, renew, renew-all, a
report) with no Authorization header, one that cannot be a key, or a key no one has (an unknown
prefix, a wrong secret); GitHub's delivery path with no X-Hub-Signature-256, or one that cannot
be a signature. A body that trickles in holds a web thread while it is read, so a caller
without a key must never make the server wait for one (docs/deploy.md, the proxy's body
timeout, bounds the rest)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client, override_settings

from apikit import ratelimit
from hands.models import Hand
from leases.models import AddressRefusal, Refusal
from tests.support.api import API, error_of, mint

pytestmark = [pytest.mark.security, pytest.mark.django_db]

BODY = b'{"resource": "src/", "fence": 1, "process_id": "p", "ttl_s": 30, "kind": "heartbeat"}'
HOT_PATHS = ["/leases/acquire", "/leases/renew", "/leases/renew-all", "/attempts/7/reports"]
GITHUB = "/integrations/github/1"
# A well-formed signature that signs nothing (64 hex digits).
SOME_SIGNATURE = "sha256=" + "ab" * 32


class Tripwire:
    """A request body that notes every read of it (the server must not make one)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.reads: list[int | None] = []

    def read(self, size: int | None = None, /) -> bytes:
        self.reads.append(size)
        data, self.body = (self.body, b"") if size is None else (self.body[:size], self.body[size:])
        return data

    def readline(self, size: int | None = None, /) -> bytes:
        return self.read(size)


@pytest.fixture
def address(time_machine) -> Any:  # noqa: ANN001
    """An address of this test's own, in a limit window of its own (the counts live in the
    cache, shared by every test within two minutes)."""
    time_machine.move_to(datetime(2031, 6, 1, 9, 30, 1, tzinfo=UTC), tick=True)
    ratelimit.unauthenticated_limiter.forget()
    raw = uuid.uuid4().int
    yield f"10.{raw % 250 + 1}.{(raw >> 8) % 250 + 1}.{(raw >> 16) % 250 + 1}"
    ratelimit.unauthenticated_limiter.forget()


def post(path: str, address: str, **headers: str) -> tuple[Any, Tripwire]:
    """POST `path` with a body that notes whether it was read."""
    body = Tripwire(BODY)
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    response = Client().generic(
        "POST",
        API + path,
        REMOTE_ADDR=address,
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH=str(len(BODY)),
        **{"wsgi.input": body},
        **meta,
    )
    return response, body


def unkeyed_headers(real_prefix: str) -> dict[str, dict[str, str]]:
    """Every way to call without a key: no header, headers that cannot be a key, and keys no
    one has (a made-up one; a real prefix with a wrong secret)."""
    return {
        "none": {},
        "empty": {"Authorization": ""},
        "another scheme": {"Authorization": "Token gc_abc_def"},
        "not a key": {"Authorization": "Bearer not-a-key"},
        "no secret": {"Authorization": "Bearer gc_abc"},
        "made up": {"Authorization": f"Bearer gc_{uuid.uuid4().hex[:12]}_{'s' * 43}"},
        "wrong secret": {"Authorization": f"Bearer gc_{real_prefix}_{'w' * 43}"},
    }


def counted(address: str) -> int:
    return sum(AddressRefusal.objects.filter(address=address).values_list("count", flat=True))


@pytest.mark.parametrize("path", HOT_PATHS)
def test_a_hot_call_without_a_key_is_refused_before_its_body_is_read_and_counted(
    owner: Hand, address: str, path: str
) -> None:
    prefix = mint(owner, ["leases", "work"]).split("_")[1]
    kinds = unkeyed_headers(prefix)
    for n, (kind, headers) in enumerate(kinds.items(), start=1):
        response, body = post(path, address, **headers)
        error_of(response, 401, "key_invalid")
        assert body.reads == [], f"{kind}: the body was read before the key was refused"
        # The body left unread, the connection is not kept for another request.
        assert response["Connection"] == "close", kind
        assert counted(address) == n, kind
    # Counted against the address, as the refusals of calls that reach no workspace are.
    assert not Refusal.objects.exists()


@override_settings(GC_UNAUTHENTICATED_PER_MINUTE=3)
@pytest.mark.parametrize("path", [*HOT_PATHS, GITHUB])
def test_past_the_address_limit_it_is_answered_429_before_its_body_is_read(
    address: str, path: str
) -> None:
    answers = []
    for _ in range(5):
        response, body = post(path, address, Authorization=f"Bearer gc_{'a' * 12}_{'b' * 43}")
        assert body.reads == [], response.content
        answers.append(response.status_code)
    assert answers == [401] * 3 + [429] * 2
    assert counted(address) == 5


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Hub-Signature-256": ""},
        {"X-Hub-Signature-256": "sha1=" + "ab" * 20},
        {"X-Hub-Signature-256": "sha256=not-hex"},
        {"X-Hub-Signature-256": SOME_SIGNATURE[:-2]},
        {"X-Hub-Signature-256": SOME_SIGNATURE.upper()},
    ],
    ids=["none", "empty", "sha1", "not hex", "short", "upper case"],
)
def test_a_delivery_without_a_signature_is_refused_before_its_body_is_read_and_counted(
    address: str, headers: dict[str, str]
) -> None:
    headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-1", **headers}
    response, body = post(GITHUB, address, **headers)
    error_of(response, 401, "signature_invalid")
    assert body.reads == []
    assert response["Connection"] == "close"
    assert counted(address) == 1


def test_a_delivery_with_a_signature_is_read_to_be_judged_and_still_counted(address: str) -> None:
    """A signature of the right shape is judged against the body, so that body is read: an
    integration that does not exist answers as a wrong signature does (no one learns which
    ids exist), and is counted alike."""
    response, body = post(
        GITHUB, address, **{"X-Hub-Signature-256": SOME_SIGNATURE, "X-GitHub-Event": "ping"}
    )
    error_of(response, 401, "signature_invalid")
    assert body.reads
    assert counted(address) == 1


def test_a_valid_key_still_has_its_body_read_and_is_not_counted(owner: Hand, address: str) -> None:
    key = mint(owner, ["leases"])
    response, body = post("/leases/acquire", address, Authorization=f"Bearer {key}")
    assert response.status_code == 201, response.content
    assert body.reads
    assert counted(address) == 0


def test_a_call_to_no_endpoint_is_refused_before_its_body_is_read_and_counted(
    address: str,
) -> None:
    response, body = post("/no/such/endpoint", address)
    error_of(response, 404, "not_found")
    assert body.reads == []
    assert counted(address) == 1
