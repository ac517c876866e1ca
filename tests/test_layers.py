"""The layering (DESIGN "Moving parts"), read off every module's imports. From the bottom:

- `apikit/`: the API's shared machinery (errors, call context, limits, pagination); no app;
- `leases/`: the ground floor of the domain (the engine, the clock, events and refusals);
- `hands/`: who may do what, where (workspaces, members, lanes, hands, keys, authentication);
- `fleet/`: the work; inside it the plan (`fleet/plan/`: work packages, runs, slots) and the
  costs (`fleet/costs/`: spend, budgets) at the bottom, neither importing the other, then the
  attempts (`fleet/attempts/`: claims, reports, handoffs, idle) on both, then the REST endpoints
  (`fleet/api/`) and the jobs (`fleet/jobs.py`, the sweep);
- `leasing/`: leases over HTTP (the resource lease API, its waits, the hot calls), above the fleet
  whose reports it renews;
- `pools/`: lease pools, whose members are resource leases (above `leases`, `hands`, `fleet`,
  `leasing`);
- `evidence/` and `webhooks/`, which hang off the fleet and not off each other or the pools;
- `schedules/`: plans that make themselves (schedules, GitHub), above the fleet and evidence;
- `friction/`: friction reports, which name the fleet's lanes, runs and attempts;
- `harnesses/`: the harnesses' hooks answered by the server, on the hot lease calls (`leasing`);
- `dashboard/` and `ops/`, the pages and the machines' view over all of them;
- `demo/`: the demo fleet, simulated hands on the project's client, which nothing imports;
- `groundcontrol/`: only the wiring (settings, URLs, Celery, the server) imports every app.

`client/` imports no Django and no project package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = [
    "apikit",
    "leases",
    "hands",
    "fleet",
    "leasing",
    "pools",
    "evidence",
    "webhooks",
    "schedules",
    "friction",
    "harnesses",
    "dashboard",
    "ops",
    "demo",
]
PROJECT = {*APPS, "groundcontrol", "bench", "tests"}
NOT_ABOVE = {"groundcontrol", "bench", "tests"}
# package -> the top-level packages it must never import
FORBIDDEN = {
    "apikit": PROJECT - {"apikit"},
    "leases": PROJECT - {"apikit", "leases"},
    "hands": PROJECT - {"apikit", "leases", "hands"},
    "fleet": PROJECT - {"apikit", "leases", "hands", "fleet"},
    "leasing": PROJECT - {"apikit", "leases", "hands", "fleet", "leasing"},
    "pools": {
        "evidence",
        "webhooks",
        "schedules",
        "friction",
        "harnesses",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "evidence": {
        "webhooks",
        "pools",
        "schedules",
        "friction",
        "harnesses",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "webhooks": {
        "evidence",
        "pools",
        "schedules",
        "friction",
        "harnesses",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "schedules": {
        "webhooks",
        "pools",
        "friction",
        "harnesses",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "friction": {
        "pools",
        "evidence",
        "webhooks",
        "schedules",
        "harnesses",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "harnesses": {
        "pools",
        "evidence",
        "webhooks",
        "schedules",
        "friction",
        "dashboard",
        "ops",
        "demo",
        *NOT_ABOVE,
    },
    "dashboard": {"ops", "demo", *NOT_ABOVE},
    "ops": {"dashboard", "demo", *NOT_ABOVE},
    "demo": {"dashboard", "ops", *NOT_ABOVE},
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


def modules_of(package: str) -> list[Path]:
    return [m for m in sorted((ROOT / package).rglob("*.py")) if "migrations" not in m.parts]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    offences = []
    modules = modules_of(package)
    assert modules, package
    for module in modules:
        bad = imported_packages(module) & FORBIDDEN[package]
        if bad:
            offences.append(f"{module.relative_to(ROOT)} imports {sorted(bad)}")
    assert offences == []


# fleet's sub-packages -> the fleet modules they must never import
FLEET_FORBIDDEN = {
    "fleet/plan": {"fleet.attempts", "fleet.costs", "fleet.api", "fleet.jobs", "fleet.records"},
    "fleet/costs": {"fleet.attempts", "fleet.plan", "fleet.api", "fleet.jobs", "fleet.records"},
    "fleet/attempts": {"fleet.api", "fleet.jobs", "fleet.records"},
}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, by its full dotted name (`from a.b import c` names `a.b.c`
    too, since `c` may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("package", sorted(FLEET_FORBIDDEN))
def test_no_part_of_the_fleet_imports_a_part_above_it(package: str) -> None:
    offences = []
    modules = modules_of(package)
    assert modules, package
    for module in modules:
        bad = {
            name
            for name in imported_modules(module)
            for above in FLEET_FORBIDDEN[package]
            if name == above or name.startswith(above + ".")
        }
        if bad:
            offences.append(f"{module.relative_to(ROOT)} imports {sorted(bad)}")
    assert offences == []


def test_the_checker_sees_an_import_of_a_sibling_part(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from fleet import attempts\nfrom fleet.costs.spend import Spend\n")
    assert {"fleet.attempts", "fleet.costs.spend"} <= imported_modules(module)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom fleet.models import Run\nfrom . import sibling\n")
    assert imported_packages(module) == {"os", "fleet"}


def test_the_wiring_only_wires() -> None:
    """`groundcontrol/` holds settings (and the embedded default's own secret key), URLs,
    Celery, the WSGI app, the web server, which middleware runs on which paths, and the
    contract's table of limits (each app's own, named): no app imports it, and it defines no
    model, service or view of its own."""
    wiring = {p.name for p in (ROOT / "groundcontrol").glob("*.py")}
    assert wiring <= {
        "__init__.py",
        "settings.py",
        "env.py",
        "urls.py",
        "api_urls.py",
        "celery.py",
        "wsgi.py",
        "server.py",
        "scheduler.py",
        "secret_key.py",
        "limits.py",
        "middleware.py",
    }
    for package in APPS:
        for module in modules_of(package):
            assert "groundcontrol" not in imported_packages(module), module
