"""GitHub Copilot's hook events answered by the server (`POST /api/v1/hooks/copilot`), from the
documented example inputs of the SDK's callbacks and the CLI's command hooks: writes leased for
the session, denials the model reads, shell writes judged after the command ran."""

from __future__ import annotations

import json

import pytest

from harnesses.formats import FORMATS, Kind, Verdict
from harnesses.models import HookSession
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "copilot"
SESSION = "5f0c9a52-3b1e-4d7a-9c2f-8e6b1a4d7c30"
FILE = f"{REPO}/src/app.py"


def write(
    api: Api, path: str = FILE, session: str = SESSION, fixture: str = "sdk_pre_tool_use_write"
) -> object:
    body = event(HARNESS, fixture, sessionId=session)
    arguments = body["toolArgs"]
    if isinstance(arguments, str):  # a command hook's toolArgs: JSON text
        body["toolArgs"] = json.dumps({**json.loads(arguments), "path": path})
    else:
        arguments["path"] = path
    return answer(hook(api, HARNESS, body, repository=REPO))


def denial(said: object) -> str:
    assert isinstance(said, dict), said
    assert said["permissionDecision"] == "deny"
    return said["permissionDecisionReason"]


def held() -> dict[str, str]:
    return dict(Lease.objects.filter(status="held").values_list("resource", "process_id"))


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    expected = {
        "cli_agent_stop": Kind.STOP,
        "cli_pre_tool_use_edit": Kind.WRITE,
        "cli_pre_tool_use_shell": Kind.SHELL,
        "cli_pre_tool_use_write": Kind.WRITE,
        "cli_session_start": Kind.START,
        "cli_vscode_pre_tool_use_shell": Kind.SHELL,
        "cli_vscode_pre_tool_use_write": Kind.WRITE,
        "sdk_hooks_invoke_pre_tool_use": Kind.WRITE,
        "sdk_post_tool_use_shell": Kind.AFTER_SHELL,
        "sdk_pre_tool_use_edit": Kind.WRITE,
        "sdk_pre_tool_use_shell": Kind.SHELL,
        "sdk_pre_tool_use_write": Kind.WRITE,
        "sdk_session_end": Kind.END,
        "sdk_session_start": Kind.START,
        # The older reference's inputs name no session: nothing is leased for, or released
        # from, no session.
        "cli_post_tool_use_shell": Kind.OTHER,
        "cli_session_end": Kind.OTHER,
    }.get(path.stem, Kind.OTHER)
    assert read.kind == expected
    assert read.session_id == body.get("sessionId", body.get("session_id", "no-session"))
    if expected == Kind.WRITE:
        assert read.paths == (FILE,)


def test_the_same_call_reads_alike_in_every_documented_form() -> None:
    forms = [
        event(HARNESS, "sdk_pre_tool_use_edit"),
        event(HARNESS, "cli_pre_tool_use_edit"),  # toolArgs as JSON text
        event(HARNESS, "sdk_hooks_invoke_pre_tool_use"),
    ]
    callback = event(HARNESS, "sdk_pre_tool_use_edit")  # as the Node SDK hands it a callback
    callback["workingDirectory"] = callback.pop("cwd")
    callback["timestamp"] = "2024-01-07T08:03:20.000Z"
    forms.append(callback)
    read = {FORMATS[HARNESS].event(body) for body in forms}
    assert len(read) == 1
    (one,) = read
    assert (one.kind, one.session_id, one.cwd, one.tool) == (Kind.WRITE, SESSION, REPO, "edit")


@pytest.mark.parametrize(
    "fixture", ["sdk_pre_tool_use_write", "sdk_pre_tool_use_edit", "cli_pre_tool_use_write"]
)
def test_a_write_in_a_registered_repository_is_leased_for_the_session(
    api_a: Api, fixture: str
) -> None:
    assert write(api_a, fixture=fixture) is None
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.holder, lease.process_id) == ("hand-a", f"copilot:{SESSION}")
    assert HookSession.objects.get().repositories == [REPO]


def test_a_relative_path_is_placed_from_the_cwd(api_a: Api) -> None:
    assert write(api_a, "src/other.py") is None
    assert held() == {"src/other.py": f"copilot:{SESSION}"}


def test_the_vs_code_compatible_input_is_leased_for_its_session(api_a: Api, api_b: Api) -> None:
    body = event(HARNESS, "cli_vscode_pre_tool_use_write")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    assert held() == {"src/app.py": f"copilot:{SESSION}"}
    body = event(HARNESS, "cli_vscode_pre_tool_use_write", session_id="def456")
    said = answer(hook(api_b, HARNESS, body, repository=REPO))
    assert "held by session " + SESSION in denial(said)


def test_the_hooks_invoke_request_is_read_and_answered_with_its_output(api_a: Api) -> None:
    body = event(HARNESS, "sdk_hooks_invoke_pre_tool_use")
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    assert held() == {"src/app.py": f"copilot:{SESSION}"}
    body = event(HARNESS, "sdk_hooks_invoke_pre_tool_use", sessionId="def456")
    body["input"]["sessionId"] = "def456"
    assert "held by session " + SESSION in denial(
        answer(hook(api_a, HARNESS, body, repository=REPO))
    )


def test_another_sessions_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    said = write(api_b, session="def456", fixture="cli_pre_tool_use_edit")
    assert set(said) == {"permissionDecision", "permissionDecisionReason"}
    sentence = denial(said)
    assert sentence.startswith(f"Ground Control: src/app.py is held by session {SESSION} of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held() == {"src/app.py": f"copilot:{SESSION}"}


def test_a_sub_agents_call_in_hooks_invoke_is_its_invoking_sessions() -> None:
    body = event(HARNESS, "sdk_hooks_invoke_pre_tool_use")
    body["input"]["sessionId"] = "sub-agent-session"
    assert FORMATS[HARNESS].event(body).session_id == SESSION


def test_a_write_without_a_session_is_denied_and_a_shell_command_is_not(api_a: Api) -> None:
    body = event(HARNESS, "cli_pre_tool_use_write")
    del body["sessionId"]
    sentence = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert "could not read this copilot hook event" in sentence and "no session id" in sentence
    shell = event(HARNESS, "cli_pre_tool_use_shell")  # the older reference's, with no sessionId
    assert answer(hook(api_a, HARNESS, shell, repository=REPO)) is None
    ran = event(HARNESS, "cli_post_tool_use_shell")
    assert answer(hook(api_a, HARNESS, ran, repository=REPO, changed=["a.txt"])) is None
    assert not Lease.objects.exists()


def test_a_path_in_no_registered_repository_is_denied_never_guessed(api_a: Api) -> None:
    sentence = denial(write(api_a, "/etc/motd"))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    body = event(HARNESS, "sdk_pre_tool_use_write", sessionId="def456")
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert "is in no repository this session registered" in sentence
    assert not Lease.objects.exists()


def test_a_body_that_is_no_event_it_can_act_on_is_denied(api_a: Api) -> None:
    for body in ({}, {"sessionId": SESSION, "toolArgs": {}}, {"hookType": "preToolUse"}):
        said = answer(api_a.post(f"/hooks/{HARNESS}", body))
        assert "could not read this copilot hook event" in denial(said)
    body = event(HARNESS, "cli_pre_tool_use_write", toolArgs="{not json")
    assert "is no object" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    body = event(HARNESS, "sdk_pre_tool_use_edit")
    del body["toolArgs"]["path"]
    assert "has no path" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))


def test_an_edit_whose_arguments_are_undocumented_is_left_alone() -> None:
    for tool in ("str_replace_editor", "apply_patch"):
        body = event(HARNESS, "sdk_pre_tool_use_edit", toolName=tool)
        assert FORMATS[HARNESS].event(body).kind == Kind.OTHER
    body = event(HARNESS, "cli_vscode_pre_tool_use_write", tool_name="Edit")
    body["tool_input"] = "*** Begin Patch\n*** Add File: x\n+x\n*** End Patch"
    assert FORMATS[HARNESS].event(body).kind == Kind.OTHER


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="def456") is None
    ran = event(HARNESS, "sdk_post_tool_use_shell")
    said = answer(
        hook(api_a, HARNESS, ran, repository=REPO, changed=[f"{REPO}/src/app.py", "src/new.py"])
    )
    # Copilot appends additionalContext to the command's result for the model.
    assert said is not None and set(said) == {"additionalContext"}
    assert (
        "your bash command changed files another holder has: src/app.py is held by "
        in (said["additionalContext"])
    )
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    assert held() == {"src/app.py": "copilot:def456", "src/new.py": f"copilot:{SESSION}"}


def test_a_failed_shell_command_is_judged_too(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="def456") is None
    failed = event(HARNESS, "sdk_pre_tool_use_shell", error="exit code 1")
    assert FORMATS[HARNESS].event(failed).kind == Kind.AFTER_SHELL
    said = answer(hook(api_a, HARNESS, failed, repository=REPO, changed=["src/app.py"]))
    assert "src/app.py is held by session def456" in said["additionalContext"]


def test_session_end_releases_everything_the_session_holds(api_a: Api, api_b: Api) -> None:
    assert write(api_a) is None
    assert write(api_a, f"{REPO}/src/other.py") is None
    assert answer(hook(api_a, HARNESS, event(HARNESS, "sdk_session_end"))) is None
    assert not held()
    assert HookSession.objects.get().ended_at is not None
    assert write(api_b, session="def456") is None


def test_an_agent_stop_is_never_told_to_go_on() -> None:
    read = FORMATS[HARNESS].event(event(HARNESS, "cli_agent_stop"))
    assert FORMATS[HARNESS].answer(read, Verdict("deny", "Ground Control: no.")) is None
