"""`gctl hook HARNESS`: a harness's command hook, answered by the server.

The harness runs the command once per event with the event's JSON on stdin; this forwards it to
`POST /api/v1/hooks/{harness}`, which reads the harness's own format and answers in it, and
prints the answer. What only the agent's disk knows goes with it (`disk`), under the body's
`groundcontrol`: the repository of the event's `cwd` (else this process's), registered for the
session, and, when the server asks in its answer's headers, what each path a tool writes
resolves to and the repository holding it (`X-GC-Resolve`: one more call, so a file reached
through any link, tracked or not, has one name), the dirty files before a shell command
(`X-GC-Changed: snapshot`, kept in `GC_HOOK_STATE_DIR`) and the files it changed after it
(`X-GC-Changed: needed`: one more call).

Nothing renews in the background: every event renews the session's leases on the server, and
a session whose events stop (a crash, `kill -9`, a closed terminal) loses them within its TTL.

When the hook itself fails (stdin that is no JSON object, no `GC_URL`, the server unreachable
or answering an error, git failing, `GC_HOOK_DEADLINE_S` passing), the tool call is refused the
way the harness refuses one (`FAILURE`), never let through: an unchecked write breaks the
one-writer promise. `GC_HOOK_FAIL_OPEN=1` lets a call through when the server cannot be reached
or refuses; only then. At an event where refusing would keep the model working (a stop), the
failure is shown and nothing is refused.

Standard library only, and nothing of the package it does not use: a hook starts cold.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

from groundcontrol_client.git import files
from groundcontrol_client.hooks import disk

HARNESSES = ("claude-code", "codex", "gemini", "cursor", "opencode", "cline", "copilot")
DEFAULT_DEADLINE_S = 45.0
# Harnesses that end a hook sooner (and then let the call through): the deadline comes first.
HARNESS_DEADLINE_S = {"cline": 25.0, "copilot": 25.0}
# How each harness's command hook refuses a tool call when the hook itself failed: the exit
# code with the reason on stderr, or a refusal printed on stdout (exit 0).
EXIT_BLOCK = 2
FAILURE: dict[str, Any] = {
    "claude-code": EXIT_BLOCK,
    # Codex lets a call through on every failure but an explicit denial (exit 2 needs a reason).
    "codex": lambda why: {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": why,
        }
    },
    "gemini": EXIT_BLOCK,
    "cursor": EXIT_BLOCK,
    # Cline honours JSON whatever the exit code; a cancel ends the whole task, so only a write's
    # failure cancels (`_failed`).
    "cline": lambda why: {"cancel": True, "errorMessage": why},
    "copilot": lambda why: {"permissionDecision": "deny", "permissionDecisionReason": why},
    "opencode": EXIT_BLOCK,
}
# Events at which refusing would keep the model working, or refuses nothing: a failure there
# exits 1, shown to the user, and blocks nothing.
NOT_REFUSABLE = frozenset(
    {
        "Stop",
        "SubagentStop",
        "SessionEnd",
        "stop",
        "AfterAgent",
        "agentStop",
        "sessionEnd",
        "TaskComplete",
        "TaskCancel",
    }
)
EXIT_SHOWN = 1


class HookFailed(Exception):
    """The hook could not get an answer (the sentence says why); `server` when it was the
    server's fault (unreachable or refusing), which `GC_HOOK_FAIL_OPEN` may let through."""

    def __init__(self, why: str, *, server: bool = False) -> None:
        super().__init__(why)
        self.server = server


def state_dir(env: Mapping[str, str]) -> str:
    given = env.get("GC_HOOK_STATE_DIR")
    if given:
        return given
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "groundcontrol", "hooks")


def deadline_s(env: Mapping[str, str], harness: str = "") -> float:
    """`GC_HOOK_DEADLINE_S`, else the harness's default: the hook fails (closed) before the
    harness's own timeout ends it, which would let the call through."""
    default = HARNESS_DEADLINE_S.get(harness, DEFAULT_DEADLINE_S)
    value = env.get("GC_HOOK_DEADLINE_S", "")
    try:
        return max(float(value), 0.0) if value else default
    except ValueError:
        return default


def endpoint(env: Mapping[str, str], harness: str, *, release_on_stop: bool) -> str:
    url = (env.get("GC_URL") or "").rstrip("/")
    if not url:
        raise HookFailed("GC_URL is not set: Ground Control's address")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    return f"{url}/api/v1/hooks/{harness}" + ("?release_on_stop=1" if release_on_stop else "")


def ask(url: str, key: str, body: dict[str, Any], timeout: float) -> tuple[bytes, Any]:
    """POST the event; the answer's body and headers. HookFailed for anything but a 200.
    `http.client` itself (not urllib's layers above it): a hook starts cold."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https":
        import ssl

        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.netloc, timeout=timeout or None, context=ssl.create_default_context()
        )
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(parts.netloc, timeout=timeout or None)
    else:
        raise HookFailed(f"GC_URL must be an http(s) address, not {url!r}")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    try:
        connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        answer = connection.getresponse()
        data = answer.read()
    except OSError as error:
        raise HookFailed(
            f"Ground Control cannot be reached at {url}: {error}", server=True
        ) from error
    except http.client.HTTPException as error:
        raise HookFailed(
            f"Ground Control's answer was cut short at {url}: {error!r}", server=True
        ) from error
    finally:
        connection.close()
    if answer.status != 200:
        detail = data.decode(errors="replace")[:500]
        raise HookFailed(f"Ground Control answered {answer.status}: {detail}", server=True)
    return data, answer.headers


def resolve(paths: list[str], cwd: str) -> tuple[dict[str, str], list[str]]:
    """What each path (as the event names it: relative to `cwd`, or from `~`, as the harness's
    tools read it) resolves to on this disk, and the repositories holding them, named as every
    writer names a file (`groundcontrol_client.git.files`)."""
    namer = files.Namer()
    resolved: dict[str, str] = {}
    tops: list[str] = []
    for path in paths[: disk.MAX_LOOKUPS * 4]:
        named = namer.name(os.path.expanduser(path), cwd)
        resolved[path] = named.path
        if named.top is not None and named.top not in tops:
            tops.append(named.top)
    return resolved, tops


# A text value longer than this is cut to its `*** ` lines (a patch's file markers) before it is
# sent: the server needs the files a tool writes, not their text, and a body has a size limit.
LONG_TEXT = 16 * 1024


def slim(value: Any) -> Any:
    """`value` with every long text cut to what can name a file (its `*** ` lines)."""
    if isinstance(value, str) and len(value) > LONG_TEXT:
        return "\n".join(line for line in value.splitlines() if line.startswith("*** "))
    if isinstance(value, dict):
        return {key: slim(item) for key, item in value.items()}
    if isinstance(value, list):
        return [slim(item) for item in value]
    return value


def forward(
    harness: str, event: dict[str, Any], env: Mapping[str, str], *, release_on_stop: bool = False
) -> bytes:
    """The server's answer to `event`, after what it asked of the disk."""
    event = slim(event)
    url = endpoint(env, harness, release_on_stop=release_on_stop)
    key = env.get("GC_KEY") or ""
    state = state_dir(env)
    cwd = event.get("cwd")
    here = cwd if isinstance(cwd, str) and cwd.startswith("/") else os.getcwd()
    facts: dict[str, Any] = {**disk.registration([here], state), "resolves": True}
    if files.outside_allowed(env):
        facts["outside_allowed"] = True
    ttl = env.get("GC_HOOK_TTL_S")
    if ttl:
        facts["ttl_s"] = float(ttl)
    timeout = deadline_s(env, harness)
    answer, headers = ask(url, key, {**event, "groundcontrol": facts}, timeout)
    asked = headers.get("X-GC-Resolve")
    if asked:
        resolved, more = resolve(json.loads(asked), here)
        facts = {
            **facts,
            "repositories": list(dict.fromkeys(facts["repositories"] + more)),
            "resolved": resolved,
        }
        answer, headers = ask(url, key, {**event, "groundcontrol": facts}, timeout)
    wants = headers.get("X-GC-Changed")
    session = headers.get("X-GC-Session") or ""
    if wants and facts["repositories"]:
        kept = disk.snapshot_file(state, session)
        now: dict[str, Any] = {}
        for top in facts["repositories"]:
            now.update(disk.dirty(top))
        if wants == "snapshot":
            os.makedirs(state, exist_ok=True)
            with open(kept, "w") as file:
                json.dump({"session": session, "dirty": now}, file)
        elif wants == "needed":
            try:
                with open(kept) as file:
                    noted = json.load(file)
                os.unlink(kept)
                before = noted["dirty"] if noted.get("session") == session else None
            except (OSError, ValueError, KeyError, AttributeError):
                before = None
            changed = disk.changed_since(before, now)
            answer, _ = ask(
                url, key, {**event, "groundcontrol": {**facts, "changed": changed}}, timeout
            )
    return answer


def answer_event(
    harness: str, event: dict[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The server's answer to one hook event given in process (an SDK's hook callback, such as
    the Copilot SDK's `onPreToolUse`): the harness's own JSON, or None for nothing to say. A
    failure answers the harness's refusal (an SDK whose callback raises lets the call through);
    `GC_HOOK_FAIL_OPEN=1` answers None instead when the server cannot be reached or refuses."""
    env = os.environ if env is None else env
    try:
        answer = forward(harness, event, env)
    except HookFailed as failed:
        if failed.server and env.get("GC_HOOK_FAIL_OPEN") == "1":
            return None
        why = f"Ground Control's hook failed, so the tool call is blocked: {failed}"
    except Exception as error:  # noqa: BLE001 - any failure refuses the call
        why = f"Ground Control's hook failed, so the tool call is blocked: {error}"
    else:
        return json.loads(answer) if answer.strip() else None
    refuse = FAILURE[harness]
    if callable(refuse):
        refusal: dict[str, Any] = refuse(why)
        return refusal
    raise HookFailed(why)


def main(
    harness: str,
    *,
    release_on_stop: bool = False,
    stdin: Any = None,
    env: Mapping[str, str] | None = None,
) -> int:
    env = os.environ if env is None else env
    name = ""
    limit = deadline_s(env, harness)
    try:
        if limit:
            _set_deadline(limit)
        try:
            # Bytes, decoded strictly: a harness sends UTF-8, and anything else is no event.
            event = json.loads((sys.stdin.buffer if stdin is None else stdin).read())
        except ValueError as error:
            raise HookFailed(f"stdin is not a JSON event ({error})") from error
        if not isinstance(event, dict):
            raise HookFailed(f"stdin is JSON but not an object ({type(event).__name__})")
        name = str(event.get("hook_event_name") or event.get("hookName") or "")
        answer = forward(harness, event, env, release_on_stop=release_on_stop)
        if answer:
            sys.stdout.write(answer.decode())
            sys.stdout.write("\n")
        return 0
    except HookFailed as failed:
        if failed.server and env.get("GC_HOOK_FAIL_OPEN") == "1":
            return 0
        return _failed(harness, name, str(failed))
    except Exception as error:  # noqa: BLE001 - any failure refuses the call, whatever it is
        return _failed(harness, name, f"{type(error).__name__}: {error}")
    finally:
        if limit:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _set_deadline(seconds: float) -> None:
    def passed(*_: object) -> None:
        raise HookFailed(f"no answer within {seconds:g} s (GC_HOOK_DEADLINE_S)")

    signal.signal(signal.SIGALRM, passed)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _failed(harness: str, name: str, why: str) -> int:
    if harness == "cline" and name not in ("PreToolUse", ""):
        print(json.dumps({"cancel": False}))  # only a write's failure ends the task
        print(f"gctl hook cline failed at {name}: {why}", file=sys.stderr)
        return 0
    if name in NOT_REFUSABLE:
        print(f"gctl hook {harness} failed, so nothing was done at {name}: {why}", file=sys.stderr)
        return EXIT_SHOWN
    sentence = f"gctl hook {harness} failed, so the tool call is blocked: {why}"
    refuse = FAILURE[harness]
    if callable(refuse):
        print(json.dumps(refuse(sentence)))
        print(sentence, file=sys.stderr)
        return 0
    print(sentence, file=sys.stderr)
    return refuse
