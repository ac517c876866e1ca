"""Ground Control's OpenCode plugin (client/groundcontrol_client/hooks/opencode-plugin.js) against
the live server: a Node script imports the plugin as OpenCode would and calls its hooks with the
documented hook arguments, in a real git repository. A write is leased or thrown as refused, a
shell command's write to another session's file is appended to its output, and a write Ground
Control cannot check is refused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hands.models import Hand
from leases.models import Event, Lease
from tests.harnesses.events import event
from tests.support.api import mint

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
]

PLUGIN = (
    Path(__file__).resolve().parents[2]
    / "client"
    / "groundcontrol_client"
    / "hooks"
    / "opencode-plugin.js"
)
ONE = "ses_3f2a9c1d7ffeQk2Lw8nR5tYb1c"  # the documented session
TWO = "ses_4b5c6d7e8f90Aa1Bb2Cc3Dd4Ee"

# Imports the plugin, makes its hooks as OpenCode does, and runs the steps in order: a hook call
# (its result: the output object as the hook left it, or the message it threw) or a shell
# command run in the project between a `bash` call's hooks, as the tool would.
DRIVER = """
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [plugin, script] = process.argv.slice(2);
const { GroundControl } = await import(pathToFileURL(plugin).href);
const { context, steps } = JSON.parse(readFileSync(script, "utf8"));
const hooks = await GroundControl(context);
const results = [];
for (const step of steps) {
  try {
    if (step.run !== undefined) {
      execFileSync("sh", ["-c", step.run], { cwd: context.directory });
      results.push({ ok: true });
    } else if (step.hook === "event") {
      await hooks.event(step.argument);
      results.push({ ok: true });
    } else {
      await hooks[step.hook](step.input, step.output);
      results.push({ ok: true, output: step.output });
    }
  } catch (error) {
    results.push({ error: String(error?.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(results));
"""


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("print('hello')\n")
    (repo / "README.md").write_text("readme\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    return repo


def before(name: str, session: str, **args: Any) -> dict[str, Any]:
    """The documented `tool.execute.before` arguments `name`, for `session`."""
    given = event("opencode", name)
    given["input"]["sessionID"] = session
    given["output"]["args"].update(args)
    return {"hook": "tool.execute.before", **given}


def after(name: str, session: str) -> dict[str, Any]:
    given = event("opencode", name)
    given["input"]["sessionID"] = session
    return {"hook": "tool.execute.after", **given}


def created(session: str) -> dict[str, Any]:
    given = event("opencode", "event_session_created")
    given["event"]["properties"]["sessionID"] = session
    given["event"]["properties"]["info"]["id"] = session
    return {"hook": "event", "argument": given}


def drive(
    tmp_path: Path, project: Path, steps: list[dict[str, Any]], **env: str
) -> list[dict[str, Any]]:
    script = tmp_path / "steps.json"
    context = {"directory": str(project), "worktree": str(project)}
    script.write_text(json.dumps({"context": context, "steps": steps}))
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    environment.update(env)
    done = subprocess.run(
        ["node", str(driver), str(PLUGIN), str(script)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_write_is_leased_and_another_sessions_write_of_it_is_thrown_with_the_sentence(
    live_server: Any, owner: Hand, teammate: Hand, tmp_path: Path, project: Path
) -> None:
    app = str(project / "src" / "app.py")
    first = drive(
        tmp_path,
        project,
        [created(ONE), before("tool_execute_before_write", ONE, filePath=app)],
        GC_URL=live_server.url + "/api/v1/",
        GC_KEY=mint(owner, ["work", "leases"]),
    )
    assert first == [{"ok": True}, {"ok": True, "output": first[1]["output"]}]
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.holder, lease.process_id, lease.status) == ("hand-a", f"opencode:{ONE}", "held")

    second = drive(
        tmp_path,
        project,
        [before("tool_execute_before_edit", TWO, filePath=app)],
        GC_URL=live_server.url,
        GC_KEY=mint(teammate, ["work", "leases"]),
    )
    thrown = second[0]["error"]
    assert thrown.startswith(f"Ground Control: src/app.py is held by session {ONE} of hand ")
    assert "for its session" in thrown
    assert Lease.objects.get(resource="src/app.py").process_id == f"opencode:{ONE}"


def test_apply_patch_leases_every_file_relative_to_the_project(
    live_server: Any, owner: Hand, tmp_path: Path, project: Path
) -> None:
    results = drive(
        tmp_path,
        project,
        [before("tool_execute_before_apply_patch", ONE)],
        GC_URL=live_server.url,
        GC_KEY=mint(owner, ["work", "leases"]),
    )
    assert "error" not in results[0], results
    names = set(Lease.objects.filter(status="held").values_list("resource", flat=True))
    assert names == {"src/app.py", "src/util.py"}


def test_a_shell_command_that_changes_a_file_another_session_holds_is_told_in_its_output(
    live_server: Any, owner: Hand, teammate: Hand, tmp_path: Path, project: Path
) -> None:
    app = str(project / "src" / "app.py")
    (project / "notes.txt").write_text("dirty before, untouched\n")
    drive(
        tmp_path,
        project,
        [before("tool_execute_before_write", ONE, filePath=app)],
        GC_URL=live_server.url,
        GC_KEY=mint(owner, ["work", "leases"]),
    )
    results = drive(
        tmp_path,
        project,
        [
            before("tool_execute_before_bash", TWO, command="echo more >> src/app.py"),
            {"run": "echo more >> src/app.py && echo new > src/new.py"},
            after("tool_execute_after_bash", TWO),
        ],
        GC_URL=live_server.url,
        GC_KEY=mint(teammate, ["work", "leases"]),
    )
    told = results[2]["output"]["output"]
    assert told.startswith("3 passed in 0.12s\n\n")  # the command's own output, then the sentence
    assert "Ground Control: your bash command changed files another holder has: src/app.py is " in (
        told
    )
    assert f"held by session {ONE}" in told and "git restore" in told
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand) == ("src/app.py", "hand-b")
    # The new file is the command's session's; the file dirty before and untouched is nobody's.
    assert Lease.objects.get(resource="src/new.py").process_id == f"opencode:{TWO}"
    assert not Lease.objects.filter(resource="notes.txt").exists()


def test_a_write_ground_control_cannot_check_is_refused(
    owner: Hand, tmp_path: Path, project: Path
) -> None:
    write = before("tool_execute_before_write", ONE, filePath=str(project / "src" / "app.py"))
    unreachable = f"http://127.0.0.1:{closed_port()}"
    key = mint(owner, ["work", "leases"])
    for env in ({"GC_URL": unreachable, "GC_KEY": key}, {"GC_KEY": key}):
        thrown = drive(tmp_path, project, [write], **env)[0]["error"]
        assert thrown.startswith("Ground Control could not check this write, so it is refused: ")
    assert (
        "could not be reached" in drive(tmp_path, project, [write], GC_URL=unreachable)[0]["error"]
    )
    # GC_HOOK_FAIL_OPEN=1 lets it through unchecked.
    assert drive(tmp_path, project, [write], GC_URL=unreachable, GC_HOOK_FAIL_OPEN="1") == [
        {"ok": True, "output": write["output"]}
    ]


def test_a_subagents_session_writes_as_the_session_that_started_it(
    live_server: Any, owner: Hand, tmp_path: Path, project: Path
) -> None:
    app = str(project / "src" / "app.py")
    child = created(TWO)
    child["argument"]["event"]["properties"]["info"]["parentID"] = ONE
    gone = {"hook": "event", "argument": event("opencode", "event_session_deleted")}
    gone["argument"]["event"]["properties"]["sessionID"] = TWO
    results = drive(
        tmp_path,
        project,
        [
            created(ONE),
            before("tool_execute_before_write", ONE, filePath=app),
            child,
            before("tool_execute_before_edit", TWO, filePath=app),
            gone,  # the subagent's end is not its parent's
        ],
        GC_URL=live_server.url,
        GC_KEY=mint(owner, ["work", "leases"]),
    )
    assert all("error" not in result for result in results), results
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.process_id, lease.status) == (f"opencode:{ONE}", "held")
