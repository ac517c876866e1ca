"""Claims, reports, directives, finish and release on slots, at exact boundaries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from apikit.errors import NotFound, ValidationFailed
from evidence.errors import EvidenceMissing
from evidence.models import Evidence
from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import selectors as attempt_selectors
from fleet.attempts import services as attempt_services
from fleet.errors import NoOpenSlot, RunClosed, SlotTaken
from fleet.models import Attempt, Report
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import clock
from leases.errors import LeaseLost, NotHolder, ProcessMismatch, StaleFence
from leases.models import Event, Refusal

pytestmark = pytest.mark.django_db

PR = [{"kind": "pull_request", "url": "https://example.com/org/repo/pull/7"}]


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(heartbeat_interval_s=100, grace_s=60, evidence_required=["pull_request"])


def claim(hand, run, process: str = "host:1", **kwargs):  # noqa: ANN001, ANN201
    return attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=process, **kwargs)


def report(hand, view, process: str | None = "host:1", **kwargs):  # noqa: ANN001, ANN201
    options = {"kind": "heartbeat", "fence": view.attempt.fence}
    options.update(kwargs)
    return report_services.attempt_report(
        hand=hand, attempt_id=view.attempt.pk, process_id=process, **options
    )


def test_it_claims_the_lowest_open_slot_and_records_the_claim(owner, teammate, run, frozen_clock):
    first = claim(owner, run)
    second = claim(teammate, run, "host:2")
    assert (first.attempt.slot.index, second.attempt.slot.index) == (0, 1)
    assert first.state == "live"
    assert first.lease.resource == f"run/{run.pk}/slot/0"
    assert first.lease.fence == 1
    assert first.lease.deadline == frozen_clock + timedelta(seconds=100)
    assert Event.objects.filter(kind="claimed").count() == 2


def test_a_full_run_answers_no_open_slot_and_a_taken_slot_slot_taken(
    owner, teammate, run, frozen_clock
):
    claim(owner, run)
    claim(owner, run, "host:3")
    with pytest.raises(NoOpenSlot):
        claim(teammate, run)
    with pytest.raises(SlotTaken) as taken:
        claim(teammate, run, slot=1)
    assert taken.value.fields["holder"] == "hand-a"
    assert sorted(Refusal.objects.values_list("code", flat=True)) == ["no_open_slot", "slot_taken"]


def test_a_closed_run_takes_no_claims(owner, run):
    plan_services.run_set_state(
        workspace_id=run.workspace_id, run_id=run.pk, state="closed", actor="boss"
    )
    with pytest.raises(RunClosed):
        claim(owner, run)
    assert Event.objects.filter(kind="run_closed").count() == 1


def test_a_run_of_another_workspace_is_not_found(outsider, run):
    with pytest.raises(NotFound):
        claim(outsider, run)


def test_the_state_moves_through_every_boundary_and_a_report_revives_it(owner, run, frozen_clock):
    view = claim(owner, run)
    expected = [
        (100, "live"),
        (100.001, "late"),
        (130, "late"),
        (130.001, "stalled"),
        (160, "stalled"),
    ]
    for offset, state in expected:
        clock.freeze(frozen_clock + timedelta(seconds=offset))
        renewed, revived = report(owner, view, process=None)  # recorded, not renewed
        assert (renewed, revived.state) == (False, state), offset
    renewed, revived = report(owner, view)
    assert (renewed, revived.state) == (True, "live")
    assert revived.lease.deadline == frozen_clock + timedelta(seconds=260)


def test_a_lost_attempt_is_refused_on_every_call_forever(owner, run, frozen_clock):
    view = claim(owner, run)
    clock.advance(160.001)
    with pytest.raises(LeaseLost):
        report(owner, view)
    with pytest.raises(LeaseLost):
        report(owner, view, process=None)
    with pytest.raises(LeaseLost):
        attempt_services.attempt_release(
            hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", reason="late"
        )
    with pytest.raises(LeaseLost):
        attempt_finish(
            hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", evidence=PR
        )
    clock.advance(10_000)
    with pytest.raises(LeaseLost):
        report(owner, view)


def test_a_lost_holders_slot_is_claimable_at_once_without_a_sweep(
    owner, teammate, make_run, frozen_clock
):
    run = make_run(slots=1, heartbeat_interval_s=10, grace_s=0)
    old = claim(owner, run)
    clock.advance(10)
    with pytest.raises(NoOpenSlot):
        claim(teammate, run, "host:2")
    clock.advance(0.001)
    new = claim(teammate, run, "host:2")
    assert new.lease.fence == 2
    assert Attempt.objects.get(pk=old.attempt.pk).end == "lost"
    assert Event.objects.filter(kind="lost", attempt_id=old.attempt.pk).count() == 1
    with pytest.raises(LeaseLost):
        report(owner, old)


def test_a_report_renews_only_with_the_claims_process_identity(owner, run, frozen_clock):
    view = claim(owner, run)
    clock.advance(50)
    renewed, _ = report(owner, view, process=None, kind="progress", percent=40, message="halfway")
    assert renewed is False
    with pytest.raises(ProcessMismatch):
        report(owner, view, process="host:999")
    # With a message, so that it is on record at once (a bare heartbeat: the next test).
    renewed, after = report(owner, view, message="still here")
    assert renewed is True
    assert after.lease.deadline == frozen_clock + timedelta(seconds=150)
    kinds = list(Report.objects.order_by("id").values_list("kind", "renewed", "percent"))
    assert kinds == [("progress", False, 40.0), ("heartbeat", True, None)]
    assert Refusal.objects.get().code == "process_mismatch"


def test_a_bare_heartbeat_renews_every_time_and_is_recorded_once_a_minute(owner, run, frozen_clock):
    view = claim(owner, run)
    assert view.attempt.last_report_at is None
    beats = []
    for _ in range(4):  # at 0, 20, 40 and 60 s after the claim
        renewed, after = report(owner, view)
        assert renewed is True
        assert after.lease.deadline == clock.db_now() + timedelta(seconds=100)
        beats.append(clock.db_now())
        clock.advance(20)
    recorded = list(Report.objects.order_by("id").values_list("at", flat=True))
    assert recorded == [beats[0], beats[3]]
    attempt = Attempt.objects.get(pk=view.attempt.pk)
    assert attempt.last_report_at == beats[3]
    # Between records the answer's last_report_at is the latest renewal, not the record.
    report(owner, view)
    current = attempt_selectors.attempt_view(
        attempt_selectors.attempt_get(workspace_id=run.workspace_id, attempt_id=view.attempt.pk)
    )
    assert Attempt.objects.get(pk=view.attempt.pk).last_report_at == beats[3]
    assert attempt_selectors.last_report_at(current.attempt, current.lease) == clock.db_now()
    # A report with anything in it is recorded every time.
    report(owner, view, kind="progress", percent=10)
    report(owner, view, message="tests pass")
    assert Report.objects.count() == 4


def test_a_hand_cannot_act_on_another_hands_attempt(owner, teammate, run):
    view = claim(owner, run)
    with pytest.raises(NotHolder):
        report(teammate, view)
    with pytest.raises(NotHolder):
        attempt_services.attempt_release(
            hand=teammate, attempt_id=view.attempt.pk, fence=1, process_id="host:1", reason="x"
        )
    with pytest.raises(NotHolder):
        attempt_finish(
            hand=teammate, attempt_id=view.attempt.pk, fence=1, process_id="host:1", evidence=PR
        )
    assert Refusal.objects.filter(code="not_holder", hand="hand-b").count() == 3


def test_a_stale_fence_is_refused_with_the_current_fence(owner, run):
    view = claim(owner, run)
    with pytest.raises(StaleFence) as stale:
        report(owner, view, fence=0)
    assert stale.value.fields["current_fence"] == 1


def test_directives_reach_the_hand_in_its_next_report(owner, run):
    view = claim(owner, run)
    attempt_services.attempt_set_directive(
        workspace_id=run.workspace_id, attempt_id=view.attempt.pk, directive="pause", actor="boss"
    )
    _, after = report(owner, view)
    assert after.attempt.directive == "pause"
    assert Event.objects.filter(kind="directive_set").count() == 1
    with pytest.raises(ValidationFailed):
        attempt_services.attempt_set_directive(
            workspace_id=run.workspace_id, attempt_id=view.attempt.pk, directive="dance", actor="b"
        )


def test_finish_needs_the_required_evidence_and_keeps_the_lease_until_then(owner, run):
    view = claim(owner, run)
    with pytest.raises(EvidenceMissing) as missing:
        attempt_finish(
            hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", evidence=[]
        )
    assert missing.value.fields["missing"] == ["pull_request"]
    assert report(owner, view)[1].state == "live"
    done = attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=1,
        process_id="host:1",
        evidence=PR,
        summary="ok",
    )
    assert done.state == "finished"
    assert Evidence.objects.get().url == PR[0]["url"]
    # A retried finish answers as the first did and writes nothing more.
    again = attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=1,
        process_id="host:1",
        evidence=PR,
        summary="ok",
    )
    assert again.state == "finished"
    assert Evidence.objects.count() == 1
    assert Event.objects.filter(kind="finished").count() == 1
    with pytest.raises(LeaseLost):
        report(owner, view)


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "/relative/path",
        "https://",
        "https://exa mple.com/",
        "ftp://example.com/x",
    ],
)
def test_finish_refuses_links_that_are_not_http(owner, run, url):
    view = claim(owner, run)
    with pytest.raises(ValidationFailed):
        attempt_finish(
            hand=owner,
            attempt_id=view.attempt.pk,
            fence=1,
            process_id="host:1",
            evidence=[{"kind": "pull_request", "url": url}],
        )
    assert not Evidence.objects.exists()
    assert Attempt.objects.get().end is None


def test_release_opens_the_slot_at_once(owner, teammate, make_run):
    run = make_run(slots=1)
    view = claim(owner, run)
    released = attempt_services.attempt_release(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=1,
        process_id="host:1",
        reason="blocked on review",
    )
    assert released.state == "released"
    assert released.attempt.end_reason == "blocked on review"
    assert claim(teammate, run, "host:2").lease.fence == 2
    assert Event.objects.filter(kind="released").count() == 1


def test_breaking_a_slot_lease_loses_the_attempt(owner, teammate, make_run):
    run = make_run(slots=1)
    view = claim(owner, run)
    attempt_services.lease_break(
        workspace_id=run.workspace_id, resource=view.lease.resource, actor="boss", reason="stuck"
    )
    assert Attempt.objects.get(pk=view.attempt.pk).end == "lost"
    with pytest.raises(LeaseLost):
        report(owner, view)
    assert claim(teammate, run, "host:2").lease.fence == 3
    kinds = sorted(
        Event.objects.filter(kind__in=["lease_broken", "lost"]).values_list("kind", flat=True)
    )
    assert kinds == ["lease_broken", "lost"]


def test_refused_operations_write_nothing_but_their_refusal(owner, teammate, run):
    view = claim(owner, run)
    events_before = Event.objects.count()
    reports_before = Report.objects.count()
    with pytest.raises(NotHolder):
        report(teammate, view)
    assert Event.objects.count() == events_before
    assert Report.objects.count() == reports_before
    assert Refusal.objects.count() == 1


def test_work_packages_are_idempotent_on_their_key(lane):
    first, created = plan_services.work_package_create(lane=lane, key="2030-01-01", title="Day")
    again, created_again = plan_services.work_package_create(
        lane=lane, key="2030-01-01", title="Day"
    )
    assert (created, created_again) == (True, False)
    assert first.pk == again.pk


def test_runs_make_one_free_slot_lease_each(make_run):
    run = make_run(slots=3)
    resources = sorted(run.slots.values_list("lease__resource", "lease__fence"))
    assert resources == [(f"run/{run.pk}/slot/{i}", 0) for i in range(3)]


@pytest.mark.parametrize("slots", [0, 1001, "2", None])
def test_runs_refuse_bad_slot_counts(make_run, slots):
    with pytest.raises(ValidationFailed):
        make_run(slots=slots)


def test_keys_are_hashed_scoped_expiring_and_revocable(owner, frozen_clock):
    from apikit.errors import KeyInvalid, ScopeDenied
    from hands.errors import KeyExpired, KeyRevoked

    issued = hand_services.key_issue(hand=owner, scopes=["work"], actor="boss", expires_in_s=60)
    assert issued.plaintext.startswith(f"gc_{issued.key.prefix}_")
    secret = issued.plaintext.split("_", 2)[2]
    assert secret not in issued.key.secret_hash
    assert hand_services.key_authenticate(issued.plaintext).hand == owner
    with pytest.raises(ScopeDenied):
        hand_services.key_require_scope(issued.key, "plan")
    with pytest.raises(KeyInvalid):
        hand_services.key_authenticate(issued.plaintext + "x")
    with pytest.raises(KeyInvalid):
        hand_services.key_authenticate("not-a-key")
    clock.advance(60)
    with pytest.raises(KeyExpired):
        hand_services.key_authenticate(issued.plaintext)
    other = hand_services.key_issue(hand=owner, scopes=["work", "leases"], actor="boss")
    hand_services.key_revoke(
        workspace_id=owner.workspace_id, prefix=other.key.prefix, actor="boss", reason="gone"
    )
    with pytest.raises(KeyRevoked):
        hand_services.key_authenticate(other.plaintext)
    assert Event.objects.filter(kind="key_revoked").count() == 1


def test_last_use_is_written_at_most_once_a_minute(owner, frozen_clock):
    issued = hand_services.key_issue(hand=owner, scopes=["work"], actor="boss")
    hand_services.key_authenticate(issued.plaintext)
    issued.key.refresh_from_db()
    first = issued.key.last_used_at
    assert first == frozen_clock
    clock.advance(30)
    hand_services.key_authenticate(issued.plaintext)
    issued.key.refresh_from_db()
    assert issued.key.last_used_at == first
    clock.advance(31)
    hand_services.key_authenticate(issued.plaintext)
    issued.key.refresh_from_db()
    assert issued.key.last_used_at == frozen_clock + timedelta(seconds=61)
