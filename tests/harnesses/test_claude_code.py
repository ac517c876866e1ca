"""Claude Code's hook events answered by the server (`POST /api/v1/hooks/claude-code`), from the
documented example events: writes leased for the session, denials the model reads, every event
renewing what the session holds, shell writes judged after the command ran."""

from __future__ import annotations

import pytest

from harnesses.formats import FORMATS, Kind
from harnesses.models import HookSession
from leases import clock
from leases.models import Event, Lease
from tests.harnesses.events import REPO, answer, documented, event, hook
from tests.support.api import Api

HARNESS = "claude-code"
FILE = f"{REPO}/src/app.py"


def write(api: Api, path: str = FILE, session: str = "abc123", **facts: object) -> object:
    body = event(HARNESS, "pre_tool_use_write", **{"tool_input.file_path": path})
    body["session_id"] = session
    return answer(hook(api, HARNESS, body, repository=REPO, **facts))


def denial(said: object) -> str:
    assert isinstance(said, dict), said
    out = said["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse"
    assert out["permissionDecision"] == "deny"
    return out["permissionDecisionReason"]


def held(resource: str) -> Lease:
    return Lease.objects.get(resource=resource)


@pytest.mark.parametrize("path", documented(HARNESS), ids=lambda p: p.stem)
def test_every_documented_event_is_read(path) -> None:
    body = event(HARNESS, path.stem)
    read = FORMATS[HARNESS].event(body)
    assert read.session_id == body["session_id"]
    expected = {
        "pre_tool_use_write": Kind.WRITE,
        "pre_tool_use_edit": Kind.WRITE,
        "pre_tool_use_multi_edit": Kind.WRITE,
        "pre_tool_use_notebook_edit": Kind.WRITE,
        "pre_tool_use_bash": Kind.SHELL,
        "post_tool_use_bash": Kind.AFTER_SHELL,
        "session_start": Kind.START,
        "session_end": Kind.END,
        "stop": Kind.STOP,
    }.get(path.stem, Kind.OTHER)
    assert read.kind == expected
    if expected == Kind.WRITE:
        assert read.paths and read.paths[0].startswith("/")


def test_a_write_in_a_registered_repository_is_leased_for_the_session(api_a: Api) -> None:
    assert write(api_a) is None  # nothing to say: the session's own permission rules decide
    lease = held("src/app.py")
    assert (lease.holder, lease.process_id, lease.status) == (
        "hand-a",
        "claude-code:abc123",
        "held",
    )
    session = HookSession.objects.get()
    assert session.repositories == [REPO]


def test_each_writing_tool_leases_the_file_it_names(api_a: Api) -> None:
    for name in ("pre_tool_use_edit", "pre_tool_use_multi_edit", "pre_tool_use_notebook_edit"):
        body = event(HARNESS, name)
        assert answer(hook(api_a, HARNESS, body, repository=REPO)) is None
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/app.py", "notebooks/analysis.ipynb"}


def test_another_sessions_write_is_denied_saying_whose_session_holds_it(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a) is None
    sentence = denial(write(api_b, session="def456"))
    assert sentence.startswith("Ground Control: src/app.py is held by session abc123 of hand ")
    assert "'hand-a' since " in sentence and "for its session" in sentence
    assert "handoff" in sentence
    assert "window ends" not in sentence
    assert held("src/app.py").process_id == "claude-code:abc123"


def test_two_sessions_of_one_key_are_two_holders(api_a: Api) -> None:
    assert write(api_a) is None
    sentence = denial(write(api_a, session="other-session"))
    assert "session abc123 of your own hand 'hand-a'" in sentence


def test_one_file_reached_by_two_spellings_is_one_lease(api_a: Api, api_b: Api) -> None:
    assert write(api_a, f"{REPO}/src/../src/./app.py") is None
    body = event(HARNESS, "pre_tool_use_write", **{"tool_input.file_path": "src/app.py"})
    body.update(session_id="def456", cwd=REPO)
    assert "session abc123" in denial(answer(hook(api_b, HARNESS, body, repository=REPO)))
    assert Lease.objects.filter(status="held").count() == 1


def test_a_write_through_a_registered_link_leases_the_file_it_reaches(
    api_a: Api, api_b: Api
) -> None:
    links = {f"{REPO}/current": f"{REPO}/releases/v2"}
    assert write(api_a, f"{REPO}/releases/v2/notes.md", links=links) is None
    assert "releases/v2/notes.md is held" in denial(
        write(api_b, f"{REPO}/current/notes.md", session="def456", links=links)
    )


def test_a_path_in_no_registered_repository_is_denied_never_guessed(api_a: Api) -> None:
    body = event(HARNESS, "pre_tool_use_write", **{"tool_input.file_path": "/etc/motd"})
    sentence = denial(answer(hook(api_a, HARNESS, body)))
    assert sentence.startswith("Ground Control: /etc/motd is in no repository this session ")
    # The cwd is no repository: a session that registered none names nothing.
    sentence = denial(answer(hook(api_a, HARNESS, event(HARNESS, "pre_tool_use_write"))))
    assert "is in no repository this session registered" in sentence
    assert not Lease.objects.exists()


def test_inside_dot_git_and_the_top_level_itself_have_no_name(api_a: Api) -> None:
    assert ".git directory" in denial(write(api_a, f"{REPO}/.git/config"))
    assert "top level" in denial(write(api_a, REPO))


def test_a_nested_repository_names_its_files_from_its_own_top_level(api_a: Api) -> None:
    nested = f"{REPO}/vendor/lib"
    assert write(api_a, f"{nested}/x.py", repositories=[nested]) is None
    assert held("x.py").process_id == "claude-code:abc123"


def test_a_bad_key_or_no_key_denies_the_write_in_the_harness_format(api_a: Api) -> None:
    for key in (None, "gc_nope_nope"):
        said = write(Api(key))
        assert "Ground Control refused the hook's call" in denial(said)
    assert not Lease.objects.exists()


def test_a_key_without_the_leases_scope_is_denied(owner) -> None:
    from tests.support.api import mint

    said = write(Api(mint(owner, ["work"])))
    assert "scope_denied" in denial(said)


def test_a_body_that_is_no_event_is_denied(api_a: Api) -> None:
    for body in ({}, {"hook_event_name": "PreToolUse"}, [1, 2]):
        said = answer(api_a.post(f"/hooks/{HARNESS}", body))
        assert "could not read this claude-code hook event" in denial(said)
    body = event(HARNESS, "pre_tool_use_write")
    del body["tool_input"]["file_path"]
    assert "has no file_path" in denial(answer(hook(api_a, HARNESS, body, repository=REPO)))


def test_an_unknown_harness_is_not_found(api_a: Api) -> None:
    response = api_a.post("/hooks/nonesuch", event(HARNESS, "pre_tool_use_write"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_file_the_session_holds_is_written_again_without_a_new_tenure(api_a: Api) -> None:
    assert write(api_a) is None
    fence = held("src/app.py").fence
    assert write(api_a) is None
    assert held("src/app.py").fence == fence


def test_a_directory_the_session_holds_covers_the_files_under_it(api_a: Api) -> None:
    api_a.post(
        "/leases/acquire",
        {"resource": "src/", "ttl_s": 60, "process_id": "claude-code:abc123"},
    )
    assert write(api_a) is None
    assert not Lease.objects.filter(resource="src/app.py").exists()


def test_every_event_renews_the_sessions_leases_and_silence_ends_them(
    api_a: Api, api_b: Api
) -> None:
    assert write(api_a, ttl_s=30) is None
    prompt = event(HARNESS, "user_prompt_submit", session_id="abc123")
    with clock.travel(25):
        assert answer(hook(api_a, HARNESS, prompt)) is None
    with clock.travel(50):  # 25 s after the prompt: alive, renewed by it
        assert "session abc123" in denial(write(api_b, session="def456"))
    with clock.travel(56):  # 31 s after the last event: the session's silence ended it
        assert write(api_b, session="def456") is None
    assert held("src/app.py").process_id == "claude-code:def456"


def test_session_end_releases_everything_the_session_holds(api_a: Api, api_b: Api) -> None:
    assert write(api_a) is None
    assert write(api_a, f"{REPO}/src/other.py") is None
    end = event(HARNESS, "session_end", session_id="abc123")
    assert answer(hook(api_a, HARNESS, end)) is None
    assert not Lease.objects.filter(status="held").exists()
    assert HookSession.objects.get().ended_at is not None
    assert write(api_b, session="def456") is None


def test_a_shell_write_to_a_file_another_holds_is_told_and_recorded(api_a: Api, api_b: Api) -> None:
    assert write(api_b, session="def456") is None
    ran = event(HARNESS, "post_tool_use_bash", session_id="abc123")
    said = answer(
        hook(
            api_a,
            HARNESS,
            ran,
            repository=REPO,
            changed=[f"{REPO}/src/app.py", "src/new.py"],
        )
    )
    assert said is not None and said["decision"] == "block"
    assert (
        "your Bash command changed files another holder has: src/app.py is held by session "
        in (said["reason"])
    )
    assert "git restore" in said["reason"]
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-a")
    assert recorded.data["holder"] == "hand-b"
    # The changed file nobody held is the session's now.
    assert held("src/new.py").process_id == "claude-code:abc123"
    assert held("src/app.py").process_id == "claude-code:def456"


def test_a_shell_write_to_files_nobody_holds_says_nothing(api_a: Api) -> None:
    ran = event(HARNESS, "post_tool_use_bash", session_id="abc123")
    assert answer(hook(api_a, HARNESS, ran, repository=REPO, changed=["a.txt"])) is None
    assert held("a.txt").process_id == "claude-code:abc123"


def test_registration_is_bounded_and_checked(api_a: Api) -> None:
    said = write(api_a, repositories=["relative/path"])
    assert "absolute paths" in denial(said)
    said = write(api_a, repositories=[f"/r{i}" for i in range(65)])
    assert "at most 64" in denial(said)
    said = write(api_a, ttl_s=1)
    assert "ttl_s must be from 5 to 3600" in denial(said)


def test_a_nul_in_the_hooks_url_is_the_documented_400_not_an_answer(api_a: Api) -> None:
    """A URL no hook configuration makes (a NUL in a query parameter: the long fuzzer's find) is
    refused before any view reads it, as for every API call, and the contract documents it."""
    response = api_a.client.post(
        f"/api/v1/hooks/{HARNESS}?release_on_stop=%00",
        data=event(HARNESS, "pre_tool_use_write"),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    schema = api_a.client.get("/api/v1/schema/", {"format": "json"}).json()
    assert "400" in schema["paths"]["/api/v1/hooks/{harness}"]["post"]["responses"]
