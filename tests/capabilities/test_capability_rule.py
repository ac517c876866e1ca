"""The capability rule's three forms held together (`hands.capabilities`): what a tag list may
be, the tags a hand lacks in Python, and the same in SQL (the claim's statement, the runs a hand
lists), over one table of cases."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from apikit.errors import ValidationFailed
from hands import capabilities

pytestmark = pytest.mark.django_db

CASES = [
    ([], []),
    ([], ["gpu"]),
    (["gpu"], []),
    (["gpu"], ["gpu"]),
    (["gpu"], ["GPU"]),  # stored tags are lowercase: the rule compares exactly
    (["python", "gpu"], ["gpu", "python", "browser"]),
    (["python", "gpu"], ["python"]),
    (["c++"], ["c"]),
    (["a.b"], ["a.b", "a"]),
    (["x"], ["xx"]),
]


@pytest.mark.parametrize(("needed", "has"), CASES)
def test_the_sql_form_agrees_with_the_python_form(needed: list[str], has: list[str]) -> None:
    sql = capabilities.fits_sql(
        capabilities.array_param_sql("%s"), capabilities.array_param_sql("%s")
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT CASE WHEN {sql} THEN 1 ELSE 0 END", [json.dumps(needed), json.dumps(has)]
        )
        (fits,) = cursor.fetchone()
    assert bool(fits) == (capabilities.missing(needed, has) == [])


def test_missing_keeps_the_runs_order() -> None:
    assert capabilities.missing(["gpu", "python", "browser"], ["python"]) == ["gpu", "browser"]


def test_normalise_strips_lowers_and_dedupes() -> None:
    assert capabilities.normalise([" GPU", "gpu", "Python3.12", "c++", "a_b-c"]) == [
        "gpu",
        "python3.12",
        "c++",
        "a_b-c",
    ]
    assert capabilities.normalise(None) == []


@pytest.mark.parametrize(
    "bad",
    [
        "gpu",
        {"gpu": 1},
        [None],
        [""],
        ["a b"],
        ["_x"],
        ["é"],
        ["x" * 33],
        ["t"] * 0 + [str(i) for i in range(21)],
    ],
)
def test_normalise_refuses_what_is_not_a_short_list_of_short_tags(bad: object) -> None:
    with pytest.raises(ValidationFailed) as refused:
        capabilities.normalise(bad, field="capabilities")
    assert "capabilities" in refused.value.fields["fields"]


def test_duplicates_count_once_against_the_limit() -> None:
    assert len(capabilities.normalise(["a"] * 50 + [str(i) for i in range(19)])) == 20
