"""The files a patch in the `*** Begin Patch` format writes (Codex's `apply_patch`, and the
harnesses that took it up): every `*** Add File:`, `*** Update File:`, `*** Delete File:` and
`*** Move to:` path, as written (relative to the event's cwd, or absolute). A patch that writes
no file, or is not in the format, is `BadEvent`: a write whose files are unknown is refused."""

from __future__ import annotations

from harnesses.formats import BadEvent

_MARKERS = ("*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:")


def written_by(patch: str) -> tuple[str, ...]:
    lines = patch.splitlines()
    if not lines or lines[0].strip() != "*** Begin Patch":
        raise BadEvent("the patch does not begin with '*** Begin Patch'")
    paths: list[str] = []
    for line in lines[1:]:
        for marker in _MARKERS:
            if line.startswith(marker):
                path = line[len(marker) :].strip()
                if not path:
                    raise BadEvent(f"the patch's {marker!r} line names no file")
                paths.append(path)
    if not paths:
        raise BadEvent("the patch names no file it writes")
    return tuple(dict.fromkeys(paths))
