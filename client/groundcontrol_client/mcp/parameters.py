"""What the MCP tools take: the parameter types with their ranges, and the plain sentence that
answers arguments outside them."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, ValidationError

from groundcontrol_client.core.limits import LIMITS

# The server's limits (the contract's `x-limits`), said in each parameter so a model stays
# inside them.
MAX_TEXT = int(LIMITS["reason_length"])
MAX_RESOURCE = int(LIMITS["resource_length"])
MAX_TTL_S = LIMITS["ttl_s"]
MAX_WAIT_S = LIMITS["wait_s"]
MAX_CHECKPOINT_BYTES = int(LIMITS["checkpoint_bytes"])

# Every number and flag is strict: JSON's own type only (lax mode would take `true` as run 1 and
# "12" as 12, acting on what the model did not mean). A float parameter still takes an integer.
RunId = Annotated[
    int, Field(ge=1, strict=True, description="The run's id (list_runs shows the open runs).")
]
AttemptId = Annotated[
    int | None,
    Field(
        ge=1,
        strict=True,
        description="Which of your attempts (from claim or status). Leave it out while this "
        "session holds one claim.",
    ),
]
MAX_TOKENS = int(LIMITS["tokens"])
MAX_COST_USD = LIMITS["cost_usd"]
TokensIn = Annotated[
    int | None,
    Field(
        ge=0, le=MAX_TOKENS, strict=True, description="Input tokens used since your last report."
    ),
]
TokensOut = Annotated[
    int | None,
    Field(
        ge=0, le=MAX_TOKENS, strict=True, description="Output tokens used since your last report."
    ),
]
CostUsd = Annotated[
    float | None,
    Field(
        ge=0,
        le=MAX_COST_USD,
        strict=True,
        description="What the work cost since your last report, in US dollars (e.g. 0.12).",
    ),
]
Resource = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_RESOURCE,
        description=f"The resource's name, up to {MAX_RESOURCE} characters: a path such as "
        "src/auth/, or "
        "a lock's name such as migrations.",
    ),
]
WaitS = Annotated[
    float | None,
    Field(
        ge=0,
        le=MAX_WAIT_S,
        strict=True,
        description="Seconds to wait, 0 to 60, if it is taken now (default: answer at once). "
        "To wait longer, call again within 30 s of the denial: this session keeps your place "
        "in line from call to call.",
    ),
]


class EvidenceItem(BaseModel):
    kind: str = Field(min_length=1, description="The kind the brief asks for, e.g. pull_request.")
    url: str = Field(min_length=1, description="An http(s) link to it.")
    note: str = Field(default="", description="Optional: a few words about it.")

    # What each field takes, as `invalid_arguments` says it for an item that is wrong.
    TAKES: ClassVar[dict[str, str]] = {
        "kind": "a short string, the kind the brief asks for (e.g. pull_request)",
        "url": "an http(s) link to it, such as the pull request's address",
        "note": "optional text, a few words about it",
    }
    EXAMPLE: ClassVar[str] = '{"kind": "pull_request", "url": "<its link>"}'


# The objects a parameter holds, by their JSON schema's name, for what their fields take.
_OBJECTS: dict[str, type[EvidenceItem]] = {"EvidenceItem": EvidenceItem}


# --- arguments outside a parameter's range, said as a sentence ---------------------------------

_TYPES = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _allowed(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """What a parameter takes, from its JSON schema: "a number from 0 to 100", "one of
    progress, blocker, note, heartbeat", "a list of {kind, url, note (optional)}"."""
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    described = []
    for option in options:
        if "enum" in option or "const" in option:
            values = option.get("enum") or [option.get("const")]
            described.append("one of " + ", ".join(map(str, values)))
            continue
        text = _TYPES.get(str(option.get("type")), "a value")
        low, high = option.get("minimum"), option.get("maximum")
        if low is not None and high is not None:
            text += f" from {low:g} to {high:g}"
        elif low is not None:
            text += f" of at least {low:g}"
        elif high is not None:
            text += f" of at most {high:g}"
        if option.get("maxLength"):
            text += f" of at most {option['maxLength']} characters"
        if option.get("minLength"):
            text += ", not empty"
        if option.get("minItems"):
            text += f" of at least {option['minItems']} item(s)"
        items = option.get("items")
        if isinstance(items, dict) and "$ref" in items:
            model = defs.get(items["$ref"].rsplit("/", 1)[-1], {})
            required = set(model.get("required", []))
            names = [n if n in required else f"{n} (optional)" for n in model.get("properties", {})]
            text += ", each {" + ", ".join(names) + "}"
        described.append(text)
    return " or ".join(described) or "a value"


def _shown(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # JSON's words (true, null) for what the model sent
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _inner_problem(
    name: str, loc: list[str], item: dict[str, Any], schema: dict[str, Any], defs: dict[str, Any]
) -> str:
    """A sentence for a wrong value inside a list parameter (`evidence[0].url`), from the
    schema of the objects it holds, never pydantic's text (which names internal classes)."""
    items = schema.get("items")
    ref = items.get("$ref", "") if isinstance(items, dict) else ""
    model_name = ref.rsplit("/", 1)[-1]
    model = defs.get(model_name, {})
    fields = list(model.get("properties", {}))
    takes = getattr(_OBJECTS.get(model_name), "TAKES", {})
    example = getattr(_OBJECTS.get(model_name), "EXAMPLE", "")
    required = set(model.get("required", []))
    shape = "{" + ", ".join(f if f in required else f"{f} (optional)" for f in fields) + "}"
    if not fields:  # not a list of objects: say what the parameter takes as a whole
        return f"{name} is not valid: {loc[0]} must be {_allowed(schema, defs)}"
    if len(loc) == 2 or loc[2] not in fields:  # the item itself is not such an object
        if len(loc) > 2:
            return f"{name} is not a field of an item (each is {shape})"
        such = f", such as {example}" if example else ""
        return f"{name} must be an object {shape}{such}, not {_shown(item.get('input'))}"
    field = loc[2]
    what = takes.get(field) or _allowed(model["properties"][field], defs)
    if item.get("type") == "missing":
        return f"{name} is required: {what}"
    return f"{name} must be {what}, not {_shown(item.get('input'))}"


def invalid_arguments(tool: str, error: ValidationError, parameters: dict[str, Any]) -> str:
    """The plain sentence for arguments the tool's schema refuses: each parameter named, with
    what it takes (pydantic's own text carries links and internals a model should not see)."""
    properties = parameters.get("properties", {})
    defs = parameters.get("$defs", {})
    problems: list[str] = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item.get("loc", ())]
        if not loc:
            continue
        top = loc[0]
        name = top + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc[1:])
        if top not in properties:
            problems.append(f"{name} is not a parameter of {tool}")
            continue
        if len(loc) > 1:  # inside a list or an object
            problems.append(_inner_problem(name, loc, item, properties[top], defs))
            continue
        allowed = _allowed(properties[top], defs)
        if item.get("type") == "missing":
            problems.append(f"{name} is required: {allowed}")
        else:
            problems.append(f"{name} must be {allowed}, not {_shown(item.get('input'))}")
    unique = list(dict.fromkeys(problems))
    return f"{tool} was not run: {'; '.join(unique)}. Call it again with valid arguments."
