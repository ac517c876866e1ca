"""The harnesses' documented example events (events/<harness>/*.json, each file's source in that
folder's SOURCES.md), and a way to send them to the server as a harness would."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.support.api import Api

EVENTS = Path(__file__).parent / "events"
REPO = "/home/dev/project"


def documented(harness: str) -> list[Path]:
    return sorted((EVENTS / harness).glob("*.json"))


def event(harness: str, name: str, **changes: Any) -> dict[str, Any]:
    """The documented event `name` of `harness`, with `changes` applied (a dotted key reaches into
    an object: `tool_input.file_path`)."""
    body = json.loads((EVENTS / harness / f"{name}.json").read_text())
    body = copy.deepcopy(body)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        into = body
        for part in path:
            into = into[part]
        into[last] = value
    return body


def hook(api: Api, harness: str, body: Any, *, repository: str | None = None, **facts: Any) -> Any:
    """POST the event as the harness would (the agent's side's `facts` under `groundcontrol`)."""
    if facts:
        body = {**body, "groundcontrol": facts}
    headers = {"X-GC-Repository": repository} if repository else None
    return api.post(f"/hooks/{harness}", body, headers=headers)


def answer(response: Any) -> dict[str, Any] | None:
    """The harness's answer: 200 always; None for an empty body (nothing to say)."""
    assert response.status_code == 200, response.content
    return response.json() if response.content else None
