"""OpenCode's hooks answered by the server (`POST /api/v1/hooks/opencode`), as Ground Control's
OpenCode plugin posts them (the documented hook arguments, under `hook` and `directory`): writes
leased for the session, denials the plugin throws, shell writes told after the command ran."""

from __future__ import annotations

from typing import Any

import pytest

from harnesses.formats import FORMATS, Kind
from harnesses.models import HookSession
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "opencode"
SESSION = "ses_3f2a9c1d7ffeQk2Lw8nR5tYb1c"
OTHER = "ses_4b5c6d7e8f90Aa1Bb2Cc3Dd4Ee"
FILE = f"{REPO}/src/app.py"
PATCH = (
    "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n"
    "*** Add File: src/util.py\n+VALUE = 1\n*** End Patch"
)


def posted(name: str, **changes: Any) -> dict[str, Any]:
    """The documented hook argument(s) `name`, as the plugin posts them: the hook it came to
    (from the file's name) and the plugin's directory."""
    body = event(HARNESS, name, **changes)
    if name.startswith("tool_execute_"):
        hook_name = "tool.execute." + name.split("_")[2]
    else:
        hook_name = "event"
    return {"hook": hook_name, "directory": REPO, **body}


def write(api: Api, path: str = FILE, session: str = SESSION, **facts: object) -> object:
    body = posted("tool_execute_before_write", **{"output.args.filePath": path})
    body["input"]["sessionID"] = session
    return answer(hook(api, HARNESS, body, repository=REPO, **facts))


def denial(said: object) -> str:
    assert isinstance(said, dict) and set(said) == {"deny"}, said
    return said["deny"]


def held(resource: str) -> Lease:
    return Lease.objects.get(resource=resource)


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = posted(path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == SESSION
    expected = {
        "tool_execute_before_write": Kind.WRITE,
        "tool_execute_before_edit": Kind.WRITE,
        "tool_execute_before_apply_patch": Kind.WRITE,
        "tool_execute_before_bash": Kind.SHELL,
        "tool_execute_after_bash": Kind.AFTER_SHELL,
        "event_session_created": Kind.START,
        "event_session_idle": Kind.STOP,
        "event_session_deleted": Kind.END,
    }[path.stem]
    assert read.kind == expected
    assert read.cwd == REPO
    if path.stem == "tool_execute_before_apply_patch":
        assert read.paths == ("src/app.py", "src/util.py")
    elif expected == Kind.WRITE:
        assert read.paths == (FILE,)


def test_the_older_session_events_name_the_session_only_in_their_info() -> None:
    body = posted("event_session_created")
    del body["event"]["properties"]["sessionID"], body["event"]["id"]
    read = FORMATS[HARNESS].event(body)
    assert (read.kind, read.session_id) == (Kind.START, SESSION)


def test_a_write_in_a_registered_repository_is_leased_for_the_session(api_a: Api) -> None:
    assert write(api_a) is None  # nothing to say: the plugin lets the tool run
    lease = held("src/app.py")
    assert (lease.holder, lease.process_id) == ("hand-a", f"opencode:{SESSION}")
    assert lease.status == "held"
    assert HookSession.objects.get().repositories == [REPO]


def test_an_edit_and_a_relative_path_lease_the_file_from_the_plugins_directory(
    api_a: Api, api_b: Api
) -> None:
    body = posted("tool_execute_before_edit")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    relative = posted("tool_execute_before_write", **{"output.args.filePath": "src/app.py"})
    relative["input"]["sessionID"] = OTHER
    assert "src/app.py is held by session" in denial(
        answer(hook(api_b, HARNESS, relative, repository=REPO))
    )
    assert Lease.objects.filter(status="held").count() == 1


def test_another_sessions_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    sentence = denial(write(api_b, session=OTHER))
    assert sentence.startswith(f"Ground Control: src/app.py is held by session {SESSION} of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held("src/app.py").process_id == f"opencode:{SESSION}"


def test_apply_patch_leases_every_file_the_patch_writes(api_a: Api, api_b: Api) -> None:
    body = posted("tool_execute_before_apply_patch")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/app.py", "src/util.py"}
    # Another session's patch touching one of them is refused as a whole.
    other = posted("tool_execute_before_apply_patch", **{"output.args.patchText": PATCH})
    other["input"]["sessionID"] = OTHER
    said = denial(answer(hook(api_b, HARNESS, other, repository=REPO)))
    assert "src/app.py is held by session" in said


def test_a_patch_that_names_no_file_is_denied(api_a: Api) -> None:
    body = posted("tool_execute_before_apply_patch", **{"output.args.patchText": "rm -rf /"})
    said = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert "could not read this opencode hook event" in said
    assert "does not begin with '*** Begin Patch'" in said


def test_a_path_in_no_registered_repository_is_denied_never_guessed(api_a: Api) -> None:
    body = posted("tool_execute_before_write", **{"output.args.filePath": "/etc/motd"})
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    # The plugin's directory only places a relative path: it registers nothing.
    body = posted("tool_execute_before_write", **{"output.args.filePath": "src/app.py"})
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert "is in no repository this session registered" in sentence
    assert not Lease.objects.exists()


def test_a_body_that_is_no_plugin_hook_is_denied(api_a: Api) -> None:
    bare = event(HARNESS, "tool_execute_before_write")  # no `hook`: not the plugin's body
    for body in (bare, {"hook": "tool.execute.around"}, {"hook": "event", "event": {}}):
        said = answer(hook(api_a, HARNESS, body, repository=REPO))
        assert "could not read this opencode hook event" in denial(said)
    body = posted("tool_execute_before_write")
    del body["output"]["args"]["filePath"]
    assert "has no filePath" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))


def test_other_tools_and_a_shell_command_about_to_run_are_let_through(api_a: Api) -> None:
    read = posted("tool_execute_before_write", **{"input.tool": "read"})
    assert answer(hook(api_a, HARNESS, read, repository=REPO)) is None
    response = hook(api_a, HARNESS, posted("tool_execute_before_bash"), repository=REPO)
    assert answer(response) is None
    assert response["X-GC-Changed"] == "snapshot"
    assert not Lease.objects.exists()


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session=OTHER) is None
    ran = posted("tool_execute_after_bash")
    changed = [f"{REPO}/src/app.py", f"{REPO}/src/new.py"]
    said = answer(hook(api_a, HARNESS, ran, repository=REPO, changed=changed))
    assert isinstance(said, dict) and set(said) == {"tell"}, said
    assert (
        "your bash command changed files another holder has: src/app.py is held by "
        in (said["tell"])
    )
    assert "git restore" in said["tell"]
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    assert held("src/new.py").process_id == f"opencode:{SESSION}"
    assert held("src/app.py").process_id == f"opencode:{OTHER}"


def test_a_failure_after_the_command_ran_is_told_not_thrown(db: None) -> None:
    said = answer(hook(Api(None), HARNESS, posted("tool_execute_after_bash"), changed=[FILE]))
    assert isinstance(said, dict) and set(said) == {"tell"}, said
    assert "Ground Control refused the hook's call" in said["tell"]


def test_a_turn_that_ends_keeps_the_leases_and_session_deleted_releases_them(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    assert answer(hook(api_a, HARNESS, posted("event_session_idle"))) is None
    assert held("src/app.py").status == "held"
    assert answer(hook(api_a, HARNESS, posted("event_session_created"))) is None
    assert answer(hook(api_a, HARNESS, posted("event_session_deleted"))) is None
    assert not Lease.objects.filter(status="held").exists()
    assert HookSession.objects.get().ended_at is not None
    assert write(api_b, session=OTHER) is None
