"""A supervisor's calls about pools, the lines of waiters and CI's attestations, through `Client`
and `AsyncClient` against the live server: pools made (the same again answered as it is, other
members refused), listed and read member by member as hands take them; the waiters in line, all
or one line of the tree; the attestations, newest first, one URL's, and a lane-limited key's
(its lane's and the workspace's); the refusals each call can meet."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from groundcontrol_client import NotFound, ScopeDenied, ValidationFailed
from groundcontrol_client.core.errors import PoolExists
from groundcontrol_client.core.grades import Attestation
from groundcontrol_client.core.pools import PoolMember, PoolRecord, Waiter

from hands import services as hand_services
from hands.models import Hand, Lane, Workspace
from leases import queue
from pools.models import Pool
from tests.supervisor_cli.shells import Shell
from tests.support.live import PR_URL, Fleet

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_creates_a_pool_and_reads_it_member_by_member(
    planner: Shell, worker: Shell, gc: Fleet
) -> None:
    made = planner.pool_create("ports", members=["8001", "8002", "8003"])
    assert isinstance(made, PoolRecord)
    assert (made.name, made.size, made.available) == ("ports", 3, 3)
    assert [(m.member, m.resource, m.state, m.holder, m.fence) for m in made.members] == [
        ("8001", "pool/ports/8001", "free", None, 0),
        ("8002", "pool/ports/8002", "free", None, 0),
        ("8003", "pool/ports/8003", "free", None, 0),
    ]
    assert made.created_by == "hand-a" and made.server_time is not None

    taken = worker.lease_from_pool("ports", ttl_s=30, process_id="host:4242")
    shown = planner.pool("ports")
    assert shown.available == 2
    first = shown.members[0]
    assert isinstance(first, PoolMember)
    assert (first.member, first.state, first.holder, first.process_id, first.fence) == (
        taken.member,
        "live",
        "hand-a",
        "host:4242",
        1,
    )
    assert first.expires_in_s is not None and 0 < first.expires_in_s <= 30
    assert first.expires_at is not None
    assert [m.holder for m in shown.members[1:]] == [None, None]


def test_the_same_pool_again_is_answered_as_it_is_and_other_members_are_refused(
    planner: Shell,
) -> None:
    first = planner.pool_create("workers", capacity=2)
    assert [m.member for m in first.members] == ["1", "2"]
    again = planner.pool_create("workers", members=["1", "2"])  # the same members: found
    assert (again.name, again.created_at) == (first.name, first.created_at)
    with pytest.raises(PoolExists) as refused:
        planner.pool_create("workers", capacity=3)
    assert refused.value.get("members") == ["1", "2"]
    assert Pool.objects.filter(name="workers").count() == 1


def test_it_lists_the_workspaces_pools(planner: Shell, worker: Shell, workspace: Workspace) -> None:
    planner.pool_create("ports", capacity=1)
    planner.pool_create("gpus", members=["a100"])
    listed = planner.pools()
    assert sorted(pool.name for pool in listed) == ["gpus", "ports"]
    assert all(isinstance(pool, PoolRecord) and pool.size == 1 for pool in listed)
    # A hand's leases key reads them too (it takes their members).
    assert sorted(pool.name for pool in worker.pools()) == ["gpus", "ports"]


def test_the_pool_calls_refusals(
    planner: Shell, worker: Shell, lane_key: str, shell: Callable[[str], Shell]
) -> None:
    with pytest.raises(NotFound):
        planner.pool("nowhere")
    with pytest.raises(ScopeDenied):  # work and leases: it reads pools, never makes one
        worker.pool_create("ports", capacity=2)
    with pytest.raises(ScopeDenied):  # a lane-limited key: pools are the workspace's
        shell(lane_key).pool_create("ports", capacity=2)
    with pytest.raises(ValidationFailed):
        planner.pool_create("a/b", capacity=2)
    assert not Pool.objects.exists()


def test_it_reads_the_lines_of_waiters_all_or_one(
    planner: Shell, workspace: Workspace, teammate: Hand
) -> None:
    for resource, holder in (("src/auth/", "hand-b"), ("docs/", "hand-a"), ("src/", "hand-a")):
        queue.join(
            workspace_id=workspace.pk,
            resource=resource,
            holder=holder,
            process_id=f"{holder}:1",
            mode="exclusive",
        )
    every = planner.lease_queue()
    assert all(isinstance(w, Waiter) for w in every)
    assert [(w.resource, w.holder, w.mode, w.position) for w in every] == [
        ("src/auth/", "hand-b", "exclusive", 1),
        ("docs/", "hand-a", "exclusive", 1),
        # Behind hand-b's exclusive src/auth/ on its line of the tree: the queue's place.
        ("src/", "hand-a", "exclusive", 2),
    ]
    assert every[0].queued_at is not None
    # src/auth/'s line of the tree: the names above it and below it, never docs/.
    assert [w.resource for w in planner.lease_queue("src/auth/login.py")] == ["src/auth/", "src/"]
    assert planner.lease_queue("build/") == []
    with pytest.raises(ValidationFailed):
        planner.lease_queue("../etc")


def test_it_lists_attestations_newest_first_and_by_url(
    planner: Shell, shell: Callable[[str], Shell], workspace: Workspace, lane: Lane, docs: Lane
) -> None:
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    everywhere = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test").plaintext
    in_docs = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test", lane=docs)
    other = "https://github.com/acme/app/pull/8"
    shell(everywhere).attest(PR_URL, result="fail", note="lint")
    shell(everywhere).attest(PR_URL, result="pass")
    shell(in_docs.plaintext).attest(other, result="pass", kind="pull_request")

    listed = planner.attestations()
    assert all(isinstance(a, Attestation) for a in listed)
    assert [(a.url, a.result, a.lane) for a in listed] == [
        (other, "pass", "docs"),
        (PR_URL, "pass", None),
        (PR_URL, "fail", None),
    ]
    assert (listed[0].hand, listed[0].key_prefix, listed[0].kind) == (
        "ci",
        in_docs.key.prefix,
        "pull_request",
    )
    assert [a.result for a in planner.attestations(url=PR_URL)] == ["pass", "fail"]
    assert [a.result for a in planner.attestations(url=PR_URL, limit=1)] == ["pass"]
    # A key limited to rewalk reads the workspace's and its lane's, never docs'.
    limited = hand_services.key_issue(
        hand=ci, scopes=["supervise"], actor="test", lane=lane
    ).plaintext
    assert [a.url for a in shell(limited).attestations()] == [PR_URL, PR_URL]


def test_reading_attestations_takes_attest_or_supervise(worker: Shell) -> None:
    with pytest.raises(ScopeDenied):
        worker.attestations()
