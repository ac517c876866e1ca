"""The client's limits are the server's: every limit the client keeps to
(`groundcontrol_client.core.limits.LIMITS`) is in the schema's `x-limits` (from
`groundcontrol.limits`), with the same value; and the schema says what each limit means."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from groundcontrol_client.core.limits import LIMITS

from groundcontrol.limits import limits


@pytest.fixture(scope="module")
def schema_limits() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["x-limits"]


def test_the_schema_carries_every_limit_the_server_enforces(schema_limits) -> None:
    assert {name: spec["value"] for name, spec in schema_limits.items()} == {
        name: value for name, (value, _) in limits().items()
    }
    assert all(spec["description"] for spec in schema_limits.values())


def test_every_client_limit_is_the_servers(schema_limits) -> None:
    assert {name: schema_limits[name]["value"] for name in LIMITS if name in schema_limits} == (
        LIMITS
    )


def test_the_mcp_tools_say_the_servers_limits(schema_limits) -> None:
    from groundcontrol_client.mcp import parameters as mcp_parameters

    assert mcp_parameters.MAX_TEXT == schema_limits["reason_length"]["value"]
    assert mcp_parameters.MAX_RESOURCE == schema_limits["resource_length"]["value"]
    assert mcp_parameters.MAX_WAIT_S == schema_limits["wait_s"]["value"]
