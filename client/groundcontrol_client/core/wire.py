"""How the client reads the server's answers: `WireModel`, the base of every wire object, and the
field types the models share, each rule written once.

A wire object is a frozen pydantic model: a value, equal to another with the same fields. It
keeps the server's full JSON in `raw` (aside from its equality and its repr), so fields the
server adds later are not lost, and it ignores the fields it does not know. `from_wire` reads an
answer; one that lacks a field the contract requires, or holds one of the wrong type, raises
`MalformedAnswer` (a `ServerError`) naming the object and the field ("the server's answer is not
a valid attempt: run is 'twelve', not a whole number"), so gctl says so and exits 1, never with
a traceback.

Lenient about optional fields, strict about the others and about types: a null reads as the
field's default, as a missing field does (and a required one null is "it has no ..."); a field
of the wrong type is malformed, except a time, which reads as None. The types:

- `WholeNumber`: a JSON integer, or one written as digits or as an integral float; never a
  boolean (pydantic's own int would read true as 1).
- `Number`: a JSON number, or a decimal written as text; never a boolean.
- `Text`: text; empty reads as the default too.
- `Flag`: true or false, nothing else.
- `Time`: an ISO 8601 time; anything else reads as None. `StrictTime`: one that must be a time.
- `OrDefault[T]`: a `T` (a list, an object) whose null reads as the default.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Strict,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError, PydanticUseDefault

from groundcontrol_client.core.errors import MalformedAnswer

T = TypeVar("T")
_DIGITS = re.compile(r"-?[0-9]+")


def _null_is_default(value: Any) -> Any:
    """A null reads as the field's default (a required field's: missing)."""
    if value is None:
        raise PydanticUseDefault
    return value


def _whole_number(value: Any) -> int:
    value = _null_is_default(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    raise PydanticCustomError("whole_number", "not a whole number")


def _number(value: Any) -> float:
    value = _null_is_default(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # a decimal written as text
        try:
            return float(value)
        except ValueError:
            pass
    raise PydanticCustomError("number", "not a number")


def _text(value: Any) -> Any:
    return _null_is_default(None if value == "" else value)


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _strict_time(value: Any) -> datetime:
    moment = _time(value)
    if moment is None:
        raise PydanticCustomError("time", "not a time")
    return moment


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
Number = Annotated[float, BeforeValidator(_number)]
Text = Annotated[str, BeforeValidator(_text)]
Flag = Annotated[bool, Strict(), BeforeValidator(_null_is_default)]
Time = Annotated[datetime | None, BeforeValidator(_time)]
StrictTime = Annotated[datetime, BeforeValidator(_strict_time)]
OrDefault = Annotated[T, BeforeValidator(_null_is_default)]


class _FromWire:
    """The validation context of `from_wire`: an answer, said as `MalformedAnswer`."""


_ANSWER = _FromWire()


class WireModel(BaseModel):
    """A wire object; each names itself with its `title` (`class Run(WireModel, title="run")`),
    as the sentence of a malformed answer does."""

    model_config = ConfigDict(frozen=True, validate_by_name=True)

    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def raw(self) -> dict[str, Any]:
        """The server's answer as it came, every field of it (empty for a value made here)."""
        return self._raw

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """`data`, an answer of the server, read; a malformed one raises `MalformedAnswer`."""
        return cls.model_validate(data, context=_ANSWER)

    @model_validator(mode="wrap")
    @classmethod
    def _read_answer(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        # Around every model, the nested too: the innermost malformed object says what it is (an
        # attempt's lease), and the objects around it let its MalformedAnswer through.
        if info.context is not _ANSWER:
            return handler(data)  # a value made here: pydantic's ValidationError, as usual
        try:
            model = handler(data)
        except ValidationError as error:
            raise malformed(cls.model_config.get("title") or cls.__name__, error) from None
        if isinstance(data, dict):
            model._raw = data
        return model

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WireModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__


def malformed(what: str, error: ValidationError) -> MalformedAnswer:
    """The answer `error` found wrong as a `what`, in a sentence per fault."""
    faults = [f for f in error.errors(include_url=False) if f["type"] not in _CONSEQUENCES]
    sentences = dict.fromkeys(map(_sentence, faults))
    return MalformedAnswer(
        f"the server's answer is not a valid {what}: {'; '.join(sentences)}",
        fields={"what": what},
    )


# A default read from a field that was malformed: that field's fault says it.
_CONSEQUENCES = {"default_factory_not_called"}

# pydantic's own faults, in the client's words (the types above say theirs).
_FAULTS = {
    "bool_type": "not true or false",
    "dict_type": "not an object",
    "list_type": "not a list",
    "model_type": "not an object",
    "string_type": "not text",
    "tuple_type": "not a list",
}


def _sentence(fault: ErrorDetails) -> str:
    where = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in fault["loc"])
    where = where.removeprefix(".")
    if fault["type"] == "missing":
        return f"it has no {where}"
    if not where and fault["type"] in ("model_type", "dict_type"):
        return f"an object was expected, not {_json_kind(fault['input'])}"
    said = _FAULTS.get(fault["type"]) or fault["msg"][:1].lower() + fault["msg"][1:]
    return f"{where} is {fault['input']!r}, {said}" if where else said


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {bool: "a boolean", list: "a list", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)
