"""Dashboard fixtures: people with each role, logged-in clients, and fleets made in bulk."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.models import Attempt, AttemptEnd, Run, Slot, WorkPackage
from fleet.plan.services import slot_resource
from hands import services as hand_services
from hands.models import Hand, Lane, Role, Workspace
from leases.clock import db_now
from leases.models import Lease, LeaseKind, LeaseStatus


def member(workspace: Workspace, username: str, role: str) -> Client:
    """A client signed in (`force_login`) as a new user with `role` in `workspace`. The user has
    no password: none is hashed (PBKDF2 takes 0.4 s of CPU a user) and none is needed."""
    user = get_user_model().objects.create_user(username=username)
    hand_services.membership_set(workspace=workspace, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def workspace_admin_client(workspace: Workspace) -> Client:
    return member(workspace, "ada", Role.ADMIN)


@pytest.fixture
def supervisor_client(workspace: Workspace) -> Client:
    return member(workspace, "sam", Role.SUPERVISOR)


@pytest.fixture
def viewer_client(workspace: Workspace) -> Client:
    return member(workspace, "vic", Role.VIEWER)


@pytest.fixture
def outsider_client(outsider_workspace: Workspace) -> Client:
    return member(outsider_workspace, "oscar", Role.ADMIN)


# States a bulk-made attempt can be put in, by its lease's deadline relative to now.
# With interval 100 and grace 60: late after the deadline, stalled 30 s later, lost 60 s later.
_DEADLINE_OFFSETS = {"live": 50, "late": -10, "stalled": -40, "lost": -100}


@pytest.fixture
def make_fleet(workspace: Workspace) -> Callable[..., Run]:
    """`n` attempts on one run (one slot each, one hand per ten), in bulk: a handful of queries
    whatever `n`, cycling through every state."""
    counter = iter(range(1_000_000))

    def make(n: int, *, lane: Lane | None = None, now: datetime | None = None) -> Run:
        tag = next(counter)
        now = now or db_now()
        if lane is None:
            lane, _ = hand_services.lane_create(workspace=workspace, slug=f"bulk-{tag}")
        package = WorkPackage.objects.create(
            workspace=workspace, lane=lane, key=f"bulk-{tag}", title=f"Bulk {tag}"
        )
        run = Run.objects.create(
            workspace=workspace,
            work_package=package,
            title=f"Bulk run {tag}",
            slot_count=n,
            heartbeat_interval_s=100,
            grace_s=60,
        )
        hands = Hand.objects.bulk_create(
            Hand(workspace=workspace, name=f"bulk-{tag}-hand-{i}") for i in range(max(1, n // 10))
        )
        states = [*_DEADLINE_OFFSETS, "finished", "released"]
        leases = []
        for i in range(n):
            state = states[i % len(states)]
            held = state in _DEADLINE_OFFSETS
            deadline = now + timedelta(seconds=_DEADLINE_OFFSETS.get(state, -500))
            leases.append(
                Lease(
                    workspace_id=workspace.pk,
                    resource=slot_resource(run.pk, i),
                    kind=LeaseKind.SLOT,
                    status=LeaseStatus.HELD if held else LeaseStatus.FREE,
                    holder=hands[i % len(hands)].name,
                    process_id="bulk",
                    fence=1,
                    interval_s=100,
                    grace_s=60,
                    acquired_at=deadline - timedelta(seconds=200),
                    renewed_at=deadline - timedelta(seconds=100),
                    deadline=deadline,
                )
            )
        leases = Lease.objects.bulk_create(leases)
        slots = Slot.objects.bulk_create(
            Slot(workspace=workspace, run=run, index=i, lease=lease)
            for i, lease in enumerate(leases)
        )
        attempts = []
        for i, (slot, lease) in enumerate(zip(slots, leases, strict=True)):
            state = states[i % len(states)]
            ended = state in (AttemptEnd.FINISHED, AttemptEnd.RELEASED)
            attempts.append(
                Attempt(
                    workspace=workspace,
                    run=run,
                    slot=slot,
                    hand=hands[i % len(hands)],
                    lane=lane,
                    lease=lease,
                    fence=1,
                    process_id="bulk",
                    claimed_at=lease.acquired_at,
                    last_report_at=lease.renewed_at,
                    end=state if ended else None,
                    ended_at=now - timedelta(seconds=60) if ended else None,
                )
            )
        Attempt.objects.bulk_create(attempts)
        return run

    return make
