"""The run page's scrubber takes `t` (seconds since the epoch, ASCII digits) and clamps it to
the run's span: any number, however far past or future, and any garbage, answers the page (a
`t` past year 9999 is no datetime: it is clamped as a number first)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

PAST_9999 = ["253402300800", str(2**39), str(2**40 - 1)]


@pytest.mark.parametrize("t", PAST_9999)
@pytest.mark.parametrize("view", ["run-replay", "run-timeline"])
def test_a_moment_past_year_9999_shows_the_runs_end(
    supervisor_client: Any, make_run: Any, view: str, t: str
) -> None:
    run = make_run()
    supervisor_client.raise_request_exception = False
    response = supervisor_client.get(reverse(view, args=[run.pk]), {"t": t})
    assert response.status_code == 200, (view, t, response.status_code)


@pytest.mark.parametrize("t", ["0", "1", "-5", "abc", "1e9", "２０", "9" * 30, ""])
def test_far_past_and_garbage_moments_answer_the_page(
    supervisor_client: Any, make_run: Any, t: str
) -> None:
    run = make_run()
    supervisor_client.raise_request_exception = False
    response = supervisor_client.get(reverse("run-replay", args=[run.pk]), {"t": t})
    assert response.status_code == 200, (t, response.status_code)
