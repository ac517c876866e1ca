"""Gemini CLI's hook events answered by the server (`POST /api/v1/hooks/gemini`), from the
documented example events: writes leased for the session, denials the model reads as the tool's
error, shell writes judged after the command ran and told beside its result."""

from __future__ import annotations

import pytest

from harnesses.formats import FORMATS, Kind, Verdict
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "gemini"
FILE = f"{REPO}/src/app.py"


def write(api: Api, path: str = FILE, session: str = "abc123", **facts: object) -> object:
    body = event(HARNESS, "before_tool_write_file", **{"tool_input.file_path": path})
    body["session_id"] = session
    return answer(hook(api, HARNESS, body, repository=REPO, **facts))


def denial(said: object) -> str:
    # Exactly the documented denial: nothing that would stop the agent loop.
    assert isinstance(said, dict) and set(said) == {"decision", "reason"}, said
    assert said["decision"] == "deny"
    return said["reason"]


def held(resource: str) -> Lease:
    return Lease.objects.get(resource=resource)


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == body["session_id"]
    assert read.cwd == REPO
    expected = {
        "before_tool_write_file": Kind.WRITE,
        "before_tool_replace": Kind.WRITE,
        "before_tool_shell": Kind.SHELL,
        "after_tool_shell": Kind.AFTER_SHELL,
        "session_start": Kind.START,
        "session_end": Kind.END,
    }.get(path.stem, Kind.OTHER)
    assert read.kind == expected
    if expected == Kind.WRITE:
        assert read.paths == (FILE,)


def test_the_end_of_the_agents_turn_is_a_stop() -> None:
    body = event(HARNESS, "session_start", hook_event_name="AfterAgent")
    assert FORMATS[HARNESS].event(body).kind == Kind.STOP


def test_a_write_in_a_registered_repository_is_leased_for_the_session(api_a: Api) -> None:
    assert write(api_a) is None  # nothing to say: Gemini's own policy decides the rest
    lease = held("src/app.py")
    assert (lease.holder, lease.process_id, lease.status) == ("hand-a", "gemini:abc123", "held")


def test_replace_leases_the_file_it_names(api_a: Api, api_b: Api) -> None:
    body = event(HARNESS, "before_tool_replace")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    assert held("src/app.py").process_id == "gemini:abc123"
    assert "session abc123" in denial(write(api_b, session="def456"))


def test_another_sessions_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    sentence = denial(write(api_b, session="def456"))
    assert sentence.startswith("Ground Control: src/app.py is held by session abc123 of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held("src/app.py").process_id == "gemini:abc123"


def test_a_relative_path_is_placed_from_the_events_cwd(api_a: Api, api_b: Api) -> None:
    assert write(api_a, "src/app.py") is None
    assert "session abc123" in denial(write(api_b, FILE, session="def456"))
    assert Lease.objects.filter(status="held").count() == 1


def test_repositories_registered_under_groundcontrol_place_the_write(api_a: Api) -> None:
    body = event(HARNESS, "before_tool_write_file")
    said = answer(hook(api_a, HARNESS, body, repositories=[REPO]))
    assert said is None
    assert held("src/app.py").process_id == "gemini:abc123"


def test_a_path_in_no_registered_repository_is_denied_never_guessed(api_a: Api) -> None:
    body = event(HARNESS, "before_tool_write_file", **{"tool_input.file_path": "/etc/motd"})
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    # The cwd is no repository: a session that registered none names nothing.
    sentence = denial(answer(hook(api_a, HARNESS, event(HARNESS, "before_tool_write_file"))))
    assert "is in no repository this session registered" in sentence
    assert not Lease.objects.exists()


def test_a_write_that_names_no_file_is_denied(api_a: Api) -> None:
    body = event(HARNESS, "before_tool_write_file")
    del body["tool_input"]["file_path"]
    sentence = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert "could not read this gemini hook event" in sentence
    assert "has no file_path" in sentence
    for body in ({}, {"hook_event_name": "BeforeTool"}, [1, 2]):
        said = answer(api_a.post(f"/hooks/{HARNESS}", body))
        assert "could not read this gemini hook event" in denial(said)
    assert not Lease.objects.exists()


def test_a_bad_key_denies_the_write_in_gemini_format(api_a: Api) -> None:
    assert "Ground Control refused the hook's call" in denial(write(Api("gc_nope_nope")))
    assert not Lease.objects.exists()


def test_a_shell_command_and_other_tools_are_let_through_silently(api_a: Api) -> None:
    assert (
        answer(hook(api_a, HARNESS, event(HARNESS, "before_tool_shell"), repository=REPO)) is None
    )
    ran = event(HARNESS, "after_tool_write_file")
    assert answer(hook(api_a, HARNESS, ran, repository=REPO)) is None
    started = event(HARNESS, "session_start")
    assert answer(hook(api_a, HARNESS, started, repository=REPO)) is None
    assert not Lease.objects.exists()


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="def456") is None
    ran = event(HARNESS, "after_tool_shell")
    said = answer(hook(api_a, HARNESS, ran, repository=REPO, changed=["src/app.py", "src/new.py"]))
    # Appended to the command's result for the model: no decision, nothing that stops the loop.
    assert said is not None and set(said) == {"hookSpecificOutput"}, said
    out = said["hookSpecificOutput"]
    assert out["hookEventName"] == "AfterTool"
    assert (
        "your run_shell_command command changed files another holder has: src/app.py is "
        in (out["additionalContext"])
    )
    assert "git restore" in out["additionalContext"]
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    assert held("src/new.py").process_id == "gemini:abc123"
    assert held("src/app.py").process_id == "gemini:def456"


def test_a_shell_write_to_files_nobody_holds_says_nothing(api_a: Api) -> None:
    ran = event(HARNESS, "after_tool_shell")
    assert answer(hook(api_a, HARNESS, ran, repository=REPO, changed=[FILE])) is None
    assert held("src/app.py").process_id == "gemini:abc123"


def test_session_end_releases_everything_the_session_holds(api_a: Api, api_b: Api) -> None:
    assert write(api_a) is None
    assert write(api_a, f"{REPO}/src/other.py") is None
    assert answer(hook(api_a, HARNESS, event(HARNESS, "session_end"))) is None
    assert not Lease.objects.filter(status="held").exists()
    assert write(api_b, session="def456") is None


def test_where_nothing_can_be_refused_the_user_is_told() -> None:
    form = FORMATS[HARNESS]
    refused = Verdict("deny", "Ground Control refused the hook's call")
    for name in ("SessionStart", "SessionEnd", "AfterAgent", "BeforeAgent"):
        read = form.event(event(HARNESS, "session_start", hook_event_name=name))
        assert form.answer(read, refused) == {"systemMessage": refused.sentence}
    # With nothing to refuse, nothing is said; a sentence at SessionStart reaches the model.
    start = form.event(event(HARNESS, "session_start"))
    assert form.answer(start, Verdict("allow")) is None
    assert form.answer(start, Verdict("allow", "hello")) == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hello"}
    }
