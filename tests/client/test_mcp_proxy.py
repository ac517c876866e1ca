"""`gctl mcp --wrap -- CMD...` against the real filesystem server from the npm registry
(`@modelcontextprotocol/server-filesystem`), driven by the SDK's own stdio client, with two
proxy sessions as two hands over one directory, against the live server."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from groundcontrol_client import Client
from groundcontrol_client.mcp.proxy import WRITE_TOOLS, WriteTool, resource_for, write_tools
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult

from tests.client.conftest import GCTL, INTERVAL_S, Fleet, wait_for

# The npm package under test, installed once into the repository's test cache (gitignored).
PACKAGE = "@modelcontextprotocol/server-filesystem"
VERSION = "2026.8.31"
NPM_DIR = Path(__file__).resolve().parents[2] / ".cache" / "npm"
ENTRY = (
    NPM_DIR / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)
HERE = Path(__file__).resolve().parent


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content)  # type: ignore[union-attr]


def _installed_version() -> str | None:
    try:
        return json.loads((ENTRY.parents[1] / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def filesystem_server() -> Path:
    """The filesystem server's entry point, installed from the npm registry when missing; the
    test is skipped, saying why, when node or npm is missing or the registry is unreachable."""
    if _installed_version() != VERSION:
        if not (shutil.which("npm") and shutil.which("node")):
            pytest.skip(f"node and npm are needed to install {PACKAGE}")
        NPM_DIR.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--fetch-retries=1",
                    "--prefix",
                    str(NPM_DIR),
                ]  # noqa: S607
                + [f"{PACKAGE}@{VERSION}"],
                check=True,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.CalledProcessError as error:
            tail = (error.stderr or error.stdout or "").strip().splitlines()[-3:]
            pytest.skip(f"npm could not install {PACKAGE}@{VERSION}: {' / '.join(tail)}")
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm could not install {PACKAGE}@{VERSION} within 300 s")
    return ENTRY


def proxy(gc: Fleet, key: str, *command: str, options: tuple[str, ...] = ()) -> Any:
    # PYTHONPATH passes through: the gctl under test runs this checkout's client (a worktree's).
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return StdioServerParameters(
        command=GCTL,
        args=["mcp", *options, "--wrap", "--", *command],
        env={"GC_URL": gc.url, "GC_KEY": key, **path},
    )


def in_thread(main: Callable[[], Awaitable[Any]]) -> Any:
    # Its own thread: a loop another test left running in this one must not stop it starting.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, main).result()


@contextlib.asynccontextmanager
async def connected(params: StdioServerParameters) -> Any:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def seconds_until_closed(session: ClientSession, within_s: float = 10) -> float:
    """How long the proxy took to end (its connection closes), pinging it meanwhile."""
    started = anyio.current_time()
    with anyio.fail_after(within_s):
        while True:
            try:
                await session.send_ping()
            except Exception:  # noqa: BLE001 - whatever the SDK raises for a closed connection
                return anyio.current_time() - started
            await anyio.sleep(0.2)


def live_leases(client: Client) -> dict[str, str]:
    return {
        lease.resource: lease.holder
        for lease in client.leases()
        if lease.holder and lease.state not in ("free", "lost")
    }


# --- the table and the names, in process -------------------------------------------------------


def test_the_write_tools_table_is_small_and_overridable() -> None:
    assert WRITE_TOOLS == {
        "write_file": WriteTool(("path",)),
        "edit_file": WriteTool(("path",), preview="dryRun"),
        "move_file": WriteTool(("source", "destination")),
        "create_directory": WriteTool(("path",), held=False),
    }
    table = write_tools(["put=key", "edit_file=", "write_file=path, target"])
    assert table["put"] == WriteTool(("key",))
    assert "edit_file" not in table
    assert table["write_file"] == WriteTool(("path", "target"))
    with pytest.raises(ValueError, match="NAME=ARG"):
        write_tools(["write_file"])


def test_only_a_preview_that_says_true_exactly_is_no_write() -> None:
    """`edit_file` with `dryRun: true` writes nothing (the reference server answers the diff):
    it is no write. Any other value is one, so a server that read "true" or 1 as a preview, or
    not, never writes unleased."""
    edit = WRITE_TOOLS["edit_file"]
    assert not edit.writes({"path": "a.txt", "edits": [], "dryRun": True})
    for value in (False, None, "true", 1, [True], {"dryRun": True}):
        assert edit.writes({"path": "a.txt", "edits": [], "dryRun": value}), value
    assert edit.writes({"path": "a.txt", "edits": []})
    assert WRITE_TOOLS["write_file"].writes({"path": "a.txt", "dryRun": True})


def test_a_lease_is_named_by_the_path_in_the_files_repository(tmp_path: Path) -> None:
    # Issue 30, item 3: names come from the file's own repository (groundcontrol_client.git.files),
    # the root only resolves relative paths; outside any repository no lease can name it.
    root = str((tmp_path / "repo").resolve())
    (tmp_path / "repo" / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", root], check=True)
    assert resource_for("src/a.txt", root) == "src/a.txt"
    assert resource_for(f"{root}/src/a.txt", root) == "src/a.txt"
    assert resource_for("src", root) == "src/"  # an existing directory
    assert resource_for("./new/../src/b.txt", root) == "src/b.txt"
    assert resource_for("a.txt", f"{root}/src") == "src/a.txt"  # from below the top
    for outside in ("/etc/passwd", "../elsewhere.txt", ".", root):
        with pytest.raises(LookupError, match="no lease can name it"):
            resource_for(outside, root)


# --- the real filesystem server, two hands, the live server ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_hands_through_the_proxy_over_one_directory(
    gc: Fleet, filesystem_server: Path, tmp_path: Path
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)  # names come from a repository
    fs = ("node", str(filesystem_server), str(root))
    a_client, b_client = Client(gc.url, gc.key_a), Client(gc.url, gc.key_b)
    a_file, b_file = root / "src" / "a.txt", root / "src" / "b.txt"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with connected(StdioServerParameters(command=fs[0], args=list(fs[1:]))) as direct:
            seen["theirs"] = {t.name: t for t in (await direct.list_tools()).tools}
        async with contextlib.AsyncExitStack() as b_stack:
            b = await b_stack.enter_async_context(connected(proxy(gc, gc.key_b, *fs)))
            async with connected(proxy(gc, gc.key_a, *fs)) as a:
                seen["tools"] = {t.name: t for t in (await a.list_tools()).tools}
                # create_directory takes src/ only for the call: it keeps nobody out of src/.
                seen["mkdir"] = await a.call_tool("create_directory", {"path": "src"})
                seen["a_write"] = await a.call_tool(
                    "write_file", {"path": "src/a.txt", "content": "from A"}
                )
                seen["after_a_write"] = live_leases(a_client)
                seen["b_write"] = await b.call_tool(
                    "write_file", {"path": "src/a.txt", "content": "from B"}
                )
                seen["b_read"] = await b.call_tool("read_file", {"path": "src/a.txt"})
                seen["b_other"] = await b.call_tool(
                    "write_file", {"path": "src/b.txt", "content": "B's own"}
                )
                # A directory above: A's lease on docs/ (the proxy's own lease tool) covers it.
                seen["a_docs"] = await a.call_tool("acquire_lease", {"resource": "docs/"})
                seen["b_docs"] = await b.call_tool(
                    "write_file", {"path": f"{root}/docs/x.txt", "content": "x"}
                )
                seen["b_move"] = await b.call_tool(
                    "move_file", {"source": "src/b.txt", "destination": "src/a.txt"}
                )
                seen["a_status"] = await a.call_tool("status", {})
            # A's session has ended: what it held is released.
            seen["after_a"] = wait_for(lambda: "src/a.txt" not in live_leases(b_client) or None)
            seen["b_again"] = await b.call_tool(
                "write_file", {"path": "src/a.txt", "content": "from B"}
            )
            seen["b_mine"] = await b.call_tool("list_my_leases", {})

    in_thread(main)

    # CMD's tools under their own names, schemas and descriptions, beside Ground Control's.
    theirs, tools = seen["theirs"], seen["tools"]
    assert {"claim", "report_progress", "finish", "acquire_lease", "status"} <= set(tools)
    for name, tool in theirs.items():
        assert tools[name].description == tool.description
        assert tools[name].input_schema == tool.input_schema
    assert not seen["mkdir"].is_error, text(seen["mkdir"])
    assert (root / "src").is_dir()

    # A writes src/a.txt: granted, written, and A holds its lease (its directory's is gone).
    assert not seen["a_write"].is_error, text(seen["a_write"])
    assert seen["after_a_write"] == {"src/a.txt": "hand-a"}

    # B's write of the same file is refused with the denial sentence; the file is A's still.
    denied = text(seen["b_write"])
    assert seen["b_write"].is_error
    assert denied.startswith("src/a.txt is held by hand hand-a (fence "), denied
    assert "renewing; its current window ends in " in denied
    assert denied.endswith(
        ": wait, pick other work, or escalate. (write_file was not run: nothing was written.)"
    )
    # B's read passes through; B writes another file fine.
    assert not seen["b_read"].is_error and text(seen["b_read"]) == "from A"
    assert not seen["b_other"].is_error, text(seen["b_other"])
    assert b_file.read_text() == "B's own"

    # A directory above the file, held by A, refuses B's write below it; so does a move onto
    # A's file (its destination), which leaves the source where it was.
    assert not seen["a_docs"].is_error, text(seen["a_docs"])
    assert seen["b_docs"].is_error
    assert text(seen["b_docs"]).startswith("docs/ is held by hand hand-a (fence ")
    assert not (root / "docs").exists()
    assert seen["b_move"].is_error
    assert text(seen["b_move"]).startswith("src/a.txt is held by hand hand-a (fence ")
    assert b_file.read_text() == "B's own"
    assert "lease src/a.txt" in text(seen["a_status"])
    assert "lease docs/" in text(seen["a_status"])

    # A's session ended: its leases were released; then B may write src/a.txt.
    assert not seen["b_again"].is_error, text(seen["b_again"])
    assert a_file.read_text() == "from B"
    assert "src/a.txt at fence" in text(seen["b_mine"]) and "src/b.txt at fence" in text(
        seen["b_mine"]
    )
    # And when B's session ends, B's are released too.
    assert wait_for(lambda: live_leases(b_client) == {} or None)


@pytest.mark.django_db(transaction=True)
def test_an_edit_preview_takes_no_lease_and_keeps_nobody_out(
    gc: Fleet, filesystem_server: Path, tmp_path: Path
) -> None:
    """`edit_file` with `dryRun: true` (issue 33, item 9e) took the file's lease for the rest of
    the session, for a call that writes nothing: it kept every other hand out of the file, and
    was refused outright on a file another hand held. A preview takes no lease; the same edit
    without `dryRun` still takes it, or is refused."""
    root = tmp_path / "work"
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src" / "a.txt").write_text("one\n")
    (root / "src" / "b.txt").write_text("two\n")
    fs = ("node", str(filesystem_server), str(root))
    a_client, b_client = Client(gc.url, gc.key_a), Client(gc.url, gc.key_b)
    edit = {"path": "src/a.txt", "edits": [{"oldText": "one", "newText": "ONE"}]}
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with connected(proxy(gc, gc.key_a, *fs)) as a:
            seen["preview"] = await a.call_tool("edit_file", {**edit, "dryRun": True})
            seen["after_preview"] = live_leases(a_client)
            async with connected(proxy(gc, gc.key_b, *fs)) as b:
                seen["b_write"] = await b.call_tool(
                    "write_file", {"path": "src/b.txt", "content": "B's"}
                )
                seen["a_preview_b"] = await a.call_tool(
                    "edit_file",
                    {"path": "src/b.txt", "edits": [{"oldText": "B's", "newText": "A's"}],
                     "dryRun": True},
                )  # fmt: skip
                seen["a_edit_b"] = await a.call_tool(
                    "edit_file",
                    {"path": "src/b.txt", "edits": [{"oldText": "B's", "newText": "A's"}],
                     "dryRun": False},
                )  # fmt: skip
                seen["a_edit"] = await a.call_tool("edit_file", edit)
                seen["held"] = live_leases(b_client)

    in_thread(main)
    # The preview answered the diff, wrote nothing and took no lease.
    assert not seen["preview"].is_error, text(seen["preview"])
    assert "-one" in text(seen["preview"]) and "+ONE" in text(seen["preview"])
    assert seen["after_preview"] == {}
    # A preview of a file another hand holds shows the diff; the edit itself is refused.
    assert not seen["a_preview_b"].is_error, text(seen["a_preview_b"])
    assert "+A's" in text(seen["a_preview_b"])
    assert seen["a_edit_b"].is_error
    assert text(seen["a_edit_b"]).startswith("src/b.txt is held by hand hand-b (fence ")
    assert (root / "src" / "b.txt").read_text() == "B's"
    # The edit without dryRun writes, leased for the session.
    assert not seen["a_edit"].is_error, text(seen["a_edit"])
    assert (root / "src" / "a.txt").read_text() == "ONE\n"
    assert seen["held"] == {"src/a.txt": "hand-a", "src/b.txt": "hand-b"}


@pytest.mark.django_db(transaction=True)
def test_it_says_so_and_ends_when_the_wrapped_server_dies(gc: Fleet) -> None:
    dying = (sys.executable, str(HERE / "mcp_dying_server.py"))
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with connected(proxy(gc, gc.key_a, *dying)) as a:
            seen["echo"] = await a.call_tool("echo", {"text": "hi"})
            seen["lease"] = await a.call_tool("acquire_lease", {"resource": "src/"})
            seen["die"] = await a.call_tool("die", {})
            with anyio.fail_after(10):
                while True:  # the proxy ends: its connection closes
                    try:
                        await a.send_ping()
                    except Exception as error:  # noqa: BLE001
                        seen["ended"] = error
                        break
                    await anyio.sleep(0.2)

    in_thread(main)
    assert text(seen["echo"]) == "hi"
    assert not seen["lease"].is_error, text(seen["lease"])
    assert seen["die"].is_error
    assert text(seen["die"]).startswith("The wrapped MCP server (")
    assert "has ended: it closed its connection" in text(seen["die"])
    assert "ended" in seen
    # What the session held was released as the proxy ended.
    assert wait_for(lambda: live_leases(Client(gc.url, gc.key_a)) == {} or None)


def test_a_revoked_key_ends_the_wrapped_server_and_the_proxy_within_a_heartbeat(
    gc: Fleet,
) -> None:
    """Stop means stop (issue 21, item 6): the proxy asks every third of its ttl whether its
    key still works, and a revoked one ends CMD and the proxy."""
    from hands import services as hand_services
    from hands.models import HandKey

    dying = (sys.executable, str(HERE / "mcp_dying_server.py"))
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with connected(proxy(gc, gc.key_a, *dying, options=("--ttl", "3"))) as a:
            seen["echo"] = await a.call_tool("echo", {"text": "hi"})
            prefix = gc.key_a.split("_", 2)[1]
            key = await anyio.to_thread.run_sync(lambda: HandKey.objects.get(prefix=prefix))
            await anyio.to_thread.run_sync(
                lambda: hand_services.key_revoke(
                    workspace_id=key.hand.workspace_id, prefix=prefix, actor="boss"
                )
            )
            seen["after_s"] = await seconds_until_closed(a)

    in_thread(main)
    assert text(seen["echo"]) == "hi"
    assert seen["after_s"] < 3 / 3 + 1 + 2, seen["after_s"]


def test_a_stop_directive_stops_the_work_and_the_next_call_reads_why(gc: Fleet) -> None:
    """Stop means stop (issue 21, item 6), said to the model (issue 32, item 7): the supervisor
    says stop to the session's claim; within a heartbeat the claim is released and the wrapped
    server is called no more, and the model's next call of its tools is answered with why, the
    connection still open."""
    from fleet.attempts import services as attempt_services
    from fleet.models import Attempt

    run = gc.run()
    dying = (sys.executable, str(HERE / "mcp_dying_server.py"))
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with connected(proxy(gc, gc.key_a, *dying)) as a:
            seen["claim"] = await a.call_tool("claim", {"run_id": run.pk})
            record = await anyio.to_thread.run_sync(lambda: Attempt.objects.get(run=run))
            await anyio.to_thread.run_sync(
                lambda: attempt_services.attempt_set_directive(
                    workspace_id=run.workspace_id,
                    attempt_id=record.pk,
                    directive="stop",
                    actor="boss",
                )
            )
            started = anyio.current_time()

            def released() -> bool:
                return Attempt.objects.get(pk=record.pk).end is not None

            with anyio.fail_after(INTERVAL_S + 1 + 5):
                while not await anyio.to_thread.run_sync(released):
                    await anyio.sleep(0.1)
            seen["after_s"] = anyio.current_time() - started
            seen["echo"] = await a.call_tool("echo", {"text": "hi"})
            await a.send_ping()  # still connected

    in_thread(main)
    assert not seen["claim"].is_error, text(seen["claim"])
    assert seen["after_s"] < INTERVAL_S + 1 + 2, seen["after_s"]
    assert seen["echo"].is_error
    said = text(seen["echo"])
    assert "Stopped: the supervisor's directive for attempt" in said, said
    assert "is stop" in said and "do not retry it" in said, said
    assert "hi" not in said.splitlines()


def _rpc(proxy: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proxy.stdin is not None
    proxy.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    proxy.stdin.flush()


def _answer_to(proxy: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert proxy.stdout is not None
    while True:
        line = proxy.stdout.readline()
        assert line, "the proxy closed its stdout before it answered"
        message = json.loads(line)
        if message.get("id") == request_id:
            return message


def test_a_stop_directive_releases_the_claim_though_the_host_says_nothing_more(gc: Fleet) -> None:
    """A host that waits quietly (no ping, no call) still has its claim released within a
    heartbeat of the stop, the proxy's connection open: stdin is read by the event loop, so
    nothing waits for the host's next line (mcp/stdin.py). Its next call reads why; when it
    ends the session, the proxy exits 1."""
    import time

    from mcp.types import LATEST_PROTOCOL_VERSION

    from fleet.attempts import services as attempt_services
    from fleet.models import Attempt

    run = gc.run()
    params = proxy(gc, gc.key_a, sys.executable, str(HERE / "mcp_dying_server.py"))
    host = subprocess.Popen(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **params.env},
    )
    try:
        _rpc(host, {"id": 1, "method": "initialize", "params": {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "quiet-host", "version": "1"},
        }})  # fmt: skip
        assert "result" in _answer_to(host, 1)
        _rpc(host, {"method": "notifications/initialized"})
        _rpc(host, {"id": 2, "method": "tools/call", "params": {
            "name": "claim", "arguments": {"run_id": run.pk},
        }})  # fmt: skip
        claimed = _answer_to(host, 2)
        assert not claimed["result"].get("isError"), claimed
        attempt_services.attempt_set_directive(
            workspace_id=run.workspace_id,
            attempt_id=Attempt.objects.get(run=run).pk,
            directive="stop",
            actor="boss",
        )
        started = time.monotonic()
        wait_for(lambda: not Attempt.objects.filter(run=run, end=None).exists(), timeout=10)
        after_s = time.monotonic() - started
        assert host.poll() is None  # still serving
        _rpc(host, {"id": 3, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hi"},
        }})  # fmt: skip
        said = _answer_to(host, 3)["result"]
        assert said["isError"] is True
        assert "Stopped: the supervisor's directive for attempt" in said["content"][0]["text"]
        _, stderr = host.communicate(timeout=20)  # the host ends the session: stdin closes
        code = host.returncode
    finally:
        if host.poll() is None:
            host.kill()
            host.communicate()
    assert code == 1, stderr
    assert b"directive for attempt" in stderr and b"is stop" in stderr, stderr
    assert after_s < INTERVAL_S + 1 + 2, after_s
