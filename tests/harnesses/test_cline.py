"""Cline's hooks answered by the server (`POST /api/v1/hooks/cline`), from the documented example
events of classic Cline (3.x), the SDK-based 4.x extension and the SDK/CLI file hooks: writes
leased for the task, the one refusal Cline offers (a cancel, which stops the task) kept for
writes, shell writes told after the command ran, the task's end releasing what it holds."""

from __future__ import annotations

from typing import Any

import pytest

from harnesses.formats import FORMATS, Kind
from harnesses.models import HookSession
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "cline"
TASK = "1736654399000"
OTHER = "1736654499000"
FILE = f"{REPO}/src/app.py"
ALLOWED = {"cancel": False}
PATCH = (
    "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n"
    "*** Add File: src/util.py\n+VALUE = 1\n*** End Patch"
)


def write(api: Api, path: str = "src/app.py", task: str = TASK, **facts: object) -> object:
    body = event(HARNESS, "pre_tool_use_write_to_file", **{"preToolUse.parameters.path": path})
    body["taskId"] = task
    return answer(hook(api, HARNESS, body, repository=REPO, **facts))


def denial(said: object) -> str:
    assert isinstance(said, dict) and set(said) == {"cancel", "errorMessage"}, said
    assert said["cancel"] is True
    return said["errorMessage"]


def told(said: object) -> str:
    assert isinstance(said, dict) and set(said) == {"cancel", "contextModification"}, said
    assert said["cancel"] is False
    return said["contextModification"]


def held(resource: str) -> Lease:
    return Lease.objects.get(resource=resource)


def tool_call(name: str, tool: str, **parameters: Any) -> dict[str, Any]:
    body = event(HARNESS, name)
    body["preToolUse"] = {"toolName": tool, "parameters": parameters}
    return body


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == body["taskId"]
    assert read.cwd == REPO
    expected = {
        "pre_tool_use_write_to_file": Kind.WRITE,
        "pre_tool_use_write_to_file_absolute_path": Kind.WRITE,
        "pre_tool_use_replace_in_file": Kind.WRITE,
        "v4_pre_tool_use_editor": Kind.WRITE,
        "sdk_cli_pre_tool_use_tool_call": Kind.WRITE,
        "pre_tool_use_execute_command": Kind.SHELL,
        "v4_pre_tool_use_run_commands": Kind.SHELL,
        "post_tool_use_execute_command": Kind.AFTER_SHELL,
        "v4_post_tool_use_run_commands": Kind.AFTER_SHELL,
        "task_start": Kind.START,
        "task_resume": Kind.START,
        "task_complete": Kind.END,
        "task_cancel": Kind.END,
    }.get(path.stem, Kind.OTHER)
    assert read.kind == expected
    if expected == Kind.WRITE:
        assert read.paths in (("src/app.py",), (FILE,))


def test_a_write_in_a_registered_repository_is_leased_for_the_task(api_a: Api) -> None:
    assert write(api_a) == ALLOWED  # Cline's hook must print JSON: the explicit allow
    lease = held("src/app.py")
    assert (lease.holder, lease.process_id, lease.status) == ("hand-a", f"cline:{TASK}", "held")
    assert HookSession.objects.get().repositories == [REPO]


@pytest.mark.parametrize(
    "name",
    [
        "pre_tool_use_write_to_file_absolute_path",
        "pre_tool_use_replace_in_file",
        "v4_pre_tool_use_editor",
        "sdk_cli_pre_tool_use_tool_call",
    ],
)
def test_each_writing_tool_leases_the_file_it_names(api_a: Api, name: str) -> None:
    assert answer(hook(api_a, HARNESS, event(HARNESS, name), repository=REPO)) == ALLOWED
    assert held("src/app.py").status == "held"


def test_another_tasks_write_is_cancelled_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) == ALLOWED
    sentence = denial(write(api_b, FILE, task=OTHER))
    assert sentence.startswith(f"Ground Control: src/app.py is held by session {TASK} of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert held("src/app.py").process_id == f"cline:{TASK}"


def test_apply_patch_leases_every_file_the_patch_writes(api_a: Api, api_b: Api) -> None:
    body = tool_call("v4_pre_tool_use_editor", "apply_patch", input=PATCH)
    assert answer(hook(api_a, HARNESS, body, repository=REPO)) == ALLOWED
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/app.py", "src/util.py"}
    other = tool_call("pre_tool_use_write_to_file", "apply_patch", input=PATCH)
    assert "src/app.py is held by session" in denial(
        answer(hook(api_b, HARNESS, other, repository=REPO))
    )


def test_the_workspace_root_only_places_a_relative_path_and_registers_nothing(
    api_a: Api,
) -> None:
    body = event(HARNESS, "pre_tool_use_write_to_file")
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert sentence.startswith(f"Ground Control: {FILE} is in no repository this session ")
    assert HookSession.objects.get().repositories == []
    body.pop("workspaceRoots")  # proto3 leaves an empty list out
    assert "is relative and the event has no absolute cwd" in denial(
        answer(hook(api_a, HARNESS, body, repository=REPO))
    )
    assert not Lease.objects.exists()


def test_a_path_in_no_registered_repository_is_cancelled(api_a: Api) -> None:
    sentence = denial(write(api_a, "/etc/motd"))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    assert not Lease.objects.exists()


def test_a_write_whose_file_cannot_be_read_is_cancelled(api_a: Api) -> None:
    body = tool_call("pre_tool_use_write_to_file", "write_to_file", content="x")
    said = denial(answer(hook(api_a, HARNESS, body, repository=REPO)))
    assert "could not read this cline hook event" in said
    assert "no path or absolutePath" in said
    for bad in ({}, {"hookName": "PreToolUse"}, [1]):
        said = denial(answer(api_a.post(f"/hooks/{HARNESS}", bad)))
        assert "could not read this cline hook event" in said


def test_a_failed_check_cancels_a_write_but_never_another_call(db: None) -> None:
    """A cancel stops the whole task: a bad key (or an outage) refuses writes only."""
    assert "Ground Control refused the hook's call" in denial(write(Api(None)))
    for name in ("pre_tool_use_execute_command", "task_start", "user_prompt_submit"):
        said = answer(hook(Api(None), HARNESS, event(HARNESS, name)))
        assert "Ground Control refused the hook's call" in told(said)
    reading = tool_call("pre_tool_use_write_to_file", "read_file", path="src/app.py")
    assert "refused" in told(answer(hook(Api(None), HARNESS, reading)))


def test_a_shell_command_about_to_run_is_let_through(api_a: Api) -> None:
    for name in ("pre_tool_use_execute_command", "v4_pre_tool_use_run_commands"):
        response = hook(api_a, HARNESS, event(HARNESS, name), repository=REPO)
        assert answer(response) == ALLOWED
        assert response["X-GC-Changed"] == "snapshot"


@pytest.mark.parametrize("name", ["post_tool_use_execute_command", "v4_post_tool_use_run_commands"])
def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(
    api_a: Api, api_b: Api, name: str
) -> None:
    assert write(api_b, task=OTHER) == ALLOWED
    ran = event(HARNESS, name)
    said = told(answer(hook(api_a, HARNESS, ran, repository=REPO, changed=[FILE, "src/new.py"])))
    assert "command changed files another holder has: src/app.py is held by session " in said
    assert "git restore" in said
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    # The relative path is placed from the workspace root.
    assert held("src/new.py").process_id == f"cline:{ran['taskId']}"


@pytest.mark.parametrize("name", ["task_complete", "task_cancel"])
def test_the_tasks_end_releases_everything_it_holds(api_a: Api, api_b: Api, name: str) -> None:
    assert answer(hook(api_a, HARNESS, event(HARNESS, "task_start"), repository=REPO)) == ALLOWED
    assert write(api_a) == ALLOWED
    assert write(api_a, "src/other.py") == ALLOWED
    assert answer(hook(api_a, HARNESS, event(HARNESS, name))) == ALLOWED
    assert not Lease.objects.filter(status="held").exists()
    assert HookSession.objects.get().ended_at is not None
    assert write(api_b, task=OTHER) == ALLOWED
    # A task resumed after its end is a session again.
    assert answer(hook(api_a, HARNESS, event(HARNESS, "task_resume"))) == ALLOWED
    assert HookSession.objects.get(process_id=f"cline:{TASK}").ended_at is None
