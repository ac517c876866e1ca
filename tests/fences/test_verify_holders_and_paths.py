"""`POST /api/v1/fences/verify` with the trailer's holder (`<resource>@<fence> <holder>`: a
current fence of another holder answers `not_holder`) and with `paths` (who holds each file
now, and the caller's own lapsed tenure over it: what `gctl git pre-commit` refuses)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from leases import clock, verification
from leases.models import FenceVerification
from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db


def acquire(api: Api, resource: str, *, ttl_s: float = 60, mode: str = "exclusive") -> int:
    answer = api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": ttl_s, "process_id": "p", "mode": mode}
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["fence"]


def verify(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    answer = api.post("/fences/verify", body)
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_a_fence_naming_its_holder_is_current_only_for_that_holder(api_a: Api) -> None:
    fence = acquire(api_a, "src/")
    body = verify(api_a, {"fences": [f"src/@{fence} hand-a", f"src/@{fence} hand-b", "src/@1"]})
    assert [(f["fence"], f["named_holder"], f["status"]) for f in body["fences"]] == [
        (f"src/@{fence}", "hand-a", "current"),
        (f"src/@{fence}", "hand-b", "not_holder"),
        (f"src/@{fence}", "", "current"),
    ]
    assert body["fences"][1]["holder"] == "hand-a"
    assert not body["all_current"]
    assert body["paths"] == []
    statuses = sorted(FenceVerification.objects.values_list("status", flat=True))
    assert statuses == ["current", "current", "not_holder"]


def test_a_holder_is_read_back_from_its_escaped_word(api_a: Api) -> None:
    fence = acquire(api_a, "src/")
    [answer] = verify(api_a, {"fences": [f"src/@{fence} {verification.holder_text('hand a@x')}"]})[
        "fences"
    ]
    assert (answer["named_holder"], answer["status"]) == ("hand a@x", "not_holder")


def test_paths_say_who_holds_them_now(api_a: Api, api_b: Api, api_outsider: Api) -> None:
    src = acquire(api_a, "src/")
    lib = acquire(api_b, "lib/x.py", mode="shared")
    body = verify(api_b, {"paths": ["src/a/b.py", "lib/x.py", "docs/none.md"]})
    assert body["fences"] == [] and body["all_current"]
    held = {p["path"]: p["held"] for p in body["paths"]}
    assert held == {
        "src/a/b.py": [
            {
                "resource": "src/",
                "fence": src,
                "holder": "hand-a",
                "mode": "exclusive",
                "state": "live",
            }
        ],
        "lib/x.py": [
            {
                "resource": "lib/x.py",
                "fence": lib,
                "holder": "hand-b",
                "mode": "shared",
                "state": "live",
            }
        ],
        "docs/none.md": [],
    }
    assert all(p["lapsed"] is None for p in body["paths"])
    # Another workspace's leases are never described.
    assert verify(api_outsider, {"paths": ["src/a/b.py"]})["paths"][0]["held"] == []


def test_a_path_under_the_callers_own_lost_lease_is_lapsed_until_it_takes_it_again(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    old = acquire(api_a, "src/", ttl_s=10)
    clock.advance(11)
    [lost] = verify(api_a, {"paths": ["src/app.py"]})["paths"]
    assert lost["held"] == []  # a lost tenure holds nothing
    assert lost["lapsed"]["fence"] == old and lost["lapsed"]["ended"] == "lost"
    new = acquire(api_b, "src/")
    api_b.post("/leases/release", {"resource": "src/", "fence": new})
    [after] = verify(api_a, {"paths": ["src/app.py"]})["paths"]
    assert after["lapsed"] == {
        "resource": "src/",
        "fence": old,
        "ended": "lost",
        "when": "2030-01-01T12:00:10+00:00",
    }
    # Only the caller's own: B released cleanly.
    assert verify(api_b, {"paths": ["src/app.py"]})["paths"][0]["lapsed"] is None
    acquire(api_a, "src/app.py")
    assert verify(api_a, {"paths": ["src/app.py"]})["paths"][0]["lapsed"] is None


@pytest.mark.parametrize(
    "body",
    [
        {"paths": []},
        {"paths": "src/a.py"},
        {"paths": ["/src/a.py"]},
        {"paths": ["src/\u0000"]},
        {"paths": [7]},
        {"paths": ["a"] * (verification.MAX_PATHS + 1)},
        {"fences": ["src/@1 hand\u0001b"], "paths": ["a"]},
    ],
)
def test_bad_paths_are_a_validation_error_and_record_nothing(api_a: Api, body: Any) -> None:
    error = error_of(api_a.post("/fences/verify", body), 400, "validation_error")
    assert set(error["fields"]) & {"paths", "fences"}
    assert not FenceVerification.objects.exists()
