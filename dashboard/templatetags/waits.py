"""The run page's part of runs that wait for runs: what the run waits for and which runs wait for
it, each linked with its state (two queries, whatever the run's attempts)."""

from __future__ import annotations

from dataclasses import dataclass

from django import template

from fleet.models import Run
from fleet.plan import dependencies

register = template.Library()


@dataclass(frozen=True)
class RunWaits:
    depends_on: list[dependencies.Dependency]
    dependents: list[dependencies.Dependency]

    @property
    def waiting_for(self) -> list[dependencies.Dependency]:
        return dependencies.waiting_for(self.depends_on)

    @property
    def closed(self) -> list[dependencies.Dependency]:
        """The runs it waits for that a supervisor closed: nothing will make them done."""
        return [other for other in self.waiting_for if other.closed]


@register.simple_tag
def run_waits(run: Run) -> RunWaits:
    """What `run` depends on (ascending) and the runs that depend on it."""
    return RunWaits(
        depends_on=dependencies.dependencies_of([run.pk]).get(run.pk, []),
        dependents=dependencies.dependents_of(run.pk),
    )
