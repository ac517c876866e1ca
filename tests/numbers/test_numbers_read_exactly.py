"""Numbers on the wire are read exactly (issue 33, item 3): a number is a JSON number, or, where
a field takes text (an amount, a query parameter), a string of ASCII digits. Python's int(),
float() and Decimal() also read other scripts' digits, superscripts, full-width digits,
underscores, padding of any kind, signs, exponents, "NaN" and "Infinity": each of those, on every
numeric input of the API (found in the schema, so a new one cannot be missed), is a 400
validation_error naming the field, and writes nothing."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest

from fleet.models import Budget, Report
from tests.support.api import API, PR, Api, claim, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]

# What int(), float() or Decimal() would read as a number, and the API must not.
HOSTILE_TEXT = [
    "١٠٠٠٠٠",  # Arabic-Indic digits: Decimal() reads $100,000
    "۱۰",  # extended Arabic-Indic
    "१०",  # Devanagari
    "１０",  # full-width
    "²",  # superscript two: str.isdigit() says yes, int() refuses (a 500 once)
    "¹⁰",
    "1_0_0_0_0",  # underscores: $10,000
    "\u00a01\u00a0",  # no-break spaces
    "\u20031\u2003",  # em spaces
    " 1 ",
    "1\n",
    "1e5",
    "1E5",
    "NaN",
    "Infinity",
    "-Infinity",
    "-0",
    "+1",
    "0x10",
    "1.",
    ".5",
    "1,5",
    "",
    " ",  # blank: DRF reads it as null, and null is no cost at all
    "\u2003",
]


class Raw:
    """A JSON token sent as written (json.dumps would write 1e5 as 100000.0, and no NaN)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return f"Raw({self.token})"


# JSON numbers that are not whole (an integer field), or carry a sign (an amount).
NOT_WHOLE = [1.0, 1.5, Raw("1e5"), Raw("1E0"), Raw("1.0"), True]
SIGNED_AMOUNTS = [Raw("-0.0"), -1, Raw("-0.000001"), True, [1], {"usd": 1}]
NOT_JSON = [Raw("NaN"), Raw("Infinity"), Raw("-Infinity")]

# Each call with a numeric input: a body the call would take, apart from the field tried.
BASE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/attempts/{attempt_id}/finish"): {
        "fence": 1,
        "process_id": "boss:1",
        "evidence": PR,
        "summary": "ok",
    },
    ("POST", "/attempts/{attempt_id}/release"): {
        "fence": 1,
        "process_id": "boss:1",
        "reason": "r",
    },
    ("POST", "/attempts/{attempt_id}/reports"): {
        "fence": 1,
        "process_id": "boss:1",
        "kind": "progress",
    },
    ("POST", "/budgets"): {"lane": "rewalk", "period": "week", "action": "stop", "limit_usd": 9},
    ("PATCH", "/budgets/{budget_id}"): {"action": "stop"},
    ("POST", "/friction"): {"what": "a wall"},
    ("POST", "/hands/{name}/keys"): {
        "scopes": ["work"],
        "bound_to": {"resource": "held", "fence": 1},
    },
    ("POST", "/lanes"): {"slug": "docs"},
    ("POST", "/lanes/{slug}/schedules"): {
        "cron": "0 6 * * *",
        "key_pattern": "day-{date}",
        "title_pattern": "Day",
        "runs": [{"title": "Walk"}],
    },
    ("PATCH", "/lanes/{slug}/schedules/{schedule_id}"): {"runs": [{"title": "Walk"}]},
    ("POST", "/leases/acquire"): {"resource": "other", "ttl_s": 30, "process_id": "boss:1"},
    ("POST", "/leases/check"): {"resource": "held", "fence": 1},
    ("POST", "/leases/handoff"): {"run": 1, "slot": 0, "reason": "r"},
    ("POST", "/leases/release"): {"resource": "held", "fence": 1},
    ("POST", "/leases/renew"): {"resource": "held", "fence": 1, "process_id": "boss:1"},
    ("POST", "/leases/renew-all"): {
        "process_id": "boss:1",
        "held": [{"resource": "held", "fence": 1}],
    },
    ("POST", "/pools"): {"name": "ports", "capacity": 2},
    ("POST", "/pools/{name}/acquire"): {"process_id": "boss:1", "ttl_s": 30},
    ("PATCH", "/runs/{run_id}"): {"progress_timeout_s": 600},
    ("POST", "/runs/{run_id}/claim"): {"process_id": "boss:2"},
    ("POST", "/runs/{run_id}/slots"): {"count": 1, "reason": "r"},
    ("POST", "/work-packages/{work_package_id}/runs"): {"title": "Run"},
}


def _schema() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _numeric(schema: dict[str, Any], node: dict[str, Any], path: tuple[str, ...], seen: set[str]):
    """Each numeric property under `node`: (its path of names, integer|number|decimal)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _numeric(schema, schema["components"]["schemas"][name], path, seen | {name})
        return
    for key in ("allOf", "oneOf", "anyOf"):
        for part in node.get(key, []):
            yield from _numeric(schema, part, path, seen)
    kind = node.get("type")
    if kind in ("integer", "number"):
        yield path, kind
    elif kind == "string" and node.get("format") == "decimal":
        yield path, "decimal"
    for name, child in (node.get("properties") or {}).items():
        yield from _numeric(schema, child, (*path, name), seen)
    if "items" in node:
        yield from _numeric(schema, node["items"], path, seen)


def numeric_inputs() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(method, path, field path, kind) of every numeric field of every request body."""
    schema, found = _schema(), []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = (operation.get("requestBody") or {}).get("content", {}).get("application/json")
            if body:
                short = path.removeprefix(API)
                for field, kind in _numeric(schema, body["schema"], (), set()):
                    found.append((method.upper(), short, field, kind))
    return sorted(found)


INPUTS = numeric_inputs()


def with_value(body: dict[str, Any], field: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`body` (deep-copied) with `value` at `field` (a list on the way: its first item)."""
    body = json.loads(json.dumps(body))
    node: Any = body
    for name in field[:-1]:
        node = node.setdefault(name, {})
        if isinstance(node, list):
            node = node[0]
    node[field[-1]] = value
    return body


def send(api: Api, method: str, path: str, body: dict[str, Any]) -> Any:
    raws: list[str] = []

    def encode(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.token)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(value)

    text = json.dumps(body, default=encode, ensure_ascii=False)
    for index, token in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}\x00"), token)
    return getattr(api.client, method.lower())(
        API + path,
        data=text.encode(),
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )


@pytest.fixture
def world(boss: Api, make_run) -> dict[str, Any]:  # noqa: ANN001
    """Something behind every path parameter, so each call reaches its validation."""
    run = make_run(slots=3, heartbeat_interval_s=100, grace_s=60)
    attempt = claim(boss, run, process="boss:1")
    held = boss.post("/leases/acquire", {"resource": "held", "ttl_s": 60, "process_id": "boss:1"})
    assert held.status_code == 201, held.content
    assert boss.post("/pools", {"name": "cache", "capacity": 2}).status_code == 201
    budget = boss.post(
        "/budgets", {"lane": "rewalk", "period": "day", "action": "pause", "limit_usd": "5"}
    )
    assert budget.status_code == 201, budget.content
    schedule = boss.post(
        "/lanes/rewalk/schedules", BASE_BODIES[("POST", "/lanes/{slug}/schedules")]
    )
    assert schedule.status_code == 201, schedule.content
    return {
        "attempt_id": attempt["id"],
        "run_id": run.pk,
        "work_package_id": run.work_package_id,
        "budget_id": budget.json()["id"],
        "schedule_id": schedule.json()["id"],
        "slug": "rewalk",
        "hand_name": "boss",
        "pool_name": "cache",
    }


def filled(path: str, world: dict[str, Any]) -> str:
    name = world["pool_name"] if path.startswith("/pools/") else world["hand_name"]
    return path.format(name=name, **{k: v for k, v in world.items() if "{" + k + "}" in path})


def hostile_values(kind: str) -> list[Any]:
    values: list[Any] = [*HOSTILE_TEXT, *NOT_JSON]
    if kind == "integer":
        values += NOT_WHOLE
    elif kind == "number":
        values += [True]
    else:
        values += SIGNED_AMOUNTS
    return values


def test_every_numeric_input_has_a_body_to_try() -> None:
    calls = {(method, path) for method, path, _, _ in INPUTS}
    assert calls == set(BASE_BODIES)
    # The amounts, and the fields of every kind, are among them.
    assert ("POST", "/attempts/{attempt_id}/reports", ("cost_usd",), "decimal") in INPUTS
    assert ("POST", "/budgets", ("limit_usd",), "decimal") in INPUTS
    assert ("PATCH", "/budgets/{budget_id}", ("limit_usd",), "decimal") in INPUTS
    assert {kind for *_, kind in INPUTS} == {"integer", "number", "decimal"}


@pytest.mark.parametrize(
    ("method", "path", "field", "kind"),
    INPUTS,
    ids=[f"{m} {p} {'.'.join(f)}" for m, p, f, _ in INPUTS],
)
def test_a_number_that_is_not_exactly_one_is_a_validation_error(
    boss: Api, world: dict[str, Any], method: str, path: str, field: tuple[str, ...], kind: str
) -> None:
    url = filled(path, world)
    base = BASE_BODIES[(method, path)]
    reports, budgets = Report.objects.count(), list(Budget.objects.values_list())
    accepted = []
    for value in hostile_values(kind):
        response = send(boss, method, url, with_value(base, field, value))
        if response.status_code != 400:
            accepted.append((value, response.status_code))
            continue
        error = response.json()["error"]
        assert error["code"] == "validation_error", (value, error)
        # The field is named (a body that is not JSON at all: the body).
        if not isinstance(value, Raw) or value.token not in ("NaN", "Infinity", "-Infinity"):
            named = error["fields"]
            assert any(name.startswith(field[0]) for name in named), (value, error)
            assert field[-1] in json.dumps(named), (value, error)
    assert accepted == [], f"{method} {path} {'.'.join(field)} took these"
    # Nothing was written: no report, no budget changed.
    assert Report.objects.count() == reports
    assert list(Budget.objects.values_list()) == budgets


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.62", "0.620000"),
        ("5", "5.000000"),
        ("007.5", "7.500000"),
        (0.62, "0.620000"),
        (Raw("1e2"), "100.000000"),  # a JSON number, however written
        (3, "3.000000"),
    ],
)
def test_an_amount_in_ascii_digits_or_a_json_number_is_taken(
    boss: Api, world: dict[str, Any], value: Any, expected: str
) -> None:
    body = {"lane": "rewalk", "period": "week", "action": "stop", "limit_usd": value}
    response = send(boss, "POST", "/budgets", body)
    assert response.status_code == 201, response.content
    assert response.json()["limit_usd"] == expected


def list_paths_with(param: str) -> list[str]:
    schema = _schema()
    return sorted(
        path.removeprefix(API)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if method == "get"
        and any(p["name"] == param and p["in"] == "query" for p in operation.get("parameters", []))
    )


QUERY_NUMBERS = [
    *[(path, "limit") for path in list_paths_with("limit")],
    ("/attempts", "run"),
    ("/costs/reports", "run"),
    ("/costs/reports", "attempt"),
    ("/events", "attempt"),
    ("/events", "since"),  # an ISO time or an event id
    ("/friction", "since"),
]


def test_the_query_numbers_tried_are_every_integer_query_parameter() -> None:
    schema = _schema()
    integers = {
        (path.removeprefix(API), p["name"])
        for path, operations in schema["paths"].items()
        for operation in operations.values()
        if isinstance(operation, dict)
        for p in operation.get("parameters", [])
        if p["in"] == "query" and p.get("schema", {}).get("type") == "integer"
    }
    assert integers <= set(QUERY_NUMBERS)


@pytest.mark.parametrize(("path", "param"), QUERY_NUMBERS)
def test_a_query_number_that_is_not_ascii_digits_is_a_validation_error(
    boss: Api, world: dict[str, Any], path: str, param: str
) -> None:
    url = filled(path, world)
    accepted = []
    for value in HOSTILE_TEXT:
        if value == "":
            continue  # an empty parameter is an absent one
        response = boss.get(url, {param: value})
        if response.status_code != 400:
            accepted.append((value, response.status_code))
            continue
        assert param in error_of(response, 400, "validation_error")["fields"], value
    assert accepted == []


def cursor(position: str) -> str:
    """A cursor as DRF encodes one (base64 of a query string), at `position`."""
    return base64.b64encode(f"p={quote(position)}".encode()).decode()


@pytest.mark.parametrize("position", ["١٢", "²", "１２", "1_2", " 12", "+12", "12\n"])
def test_a_cursor_whose_position_is_not_ascii_digits_is_refused(
    boss: Api, world: dict[str, Any], position: str
) -> None:
    response = boss.get("/events", {"cursor": cursor(position)})
    assert "cursor" in error_of(response, 400, "validation_error")["fields"]


def test_a_cursor_this_server_gave_out_still_pages(boss: Api, world: dict[str, Any]) -> None:
    first = boss.get("/events", {"limit": 1})
    assert first.status_code == 200
    following = boss.get("/events", {"limit": 1, "cursor": first["X-Next-Cursor"]})
    assert following.status_code == 200
    assert following.json()[0]["id"] < first.json()[0]["id"]


def test_an_id_in_the_path_in_other_digits_names_nothing(boss: Api, world: dict[str, Any]) -> None:
    arabic = str(world["run_id"]).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    assert boss.get(f"/runs/{world['run_id']}").status_code == 200
    error_of(boss.get(f"/runs/{arabic}"), 404, "not_found")


@pytest.mark.parametrize(
    ("path", "param"),
    [("/costs", "since"), ("/costs", "until"), ("/events", "since"), ("/friction", "since")],
)
@pytest.mark.parametrize(
    "when",
    [
        "٢٠٣٠-٠١-٠١T١٢:٠٠:٠٠Z",  # Django's parse_datetime reads these digits (its \d)
        "２０３０-01-01T12:00:00Z",
        "2030-01-01T12:00:00\u00a0Z",
    ],
)
def test_a_time_in_a_query_is_ascii_or_refused(
    boss: Api, world: dict[str, Any], path: str, param: str, when: str
) -> None:
    assert boss.get(path, {param: "2030-01-01T12:00:00Z"}).status_code == 200
    assert param in error_of(boss.get(path, {param: when}), 400, "validation_error")["fields"]
