"""Input checking every endpoint shares: serializer fields that take only their JSON type (DRF's
own would turn `true` into 1 or `5` into "5"), validation into the contract's error, query
parameters, and the pagination parameters the OpenAPI schema names."""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.request import Request

from apikit.errors import ValidationFailed

PAGE_PARAMS = [
    OpenApiParameter("cursor", str, description="From the previous page's X-Next-Cursor."),
    OpenApiParameter("limit", int, description="Page size, 1 to 500 (default 100)."),
    OpenApiParameter(
        "X-Next-Cursor",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description="The next page's cursor; absent on the last page.",
    ),
    OpenApiParameter(
        "Link",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description='The next page\'s URL: <url>; rel="next".',
    ),
]


class _JsonTyped:
    """JSON has types, and the API keeps them: a string field takes only a string, a number
    field only a number (not "30", not true). DRF's fields would coerce, and a fence or a ttl
    read from the wrong type is a client bug worth a clear validation_error, not a guess."""

    json_types: tuple[type, ...] = ()
    default_error_messages = {"type": "Expected {expected}."}
    expected = ""

    def to_internal_value(self, data: Any) -> Any:
        if (
            isinstance(data, bool)
            and bool not in self.json_types
            or not isinstance(data, self.json_types)
        ):
            self.fail("type", expected=self.expected)  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(_JsonTyped, serializers.CharField):
    json_types, expected = (str,), "a string"


class StrictSlugField(_JsonTyped, serializers.SlugField):
    json_types, expected = (str,), "a string"


class StrictIntegerField(_JsonTyped, serializers.IntegerField):
    json_types, expected = (int,), "an integer"


class StrictFloatField(_JsonTyped, serializers.FloatField):
    json_types, expected = (int, float), "a number"


class StrictBooleanField(_JsonTyped, serializers.BooleanField):
    json_types, expected = (bool,), "true or false"


# Numbers are read exactly: Python's int(), float() and Decimal() (which DRF's fields and Django
# call) also take digits of any script ("١٠٠"), superscripts, full-width digits, underscores
# ("1_000"), surrounding whitespace of any kind, signs, exponents, "NaN" and "Infinity". A number
# on the wire is a JSON number, or (where a field takes text: an amount, a query parameter) a
# string of ASCII digits. `[0-9]` in a str pattern is ASCII only (`\d` would be any script's).
_WHOLE_TEXT = re.compile(r"[0-9]{1,19}")
_DECIMAL_TEXT = re.compile(r"[0-9]{1,30}(?:\.[0-9]{1,30})?")
DECIMAL_TEXT_PATTERN = r"^[0-9]+(\.[0-9]+)?$"


def whole_number(text: str) -> int | None:
    """`text` as a whole number when it is 1 to 19 ASCII digits (every id and count fits in
    64 bits), else None: no sign, space, underscore, exponent or other script's digit."""
    return int(text) if _WHOLE_TEXT.fullmatch(text) else None


class StrictDecimalField(serializers.DecimalField):
    """An amount: a JSON number, or a decimal string of ASCII digits with at most one `.`
    ("0.62"; no sign, exponent, padding, underscore or other digits), never negative (nor -0).
    A number is read by its shortest text, so 0.1 is 0.1."""

    default_error_messages = {
        "text": 'Expected a JSON number or a decimal string of ASCII digits such as "0.62" '
        "(no sign, exponent, spaces, underscores or other digits).",
        "signed": "Expected an amount of 0 or more, without a sign.",
    }

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        # DRF's own reads a blank string (of spaces of any kind) as null: here only null is.
        return serializers.Field.validate_empty_values(self, data)

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            self.fail("text")
        if isinstance(data, str) and not _DECIMAL_TEXT.fullmatch(data):
            self.fail("text")
        value = super().to_internal_value(data)
        if value.is_signed():  # negative, or a JSON -0.0
            self.fail("signed")
        return value


class StrictDecimalFieldSchema(OpenApiSerializerFieldExtension):
    """The schema says what StrictDecimalField reads: a number, or a string of ASCII digits."""

    target_class = StrictDecimalField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> Any:
        mapped = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request":
            mapped["pattern"] = DECIMAL_TEXT_PATTERN
        return mapped


def created_or_found(created: bool) -> int:
    """201 for a new object; 200 when the create found the one that existed (a retry)."""
    return 201 if created else 200


def valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """The request body, validated; invalid input answers validation_error with `fields`."""
    return valid_data(serializer_class, request.data)


def valid_data(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """`data` (a body as read), validated by `serializer_class` (see `valid`)."""
    return dict(_validator(serializer_class).run_validation(data))


@functools.cache
def _validator(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """One instance of each input serializer, its fields bound once. DRF deep-copies a
    serializer's declared fields for every instance, which cost a hot call more than its own
    statement did; validating keeps nothing on the instance (`run_validation` returns the values
    or raises the same `ValidationError` that `is_valid` does), and no input serializer reads a
    context, so one instance serves every call and thread."""
    return serializer_class()


def text_param(request: Request, name: str, *, max_length: int) -> str:
    """A free-text query parameter: no NUL (PostgreSQL cannot compare one), bounded length."""
    value = request.query_params.get(name, "")
    if "\x00" in value or len(value) > max_length:
        raise ValidationFailed(
            f"{name} must be text of at most {max_length} characters, without NUL",
            fields={name: [f"At most {max_length} characters, no NUL."]},
        )
    return value


def choice_param(request: Request, name: str, choices: list[str]) -> str:
    value = request.query_params.get(name, "")
    if value and value not in choices:
        raise ValidationFailed(
            f"{name} must be one of {', '.join(choices)}",
            fields={name: [f"One of: {', '.join(choices)}."]},
        )
    return value
