"""Changes of dependencies at once, each on its own PostgreSQL connection, can never together
close a cycle: the workspace's changes take turns (a transaction-scoped advisory lock), and each
walks the graph with every change committed before it."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from apikit.errors import GroundControlError
from fleet.models import RunDependency
from fleet.plan import dependencies
from fleet.plan import services as plan_services
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def _acyclic(workspace_id: int) -> bool:
    onward: dict[int, set[int]] = {}
    for run, other in RunDependency.objects.filter(workspace_id=workspace_id).values_list(
        "run_id", "depends_on_id"
    ):
        onward.setdefault(run, set()).add(other)
    state: dict[int, int] = {}

    def visit(node: int) -> bool:
        state[node] = 1
        for nxt in onward.get(node, ()):
            if state.get(nxt) == 1 or (nxt not in state and not visit(nxt)):
                return False
        state[node] = 2
        return True

    return all(node in state or visit(node) for node in list(onward))


def _setter(workspace_id: int, run_id: int, depends_on: list[int], outcomes: list[Any]) -> Any:
    lock = threading.Lock()

    def body() -> None:
        try:
            plan_services.run_update(
                workspace_id=workspace_id, run_id=run_id, depends_on=depends_on
            )
            result: Any = "ok"
        except GroundControlError as error:
            result = error.code
        with lock:
            outcomes.append((run_id, result))

    return body


def test_two_patches_that_would_close_a_cycle_never_both_pass(workspace: Any, lane: Any) -> None:
    package, _ = plan_services.work_package_create(lane=lane, key="p", title="P")
    for round_ in range(15):
        a = plan_services.run_create(work_package=package, title=f"a{round_}")
        b = plan_services.run_create(work_package=package, title=f"b{round_}")
        outcomes: list[Any] = []
        crashes = together(
            [
                _setter(workspace.pk, a.pk, [b.pk], outcomes),
                _setter(workspace.pk, b.pk, [a.pk], outcomes),
            ]
        )
        assert not crashes, crashes
        results = sorted(result for _, result in outcomes)
        assert results == ["dependency_cycle", "ok"], results
        assert _acyclic(workspace.pk)


def test_a_ring_patched_at_once_is_never_closed(workspace: Any, lane: Any) -> None:
    """Eight runs each told at once to wait for the next (the last for the first): every edge but
    the ring's last can pass, whichever order the lock gives them."""
    package, _ = plan_services.work_package_create(lane=lane, key="ring", title="Ring")
    for round_ in range(4):
        ring = [
            plan_services.run_create(work_package=package, title=f"r{round_}-{i}") for i in range(8)
        ]
        outcomes: list[Any] = []
        bodies = [
            _setter(workspace.pk, run.pk, [nxt.pk], outcomes)
            for run, nxt in itertools.pairwise([*ring, ring[0]])
        ]
        crashes = together(bodies)
        assert not crashes, crashes
        assert sorted(result for _, result in outcomes) == ["dependency_cycle"] + ["ok"] * 7
        assert _acyclic(workspace.pk)


def test_without_the_lock_two_patches_would_both_pass(
    monkeypatch: pytest.MonkeyPatch, workspace: Any, lane: Any
) -> None:
    """The lock is what the proof rests on: with it taken away, two changes that each walk the
    graph before the other commits both pass, and close a cycle (so the tests above can fail)."""
    package, _ = plan_services.work_package_create(lane=lane, key="p", title="P")
    a = plan_services.run_create(work_package=package, title="a")
    b = plan_services.run_create(work_package=package, title="b")
    checked = threading.Barrier(2)
    real = dependencies.refuse_cycle

    def unlocked(**kwargs: Any) -> None:
        real(**kwargs)
        checked.wait(10)  # both have walked the graph before either writes

    monkeypatch.setattr(dependencies, "lock_dependencies", lambda **kwargs: None)
    monkeypatch.setattr(dependencies, "refuse_cycle", unlocked)
    outcomes: list[Any] = []
    crashes = together(
        [
            _setter(workspace.pk, a.pk, [b.pk], outcomes),
            _setter(workspace.pk, b.pk, [a.pk], outcomes),
        ]
    )
    assert not crashes, crashes
    assert sorted(result for _, result in outcomes) == ["ok", "ok"]
    assert not _acyclic(workspace.pk)
