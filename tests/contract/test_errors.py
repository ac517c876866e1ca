"""The uniform error body and request ids on every answer, DRF's and Django's own included."""

from __future__ import annotations

import re

import pytest

from leases.models import AddressRefusal, Refusal
from tests.support.api import API, Api, error_of, refusals

pytestmark = pytest.mark.django_db


def test_every_response_carries_a_request_id_taken_from_the_request_when_given(
    api_a: Api,
) -> None:
    minted = api_a.get("/me")
    assert re.fullmatch(r"[0-9a-f]{32}", minted["X-Request-ID"])
    given = api_a.get("/me", **{"X-Request-ID": "trace-123.abc"})
    assert given["X-Request-ID"] == "trace-123.abc"
    # One that could smuggle anything into logs is replaced.
    odd = api_a.get("/me", **{"X-Request-ID": "a b\tc"})
    assert re.fullmatch(r"[0-9a-f]{32}", odd["X-Request-ID"])


def test_a_refusal_records_the_callers_request_id(api_a: Api) -> None:
    response = api_a.get("/attempts/999999", **{"X-Request-ID": "req-42"})
    error = error_of(response, 404, "not_found")
    assert error["request_id"] == "req-42"
    refusal = Refusal.objects.get()
    assert (refusal.request_id, refusal.hand, refusal.code) == ("req-42", "hand-a", "not_found")


def test_an_unknown_path_under_the_api_answers_not_found_in_the_uniform_body(
    api_a: Api, anonymous: Api
) -> None:
    error_of(api_a.get("/no/such/thing"), 404, "not_found")
    error_of(anonymous.post("/attempts/not-a-number/reports", {}), 404, "not_found")
    error_of(api_a.get("/me/"), 404, "not_found")
    # No key is looked at on an unknown path, so no workspace: the three calls are one count
    # for the client's address and minute (issue 18, item 5), not three rows.
    assert not refusals("not_found")
    counted = AddressRefusal.objects.get()
    assert (counted.code, counted.address, counted.count) == ("not_found", "127.0.0.1", 3)


def test_a_wrong_method_answers_405_in_the_uniform_body(api_a: Api) -> None:
    response = api_a.client.delete(f"{API}/me", headers={"Authorization": f"Bearer {api_a.key}"})
    error_of(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"]
    assert Refusal.objects.get().code == "method_not_allowed"


def test_a_body_that_is_not_json_answers_415_or_validation_error(api_a: Api, run) -> None:
    headers = {"Authorization": f"Bearer {api_a.key}"}
    form = api_a.client.post(f"{API}/runs/{run.pk}/claim", {"process_id": "x"}, headers=headers)
    error_of(form, 415, "unsupported_media_type")
    broken = api_a.client.post(
        f"{API}/runs/{run.pk}/claim", "{not json", content_type="application/json", headers=headers
    )
    error = error_of(broken, 400, "validation_error")
    assert "body" in error["fields"]
    listed = api_a.post(f"/runs/{run.pk}/claim", ["process_id"])
    assert "non_field_errors" in error_of(listed, 400, "validation_error")["fields"]
    assert [r.code for r in Refusal.objects.order_by("id")] == [
        "unsupported_media_type",
        "validation_error",
        "validation_error",
    ]


def test_validation_errors_say_which_field_and_why(api_a: Api) -> None:
    response = api_a.post(
        "/leases/acquire", {"resource": "", "ttl_s": 0, "process_id": "p", "wait_s": 61}
    )
    error = error_of(response, 400, "validation_error")
    assert set(error["fields"]) == {"resource", "ttl_s", "wait_s"}
    assert all(isinstance(messages, list) and messages for messages in error["fields"].values())
    control = api_a.post(
        "/leases/acquire", {"resource": "src/\x01auth", "ttl_s": 5, "process_id": "p"}
    )
    assert "resource" in error_of(control, 400, "validation_error")["fields"]
    assert len(refusals("validation_error")) == 2


def test_each_refusal_is_recorded_exactly_once(api_a: Api, run) -> None:
    # Refused inside a service (recorded there) and outside (recorded by the handler).
    api_a.post("/leases/renew", {"resource": "nothing", "fence": 1, "process_id": "p"})
    api_a.get("/attempts/12345")
    api_a.get("/refusals")
    assert sorted(Refusal.objects.values_list("code", flat=True)) == [
        "not_found",
        "not_found",
        "scope_denied",
    ]


def test_a_bug_answers_internal_error_in_the_uniform_body(api_a: Api, monkeypatch) -> None:
    from fleet.plan import selectors

    def broken(**kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(selectors, "run_get", broken)
    error = error_of(api_a.get("/runs/1/slots"), 500, "internal_error")
    assert "a bug" not in error["message"]
    # A bug is not a refusal of the caller.
    assert not Refusal.objects.exists()
