"""Cursor's hook events answered by the server (`POST /api/v1/hooks/cursor`), from the documented
example events: writes leased for the conversation, denials in the documented `permission`
shape, a write whose file cannot be found refused, shell writes judged after the command ran,
and the editor's `workspace_roots` never taken for a registered repository."""

from __future__ import annotations

from typing import Any

import pytest

from harnesses.formats import FORMATS, Kind, Verdict
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "cursor"
FILE = f"{REPO}/src/app.py"
ALLOWED = {"permission": "allow"}


def write_event(tool_input: Any = None, tool: str = "Write", **changes: Any) -> dict[str, Any]:
    """A `preToolUse` of a write tool: the documented `preToolUse` event with the tool swapped
    (the docs show no write tool's input; `file_path` is the candidate the format reads first)."""
    arguments = {"file_path": FILE, "contents": "print('hello')\n"}
    if tool_input is not None:
        arguments = tool_input
    return event(HARNESS, "pre_tool_use_shell", tool_name=tool, tool_input=arguments, **changes)


def write(api: Api, path: str = FILE, session: str = "conv-123", **facts: object) -> object:
    body = write_event({"file_path": path}, conversation_id=session)
    return answer(hook(api, HARNESS, body, repository=REPO, **facts))


def denial(said: object) -> str:
    assert isinstance(said, dict) and set(said) == {"permission", "user_message", "agent_message"}
    assert said["permission"] == "deny"
    assert said["user_message"] == said["agent_message"]
    return said["agent_message"]


def held(resource: str) -> Lease:
    return Lease.objects.get(resource=resource)


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == body["conversation_id"] == "conv-123"
    expected = {
        "pre_tool_use_shell": Kind.SHELL,
        "before_shell_execution": Kind.SHELL,
        "post_tool_use_shell": Kind.AFTER_SHELL,
        "after_shell_execution": Kind.AFTER_SHELL,
        "after_file_edit": Kind.AFTER_WRITE,  # a write that happened: leased if free
        "session_start": Kind.START,
        "session_end": Kind.END,
        "stop": Kind.STOP,
    }[path.stem]
    assert read.kind == expected
    if expected in (Kind.WRITE, Kind.AFTER_WRITE):
        assert read.paths == (FILE,)


def test_a_write_in_a_registered_repository_is_leased_for_the_conversation(api_a: Api) -> None:
    assert write(api_a) == ALLOWED  # the documented shape: an empty answer may block
    lease = held("src/app.py")
    assert (lease.holder, lease.process_id, lease.status) == ("hand-a", "cursor:conv-123", "held")


@pytest.mark.parametrize("field", ["file_path", "path", "filePath"])
def test_each_candidate_path_field_is_read(api_a: Api, field: str) -> None:
    body = write_event({field: "src/app.py", "contents": "x"}, tool="StrReplace")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) == ALLOWED
    assert held("src/app.py").process_id == "cursor:conv-123"


def test_every_file_a_write_names_is_leased(api_a: Api) -> None:
    body = write_event({"file_path": FILE, "path": "src/other.py"}, tool="Delete")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) == ALLOWED
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/app.py", "src/other.py"}


def test_a_patch_leases_every_file_it_writes(api_a: Api) -> None:
    patch = "*** Begin Patch\n*** Add File: src/a.py\n+x\n*** Update File: src/b.py\n*** End Patch"
    for tool_input in (patch, {"patch": patch}):
        body = write_event(tool_input, tool="ApplyPatch")
        assert answer(hook(api_a, HARNESS, body, repository=REPO)) == ALLOWED
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/a.py", "src/b.py"}


def test_a_write_whose_file_cannot_be_found_is_denied_never_let_through(api_a: Api) -> None:
    for tool_input in ({"contents": "x"}, "not a patch", {"file_path": ""}, None):
        body = write_event()
        body["tool_input"] = tool_input
        sentence = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
        assert "could not read this cursor hook event, so the tool call is refused" in sentence
    body = write_event()
    del body["tool_name"]  # reported from live events: a write no tool name says is refused
    assert "has no tool_name" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert not Lease.objects.exists()


def test_another_conversations_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) == ALLOWED
    sentence = denial(write(api_b, session="conv-999"))
    assert sentence.startswith("Ground Control: src/app.py is held by session conv-123 of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held("src/app.py").process_id == "cursor:conv-123"


def test_workspace_roots_are_no_registered_repository(api_a: Api) -> None:
    body = write_event()
    assert body["workspace_roots"] == [REPO]
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert sentence.startswith(f"Ground Control: {FILE} is in no repository this session ")
    assert not Lease.objects.exists()


def test_a_path_in_no_registered_repository_is_denied(api_a: Api) -> None:
    sentence = denial(write(api_a, "/etc/motd"))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    assert not Lease.objects.exists()


def test_repositories_registered_under_groundcontrol_place_the_write(api_a: Api) -> None:
    said = answer(hook(api_a, HARNESS, write_event(), repositories=[REPO]))
    assert said == ALLOWED
    assert held("src/app.py").process_id == "cursor:conv-123"


def test_a_bad_key_denies_the_write_in_cursor_format(api_a: Api) -> None:
    assert "Ground Control refused the hook's call" in denial(write(Api("gc_nope_nope")))
    assert not Lease.objects.exists()


def test_a_shell_command_is_allowed_in_the_documented_shape(api_a: Api) -> None:
    for name in ("pre_tool_use_shell", "before_shell_execution"):
        assert answer(hook(api_a, HARNESS, event(HARNESS, name), repository=REPO)) == ALLOWED
    read = event(HARNESS, "pre_tool_use_shell", tool_name="Read", tool_input={"path": FILE})
    assert answer(hook(api_a, HARNESS, read, repository=REPO)) == ALLOWED
    assert not Lease.objects.exists()


def test_an_edit_that_happened_is_leased_if_free_and_recorded_if_another_holds_it(
    api_a: Api, api_b: Api
) -> None:
    edited = event(HARNESS, "after_file_edit")
    assert answer(hook(api_a, HARNESS, edited, repository=REPO)) is None  # it has no output
    assert held("src/app.py").process_id == "cursor:conv-123"
    other = event(HARNESS, "after_file_edit", conversation_id="conv-999")
    assert answer(hook(api_b, HARNESS, other, repository=REPO)) is None
    assert held("src/app.py").process_id == "cursor:conv-123"
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-b")


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="conv-999") == ALLOWED
    ran = event(HARNESS, "post_tool_use_shell")
    said = answer(hook(api_a, HARNESS, ran, repository=REPO, changed=[FILE, "src/new.py"]))
    assert said is not None and set(said) == {"additional_context"}, said
    assert (
        "your Shell command changed files another holder has: src/app.py is held by "
        in (said["additional_context"])
    )
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    assert held("src/new.py").process_id == "cursor:conv-123"
    assert held("src/app.py").process_id == "cursor:conv-999"


def test_after_shell_execution_records_what_it_cannot_tell(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="conv-999") == ALLOWED
    ran = event(HARNESS, "after_shell_execution")
    # No cwd in this event: the agent's side gives absolute paths.
    assert answer(hook(api_a, HARNESS, ran, repository=REPO, changed=[FILE])) is None
    recorded = Event.objects.get(kind="write_outside_lease")
    assert recorded.data["process_id"] == "cursor:conv-123"


def test_session_end_releases_everything_the_conversation_holds(api_a: Api, api_b: Api) -> None:
    assert write(api_a) == ALLOWED
    assert write(api_a, f"{REPO}/src/other.py") == ALLOWED
    assert answer(hook(api_a, HARNESS, event(HARNESS, "session_end"))) is None
    assert not Lease.objects.filter(status="held").exists()
    assert write(api_b, session="conv-999") == ALLOWED


def test_session_start_and_stop_say_nothing(api_a: Api) -> None:
    for name in ("session_start", "stop"):
        assert answer(hook(api_a, HARNESS, event(HARNESS, name), repository=REPO)) is None


def test_the_session_is_the_conversation_and_a_body_without_one_is_denied(api_a: Api) -> None:
    body = event(HARNESS, "session_end")
    del body["conversation_id"]
    assert FORMATS[HARNESS].event(body).session_id == "conv-123"  # its documented session_id
    body = write_event()
    del body["conversation_id"]
    sentence = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert "has no conversation_id" in sentence
    for body in ({}, [1, 2]):
        assert "could not read" in denial(answer(api_a.post(f"/hooks/{HARNESS}", body)))


def test_the_stop_hook_is_never_given_a_follow_up() -> None:
    form = FORMATS[HARNESS]
    stop = form.event(event(HARNESS, "stop"))
    assert form.answer(stop, Verdict("deny", "refused")) is None
    start = form.event(event(HARNESS, "session_start"))
    assert form.answer(start, Verdict("allow", "hello")) == {"additional_context": "hello"}
