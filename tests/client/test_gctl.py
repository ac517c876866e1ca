"""gctl as a real subprocess against the live server: the one-shot commands, their exit codes,
and the `run` and `hold` wrappers around real commands."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evidence.models import Evidence
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, AttemptEnd, Report
from hands import services as hand_services
from hands.models import Hand
from leases import clock
from leases.models import Lease, Refusal
from tests.client.conftest import (
    GCTL,
    GRACE_S,
    INTERVAL_S,
    ONE_SHOT,
    PR_URL,
    Fleet,
    assert_heartbeats_kept_the_claim,
    attempts_of,
    mint,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_DENIED, EXIT_LOST, EXIT_AUTH, EXIT_STOPPED = 3, 4, 5, 6


def test_it_claims_reports_reads_and_finishes_one_command_at_a_time(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    identity = {"GC_PROCESS_ID": "shell-1"}
    claimed = gc.gctl("--json", "claim", str(run.pk), **identity)
    assert claimed.returncode == 0, claimed.stderr
    attempt = json.loads(claimed.stdout)
    assert attempt["process_id"] == "shell-1" and attempt["state"] == "live"
    session = {
        **identity,
        "GC_ATTEMPT": str(attempt["id"]),
        "GC_ATTEMPT_FENCE": str(attempt["fence"]),
    }

    reported = gc.gctl("report", "-m", "halfway", "--percent", "50", **session)
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.startswith("renewed; attempt ")
    brief = gc.gctl("brief", **session)
    assert brief.returncode == 0
    assert "Fix the login redirect." in brief.stdout
    assert "evidence required: pull_request" in brief.stdout

    finished = gc.gctl(
        "finish", "--evidence", f"pull_request={PR_URL}", "--summary", "ok", **session
    )
    assert finished.returncode == 0, finished.stderr
    record = Attempt.objects.get(pk=attempt["id"])
    assert record.end == AttemptEnd.FINISHED
    assert Report.objects.get(attempt=record, kind="progress").renewed is True
    assert list(Evidence.objects.filter(attempt=record).values_list("url", flat=True)) == [PR_URL]


def test_it_prints_the_exports_that_keep_a_claim_renewable(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    claimed = gc.gctl("claim", str(run.pk), "--process-id", "agent-7")
    assert claimed.returncode == 0, claimed.stderr
    (record,) = attempts_of(run)
    assert claimed.stdout.splitlines()[-1] == (
        f"export GC_ATTEMPT={record.pk} GC_ATTEMPT_FENCE={record.fence} GC_PROCESS_ID=agent-7"
    )
    # Without the claim's identity, a report is recorded and renews nothing (rule 6).
    noted = gc.gctl("report", str(record.pk), "--kind", "note", "-m", "fyi", "--no-renew")
    assert noted.returncode == 0 and noted.stdout.startswith("recorded (not renewed)")
    # With another identity it is refused: a second process must not keep the claim alive.
    other = gc.gctl("report", str(record.pk), "--process-id", "someone-else")
    assert other.returncode == EXIT_LOST
    assert "(process_mismatch)" in other.stderr


def test_it_exits_3_on_a_denial_and_says_so(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    assert gc.gctl("claim", str(run.pk)).returncode == 0
    denied = gc.gctl("claim", str(run.pk), key=gc.key_b)
    assert denied.returncode == EXIT_DENIED
    assert denied.stderr.startswith("gctl: denied: ") and "(no_open_slot)" in denied.stderr
    as_json = gc.gctl("--json", "claim", str(run.pk), key=gc.key_b)
    assert as_json.returncode == EXIT_DENIED
    assert json.loads(as_json.stdout)["error"]["code"] == "no_open_slot"


def test_it_exits_5_on_a_key_that_may_not(gc: Fleet, owner: Hand) -> None:
    run = gc.run()
    leases_only = mint(owner, ["leases"])
    refused = gc.gctl("claim", str(run.pk), key=leases_only)
    assert refused.returncode == EXIT_AUTH and "(scope_denied)" in refused.stderr
    hand_services.key_revoke(
        workspace_id=owner.workspace_id, prefix=gc.key_a.split("_")[1], actor="boss"
    )
    revoked = gc.gctl("me")
    assert revoked.returncode == EXIT_AUTH and "(key_revoked)" in revoked.stderr


def test_it_exits_4_when_a_fence_is_stale_and_2_on_usage(gc: Fleet) -> None:
    acquired = gc.gctl("--json", "lease", "acquire", "migrations", "--ttl", "60")
    assert acquired.returncode == 0, acquired.stderr
    fence = json.loads(acquired.stdout)["fence"]
    resource = {"GC_RESOURCE": "migrations", "GC_FENCE": str(fence)}
    assert gc.gctl("lease", "check", "migrations", **resource).returncode == 0
    attempt_services.lease_break(
        workspace_id=Hand.objects.get(name="hand-a").workspace_id,
        resource="migrations",
        actor="boss",
        reason="test",
    )
    stale = gc.gctl("lease", "check", "migrations", **resource)
    assert stale.returncode == EXIT_LOST and "(stale_fence)" in stale.stderr

    assert gc.gctl("lease", "check", "migrations").returncode == 2  # which fence?
    assert gc.gctl("claim").returncode == 2
    no_url = subprocess.run([GCTL, "me"], env={"PATH": os.environ["PATH"]}, capture_output=True)
    assert no_url.returncode == 2 and b"GC_URL is not set" in no_url.stderr


def test_it_exits_1_when_the_server_cannot_be_reached(gc: Fleet) -> None:
    unreachable = gc.gctl("me", GC_URL="http://127.0.0.1:9", GC_RETRIES="0")
    assert unreachable.returncode == 1
    assert "(connection_failed)" in unreachable.stderr


def test_it_lists_slots_and_leases(gc: Fleet) -> None:
    run = gc.run(slots=2, **ONE_SHOT)
    assert gc.gctl("claim", str(run.pk)).returncode == 0
    slots = gc.gctl("slots", str(run.pk))
    assert slots.stdout.splitlines() == ["slot 1: open"]
    every = json.loads(gc.gctl("--json", "slots", str(run.pk), "--all").stdout)
    assert [(s["index"], s["holder"]) for s in every] == [(0, "hand-a"), (1, None)]
    assert gc.gctl("lease", "acquire", "src/auth/", "--ttl", "60").returncode == 0
    listed = json.loads(gc.gctl("--json", "lease", "list", "--prefix", "src/").stdout)
    assert [(lease["resource"], lease["holder"]) for lease in listed] == [("src/auth/", "hand-a")]


def test_it_claims_in_one_eval_with_export(gc: Fleet) -> None:
    run = gc.run(slots=2, **ONE_SHOT)
    script = f'eval "$({GCTL} claim --export {run.pk})" && echo "$GC_ATTEMPT $GC_ATTEMPT_FENCE"'
    shell = subprocess.run(
        ["bash", "-c", script], env=gc.env(), capture_output=True, text=True, timeout=60
    )
    assert shell.returncode == 0, shell.stderr
    (record,) = attempts_of(run)
    assert shell.stdout.split() == [str(record.pk), str(record.fence)]
    # The plain output is eval-safe too: a person who evals it leaks no claim either.
    plain = subprocess.run(
        ["bash", "-c", f'eval "$({GCTL} claim {run.pk})" && echo "$GC_ATTEMPT"'],
        env=gc.env(key=gc.key_b),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == [str(attempts_of(run)[-1].pk)]
    # Refused: nothing on stdout, so the eval sets nothing; kept apart, the status shows.
    script = (
        f'eval "$({GCTL} claim --export {run.pk})"; echo "attempt=${{GC_ATTEMPT:-none}}"; '
        f'exports=$({GCTL} claim --export {run.pk}) && eval "$exports" || echo "refused $?"'
    )
    full = subprocess.run(
        ["bash", "-c", script], env=gc.env(key=gc.key_b), capture_output=True, text=True, timeout=60
    )
    assert full.stdout.splitlines() == ["attempt=none", "refused 3"]
    assert full.stderr.count("(no_open_slot)") == 2


def test_it_waits_for_a_slot_and_says_the_queues_answer(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    held = gc.gctl("--json", "claim", str(run.pk), "--process-id", "a-1")
    attempt = json.loads(held.stdout)
    waiter = _start(gc, "claim", str(run.pk), "--wait", "20", "--export", key=gc.key_b)
    time.sleep(1.5)
    released = gc.gctl(
        "release", str(attempt["id"]), "--reason", "handing over", "--process-id", "a-1"
    )
    assert released.returncode == 0, released.stderr
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    second = attempts_of(run)[-1]
    assert second.hand.name == "hand-b" and out.startswith(f"export GC_ATTEMPT={second.pk} ")
    (said,) = err.splitlines()  # the same answer is said once, however often it was asked
    assert said.startswith(
        f"gctl: waiting for a slot of run {run.pk}: run {run.pk} has no open slot (1 slot: 1 held;"
    )


def test_it_never_waits_on_a_done_run(gc: Fleet) -> None:
    run = gc.run()
    script = f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"'
    assert gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", script).returncode == 0
    done = gc.gctl("claim", str(run.pk), "--wait", "30", key=gc.key_b)
    assert done.returncode == EXIT_DENIED
    # Asked once and refused at once: a done run never opens, so its wait does not try again
    # (counted at the server, not timed: gctl's start-up alone takes seconds on loaded cores).
    claims = Refusal.objects.filter(hand="hand-b", path=f"/api/v1/runs/{run.pk}/claim")
    assert list(claims.values_list("code", flat=True)) == ["run_closed"]
    assert done.stderr.startswith(f"gctl: denied: run {run.pk} is done") and "(run_closed)" in (
        done.stderr
    )
    slots = gc.gctl("slots", str(run.pk), "--all")
    assert slots.stdout.splitlines() == ["slot 0: done (fence 1)"]


def test_it_passes_the_servers_field_messages_through(gc: Fleet) -> None:
    refused = gc.gctl("lease", "acquire", "migrations", "--ttl", "0.5")
    assert refused.returncode == 1
    assert refused.stderr.startswith("gctl: error: invalid input: ttl_s: "), refused.stderr
    assert "1" in refused.stderr and refused.stderr.endswith("(validation_error)\n")


def test_it_lists_runs_slots_and_leases_as_sentences(gc: Fleet) -> None:
    run = gc.run(slots=3, title="Fix the login redirect", **ONE_SHOT)
    claimed = json.loads(gc.gctl("--json", "claim", str(run.pk)).stdout)
    runs = gc.gctl("runs")
    assert runs.returncode == 0, runs.stderr
    assert f"run {run.pk}: Fix the login redirect (lane rewalk, " in runs.stdout
    assert "2 of 3 slots open (1 held); evidence: pull_request" in runs.stdout
    assert gc.gctl("runs", "--lane", "nowhere").stdout == "no open runs in lane nowhere\n"
    every = gc.gctl("slots", str(run.pk), "--all").stdout.splitlines()
    assert re.fullmatch(
        f"slot 0: held by hand hand-a at fence {claimed['fence']}, live, its current window "
        "ends in \\d+ s",
        every[0],
    ), every
    assert every[1:] == ["slot 1: open", "slot 2: open"]
    assert gc.gctl("lease", "acquire", "src/auth/").returncode == 0
    listed = gc.gctl("lease", "list", "--prefix", "src/").stdout.splitlines()
    assert len(listed) == 1 and listed[0].startswith(
        "src/auth/: held by hand hand-a at fence 1, live, its current window ends in "
    )


# --- gctl run ---------------------------------------------------------------------------------


def test_it_runs_a_command_under_a_claim_and_finishes_with_the_evidence_it_wrote(
    gc: Fleet, tmp_path: Path
) -> None:
    run = gc.run()
    seen = tmp_path / "seen"
    script = (
        f'echo "$GC_ATTEMPT $GC_RUN $GC_SLOT" > {seen}; sleep 3; '
        f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"'
    )
    done = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    (record,) = attempts_of(run)
    assert seen.read_text().split() == [str(record.pk), str(run.pk), "0"]
    # It ran three times the interval: the wrapper's heartbeats kept the claim.
    assert record.end == AttemptEnd.FINISHED
    assert_heartbeats_kept_the_claim(record, for_s=2 * INTERVAL_S)
    assert [(e.kind, e.url) for e in Evidence.objects.filter(attempt=record)] == [
        ("pull_request", PR_URL)
    ]
    assert f"attempt {record.pk} finished" in done.stderr


def test_it_releases_with_the_exit_status_when_the_command_fails(gc: Fleet) -> None:
    run = gc.run()
    failed = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.RELEASED
    assert record.end_reason == "the command failed: exit status 7"


def test_it_releases_when_the_command_left_no_evidence(gc: Fleet) -> None:
    run = gc.run()
    empty = gc.gctl("run", "--run", str(run.pk), "--", "true")
    assert empty.returncode == 1 and "(evidence_missing)" in empty.stderr
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.RELEASED and record.end_reason.startswith("finish refused")


def test_it_releases_when_the_command_cannot_be_started(gc: Fleet) -> None:
    run = gc.run()
    missing = gc.gctl("run", "--run", str(run.pk), "--", "/no/such/command")
    assert missing.returncode == 127
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.RELEASED
    assert record.end_reason.startswith("could not start the command: ")
    held = gc.gctl("hold", "lock", "--", "/no/such/command")
    assert held.returncode == 127
    assert gc.gctl("lease", "acquire", "lock", "--ttl", "5", key=gc.key_b).returncode == 0


def test_it_says_why_the_attempt_was_released(gc: Fleet) -> None:
    run = gc.run()
    failed = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", "exit 7")
    (record,) = attempts_of(run)
    assert failed.stderr.splitlines()[-1] == (
        f"gctl: attempt {record.pk} released: the command failed: exit status 7"
    )
    empty = gc.gctl("run", "--run", str(run.pk), "--", "true")
    last = empty.stderr.splitlines()[-1]
    assert last.startswith(f"gctl: attempt {attempts_of(run)[-1].pk} released: the finish was ")
    assert "pull_request" in last and "$GC_EVIDENCE_FILE" in last
    assert last.endswith("(evidence_missing)")


def test_it_explains_a_report_from_inside_gctl_run(gc: Fleet) -> None:
    run = gc.run()
    script = (
        'gctl report -m halfway; echo "exit $?"; gctl report --no-renew -m noted; '
        f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"'
    )
    env_path = f"{Path(GCTL).parent}:{os.environ['PATH']}"
    done = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", script, PATH=env_path)
    assert done.returncode == 0, done.stderr
    (record,) = attempts_of(run)
    assert "exit 4" in done.stdout
    (explained,) = [line for line in done.stderr.splitlines() if "(process_mismatch)" in line]
    assert explained.startswith(
        f"gctl: wrong process: attempt {record.pk} is held by the wrapper's process "
        f"({record.process_id}), not this one ("
    )
    assert "Report with --no-renew" in explained and "lease lost" not in explained
    # The --no-renew report was recorded; the claim was never in danger.
    assert Report.objects.get(attempt=record, kind="progress").message == "noted"
    assert record.end == AttemptEnd.FINISHED


def test_it_waits_for_a_slot_before_running_the_command(gc: Fleet) -> None:
    run = gc.run(**ONE_SHOT)
    held = json.loads(gc.gctl("--json", "claim", str(run.pk), "--process-id", "a-1").stdout)
    script = f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"'
    waiter = _start(
        gc, "run", "--run", str(run.pk), "--wait", "20", "--", "sh", "-c", script, key=gc.key_b
    )
    time.sleep(1.5)
    assert (
        gc.gctl(
            "release", str(held["id"]), "--reason", "over to b", "--process-id", "a-1"
        ).returncode
        == 0
    )
    _, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert err.startswith(f"gctl: waiting for a slot of run {run.pk}: ")
    assert attempts_of(run)[-1].end == AttemptEnd.FINISHED


def _start(gc: Fleet, *args: str, key: str | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GCTL, *args], env=gc.env(key), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_it_stops_the_command_when_the_directive_is_stop(gc: Fleet, tmp_path: Path) -> None:
    run = gc.run()
    wrapper = _start(gc, "run", "--run", str(run.pk), "--", "sleep", "60")
    record = wait_for(lambda: Attempt.objects.filter(run=run).first())
    attempt_services.attempt_set_directive(
        workspace_id=run.workspace_id, attempt_id=record.pk, directive="stop", actor="boss"
    )
    started = time.monotonic()
    assert wrapper.wait(15) == EXIT_STOPPED
    assert time.monotonic() - started < 5
    record.refresh_from_db()
    assert record.end == AttemptEnd.RELEASED
    assert record.end_reason == "stopped by the supervisor's directive"


def test_it_suspends_the_command_while_the_directive_is_pause(gc: Fleet, tmp_path: Path) -> None:
    run = gc.run()
    counter = tmp_path / "counter"
    loop = f"i=0; while true; do i=$((i+1)); echo $i > {counter}; sleep 0.05; done"
    wrapper = _start(gc, "run", "--run", str(run.pk), "--", "sh", "-c", loop)

    def count() -> int:
        return int(counter.read_text().strip() or 0) if counter.exists() else 0

    def direct(directive: str) -> None:
        attempt_services.attempt_set_directive(
            workspace_id=run.workspace_id, attempt_id=record.pk, directive=directive, actor="boss"
        )

    record = wait_for(lambda: Attempt.objects.filter(run=run).first())
    wait_for(count)
    direct("pause")
    time.sleep(1.5 * INTERVAL_S)  # a heartbeat's answer brings the directive
    paused_at = count()
    time.sleep(0.5)
    assert count() == paused_at
    direct("continue")
    wait_for(lambda: count() > paused_at, timeout=5)
    direct("stop")
    assert wrapper.wait(15) == EXIT_STOPPED
    record.refresh_from_db()
    # Paused is not stopped: the claim was kept alive throughout.
    assert record.end == AttemptEnd.RELEASED


def test_it_stops_the_command_when_the_lease_is_lost(gc: Fleet, tmp_path: Path) -> None:
    run = gc.run()
    pid_file = tmp_path / "pid"
    wrapper = _start(
        gc, "run", "--run", str(run.pk), "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"
    )
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    attempt_services.lease_break(
        workspace_id=run.workspace_id, resource=f"run/{run.pk}/slot/0", actor="boss", reason="x"
    )
    assert wrapper.wait(15) == EXIT_LOST
    _, stderr = wrapper.communicate()
    assert "lease lost" in stderr
    # The command is gone too, not left running without a lease.
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.LOST


def test_it_lets_another_hand_reclaim_the_slot_of_a_killed_wrapper(
    gc: Fleet, tmp_path: Path
) -> None:
    run = gc.run()
    pid_file = tmp_path / "pid"
    wrapper = _start(
        gc, "run", "--run", str(run.pk), "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"
    )
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    # The server's clock stops at the tenure's last renewal, so the dead tenure's window is
    # still open when the other hand first tries, however slowly this machine starts a process.
    (slot_lease,) = Lease.objects.filter(resource__startswith=f"run/{run.pk}/")
    clock.freeze(slot_lease.renewed_at)
    # The whole agent dies at once: no release, no goodbye.
    wrapper.kill()
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    wrapper.wait(10)
    finish = [
        "run",
        "--run",
        str(run.pk),
        "--",
        "sh",
        "-c",
        f'echo "pull_request={PR_URL}" > "$GC_EVIDENCE_FILE"',
    ]
    first_try = gc.gctl(*finish, key=gc.key_b)
    assert first_try.returncode == EXIT_DENIED, first_try.stderr
    # Past the dead tenure's window and grace: lost, and the other hand's claim takes the slot.
    clock.advance(INTERVAL_S + GRACE_S + 1)
    second_try = gc.gctl(*finish, key=gc.key_b)
    assert second_try.returncode == 0, second_try.stderr
    dead, *_, alive = attempts_of(run)
    assert (dead.hand.name, dead.end) == ("hand-a", AttemptEnd.LOST)
    assert (alive.hand.name, alive.end) == ("hand-b", AttemptEnd.FINISHED)


# --- gctl hold --------------------------------------------------------------------------------


def test_it_holds_a_resource_while_the_command_runs(gc: Fleet, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = f'echo "$GC_RESOURCE $GC_FENCE" > {seen}.tmp; mv {seen}.tmp {seen}; sleep 2.5'
    wrapper = _start(gc, "hold", "src/auth/", "--ttl", "1", "--", "sh", "-c", script)
    wait_for(seen.exists)
    resource, fence = seen.read_text().split()
    assert resource == "src/auth/"
    denied = gc.gctl("lease", "acquire", "src/auth/", "--ttl", "5", key=gc.key_b)
    assert denied.returncode == EXIT_DENIED
    # It names the resource, and its window as only the holder's current one (issue 17).
    assert denied.stderr.startswith(
        f"gctl: denied: src/auth/ is held by hand hand-a (fence {fence}), renewing; its current "
        "window ends in "
    )
    assert denied.stderr.endswith(" s: wait, pick other work, or escalate. (lease_held)\n")
    # Held past its 1 s ttl by the wrapper's renewals, then released when the command ended.
    assert wrapper.wait(15) == 0
    acquired = gc.gctl("--json", "lease", "acquire", "src/auth/", "--ttl", "5", key=gc.key_b)
    assert acquired.returncode == 0, acquired.stderr
    assert json.loads(acquired.stdout)["fence"] == int(fence) + 1


def test_it_stops_the_held_command_when_the_lease_is_lost(gc: Fleet, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    wrapper = _start(
        gc, "hold", "dev-server", "--ttl", "5", "--", "sh", "-c", f"touch {seen}; exec sleep 60"
    )
    wait_for(seen.exists)
    attempt_services.lease_break(
        workspace_id=Hand.objects.get(name="hand-a").workspace_id,
        resource="dev-server",
        actor="boss",
        reason="x",
    )
    assert wrapper.wait(15) == EXIT_LOST
    assert "lease lost" in wrapper.communicate()[1]


def test_it_passes_the_commands_exit_status_through_hold(gc: Fleet) -> None:
    held = gc.gctl("hold", "lock", "--", "sh", "-c", "exit 9")
    assert held.returncode == 9
    free = gc.gctl("--json", "lease", "acquire", "lock", "--ttl", "5", key=gc.key_b)
    assert free.returncode == 0, free.stderr
