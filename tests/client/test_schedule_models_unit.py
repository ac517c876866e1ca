"""The schedules' wire objects without a server: a valid answer parses into typed values, a
malformed one raises `MalformedAnswer` naming the object and the field, never a KeyError."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from groundcontrol_client import GitHubIntegration, Schedule, ScheduleTry
from groundcontrol_client.core.errors import MalformedAnswer
from groundcontrol_client.core.schedules import describe_schedule, describe_try

SCHEDULE: dict[str, Any] = {
    "id": 3,
    "lane": "rewalk",
    "cron": "0 6 * * *",
    "key_pattern": "daily-{date}",
    "title_pattern": "Rewalk of {date}",
    "runs": [{"title": "Walk", "slots": 1}],
    "active": True,
    "periods_after": "2030-01-01T12:00:00Z",
    "planned": ["2030-01-02T06:00:00Z", "2030-01-03T06:00:00Z"],
    "created_at": "2030-01-01T12:00:00Z",
    "created_by": "hand-a",
}
TRY = {
    "id": 9,
    "date_key": "2030-01-02T06:00Z",
    "at": "2030-01-02T06:00:00Z",
    "outcome": "failed",
    "error": "OperationalError: down",
    "work_package": None,
}


def test_a_schedule_and_its_try_parse_and_read_as_a_sentence() -> None:
    schedule = Schedule.from_wire(SCHEDULE)
    assert schedule.planned == [
        datetime(2030, 1, 2, 6, 0, tzinfo=UTC),
        datetime(2030, 1, 3, 6, 0, tzinfo=UTC),
    ]
    row = ScheduleTry.from_wire(TRY)
    assert (row.outcome, row.error, row.work_package) == ("failed", "OperationalError: down", None)
    assert describe_try(row) == "2030-01-02T06:00Z: failed: OperationalError: down"
    assert describe_schedule(schedule, row).splitlines() == [
        "schedule 3: 0 6 * * * (UTC) makes daily-{date} 'Rewalk of {date}' with 1 run",
        "  next (UTC): 2030-01-02 06:00, 2030-01-03 06:00; last try: 2030-01-02T06:00Z: failed: "
        "OperationalError: down",
    ]
    off = Schedule.from_wire({**SCHEDULE, "active": False, "planned": []})
    assert describe_schedule(off).endswith(
        "(off)\n  next (UTC): none while off; last try: none yet"
    )


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"active": "yes"}, "active"),
        ({"id": "three"}, "id"),
        ({"planned": ["soon"]}, "planned"),
        ({"runs": ["Walk"]}, "runs"),
        ({"cron": None, "lane": None}, "schedule"),
    ],
)
def test_a_malformed_schedule_is_a_malformed_answer(changes: dict[str, Any], named: str) -> None:
    data = {**SCHEDULE, **changes}
    for key, value in changes.items():
        if value is None:
            del data[key]
    with pytest.raises(MalformedAnswer) as error:
        Schedule.from_wire(data)
    assert named in error.value.message
    assert "not a valid schedule" in error.value.message


def test_an_integration_has_a_secret_only_when_the_answer_carries_one() -> None:
    listed = {
        "id": 1,
        "lane": "rewalk",
        "repository": "acme/app",
        "label": None,
        "active": True,
        "delivery_path": "/api/v1/integrations/github/1",
        "created_at": "2030-01-01T12:00:00Z",
        "created_by": "hand-a",
    }
    assert GitHubIntegration.from_wire(listed).secret is None
    assert GitHubIntegration.from_wire(listed).repository == "acme/app"
    assert GitHubIntegration.from_wire({**listed, "repository": None}).repository is None
    assert GitHubIntegration.from_wire({**listed, "secret": None}).secret is None
    assert GitHubIntegration.from_wire({**listed, "secret": "ghsec_x"}).secret == "ghsec_x"
    with pytest.raises(MalformedAnswer):
        GitHubIntegration.from_wire([listed])
