"""A hostile review of issue 18's hardening: the defects it found, each as it was reproduced.

1. A cookie's quoted value may spell a NUL as `\\000`, which Django's cookie parser unquotes:
   a session id holding one reached PostgreSQL, which refuses text with a NUL, and every page
   answered 500. Such a cookie is now dropped, as if never sent.
2. Invisible characters outside the format category (the combining grapheme joiner, variation
   selectors, the Hangul fillers: Unicode's default-ignorable code points) slipped past
   `leases.names`, so `src/auth` and `src/auth` + U+034F were two resources that look alike.
3. A revoked or expired key is not authenticated either, but its calls were never counted
   against the address's limit: a flood of them was answered 401 without end, each call writing
   a Refusal row. Now they count, and past the limit are answered 429 and counted as aggregates.
4. A report's `details` holding a NUL or a lone surrogate (`\\u0000`, `\\ud800`, in a key or a
   string) reached PostgreSQL's jsonb, which refuses both: a 500. Now a 400 naming `details`.
5. An error that quotes what the caller sent (DRF's `"x" is not a valid choice.`) with a lone
   surrogate in it could be neither encoded as UTF-8 nor stored: the answer was a 500. An
   error's message and fields now carry U+FFFD in place of a lone surrogate or a NUL.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apikit import ratelimit
from hands import services as hand_services
from hands.models import Hand, HandKey, Role
from leases import names
from leases.clock import db_now
from leases.models import AddressRefusal, Event, Lease, Refusal
from leasing import hot
from tests.api.conftest import API, Api, error_of, mint

pytestmark = pytest.mark.django_db

# --- 1. A NUL in a cookie -----------------------------------------------------------------------

NUL_SESSION = 'sessionid="abcdefghijklmnop\\000"'


def test_it_answers_the_pages_when_the_session_cookie_holds_a_nul(workspace) -> None:  # noqa: ANN001
    client = Client(raise_request_exception=False)
    board = client.get("/", HTTP_COOKIE=NUL_SESSION)
    assert board.status_code == 302 and board["Location"].startswith("/login/")
    assert client.get("/login/", HTTP_COOKIE=NUL_SESSION).status_code == 200
    assert client.get("/admin/", HTTP_COOKIE=NUL_SESSION).status_code == 302


def test_a_user_with_such_a_cookie_can_still_log_in(workspace) -> None:  # noqa: ANN001
    user = get_user_model().objects.create_user(username="ada", password="pw-ada-long-enough")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client(raise_request_exception=False)
    client.cookies.load(NUL_SESSION)
    logged_in = client.post("/login/", {"username": "ada", "password": "pw-ada-long-enough"})
    assert logged_in.status_code == 302, logged_in.content
    assert client.get("/").status_code == 200


# --- 2. Invisible characters in resource names --------------------------------------------------

INVISIBLE = [
    0x034F,  # combining grapheme joiner (Mn)
    0x115F,  # Hangul choseong filler (Lo)
    0x1160,  # Hangul jungseong filler (Lo)
    0x17B4,  # Khmer vowel inherent aq (Mn)
    0x180B,  # Mongolian free variation selector one (Mn)
    0x3164,  # Hangul filler (Lo)
    0xFE00,  # variation selector-1 (Mn)
    0xFE0F,  # variation selector-16 (Mn)
    0xFFA0,  # halfwidth Hangul filler (Lo)
    0xE0100,  # variation selector-17 (Mn)
]
INVISIBLE_IDS = [f"U+{c:04X}" for c in INVISIBLE]


@pytest.mark.parametrize("path", ["hot view", "DRF view"])
@pytest.mark.parametrize("invisible", INVISIBLE, ids=INVISIBLE_IDS)
def test_it_refuses_a_name_with_an_invisible_character(
    api_a: Api, api_b: Api, path: str, invisible: int
) -> None:
    api = Api(api_a.key, api_a.hand, hot_path=path == "hot view")
    rival = Api(api_b.key, api_b.hand, hot_path=path == "hot view")
    held = api.post("/leases/acquire", {"resource": "src/auth", "ttl_s": 30, "process_id": "p"})
    assert held.status_code == 201, held.content
    events = Event.objects.count()
    for spelling in (f"src/auth{chr(invisible)}", f"src/{chr(invisible)}auth", chr(invisible)):
        body = {"resource": spelling, "ttl_s": 30, "process_id": "q"}
        assert hot.acquire.parse(body) is None
        error = error_of(rival.post("/leases/acquire", body), 400, "validation_error")
        assert f"U+{invisible:04X}" in error["message"], error["message"]
        assert error["fields"] == {"resource": [error["message"]]}
        assert names.prefix_problem(spelling) is not None
    assert list(Lease.objects.values_list("resource", flat=True)) == ["src/auth"]
    assert Event.objects.count() == events
    # The message says what to send instead.
    problem = names.resource_problem(f"src/auth{chr(invisible)}")
    assert problem is not None and problem.endswith("send 'src/auth'"), problem


@pytest.mark.parametrize("good", ["ünïcødé/文件/🚀", "한국어/파일", "ᄀ/ᅡ/가"])
def test_names_with_visible_letters_of_those_scripts_still_work(api_a: Api, good: str) -> None:
    granted = api_a.post("/leases/acquire", {"resource": good, "ttl_s": 30, "process_id": "p"})
    assert granted.status_code == 201, granted.content


# --- 3. A flood with a revoked or expired key ---------------------------------------------------

LIMIT = 5


@pytest.fixture
def address(time_machine) -> Any:  # noqa: ANN001
    # A minute's first second on the web process's clock: no test's calls straddle two windows.
    time_machine.move_to(datetime(2031, 6, 1, 9, 30, 1, tzinfo=UTC), tick=True)
    ratelimit.unauthenticated_limiter.forget()
    raw = uuid.uuid4().int
    yield f"10.{raw % 250 + 1}.{(raw >> 8) % 250 + 1}.{(raw >> 16) % 250 + 1}"
    ratelimit.unauthenticated_limiter.forget()


def _dead_key(owner: Hand, how: str) -> str:
    key = mint(owner, ["work", "leases"], expires_in_s=60)
    prefix = key.split("_")[1]
    if how == "expired":  # an hour ago, on the database's clock
        HandKey.objects.filter(prefix=prefix).update(expires_at=db_now() - timedelta(hours=1))
    else:
        hand_services.key_revoke(workspace_id=owner.workspace_id, prefix=prefix, actor="t")
    return key


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_flood_with_a_dead_key_is_limited_and_counted(
    owner: Hand, settings: Any, address: str, how: str
) -> None:
    settings.GC_UNAUTHENTICATED_PER_MINUTE = LIMIT
    key = _dead_key(owner, how)
    code = f"key_{how}"
    answered = Counter()
    for i in range(40):
        if i % 2:
            response = Client().get(
                API + "/me", HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR=address
            )
        else:  # the hot renew, which hands a dead key to the DRF view
            response = Client().post(
                f"{API}/leases/renew",
                data='{"resource": "r", "fence": 1, "process_id": "p"}',
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {key}",
                REMOTE_ADDR=address,
            )
        answered[response.status_code] += 1
        if response.status_code == 429:
            assert error_of(response, 429, "rate_limited")["retry_after_s"] > 0
    assert answered == {401: LIMIT, 429: 40 - LIMIT}
    # The calls within the limit are each recorded with the hand (a supervisor sees its dead key
    # still calling); the flood past it is one counted row.
    assert Refusal.objects.filter(code=code, hand=owner.name).count() == LIMIT
    assert Refusal.objects.count() == LIMIT
    # Counted by the database's minute, which the calls may straddle (time_machine moves only
    # the web process's clock): one row per minute, their counts adding up to the flood.
    counted = AddressRefusal.objects.filter(address=address, code="rate_limited")
    assert 1 <= len(counted) <= 2
    assert sum(row.count for row in counted) == 40 - LIMIT


def test_a_valid_key_from_that_address_is_still_unaffected(
    owner: Hand, settings: Any, address: str
) -> None:
    settings.GC_UNAUTHENTICATED_PER_MINUTE = LIMIT
    dead, live = _dead_key(owner, "revoked"), mint(owner, ["work", "leases"])
    for _ in range(LIMIT + 3):
        Client().get(API + "/me", HTTP_AUTHORIZATION=f"Bearer {dead}", REMOTE_ADDR=address)
    me = Client().get(API + "/me", HTTP_AUTHORIZATION=f"Bearer {live}", REMOTE_ADDR=address)
    assert me.status_code == 200, me.content


# --- 4. What jsonb cannot hold, in a report's details -------------------------------------------
# PostgreSQL's jsonb refuses a NUL (`\u0000`) and a lone surrogate (`\ud800`) anywhere in a
# document, key or value: a report carrying one in its details answered 500.

UNSTORABLE = [
    '{"a": "\\ud800"}',
    '{"\\udc00": 1}',
    '{"a": ["x", {"b": "\\u0000"}]}',
    '{"a\\u0000": 1}',
]


@pytest.mark.parametrize("path", ["hot view", "DRF view"])
@pytest.mark.parametrize("details", UNSTORABLE)
def test_it_refuses_details_that_jsonb_cannot_hold(
    api_a: Api, run: Any, path: str, details: str
) -> None:
    claimed = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "p"}).json()
    api = Api(api_a.key, api_a.hand, hot_path=path == "hot view")
    before = Event.objects.count()
    body = (
        f'{{"fence": {claimed["fence"]}, "kind": "progress", "process_id": "p", '
        f'"message": "m", "details": {details}}}'
    )
    response = api.client.post(
        f"{API}/attempts/{claimed['id']}/reports",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )
    error = error_of(response, 400, "validation_error")
    assert list(error["fields"]) == ["details"], error
    assert Event.objects.count() == before


# --- 5. An error quoting a lone surrogate -------------------------------------------------------


@pytest.mark.parametrize("bad", ["x\ud800y", "x\u0000y", "\udfff"])
def test_an_error_quoting_what_cannot_be_encoded_answers_400_and_is_recorded(
    boss: Api,
    api_a: Api,
    run,
    bad: str,  # noqa: ANN001
) -> None:
    claim = api_a.post(f"/runs/{run.id}/claim", {"process_id": "p:1"})
    assert claim.status_code == 201, claim.content
    attempt = claim.json()["id"]
    # json.dumps keeps the lone surrogate as the escape a hostile client sends.
    answer = boss.client.post(
        f"{API}/attempts/{attempt}/directive",
        data=json.dumps({"directive": bad}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {boss.key}"},
    )
    error = error_of(answer, 400, "validation_error")
    assert "\ufffd" in error["fields"]["directive"][0]
    recorded = Refusal.objects.get(code="validation_error")
    assert "\ufffd" in recorded.details["fields"]["directive"][0]
