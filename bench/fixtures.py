"""What the load needs in the benchmark database, made through the services (as an operator or a
hand would), printed as one JSON object: per client a hand, a key, a claimed attempt and a held
resource lease. Run inside Django: `python -m bench.fixtures --clients 64`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import django


def make(clients: int) -> dict[str, object]:
    from fleet.attempts import services as attempt_services
    from fleet.plan import services as plan_services
    from hands import services as hand_services
    from leases import engine
    from leases import services as lease_services

    workspace = hand_services.workspace_get_or_create(name="bench")
    lane, _ = hand_services.lane_create(workspace=workspace, slug="bench")
    package, _ = plan_services.work_package_create(lane=lane, key="bench", title="Benchmark")
    # An hour of heartbeat interval and half an hour of grace: nothing expires during a run.
    run = plan_services.run_create(
        work_package=package,
        title="Heartbeats",
        slots=clients,
        heartbeat_interval_s=3600,
        grace_s=1800,
    )
    out = []
    for i in range(clients):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"bench-{i}")
        key = hand_services.key_issue(hand=hand, scopes=["work", "leases"], actor="bench").plaintext
        process_id = f"bench:{i}"
        view = attempt_services.attempt_claim(
            hand=hand, run_id=run.pk, process_id=process_id, slot=i
        )
        resource = f"bench/renew/{i}"
        lease = lease_services.lease_acquire(
            workspace_id=workspace.pk,
            resource=resource,
            holder=hand.name,
            process_id=process_id,
            ttl_s=3600,
        )
        out.append(
            {
                "hand": hand.name,
                "hand_id": hand.pk,
                "key": key,
                "process_id": process_id,
                "attempt_id": view.attempt.pk,
                "attempt_fence": view.attempt.fence,
                "slot_resource": view.lease.resource,
                "resource": resource,
                "fence": lease.fence,
            }
        )
    return {
        "workspace_id": workspace.pk,
        "run_id": run.pk,
        "lease_table": engine.TABLE,
        "clients": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
    django.setup()
    json.dump(make(args.clients), sys.stdout)


if __name__ == "__main__":
    main()
