"""The wire models' shared rules without a server (`groundcontrol_client.core.wire`): a whole
number is never a boolean, a null reads as the default, a time that is not one reads as None, the
answer is kept whole in `raw` aside from equality, and a malformed answer is a `MalformedAnswer`
naming the innermost object at fault, while a value made in code fails as pydantic's own error."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest
from groundcontrol_client import Attempt, Lease, RenewedAll, ReportResult, Slot
from groundcontrol_client.core.errors import MalformedAnswer, ServerError
from groundcontrol_client.core.models import Checked, FencesVerified, Released

LEASE: dict[str, Any] = {"resource": "runs/12/slots/0", "fence": 3, "heartbeat_interval_s": 30}
ATTEMPT: dict[str, Any] = {"id": 41, "run": 12, "slot": 0, "lease": LEASE}


def malformed(parse: Any, data: Any) -> MalformedAnswer:
    with pytest.raises(MalformedAnswer) as error:
        parse(data)
    assert isinstance(error.value, ServerError)
    return error.value


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_where_a_whole_number_belongs_is_a_malformed_answer(value: bool) -> None:
    error = malformed(Attempt.from_wire, {**ATTEMPT, "run": value})
    assert error.message == (
        f"the server's answer is not a valid attempt: run is {value!r}, not a whole number"
    )
    assert error.fields == {"what": "attempt"}
    assert "not a whole number" in malformed(Slot.from_wire, {"index": value}).message


@pytest.mark.parametrize(("value", "read"), [(7, 7), (7.0, 7), ("7", 7), (" -2 ", -2)])
def test_a_whole_number_may_come_as_an_integral_float_or_as_digits(value: Any, read: int) -> None:
    assert Attempt.from_wire({**ATTEMPT, "slot": value}).slot == read


@pytest.mark.parametrize("value", [1.5, "7a", "", {}, [7]])
def test_anything_else_where_a_whole_number_belongs_is_malformed(value: Any) -> None:
    assert "not a whole number" in malformed(Attempt.from_wire, {**ATTEMPT, "slot": value}).message


def test_a_null_reads_as_the_default_and_a_required_one_as_missing() -> None:
    attempt = Attempt.from_wire({**ATTEMPT, "run": None, "state": None, "directive": None})
    assert (attempt.run, attempt.state, attempt.directive) == (0, "", "continue")
    error = malformed(Attempt.from_wire, {**ATTEMPT, "id": None})
    assert error.message == "the server's answer is not a valid attempt: it has no id"


def test_a_time_that_is_not_one_reads_as_none() -> None:
    lease = {**LEASE, "expires_at": "soon", "server_time": "2030-01-01T12:00:00Z"}
    read = Attempt.from_wire({**ATTEMPT, "lease": lease}).lease
    assert read.expires_at is None
    assert read.server_time == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert (
        Attempt.from_wire({**ATTEMPT, "lease": {**LEASE, "expires_at": 5}}).lease.expires_at is None
    )


def test_the_answer_is_kept_whole_in_raw_aside_from_equality_and_repr() -> None:
    later = {**ATTEMPT, "budget": {"action": "pause"}}  # a field this client does not read
    attempt = Attempt.from_wire(later)
    assert attempt.raw is later and attempt.lease.raw is LEASE
    assert attempt == Attempt.from_wire(ATTEMPT)
    assert hash(attempt) == hash(Attempt.from_wire(ATTEMPT))
    assert "budget" not in repr(attempt)
    with pytest.raises(pydantic.ValidationError):
        attempt.run = 13  # type: ignore[misc]  # a value: frozen


def test_a_fault_inside_names_the_innermost_object() -> None:
    error = malformed(Attempt.from_wire, {**ATTEMPT, "lease": {**LEASE, "fence": "x"}})
    assert error.message == (
        "the server's answer is not a valid attempt's lease: fence is 'x', not a whole number"
    )
    assert error.fields == {"what": "attempt's lease"}
    error = malformed(ReportResult.from_wire, {"attempt": ATTEMPT, "handoff_requests": [{}]})
    assert error.message == "the server's answer is not a valid handoff request: it has no id"
    error = malformed(RenewedAll.from_wire, {"renewed": [], "not_renewed": [3]})
    assert error.message.endswith("not_renewed item: an object was expected, not a number")


def test_not_an_object_or_of_the_wrong_type_is_said_plainly() -> None:
    assert malformed(Attempt.from_wire, [ATTEMPT]).message == (
        "the server's answer is not a valid attempt: an object was expected, not a list"
    )
    assert malformed(Attempt.from_wire, None).message.endswith("not null")
    error = malformed(ReportResult.from_wire, {"renewed": "yes", "attempt": ATTEMPT})
    assert error.message == (
        "the server's answer is not a valid report's answer: renewed is 'yes', not true or false"
    )
    error = malformed(Lease.from_wire, {"resource": 7, "fence": 1})
    assert error.message == "the server's answer is not a valid lease: resource is 7, not text"


def test_a_tenure_not_renewed_takes_its_resource_and_fence_from_its_lease() -> None:
    answer = RenewedAll.from_wire(
        {
            "renewed": [],
            "not_renewed": [
                {"lease": {"resource": "src/", "fence": 5}, "code": "lease_lost"},
                {"resource": "docs/", "fence": None, "lease": None, "code": "lease_lost"},
            ],
        }
    )
    assert [(item.resource, item.fence) for item in answer.not_renewed] == [
        ("src/", 5),
        ("docs/", None),
    ]
    assert answer.lost() == ["src/", "docs/"]


def test_an_attempt_without_its_own_fence_has_its_lease_s() -> None:
    assert Attempt.from_wire(ATTEMPT).fence == 3
    assert Attempt.from_wire({**ATTEMPT, "fence": 2}).fence == 2


def test_a_value_made_in_code_fails_as_pydantic_does_not_as_the_servers_answer() -> None:
    with pytest.raises(pydantic.ValidationError):
        Slot(index="first")  # type: ignore[arg-type]
    assert Slot(index=0, state="open").raw == {}


@pytest.mark.parametrize(
    ("parse", "data", "said"),
    [
        (Released.from_wire, {"released": "yes"}, "released is 'yes', not true or false"),
        (Checked.from_wire, {"valid": True}, "it has no lease"),
        (FencesVerified.from_wire, {"fences": {"a@1": "current"}}, "fences is"),
    ],
)
def test_a_release_a_check_and_a_verification_are_read_as_models_too(
    parse: Any, data: Any, said: str
) -> None:
    """The answers the clients once indexed by hand (`data["lease"]`, `data["fences"]`): a
    malformed one is a `MalformedAnswer`, never a KeyError's traceback."""
    assert said in malformed(parse, data).message
