"""The client package's dependencies are ranges (it is installed beside an agent's own
packages), each with a floor it was written against and a ceiling at the next major version."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

CLIENT = Path(__file__).resolve().parents[2] / "client" / "pyproject.toml"


def test_it_declares_version_ranges_for_httpx_mcp_and_pydantic_not_pins() -> None:
    requirements = {
        r.name: r
        for r in map(Requirement, tomllib.loads(CLIENT.read_text())["project"]["dependencies"])
    }
    assert set(requirements) == {"httpx", "mcp", "pydantic"}
    for requirement in requirements.values():
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {">=", "<"}, requirement
    assert requirements["httpx"].specifier.contains("0.28.1")
    assert not requirements["httpx"].specifier.contains("1.0")
    assert requirements["mcp"].specifier.contains("2.3.0")
    assert not requirements["mcp"].specifier.contains("1.27.0")
    assert not requirements["mcp"].specifier.contains("3.0")
    # The wire models' ConfigDict(validate_by_name=...) is 2.11's.
    assert requirements["pydantic"].specifier.contains("2.14.4")
    assert not requirements["pydantic"].specifier.contains("2.10.6")
    assert not requirements["pydantic"].specifier.contains("3.0")
