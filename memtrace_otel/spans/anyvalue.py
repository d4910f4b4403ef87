"""OTLP/JSON ``AnyValue`` and ``KeyValue`` lists, type-checked as they are read.

Every value is checked against the type its field promises (``intValue`` is an
integer or a decimal string of one, ``boolValue`` a JSON boolean, ...): a wrong
one raises :class:`BadValue`, never a silent repair (``bool("false")`` is true,
``int("²")`` fails). Integers are JSON integers or strings of decimal digits
(``str.isdecimal``: other scripts' digits spell the same number; superscripts,
signs and spaces do not pass). :func:`key_values` turns each bad entry into one
``(key, reason)`` pair and keeps the others.

Both lowerCamelCase (the OTLP/JSON rule) and snake_case field names are read.
"""

from __future__ import annotations

import re
from sys import intern as _intern
from typing import Any

__all__ = [
    "MAX_VALUE_DEPTH",
    "BadValue",
    "any_value",
    "brief",
    "enum_name",
    "int64",
    "key_values",
    "unsigned_nanos",
]

MAX_VALUE_DEPTH = 32
"""Arrays and key-value lists nested deeper than this are rejected (a bounded walk, no recursion error)."""

_INT_TEXT = re.compile(r"-?\d{1,20}").fullmatch  # decimal digits: str.isdigit() would accept "²"
_FLOAT_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|-?Infinity").fullmatch
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1


class BadValue(ValueError):
    """A value of the wrong type or out of range; the message is one line and names it."""


def brief(value: Any) -> str:
    """A one-line, bounded description of an input value for a problem message.

    Containers are described, not printed: a deeply nested one would not repr.
    """
    if type(value) is str:
        return repr(value) if len(value) <= 40 else f"{value[:37]!r}..."
    if type(value) is int and value.bit_length() > 64:
        return f"<{value.bit_length()}-bit integer>"
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, (list, dict)):
        return f"<{'list' if isinstance(value, list) else 'object'} of {len(value)} item(s)>"
    return f"<{type(value).__name__}>"


def enum_name(raw: Any, names: dict[Any, str]) -> str | None:
    """The name ``raw`` stands for in ``names`` (keyed by number and by name), or ``None``.

    >>> enum_name(2, {2: "ERROR"}), enum_name(True, {1: "OK"}), enum_name([], {})
    ('ERROR', None, None)
    """
    if type(raw) is int or type(raw) is str:  # not bool (True == 1), not unhashable
        return names.get(raw)
    return None


def int64(raw: Any, what: str = "intValue") -> int:
    """An OTLP ``int64``: a JSON integer or a string of ASCII decimal digits.

    >>> int64("-7")
    -7
    >>> int64("²")
    Traceback (most recent call last):
    ...
    memtrace_otel.spans.anyvalue.BadValue: intValue '²' is not an integer
    """
    if type(raw) is int:
        value = raw
    elif type(raw) is str and _INT_TEXT(raw):
        value = int(raw)
    else:
        raise BadValue(f"{what} {brief(raw)} is not an integer")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise BadValue(f"{what} {brief(raw)} is out of the 64-bit range")
    return value


def unsigned_nanos(raw: Any, what: str) -> int:
    """A ``fixed64`` timestamp in nanoseconds: absent is 0, otherwise a non-negative integer.

    >>> unsigned_nanos("1700000000000000000", "startTimeUnixNano")
    1700000000000000000
    """
    if raw is None:
        return 0
    if type(raw) is str and raw.isdecimal() and len(raw) <= 20:
        value = int(raw)
    elif type(raw) is int and raw >= 0:
        value = raw
    else:
        raise BadValue(f"{what} {brief(raw)} is not a non-negative integer")
    if not 0 <= value <= _UINT64_MAX:
        raise BadValue(f"{what} {brief(raw)} is out of the unsigned 64-bit range")
    return value


def _string(raw: Any, depth: int) -> str:
    if type(raw) is not str:
        raise BadValue(f"stringValue {brief(raw)} is not a string")
    return raw


def _bool(raw: Any, depth: int) -> bool:
    if type(raw) is not bool:
        raise BadValue(f"boolValue {brief(raw)} is not true or false")
    return raw


def _int(raw: Any, depth: int) -> int:
    return int64(raw)


def _double(raw: Any, depth: int) -> float:
    if type(raw) is float or type(raw) is int:
        return float(raw)
    if type(raw) is str and _FLOAT_TEXT(raw):
        return float(raw)
    raise BadValue(f"doubleValue {brief(raw)} is not a number")


def _bytes(raw: Any, depth: int) -> str:
    if type(raw) is not str:
        raise BadValue(f"bytesValue {brief(raw)} is not a base64 string")
    return raw


def _values(raw: Any, what: str, depth: int) -> list[Any]:
    if depth >= MAX_VALUE_DEPTH:
        raise BadValue(f"{what} nested deeper than {MAX_VALUE_DEPTH} levels")
    if type(raw) is not dict:
        raise BadValue(f"{what} {brief(raw)} is not an object")
    values = raw.get("values")
    if values is None:
        return []
    if type(values) is not list:
        raise BadValue(f"{what} values {brief(values)} is not a list")
    return values


def _array(raw: Any, depth: int) -> list[Any]:
    values = raw.get("values") if type(raw) is dict else None
    if depth or type(values) is not list:  # nested, or not a plain list: the checked way
        values = _values(raw, "arrayValue", depth)  # raises, or [] for an empty array
    result = []
    for value in values:  # arrays of strings are the common case: no call per element
        text = value.get("stringValue") if type(value) is dict else None
        result.append(text if type(text) is str else any_value(value, depth + 1))
    return result


def _kvlist(raw: Any, depth: int) -> dict[str, Any]:
    errors: list[tuple[str, str]] = []
    result = key_values(_values(raw, "kvlistValue", depth), errors, depth + 1)
    if errors:
        key, reason = errors[0]
        raise BadValue(f"kvlistValue entry {key!r}: {reason}")
    return result


_CONVERTERS: dict[str, Any] = {
    "stringValue": _string, "intValue": _int, "boolValue": _bool, "doubleValue": _double,
    "arrayValue": _array, "kvlistValue": _kvlist, "bytesValue": _bytes,
    "string_value": _string, "int_value": _int, "bool_value": _bool, "double_value": _double,
    "array_value": _array, "kvlist_value": _kvlist, "bytes_value": _bytes,
}


def any_value(value: Any, depth: int = 0) -> Any:
    """Python value of an OTLP ``AnyValue``; an empty one (or none) is ``None``.

    >>> any_value({"intValue": "7"})
    7
    >>> any_value({"arrayValue": {"values": [{"stringValue": "a"}, {"boolValue": True}]}})
    ['a', True]
    >>> any_value({"boolValue": "false"})
    Traceback (most recent call last):
    ...
    memtrace_otel.spans.anyvalue.BadValue: boolValue 'false' is not true or false

    Raises
    ------
    BadValue
        A field of the wrong type, an unknown field, or nesting past :data:`MAX_VALUE_DEPTH`.
    """
    if value is None:
        return None
    if type(value) is not dict:
        raise BadValue(f"value {brief(value)} is not an AnyValue object")
    # One key per AnyValue: look it up rather than trying every field (hot loop).
    for key, raw in value.items():
        convert = _CONVERTERS.get(key)
        if convert is None:
            raise BadValue(f"unknown AnyValue field {brief(key)}")
        return convert(raw, depth)
    return None


def key_values(items: Any, errors: list[tuple[str, str]], depth: int = 0) -> dict[str, Any]:
    """``[{"key": k, "value": AnyValue}]`` as a dict.

    A bad entry is left out and ``(key, reason)`` appended to ``errors``
    (``key`` is ``""`` when the entry has none); the other entries are kept.

    >>> errors = []
    >>> key_values([{"key": "a", "value": {"intValue": "x"}}, {"key": "b", "value": {"stringValue": "y"}}],
    ...            errors)
    {'b': 'y'}
    >>> errors
    [('a', "intValue 'x' is not an integer")]
    """
    result: dict[str, Any] = {}
    if items is None:
        return result
    if type(items) is not list:
        errors.append(("", f"attribute list {brief(items)} is not a list"))
        return result
    for item in items:
        if type(item) is not dict or type(key := item.get("key")) is not str:
            errors.append(("", f"attribute entry {brief(item)} has no string key"))
            continue
        # One shared copy of each key rather than one per span and attribute: large files
        # repeat a handful of keys millions of times.
        key = _intern(key)
        value = item.get("value")
        try:
            if type(value) is dict:
                # Fast paths for what memory spans are made of: strings and arrays of strings.
                text = value.get("stringValue")
                if type(text) is str:
                    result[key] = text
                    continue
                array = value.get("arrayValue")
                if array is not None:
                    result[key] = _array(array, depth)
                    continue
            result[key] = any_value(value, depth)
        except BadValue as error:
            errors.append((key, str(error)))
    return result
