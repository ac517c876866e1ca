"""What a fence is (leases/fences.py), and every entry point reading it alike: the input
serializer (which validates a hot call's body before its statement runs) and the services
refuse the same values."""

from __future__ import annotations

import pytest

from apikit.errors import ValidationFailed
from leases.fences import FENCE_MAX, as_fence, stale_fence, validate_fence
from tests.support.api import Api, error_of

VALUES = [
    (0, True),
    (1, True),
    (FENCE_MAX, True),
    (FENCE_MAX + 1, False),
    (-1, False),
    (True, False),
    (1.0, False),
    ("1", False),
    (None, False),
]


@pytest.mark.parametrize(("value", "is_fence"), VALUES)
def test_a_fence_is_a_non_negative_bigint(value: object, is_fence: bool) -> None:
    assert (as_fence(value) is not None) == is_fence
    if is_fence:
        assert validate_fence(value) == value
    else:
        with pytest.raises(ValidationFailed):
            validate_fence(value)


def test_a_stale_fence_names_the_current_one() -> None:
    assert stale_fence(3, 3, "x") is None
    refusal = stale_fence(2, 3, "'src/'")
    assert refusal is not None and refusal.fields == {"current_fence": 3}
    assert refusal.message == "fence 2 is not the current fence 3 of 'src/'"


@pytest.mark.django_db
def test_every_entry_point_reads_a_fence_alike(api_a: Api) -> None:
    api = api_a
    acquired = api.post("/leases/acquire", {"resource": "f/", "ttl_s": 60, "process_id": "p"})
    assert acquired.status_code == 201, acquired.content
    for value, is_fence in VALUES:
        answer = api.post("/leases/renew", {"resource": "f/", "fence": value, "process_id": "p"})
        if not is_fence:
            error = error_of(answer, 400, "validation_error")
            assert "fence" in error["fields"], value
        elif value == 1:
            assert answer.status_code == 200, answer.content
        else:
            assert error_of(answer, 409, "stale_fence")["current_fence"] == 1
