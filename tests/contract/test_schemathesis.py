"""Every endpoint of the OpenAPI schema fuzzed by schemathesis: no 5xx, and every answer (status,
content type, body) is one the schema documents.

Bounded for CI (GC_FUZZ_EXAMPLES per operation, 12 by default); a longer run sets it higher:

    GC_FUZZ_EXAMPLES=500 scripts/test tests/contract/test_schemathesis.py
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from django.test import override_settings
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleet.attempts import services as attempt_services
from groundcontrol.wsgi import application
from hands import services as hand_services
from tests.reliability.live import ROOT

pytestmark = pytest.mark.hostile

EXAMPLES = int(os.environ.get("GC_FUZZ_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)
TRIED: Counter[str] = Counter()  # requests sent, by status class, and 429s (docs/reliability.md)


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    path = ROOT / "test-artifacts" / "hostile-schemathesis.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "examples_per_operation": EXAMPLES,
                "requests": dict(TRIED),
                "operations": len(list(schema.get_all_operations())),
            }
        )
    )


@pytest.fixture
def world(workspace, make_run, owner) -> Iterator[dict[str, str]]:  # noqa: ANN001
    """A key with every scope, and real objects for the fuzzer's ids to land on now and then:
    run 1's slots, an attempt, a lane, a hand, a held lease."""
    boss, _ = hand_services.hand_create(workspace=workspace, name="fuzz-boss")
    key = hand_services.key_issue(
        hand=boss, scopes=hand_services.ALL_SCOPES, actor="test"
    ).plaintext
    run = make_run(slots=3)
    attempt_services.attempt_claim(hand=boss, run_id=run.pk, process_id="fuzz")
    # The fuzzer's counts per minute are its own business; 429 has its own tests. Its unknown
    # paths count as unauthenticated calls of one address (apikit.ratelimit): left on, that
    # limit would answer 429 to most of a long run, and the run would test nothing else.
    with override_settings(GC_RATE_LIMIT_PER_MINUTE=0, GC_UNAUTHENTICATED_PER_MINUTE=0):
        yield {"Authorization": f"Bearer {key}"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
# Real commits: a database error in one request must show as that request's answer, not poison
# the next one through a shared test transaction.
@pytest.mark.django_db(transaction=True)
def test_it_never_answers_5xx_and_every_answer_matches_the_schema(case, world) -> None:  # noqa: ANN001
    response = case.call(headers=world)
    TRIED[f"{response.status_code // 100}xx"] += 1
    if response.status_code == 429:
        TRIED["429"] += 1
    case.validate_response(response, checks=CHECKS)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/lanes/a%0Ab/work-packages",
        "/runs/1%0A/slots",
        "/hands/a%0Ab/keys",
        "/attempts/%0A",
        "/no/such%0Athing",
    ],
)
def test_a_path_with_a_newline_answers_the_uniform_404(boss, path: str) -> None:  # noqa: ANN001
    """Found by the long run: a newline in a path parameter matched no API route, not even the
    catch-all (`.` does not match a newline), so Django's HTML 404 page answered under the API."""
    from tests.support.api import error_of

    for response in (boss.get(path), boss.post(path, {})):
        assert response["Content-Type"] == "application/json", response.content[:200]
        error_of(response, 404, "not_found")
