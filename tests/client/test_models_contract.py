"""The client's wire models read the server's contract: each model parses an answer made from its
schema component (every property, each of its type), and every field it reads, at any depth, is
a property the schema has, so the client never waits for a field the server does not send."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from groundcontrol_client.core import (
    costs,
    friction,
    grades,
    handoff_calls,
    handoffs,
    models,
    people,
    records,
)
from groundcontrol_client.core import plans as plan_models
from groundcontrol_client.core import schedules as schedule_models

# (what the client parses, the schema components it parses: an answer of any of them)
MODELS: list[tuple[Callable[[Any], Any], tuple[str, ...]]] = [
    (models.SlotLease.from_wire, ("AttemptLeaseOut",)),
    (models.Attempt.from_wire, ("AttemptOut", "FinishedOut", "ClaimOut")),
    (models.Lease.from_wire, ("LeaseOut", "PoolLeaseOut", "RenewedLeaseOut")),
    (models.FenceAnswer.from_wire, ("FenceAnswerOut",)),
    (models.Released.from_wire, ("ReleasedOut",)),
    (models.Checked.from_wire, ("CheckOut",)),
    (models.FencesVerified.from_wire, ("FencesVerifyOut",)),
    (models.RenewedAll.from_wire, ("RenewedAllOut",)),
    (models.Slot.from_wire, ("SlotOut",)),
    (models.Run.from_wire, ("RunOut",)),
    (models.Me.from_wire, ("MeOut",)),
    (models.Brief.from_wire, ("BriefOut",)),
    (models.ReportResult.from_wire, ("ReportOut",)),
    (handoffs.PendingHandoff.from_wire, ("PendingHandoffOut",)),
    (handoffs.Handoff.from_wire, ("HandoffOut",)),
    (handoff_calls.Granted.from_wire, ("GrantedOut",)),
    (schedule_models.Schedule.from_wire, ("ScheduleOut",)),
    (schedule_models.ScheduleTry.from_wire, ("TryOut",)),
    (schedule_models.GitHubIntegration.from_wire, ("IntegrationOut", "IssuedIntegrationOut")),
    (friction.FrictionReport.from_wire, ("FrictionOut",)),
    (grades.Attestation.from_wire, ("AttestationOut", "AttestedOut")),
    (grades.GradedEvidence.from_wire, ("EvidenceOut",)),
    (costs.CostReport.from_wire, ("CostReportOut",)),
    (costs.ReportVoided.from_wire, ("ReportVoidOut",)),
    (plan_models.LaneRecord.from_wire, ("LaneOut",)),
    (plan_models.WorkPackage.from_wire, ("WorkPackageOut",)),
    (plan_models.TimelineEntry.from_wire, ("TimelineEntryOut",)),
    (people.HandRecord.from_wire, ("HandOut",)),
    (people.KeyRecord.from_wire, ("KeyOut", "IssuedKeyOut")),
    (people.IssuedKey.from_wire, ("IssuedKeyOut",)),
    (records.Refusal.from_wire, ("RefusalOut",)),
    (records.Event.from_wire, ("EventOut",)),
    (records.Costs.from_wire, ("CostsOut",)),
    (records.Budget.from_wire, ("BudgetOut",)),
]


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


# A model that parses several answers (a lease, a pool's lease, a renewed lease) may look for a
# field that only some of them have, wherever one of them is nested.
FAMILIES = {name: names for _, names in MODELS for name in names}


def _resolve(node: dict[str, Any], components: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The schema `node` stands for, and the name of the component it is (or "")."""
    name = ""
    while True:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            node = components[name]
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        elif "oneOf" in node or "anyOf" in node:
            options = node.get("oneOf") or node.get("anyOf")
            node = next(o for o in options if o.get("type") != "null" and o != {"enum": [None]})
        else:
            return node, name


def example(node: dict[str, Any], components: dict[str, Any]) -> Any:
    """A value of `node`'s schema: every property of an object, one item of a list."""
    node, _ = _resolve(node, components)
    if "enum" in node:
        return next(value for value in node["enum"] if value is not None)
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        return {name: example(sub, components) for name, sub in node.get("properties", {}).items()}
    if kind == "array":
        return [example(node.get("items", {}), components)]
    if kind == "integer":
        return 3
    if kind == "number":
        return 2.5
    if kind == "boolean":
        return True
    if kind == "string" and node.get("format") == "decimal":
        return "1.250000"  # money: a decimal string
    if kind == "string":
        return "2026-12-04T01:02:03+00:00" if node.get("format") == "date-time" else "text"
    return {}


class Reading(dict):  # type: ignore[type-arg]
    """An answer that notes every field read from it (paths like `lease.resource`)."""

    def __init__(self, data: dict[str, Any], path: str, read: set[str]) -> None:
        super().__init__({k: _wrap(v, f"{path}{k}.", read) for k, v in data.items()})
        self.path, self.read = path, read

    def __getitem__(self, key: str) -> Any:
        self.read.add(self.path + key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(self.path + key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(f"{self.path}{key}")
        return super().__contains__(key)


def _wrap(value: Any, path: str, read: set[str]) -> Any:
    if isinstance(value, dict):
        return Reading(value, path, read)
    if isinstance(value, list):
        return [_wrap(item, path + "[].", read) for item in value]
    return value


def _in_schema(path: str, node: dict[str, Any], components: dict[str, Any], name: str) -> bool:
    for step in path.split("."):
        node, named = _resolve(node, components)
        name = named or name
        if step == "[]":
            node, name = node.get("items", {}), ""
            continue
        family = [components[n] for n in FAMILIES.get(name, ())] or [node]
        having = [c["properties"][step] for c in family if step in c.get("properties", {})]
        if step in node.get("properties", {}):
            node = node["properties"][step]
        elif having:
            node = having[0]
        else:
            return False
        name = ""
    return True


def _named(parse: Callable[[Any], Any]) -> str:
    """`Attempt.from_wire` (the models share one `from_wire`: its own name is its base's)."""
    return f"{parse.__self__.__name__}.{parse.__name__}"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("parse", "names"), MODELS, ids=[_named(parse) for parse, _ in MODELS])
def test_each_model_reads_only_what_its_schema_answers(
    parse: Callable[[Any], Any], names: tuple[str, ...], components: dict[str, Any]
) -> None:
    for name in names:
        read: set[str] = set()
        assert parse(Reading(example(components[name], components), "", read)) is not None
        unknown = {p for p in read if not _in_schema(p, components[name], components, name)}
        assert not unknown, f"{_named(parse)} reads what {name} never has: {sorted(unknown)}"
        assert read


def test_the_reading_notes_a_field_the_schema_does_not_have(components: dict[str, Any]) -> None:
    # The check itself: a model that looked for a field of no answer would be caught.
    read: set[str] = set()
    slot = components["SlotOut"]
    Reading(example(slot, components), "", read).get("last_holder")
    assert "last_holder" in read and not _in_schema("last_holder", slot, components, "SlotOut")
    assert not _in_schema("lease.pool", components["AttemptOut"], components, "AttemptOut")
    assert _in_schema("renewed.[].pool", components["RenewedAllOut"], components, "RenewedAllOut")
