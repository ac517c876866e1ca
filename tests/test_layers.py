"""The layering (DESIGN "Moving parts"), read off every module's imports: `leases/` is the ground
floor and imports no app above it; `fleet/` builds on `leases/` and never imports `evidence/`,
which hangs off it, nor `dashboard/`, the pages over both; `client/` imports no Django and no
project package. Only the wiring (`groundcontrol/`'s URLs, settings, Celery) imports every app."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"leases", "fleet", "evidence", "dashboard", "ops", "groundcontrol", "bench", "tests"}
# package -> the top-level packages it must never import
FORBIDDEN = {
    "leases": {"fleet", "evidence", "dashboard", "ops", "groundcontrol", "bench", "tests"},
    "fleet": {"evidence", "dashboard", "ops", "bench", "tests"},
    "evidence": {"dashboard", "ops", "bench", "tests"},
    "dashboard": {"ops", "bench", "tests"},
    "ops": {"dashboard", "bench", "tests"},
    "client/groundcontrol_client": PROJECT | {"django", "rest_framework", "drf_spectacular"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    offences = []
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, package
    for module in modules:
        if "migrations" in module.parts:
            continue
        bad = imported_packages(module) & FORBIDDEN[package]
        if bad:
            offences.append(f"{module.relative_to(ROOT)} imports {sorted(bad)}")
    assert offences == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom fleet.models import Run\nfrom . import sibling\n")
    assert imported_packages(module) == {"os", "fleet"}
