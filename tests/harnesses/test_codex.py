"""Codex CLI's hook events answered by the server (`POST /api/v1/hooks/codex`), from the
documented example events: every file an `apply_patch` touches leased for the session before it
runs, denials the model reads, shell writes judged after the command ran."""

from __future__ import annotations

import pytest

from harnesses.formats import FORMATS, Kind, Verdict
from harnesses.models import HookSession
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "codex"
SESSION = "019c48b7-7098-7b61-bc48-32e82585d451"


def patch(*operations: str) -> str:
    return "\n".join(["*** Begin Patch", *operations, "*** End Patch"])


def write(
    api: Api, *operations: str, session: str = SESSION, fixture: str = "pre_tool_use_apply_patch"
) -> object:
    body = event(HARNESS, fixture, session_id=session)
    if operations:
        body["tool_input"]["command"] = patch(*operations)
    return answer(hook(api, HARNESS, body, repository=REPO))


def denial(said: object) -> str:
    assert isinstance(said, dict), said
    assert set(said) == {"hookSpecificOutput"}  # Codex refuses an answer with unknown keys
    out = said["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse"
    assert out["permissionDecision"] == "deny"
    return out["permissionDecisionReason"]


def held() -> dict[str, str]:
    return dict(Lease.objects.filter(status="held").values_list("resource", "process_id"))


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == body["session_id"]
    expected = {
        "pre_tool_use_apply_patch": Kind.WRITE,
        "pre_tool_use_apply_patch_add": Kind.WRITE,
        "pre_tool_use_apply_patch_multi": Kind.WRITE,
        "pre_tool_use_shell": Kind.SHELL,
        "post_tool_use_shell": Kind.AFTER_SHELL,
        "session_start": Kind.START,
        "session_end": Kind.END,
        "stop": Kind.STOP,
    }.get(path.stem, Kind.OTHER)  # the apply_patch that ran was judged before it ran
    assert read.kind == expected
    if expected == Kind.WRITE:
        assert read.paths and read.tool == "apply_patch"


def test_a_patch_names_every_file_it_touches_with_or_without_a_final_newline() -> None:
    read = FORMATS[HARNESS].event(event(HARNESS, "pre_tool_use_apply_patch_multi"))
    assert read.paths == ("hello.txt", "src/app.py", "src/main.py", "obsolete.txt")
    read = FORMATS[HARNESS].event(event(HARNESS, "pre_tool_use_apply_patch_add"))
    assert read.paths == ("pre_tool_use_apply_patch.txt",)


def test_a_write_in_a_registered_repository_is_leased_for_the_session(api_a: Api) -> None:
    assert write(api_a) is None  # empty stdout: Codex fails a hook that prints a bare "allow"
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.holder, lease.process_id) == ("hand-a", f"codex:{SESSION}")
    assert HookSession.objects.get().repositories == [REPO]


def test_a_patch_leases_every_file_it_adds_updates_deletes_or_moves_to(api_a: Api) -> None:
    assert write(api_a, fixture="pre_tool_use_apply_patch_multi") is None
    process = f"codex:{SESSION}"
    assert held() == {
        "hello.txt": process,
        "src/app.py": process,
        "src/main.py": process,
        "obsolete.txt": process,
    }


def test_another_sessions_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    sentence = denial(write(api_b, session="def456"))
    assert sentence.startswith(f"Ground Control: src/app.py is held by session {SESSION} of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held() == {"src/app.py": f"codex:{SESSION}"}


@pytest.mark.parametrize(
    "touched",
    [
        "*** Add File: src/main.py\n+new",
        "*** Delete File: src/main.py",
        "*** Update File: src/main.py\n@@\n-a\n+b",
    ],
    ids=["add", "delete", "update"],
)
def test_a_patch_touching_one_file_another_session_holds_is_denied(
    api_a: Api, api_b: Api, touched: str
) -> None:
    assert write(api_a, "*** Add File: src/main.py\n+mine") is None
    said = write(api_b, "*** Add File: docs/free.md\n+free", touched, session="def456")
    assert "src/main.py is held by session " + SESSION in denial(said)


def test_a_move_to_a_file_another_session_holds_is_denied(api_a: Api, api_b: Api) -> None:
    assert write(api_a, "*** Add File: src/main.py\n+mine") is None
    move = "*** Update File: src/app.py\n*** Move to: src/main.py\n@@\n-a\n+b"
    assert "src/main.py is held by session " in denial(write(api_b, move, session="def456"))
    assert held()["src/main.py"] == f"codex:{SESSION}"


def test_a_path_in_no_registered_repository_is_denied_never_guessed(api_a: Api) -> None:
    sentence = denial(write(api_a, "*** Add File: ../elsewhere.txt\n+x"))
    assert sentence.startswith("Ground Control: /home/dev/elsewhere.txt is in no repository ")
    # A session that registered no repository names nothing, not even in its cwd.
    body = event(HARNESS, "pre_tool_use_apply_patch", session_id="def456")
    assert "is in no repository this session registered" in denial(
        answer(hook(api_a, HARNESS, body))
    )
    assert not Lease.objects.exists()


def test_a_patch_that_names_no_file_is_denied(api_a: Api) -> None:
    body = event(HARNESS, "pre_tool_use_apply_patch", **{"tool_input.command": "rm -rf /"})
    said = answer(hook(api_a, HARNESS, body, repository=REPO))
    assert "could not read this codex hook event" in denial(said)
    assert "does not begin with '*** Begin Patch'" in denial(said)
    body = event(HARNESS, "pre_tool_use_apply_patch", **{"tool_input.command": patch()})
    assert "names no file" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))


def test_a_body_that_is_no_event_is_denied(api_a: Api) -> None:
    for body in ({}, {"hook_event_name": "PreToolUse"}, {"session_id": "s"}):
        said = answer(api_a.post(f"/hooks/{HARNESS}", body))
        assert "could not read this codex hook event" in denial(said)
    body = event(HARNESS, "pre_tool_use_apply_patch")
    del body["tool_input"]["command"]
    assert "has no command" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))


def test_a_shell_command_is_allowed_and_judged_after_it_ran(api_a: Api) -> None:
    assert answer(hook(api_a, HARNESS, event(HARNESS, "pre_tool_use_shell"), repository=REPO)) is (
        None
    )
    ran = event(HARNESS, "post_tool_use_shell")
    assert answer(hook(api_a, HARNESS, ran, repository=REPO, changed=["a.txt"])) is None
    assert held() == {"a.txt": f"codex:{SESSION}"}


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="def456") is None
    ran = event(HARNESS, "post_tool_use_shell")
    said = answer(
        hook(api_a, HARNESS, ran, repository=REPO, changed=[f"{REPO}/src/app.py", "src/new.py"])
    )
    # Codex gives the model the reason in place of the command's output.
    assert said is not None and set(said) == {"decision", "reason"}
    assert said["decision"] == "block"
    assert (
        "your Bash command changed files another holder has: src/app.py is held by "
        in (said["reason"])
    )
    assert "git restore" in said["reason"]
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    assert held() == {"src/app.py": "codex:def456", "src/new.py": f"codex:{SESSION}"}


def test_session_end_releases_everything_the_session_holds(api_a: Api, api_b: Api) -> None:
    assert write(api_a, fixture="pre_tool_use_apply_patch_multi") is None
    end = event(HARNESS, "session_end", session_id=SESSION)
    assert answer(hook(api_a, HARNESS, end)) is None
    assert not held()
    assert HookSession.objects.get().ended_at is not None
    assert write(api_b, session="def456") is None


def test_stop_never_keeps_the_model_working(api_a: Api) -> None:
    read = FORMATS[HARNESS].event(event(HARNESS, "stop"))
    said = FORMATS[HARNESS].answer(read, Verdict("deny", "Ground Control: no."))
    assert said == {"systemMessage": "Ground Control: no."}
    assert answer(hook(api_a, HARNESS, event(HARNESS, "stop"), repository=REPO)) is None
