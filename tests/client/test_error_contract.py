"""The client's error table is the server's: every code the schema lists (`x-error-codes`, from
`apikit.errors.error_codes`) is a class of the client's, in the category its status means, and
its sentence says what to do about that code, never another code's advice."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from groundcontrol_client.core.errors import (
    ADVICE_DENIED,
    ERRORS_BY_CODE,
    AuthFailed,
    Denied,
    GroundControlError,
    NotFound,
    ServerError,
    TenureLost,
    Unavailable,
    describe,
    error_from_response,
)

from apikit.errors import error_codes


@pytest.fixture(scope="module")
def schema_codes() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["x-error-codes"]


def test_the_schema_lists_every_code_the_server_raises_with_its_status(schema_codes) -> None:
    assert {code: spec["status"] for code, spec in schema_codes.items()} == {
        code: status for code, (status, _) in error_codes().items()
    }
    assert all(spec["description"] for spec in schema_codes.values())
    # The codes of every app's errors module, and the framework's own.
    assert {"handoff_own_lease", "pool_exists", "signature_invalid", "busy"} <= set(schema_codes)
    assert {"method_not_allowed", "unsupported_media_type", "internal_error"} <= set(schema_codes)


def test_the_client_knows_every_code_the_schema_lists(schema_codes) -> None:
    assert sorted(set(schema_codes) - set(ERRORS_BY_CODE)) == []


# The category each status means to a caller (NotHolder is a 403 that ends a tenure: lost).
_CATEGORY = {401: AuthFailed, 404: NotFound, 429: Unavailable, 500: ServerError, 503: Unavailable}


def test_each_code_lands_in_the_category_its_status_means(schema_codes) -> None:
    for code, spec in schema_codes.items():
        cls = ERRORS_BY_CODE[code]
        status = spec["status"]
        assert issubclass(cls, Unavailable) == (status in (429, 503)), code
        if status in _CATEGORY:
            assert issubclass(cls, _CATEGORY[status]), (code, status, cls)
        if status == 403:
            assert issubclass(cls, AuthFailed | TenureLost), code
        if issubclass(cls, Denied | TenureLost):
            assert status == 409 or (status == 403 and code == "not_holder"), code


@pytest.mark.parametrize("code", sorted(c for c, cls in ERRORS_BY_CODE.items() if cls.advice))
def test_a_code_with_advice_of_its_own_is_not_told_to_wait(code: str, schema_codes) -> None:
    status = schema_codes[code]["status"]
    error = error_from_response(status, {"error": {"code": code, "message": "refused"}})
    assert type(error) is ERRORS_BY_CODE[code] and not isinstance(error, Denied)
    sentence = describe(error)
    assert sentence == f"refused: {error.advice}" and ADVICE_DENIED not in sentence


def test_asking_for_ones_own_lease_says_so_not_wait() -> None:
    error = error_from_response(
        409, {"error": {"code": "handoff_own_lease", "message": "hand a holds src/auth/"}}
    )
    assert isinstance(error, GroundControlError) and not isinstance(error, Denied)
    assert describe(error).startswith("hand a holds src/auth/: your own hand holds it")
