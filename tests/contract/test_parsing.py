"""Hostile input answers 400 with the uniform body, never a 500, and writes nothing (issue 18,
item 4): bodies nested deeper than the bound, keys repeated in one object, and NUL characters in
the path or a query parameter, on the hot calls, the other calls and the dashboard."""

from __future__ import annotations

import json
import math

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apikit.api import MAX_JSON_DEPTH, decode_json, may_repeat_a_key
from fleet.models import Report
from leases.models import Lease
from tests.support.api import API, Api, claim, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]


def post_raw(api: Api, path: str, raw: bytes):  # noqa: ANN201
    return api.client.post(
        API + path, raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api.key}"
    )


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 3000])
def test_a_body_nested_too_deep_is_refused(api_a: Api, run, depth: int) -> None:
    api = api_a
    attempt = claim(api, run)
    details = "[" * depth + "]" * depth
    raw = (
        f'{{"fence": {attempt["fence"]}, "kind": "note", "message": "m", '
        f'"details": {{"x": {details}}}}}'
    ).encode()
    error_of(post_raw(api, f"/attempts/{attempt['id']}/reports", raw), 400, "validation_error")
    deep = b'{"resource": "r", "ttl_s": 30, "process_id": "p", "x": ' + details.encode() + b"}"
    error_of(post_raw(api, "/leases/acquire", deep), 400, "validation_error")
    assert not Report.objects.filter(kind="note").exists()
    assert not Lease.objects.filter(resource="r").exists()


def test_a_key_given_twice_is_refused(api_a: Api) -> None:
    api = api_a
    raw = b'{"resource": "a", "resource" : "b", "ttl_s": 30, "process_id": "p"}'
    error_of(post_raw(api, "/leases/acquire", raw), 400, "validation_error")
    assert not Lease.objects.exists()
    # A `":` inside a string is no repeated key: the strict parser tells them apart.
    fine = b'{"resource": "a\\":b", "ttl_s": 30, "process_id": "p"}'
    assert post_raw(api, "/leases/acquire", fine).status_code == 201


@pytest.mark.parametrize(
    "path",
    [
        "/leases?prefix=%00",
        "/leases?holder=a%00b",
        "/refusals?code=%00",
        "/events?hand=%00",
        "/attempts?hand=%00",
        "/hands/%00/keys",
    ],
)
def test_a_nul_in_the_path_or_a_query_parameter_is_a_400(boss: Api, path: str) -> None:
    error = error_of(boss.get(path), 400, "validation_error")
    assert error["request_id"]


def test_the_dashboard_refuses_a_nul_too(admin_client: Client) -> None:
    for path in ("/?lane=%00", "/keys/%00/revoke/"):
        assert admin_client.get(path).status_code == 400


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=40,
    )
)
def test_the_strict_parser_reads_what_json_writes_or_refuses_with_a_value_error(value) -> None:  # noqa: ANN001
    """A fuzz of the one body parser: any JSON value is read back as written, or refused with a
    ValueError (too deep), never another exception; an infinity (which Python's encoder writes
    and JSON has not, nor jsonb) is refused saying so; and the repeated-key test that sends a
    body past orjson to the strict parser (`may_repeat_a_key`) never misses a repeat."""
    raw = json.dumps(value).encode()
    try:
        assert decode_json(raw) == value
    except ValueError as refused:
        expected = "is not a number JSON has" if _holds_infinity(value) else "deeper"
        assert expected in str(refused)
    else:
        assert not _holds_infinity(value)
    if isinstance(value, dict) and value:
        key = next(iter(value))
        repeated = raw[:-1] + b", " + json.dumps(key).encode() + b": 0}"
        assert may_repeat_a_key(repeated, json.loads(repeated))
        with pytest.raises(ValueError):
            decode_json(repeated)


def _holds_infinity(value: object) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, dict):
        return any(_holds_infinity(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_infinity(item) for item in value)
    return False


def test_report_details_over_their_size_are_refused(api_a: Api, run) -> None:
    from fleet.attempts.reports import MAX_DETAILS_BYTES

    api = api_a
    attempt = claim(api, run)
    path = f"/attempts/{attempt['id']}/reports"
    big = {"log": "x" * (MAX_DETAILS_BYTES + 1)}
    body = {"fence": attempt["fence"], "kind": "note", "message": "m", "details": big}
    error = error_of(api.post(path, body), 400, "validation_error")
    assert error["limit_bytes"] == MAX_DETAILS_BYTES
    assert not Report.objects.filter(kind="note").exists()
    body["details"] = {"log": "x" * (MAX_DETAILS_BYTES // 2)}
    assert api.post(path, body).status_code == 200
