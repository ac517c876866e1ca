"""The write guard for Python agent frameworks' tools (`groundcontrol_client.hooks.frameworks`),
against the live server: two hands' guards over one git repository, each guard one session that
holds what its tools write until it closes; and the frameworks' decorators on top of it."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import subprocess
import threading
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest
from groundcontrol_client import Client, Hand
from groundcontrol_client.hooks.frameworks import (
    WriteGuard,
    WriteRefused,
    langgraph_wrappers,
    openai_tool_guardrail,
)

from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

HELD_BY_A = "src/app.py is held by hand hand-a (fence "
NOT_RUN = "(write_file was not run: nothing was written.)"


def installed(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} is not installed"
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = (tmp_path / "repo").resolve()
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)  # names come from a repository
    return root


@pytest.fixture
def hands(gc: Fleet) -> Iterator[tuple[Hand, Hand]]:
    a, b = Hand(Client(gc.url, gc.key_a)), Hand(Client(gc.url, gc.key_b))
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def guard_a(hands: tuple[Hand, Hand]) -> Iterator[WriteGuard]:
    with WriteGuard(hands[0]) as guard:
        yield guard


@pytest.fixture
def guard_b(gc: Fleet) -> Iterator[WriteGuard]:
    # B's side from a bare client and a session identity of its own.
    client = Client(gc.url, gc.key_b)
    with WriteGuard(client, process_id="agent-b:session-1") as guard:
        yield guard
    client.close()


def live(client: Client) -> dict[str, tuple[str, str, int]]:
    """What is held now: name -> (holder, process identity, fence)."""
    return {
        lease.resource: (lease.holder, lease.process_id, lease.fence)
        for lease in client.leases()
        if lease.holder and lease.state not in ("free", "lost")
    }


def writer(
    guard: WriteGuard, root: Path | None = None, **options: Any
) -> tuple[Callable[..., Any], list[str]]:
    """A tool that writes a file (a relative path from `root`), guarded; and the paths it
    actually wrote."""
    runs: list[str] = []

    @guard.writes("path", **options)
    def write_file(path: str, content: str) -> str:
        """Write `content` to the file at `path`."""
        runs.append(path)
        Path(root or ".", path).write_text(content)
        return f"wrote {path}"

    return write_file, runs


# --- a session's writes -------------------------------------------------------------------------


def test_a_guarded_write_is_leased_for_the_session_and_renewed_while_it_works(
    gc: Fleet, hands: tuple[Hand, Hand], repo: Path
) -> None:
    target = repo / "src" / "app.py"
    with WriteGuard(hands[0], ttl=2) as guard:
        write_file, runs = writer(guard)
        assert write_file(str(target), "from A") == f"wrote {target}"
        assert runs == [str(target)] and target.read_text() == "from A"
        first = live(hands[0].client)
        assert first == {"src/app.py": ("hand-a", hands[0].process_id, first["src/app.py"][2])}
        assert guard.held == ["src/app.py"]

        # Past the lease's own ttl: the runtime renews it in the background; a second write of
        # the same file takes nothing new (same fence).
        time.sleep(4)
        assert write_file(path=str(target), content="again") == f"wrote {target}"
        (lease,) = [x for x in hands[0].client.leases() if x.resource == "src/app.py"]
        assert (lease.holder, lease.state, lease.fence) == (
            "hand-a",
            "live",
            first["src/app.py"][2],
        )
        assert runs == [str(target), str(target)]


def test_another_hands_guard_is_refused_naming_the_holder_and_its_tool_does_not_run(
    guard_a: WriteGuard, guard_b: WriteGuard, repo: Path
) -> None:
    a_file, b_file = repo / "src" / "app.py", repo / "src" / "b.py"
    a_write, _ = writer(guard_a)
    a_write(str(a_file), "from A")

    b_write, b_runs = writer(guard_b)
    with pytest.raises(WriteRefused) as refused:
        b_write(str(a_file), "from B")
    sentence = refused.value.sentence
    assert str(refused.value) == sentence
    assert sentence.startswith(HELD_BY_A), sentence
    assert "renewing; its current window ends in " in sentence
    assert sentence.endswith(f": wait, pick other work, or escalate. {NOT_RUN}")
    assert b_runs == [] and a_file.read_text() == "from A"

    # What most frameworks hand the model: the sentence as the tool's result.
    b_says, b_runs = writer(guard_b, on_refusal="return")
    said = b_says(str(a_file), "from B")
    assert said.startswith(HELD_BY_A) and said.endswith(NOT_RUN), said
    assert b_runs == []

    # A write of several files is refused whole: what it took for the others goes back.
    @guard_b.writes("source", "destination", on_refusal="return")
    def move_file(source: str, destination: str) -> str:
        """Move a file."""
        raise AssertionError("not run")

    assert move_file(str(b_file), str(a_file)).startswith(HELD_BY_A)
    assert guard_b.held == []
    held = live(guard_b.session.client)  # src/b.py, taken for the move, was given back
    assert [(name, holder) for name, (holder, _, _) in held.items()] == [("src/app.py", "hand-a")]


def test_a_path_through_a_link_or_with_dot_dot_names_the_same_file(
    gc: Fleet, hands: tuple[Hand, Hand], guard_b: WriteGuard, repo: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(repo, target_is_directory=True)
    with WriteGuard(hands[0], base=link) as guard_a:
        a_write, _ = writer(guard_a, root=link)
        a_write("src/app.py", "from A")  # relative, from the base (a link to the repository)
        (fence,) = [x.fence for x in hands[0].client.leases() if x.resource == "src/app.py"]
        a_write(f"{repo}/src/../src/app.py", "again")
        assert guard_a.held == ["src/app.py"]
        assert live(hands[0].client)["src/app.py"][2] == fence  # the same lease, not a new one

        b_write, b_runs = writer(guard_b, on_refusal="return")
        for spelling in (
            f"{link}/src/app.py",
            f"{repo}/src/./../src/app.py",
            f"{link}/src/x/../app.py",
        ):
            assert b_write(spelling, "from B").startswith(HELD_BY_A), spelling
        assert b_runs == [] and (repo / "src" / "app.py").read_text() == "again"


def test_a_file_in_no_repository_is_refused_unless_writes_outside_are_allowed(
    guard_a: WriteGuard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "elsewhere" / "notes.txt"
    outside.parent.mkdir()
    write_file, runs = writer(guard_a)
    with pytest.raises(WriteRefused) as refused:
        write_file(str(outside), "x")
    assert "is in no git repository, so no lease can name it" in refused.value.sentence
    assert refused.value.sentence.endswith(NOT_RUN)
    assert runs == [] and not outside.exists()

    monkeypatch.setenv("GC_ALLOW_OUTSIDE_REPO", "1")
    assert write_file(str(outside), "x") == f"wrote {outside}"
    assert guard_a.held == []  # through, unleased


def test_an_async_tool_is_leased_from_a_worker_thread_and_refused_like_a_sync_one(
    guard_a: WriteGuard, guard_b: WriteGuard, repo: Path
) -> None:
    target = repo / "src" / "app.py"
    named_in: list[int] = []

    def path_of(path: str, content: str) -> str:
        named_in.append(threading.get_ident())
        return path

    def tool(guard: WriteGuard) -> Callable[..., Any]:
        @guard.writes(path_of, on_refusal="return")
        async def write_file(path: str, content: str) -> str:
            """Write `content` to the file at `path`."""
            target.write_text(content)
            return "written"

        return write_file

    a_write, b_write = tool(guard_a), tool(guard_b)
    assert inspect.iscoroutinefunction(a_write)

    async def main() -> tuple[str, str, int]:
        loop_thread = threading.get_ident()
        return await a_write(str(target), "from A"), await b_write(str(target), "B"), loop_thread

    a_said, b_said, loop_thread = asyncio.run(main())
    assert a_said == "written" and target.read_text() == "from A"
    assert b_said.startswith(HELD_BY_A) and b_said.endswith(NOT_RUN), b_said
    assert named_in and loop_thread not in named_in  # the event loop never waited on the server


def test_closing_the_guard_releases_every_file_it_leased_and_refuses_later_writes(
    gc: Fleet, hands: tuple[Hand, Hand], guard_b: WriteGuard, repo: Path
) -> None:
    first, second = repo / "src" / "app.py", repo / "docs" / "notes.md"
    second.parent.mkdir()
    with WriteGuard(hands[0]) as guard:
        write_file, _ = writer(guard)
        write_file(str(first), "1")
        write_file(str(second), "2")
        assert set(live(hands[0].client)) == {"src/app.py", "docs/notes.md"}
    assert live(hands[0].client) == {}
    with pytest.raises(WriteRefused, match="This agent session has ended"):
        write_file(str(first), "after")
    assert first.read_text() == "1"
    guard.close()  # again: nothing more

    b_write, b_runs = writer(guard_b)
    b_write(str(first), "B")
    b_write(str(second), "B")
    assert b_runs == [str(first), str(second)]


# --- the frameworks' decorators on top -----------------------------------------------------------


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A tool schema built as the frameworks build theirs: the signature, the type hints
    (resolved in the function's own module) and a pydantic model of the parameters."""
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {
        name: (hints[name], ... if p.default is p.empty else p.default)
        for name, p in inspect.signature(fn).parameters.items()
    }
    return pydantic.create_model(fn.__name__, **fields).model_json_schema()


def test_a_guarded_tool_keeps_its_signature_name_and_docstring_for_a_framework_on_top(
    guard_a: WriteGuard,
) -> None:
    def write_file(path: str, content: str, mode: str = "w") -> str:
        """Write `content` to the file at `path`."""
        return path

    async def append_file(path: str, lines: list[str]) -> int:
        """Append lines to a file."""
        return len(lines)

    for original in (write_file, append_file):
        guarded = guard_a.writes("path")(original)
        assert inspect.signature(guarded) == inspect.signature(original)
        assert typing.get_type_hints(guarded) == typing.get_type_hints(original)
        assert (guarded.__name__, guarded.__doc__) == (original.__name__, original.__doc__)
        assert inspect.iscoroutinefunction(guarded) == inspect.iscoroutinefunction(original)
        assert schema_of(guarded) == schema_of(original)
    assert set(schema_of(guard_a.writes("path")(write_file))["properties"]) == {
        "path",
        "content",
        "mode",
    }

    # A name the tool does not take is refused when decorating, not at the first write.
    with pytest.raises(TypeError, match="takes no argument 'file'"):
        guard_a.writes("file")(write_file)


@installed("agents")
def test_the_openai_agents_sdk_builds_its_schema_and_guardrail_from_the_guard(
    guard_a: WriteGuard, guard_b: WriteGuard, repo: Path
) -> None:
    from agents import function_tool

    target = repo / "src" / "app.py"
    write_file, _ = writer(guard_a, on_refusal="return")
    tool = function_tool(write_file)
    assert set(tool.params_json_schema["properties"]) == {"path", "content"}

    write_file(str(target), "from A")
    guardrail = openai_tool_guardrail(guard_b, "path")
    context = SimpleNamespace(
        tool_name="write_file", tool_arguments=json.dumps({"path": str(target), "content": "B"})
    )
    output = asyncio.run(guardrail.run(SimpleNamespace(context=context, agent=None)))
    assert output.behavior["type"] == "reject_content"
    assert output.behavior["message"].startswith(HELD_BY_A)


@installed("langchain_core")
def test_langchain_builds_its_tool_and_langgraphs_wrapper_answers_a_tool_message(
    guard_a: WriteGuard, guard_b: WriteGuard, repo: Path
) -> None:
    from langchain_core.tools import tool

    target = repo / "src" / "app.py"
    write_file, _ = writer(guard_a, on_refusal="return")
    assert set(tool(write_file).args) == {"path", "content"}

    write_file(str(target), "from A")
    wrap, _ = langgraph_wrappers(guard_b, {"write_file": "path"})
    call = {"name": "write_file", "args": {"path": str(target), "content": "B"}, "id": "call-1"}
    message = wrap(SimpleNamespace(tool_call=call), lambda request: pytest.fail("ran"))
    assert (message.tool_call_id, message.status) == ("call-1", "error")
    assert message.content.startswith(HELD_BY_A)


@installed("crewai")
def test_crewai_builds_its_tool_from_the_guarded_function(guard_a: WriteGuard) -> None:
    from crewai.tools import tool

    write_file, _ = writer(guard_a, on_refusal="return")
    assert {"path", "content"} <= set(tool("write_file")(write_file).args_schema.model_fields)


def test_langgraphs_wrappers_lease_a_named_tools_paths_and_pass_every_other_call(
    guard_a: WriteGuard, repo: Path
) -> None:
    target = repo / "src" / "app.py"
    wrap, awrap = langgraph_wrappers(guard_a, {"write_file": "path", "move": ("src", "dst")})
    executed: list[str] = []

    def execute(request: Any) -> str:
        executed.append(request.tool_call["name"])
        return "done"

    async def aexecute(request: Any) -> str:
        return execute(request)

    def request(name: str, **args: Any) -> SimpleNamespace:
        return SimpleNamespace(tool_call={"name": name, "args": args, "id": f"call-{name}"})

    assert wrap(request("read_file", path=str(target)), execute) == "done"
    assert guard_a.held == []  # a tool not named in the table is a read: no lease
    assert wrap(request("write_file", path=str(target), content="x"), execute) == "done"
    assert guard_a.held == ["src/app.py"]
    moved = request("move", src=str(repo / "src" / "a.py"), dst=str(repo / "src" / "b.py"))
    assert asyncio.run(awrap(moved, aexecute)) == "done"
    assert guard_a.held == ["src/a.py", "src/app.py", "src/b.py"]
    assert executed == ["read_file", "write_file", "move"]
