"""Runs that wait for runs: a run's `depends_on` (`fleet.models.RunDependency`), what it waits for,
and the one rule that says so.

The rule: a run waits while any run it depends on is not done (`RunState.DONE`, its last slot
finished). It is written once, as SQL over a run's row (`waits_sql`): the claim's one statement
checks it (`fleet.attempts.services.dependency_guard`) and the ready queue filters by it
(`fleet.plan.selectors.runs_of_workspace`); the Python reads (`waiting_for`) apply `is_done`,
the same comparison, to the states one query loaded.

No cycle: a run never waits, through any chain, for itself. A new run names only runs that exist
before it, so creating one cannot close a cycle; changing a run's dependencies can, so every
change in a workspace takes the workspace's advisory lock first (`lock_dependencies`), then
walks the graph as committed (`find_cycle`, a recursive CTE) and writes in the same
transaction. Two changes that would together close a cycle (A -> B and B -> A) take turns, and
the second walks the graph with the first's edge in it."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection
from django.db.models import OuterRef, QuerySet
from django.db.models.functions import JSONObject

from apikit.errors import ValidationFailed
from fleet.errors import DependencyCycle
from fleet.models import MAX_PRIORITY, Run, RunDependency, RunState

# A run names at most this many runs it waits for (the API's `depends_on`).
MAX_DEPENDENCIES = 20
# Ids are 64-bit: a larger number names no run (and PostgreSQL could not compare it).
MAX_RUN_ID = 2**63 - 1

_RUN = Run._meta.db_table
_DEPENDENCY = RunDependency._meta.db_table


def waits_sql(run_column: str, workspace_column: str) -> str:
    """SQL true while the run whose id is `run_column` (of workspace `workspace_column`) waits:
    a run it depends on is not done. The rule's one definition (see the module)."""
    return (
        f"EXISTS (SELECT 1 FROM {_DEPENDENCY} wait_dep JOIN {_RUN} wait_on "
        "ON wait_on.id = wait_dep.depends_on_id AND wait_on.workspace_id = wait_dep.workspace_id "
        f"WHERE wait_dep.workspace_id = {workspace_column} AND wait_dep.run_id = {run_column} "
        f"AND wait_on.state <> '{RunState.DONE.value}')"
    )


def is_done(state: str) -> bool:
    """`waits_sql`'s comparison, for a state already read."""
    return state == RunState.DONE


def validate_priority(value: object) -> int:
    """A run's priority: a whole number from 0 (first) to MAX_PRIORITY, nothing else."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise ValidationFailed(
            f"priority must be an integer from 0 (first) to {MAX_PRIORITY}",
            fields={"priority": [f"An integer from 0 to {MAX_PRIORITY}."]},
        )
    return value


def validate_depends_on(
    value: object, *, workspace_id: int, lane_id: int | None = None
) -> list[int]:
    """The ids of the runs `value` names, ascending: at most MAX_DEPENDENCIES, none twice, each
    a run of the workspace that the caller can see (a lane-limited key: its lane's). A run the
    caller cannot see is named as one that does not exist."""
    if value is None:
        return []
    if (
        not isinstance(value, list)
        or len(value) > MAX_DEPENDENCIES
        or not all(
            isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= MAX_RUN_ID
            for item in value
        )
    ):
        raise ValidationFailed(
            f"depends_on must be a list of at most {MAX_DEPENDENCIES} run ids",
            fields={"depends_on": [f"A list of at most {MAX_DEPENDENCIES} run ids."]},
        )
    twice = sorted({item for item in value if value.count(item) > 1})
    if twice:
        raise ValidationFailed(
            f"depends_on names run {', '.join(map(str, twice))} more than once",
            fields={"depends_on": [f"Run {twice[0]} is named more than once."]},
        )
    found = set(
        Run.objects.in_lane(lane_id)
        .filter(workspace_id=workspace_id, pk__in=value)
        .values_list("pk", flat=True)
    )
    unknown = sorted(set(value) - found)
    if unknown:
        said = ", ".join(map(str, unknown))
        raise ValidationFailed(
            f"depends_on names no run {said}: each must be a run of this workspace",
            fields={"depends_on": [f"No run {said}."]},
        )
    return sorted(value)


def lock_dependencies(*, workspace_id: int) -> None:
    """Serialise the workspace's changes of dependencies until the transaction ends (a
    transaction-scoped advisory lock): the cycle check and the write that follow it see every
    change committed before, and no other change is on its way."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext('gc-run-deps'), hashtext(CAST(%s AS text)))",
            [workspace_id],
        )


# The edges reachable from the runs a change names, walking `depends_on` as committed, except
# out of the changed run itself (its own edges are the ones being replaced). UNION, not UNION
# ALL: each run is visited once, however many paths reach it.
_REACHABLE_EDGES = (
    "WITH RECURSIVE reach(id) AS ("
    "SELECT unnest(CAST(%(named)s AS bigint[])) "
    f"UNION SELECT d.depends_on_id FROM reach JOIN {_DEPENDENCY} d "
    "ON d.run_id = reach.id AND d.workspace_id = %(workspace_id)s "
    "WHERE reach.id <> %(run_id)s) "
    f"SELECT d.run_id, d.depends_on_id FROM {_DEPENDENCY} d "
    "WHERE d.workspace_id = %(workspace_id)s AND d.run_id <> %(run_id)s "
    "AND d.run_id IN (SELECT id FROM reach)"
)


def find_cycle(*, workspace_id: int, run_id: int, depends_on: list[int]) -> list[int] | None:
    """The shortest cycle that `run_id` depending on `depends_on` would close, as the runs from
    `run_id` back to it ([12, 10, 12]), or None. One query: the edges reachable from
    `depends_on`; then a breadth-first walk of them from `depends_on` to `run_id`."""
    if run_id in depends_on:
        return [run_id, run_id]
    if not depends_on:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            _REACHABLE_EDGES,
            {"named": depends_on, "workspace_id": workspace_id, "run_id": run_id},
        )
        edges = cursor.fetchall()
    onward: dict[int, list[int]] = {}
    for source, target in edges:
        onward.setdefault(source, []).append(target)
    came_from: dict[int, int] = {start: run_id for start in depends_on}
    pending = deque(sorted(depends_on))
    while pending:
        at = pending.popleft()
        for target in sorted(onward.get(at, [])):
            if target == run_id:
                path = [run_id, at]
                while came_from[path[-1]] != run_id:
                    path.append(came_from[path[-1]])
                return [run_id, *reversed(path[1:]), run_id]
            if target not in came_from:
                came_from[target] = at
                pending.append(target)
    return None


def refuse_cycle(
    *, workspace_id: int, run_id: int, depends_on: list[int], lane_id: int | None = None
) -> None:
    """`dependency_cycle` if `run_id` depending on `depends_on` would close a cycle, naming it
    ("run 12 -> run 10 -> run 12", `cycle` [12, 10, 12]). To a lane-limited caller (`lane_id`)
    a run of another lane is counted, never named (as `Dependency.seen`): "a run of another
    lane" in the sentence, null in `cycle`, and so in the refusal recorded."""
    cycle = find_cycle(workspace_id=workspace_id, run_id=run_id, depends_on=depends_on)
    if cycle is None:
        return
    seen = set(
        Run.objects.in_lane(lane_id)
        .filter(workspace_id=workspace_id, pk__in=cycle)
        .values_list("pk", flat=True)
    )
    shown = [run if run in seen else None for run in cycle]
    said = " -> ".join("a run of another lane" if run is None else f"run {run}" for run in shown)
    raise DependencyCycle(
        f"run {run_id} cannot wait for that: it would wait for itself ({said}); nothing "
        "was changed",
        cycle=shown,
    )


def dependencies_write(*, workspace_id: int, run_id: int, depends_on: list[int]) -> list[int]:
    """Make `depends_on` the run's dependencies (in the caller's transaction, under the run's
    row lock); answers the ones it had, in order."""
    had = sorted(
        RunDependency.objects.filter(workspace_id=workspace_id, run_id=run_id).values_list(
            "depends_on_id", flat=True
        )
    )
    RunDependency.objects.filter(workspace_id=workspace_id, run_id=run_id).exclude(
        depends_on_id__in=depends_on
    ).delete()
    RunDependency.objects.bulk_create(
        [
            RunDependency(workspace_id=workspace_id, run_id=run_id, depends_on_id=other)
            for other in depends_on
        ],
        ignore_conflicts=True,
    )
    return had


@dataclass(frozen=True)
class Dependency:
    """A run another waits for (or that waits for another), as a page or an answer shows it.
    `seen` is False for a run of another lane, shown to a lane-limited caller: it is counted,
    never named (docs/api.md, "Lanes")."""

    run_id: int
    title: str
    state: str
    lane_id: int
    seen: bool = True

    @property
    def done(self) -> bool:
        return is_done(self.state)

    @property
    def closed(self) -> bool:
        """Closed by a supervisor before it was done: a run waiting for it waits until it is
        reopened (its slots then finished) or no longer waited for."""
        return self.seen and self.state == RunState.CLOSED

    def as_waiting(self) -> dict[str, object]:
        """An entry of a `run_waiting` refusal's `waiting_for`."""
        if not self.seen:
            return {"run": None, "title": None, "state": None}
        return {"run": self.run_id, "title": self.title, "state": self.state}

    def said(self) -> str:
        if not self.seen:
            return "a run of another lane"
        return f"run {self.run_id} {self.title!r} ({self.state})"


def _dependencies(
    pairs: Iterable[tuple[int, int, str, str, int]], lane_id: int | None
) -> dict[int, list[Dependency]]:
    found: dict[int, list[Dependency]] = {}
    for key, other, title, state, other_lane in pairs:
        found.setdefault(key, []).append(
            Dependency(
                run_id=other,
                title=title,
                state=state,
                lane_id=other_lane,
                seen=lane_id is None or other_lane == lane_id,
            )
        )
    for listed in found.values():  # ascending by id; a run of another lane last, unnamed
        listed.sort(key=lambda dependency: (not dependency.seen, dependency.run_id))
    return found


def annotated(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs`, each with what it depends on (`dependency_rows`) read by the same query, so a
    page of runs costs no query more (`from_rows`)."""
    rows = (
        RunDependency.objects.filter(run_id=OuterRef("pk"))
        .order_by("depends_on_id")
        .values(
            row=JSONObject(
                run="depends_on_id",
                title="depends_on__title",
                state="depends_on__state",
                lane="depends_on__work_package__lane_id",
            )
        )
    )
    return runs.annotate(dependency_rows=ArraySubquery(rows))


def from_rows(run: Run, *, lane_id: int | None = None) -> list[Dependency] | None:
    """What `run` depends on, as `annotated` read it (None if it was not)."""
    rows = getattr(run, "dependency_rows", None)
    if rows is None:
        return None
    pairs = [(run.pk, r["run"], r["title"], r["state"], r["lane"]) for r in rows]
    return _dependencies(pairs, lane_id).get(run.pk, [])


def dependencies_of(
    run_ids: list[int], *, lane_id: int | None = None
) -> dict[int, list[Dependency]]:
    """What each of `run_ids` depends on, ascending by id (one query for a page of runs).
    `lane_id`: the caller's lane, for a lane-limited caller (other lanes' runs unseen)."""
    pairs = (
        RunDependency.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "depends_on_id")
        .values_list(
            "run_id",
            "depends_on_id",
            "depends_on__title",
            "depends_on__state",
            "depends_on__work_package__lane_id",
        )
    )
    return _dependencies(pairs, lane_id)


def dependents_of(run_id: int, *, lane_id: int | None = None) -> list[Dependency]:
    """The runs that depend on `run_id`, ascending by id (one query)."""
    pairs = (
        RunDependency.objects.filter(depends_on_id=run_id)
        .order_by("run_id")
        .values_list(
            "depends_on_id", "run_id", "run__title", "run__state", "run__work_package__lane_id"
        )
    )
    return _dependencies(pairs, lane_id).get(run_id, [])


def waiting_for(dependencies: list[Dependency]) -> list[Dependency]:
    """Of a run's dependencies, those not done: what it waits for."""
    return [dependency for dependency in dependencies if not dependency.done]


def ids(dependencies: list[Dependency]) -> list[int | None]:
    """The runs' ids as an answer lists them: ascending, a run of another lane as null (last)."""
    seen = sorted(d.run_id for d in dependencies if d.seen)
    return [*seen, *([None] * sum(1 for d in dependencies if not d.seen))]


def said_waiting(run_id: int, waiting: list[Dependency]) -> str:
    """ "run 12 waits for run 10 'build' (open) and run 11 'lint' (open): its slots take claims
    when they are done; pick other work"."""
    named = [dependency.said() for dependency in waiting]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + f" and {named[-1]}"
    when = "it is" if len(named) == 1 else "they are"
    return (
        f"run {run_id} waits for {listed}: its slots take claims when {when} done; pick other work"
    )
