"""The wire models of pools and waiters read the server's contract, as every model of the client
does (tests/client/test_models_contract.py): each parses an answer made from its schema component
(every property, each of its type), and every field it reads is a property the schema has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from groundcontrol_client.core import pools

from tests.client.test_models_contract import Reading, _in_schema, example

MODELS: list[tuple[Callable[[Any], Any], str]] = [
    (pools.PoolRecord.from_wire, "PoolOut"),
    (pools.PoolMember.from_wire, "PoolMemberOut"),
    (pools.Waiter.from_wire, "WaiterOut"),
]


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


@pytest.mark.parametrize(("parse", "name"), MODELS, ids=[name for _, name in MODELS])
def test_each_model_reads_only_what_its_schema_answers(
    parse: Callable[[Any], Any], name: str, schemas: dict[str, Any]
) -> None:
    read: set[str] = set()
    parsed = parse(Reading(example(schemas[name], schemas), "", read))
    assert parsed is not None and read
    unknown = {path for path in read if not _in_schema(path, schemas[name], schemas, name)}
    assert not unknown, f"{name}: read but never answered: {sorted(unknown)}"


def test_a_pool_reads_each_member_of_its_answer(schemas: dict[str, Any]) -> None:
    read: set[str] = set()
    pool = pools.PoolRecord.from_wire(Reading(example(schemas["PoolOut"], schemas), "", read))
    assert len(pool.members) == 1 and pool.members[0].member == "text"
    assert "members.[].holder" in read and "members.[].expires_in_s" in read
