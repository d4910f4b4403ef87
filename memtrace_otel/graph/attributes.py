"""Typed reads of span attribute values, for the graph builder.

Spans come from files and trace backends nobody vouches for, so every value the
builder takes from a span goes through one of these functions where it is read.
A value of the wrong type or shape becomes one
:class:`~memtrace_otel.spans.model.Problem` naming the span's ``file:line``,
its span id and the key, and is skipped (``None``, or the element left out of a
list); the rest of the span is still used.

The fast path of each check is one type test, so valid spans pay almost nothing.
Strings are tested with ``isinstance``: live spans may carry ``StrEnum`` members.
"""

from __future__ import annotations

import math
from typing import Any

from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.wire import MalformedId, parse_variable_id

__all__ = ["a_type", "number", "parse_id", "report", "strings", "text", "verdict"]

_TRUTH = {"true": True, "false": False}


def report(problems: list[Problem], span: SpanRecord, key: str, message: str) -> None:
    """File one problem about ``key`` of ``span``: ``file:line: span <id>: <key> <message>``."""
    problems.append(Problem(span.source or "?", f"span {span.span_id}: {key} {message}"))


def a_type(value: Any) -> str:
    """``'an int'``, ``'a list'``: the type of ``value`` for a problem line.

    >>> a_type(5), a_type([])
    ('an int', 'a list')
    """
    name = type(value).__name__
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def text(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> str | None:
    """``value`` when it is a string (or absent, ``None``); otherwise a problem and ``None``."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, str):  # a StrEnum member from a live span: node data holds plain str
        return str(value)
    report(problems, span, key, f"is {a_type(value)}, not a string; ignored")
    return None


def strings(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> list[str]:
    """The strings of a string-array attribute; the other elements are one problem and left out.

    An absent attribute is an empty list; a value that is not a list at all is one
    problem and an empty list.
    """
    if value is None:
        return []
    if type(value) is not list:
        report(problems, span, key, f"is {a_type(value)}, not a list of strings; ignored")
        return []
    for item in value:
        if type(item) is not str and not isinstance(item, str):
            break
    else:
        return value
    kept = [item for item in value if isinstance(item, str)]
    report(problems, span, key, f"has {len(value) - len(kept)} element(s) that are not strings "
                                f"(first: {a_type(next(i for i in value if not isinstance(i, str)))}); "
                                "those skipped")
    return kept


def number(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> int | float | None:
    """A finite int or float (``bool`` is not a number here); otherwise a problem and ``None``."""
    if value is None:
        return None
    if type(value) in (int, float) and math.isfinite(value):
        return value
    shown = repr(value)[:40] if isinstance(value, (int, float)) else a_type(value)
    report(problems, span, key, f"is {shown}, not a finite number; ignored")
    return None


def verdict(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> bool | None:
    """A verdict: ``True``/``False``; the strings ``"true"``/``"false"`` read as such, with a problem.

    Backends that keep every tag as a string (Zipkin-style) turn ``false`` into
    ``"false"``, a truthy string: it must never count as passed. Anything else is
    a problem and ``None`` (the verdict is skipped).
    """
    if type(value) is bool:
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUTH:
        meaning = _TRUTH[value.strip().lower()]
        report(problems, span, key, f"is the string {value[:10]!r}, not a boolean; read as {meaning}")
        return meaning
    shown = repr(value)[:40] if isinstance(value, (str, int, float)) else a_type(value)
    report(problems, span, key, f"is {shown}, not a boolean; verdict skipped")
    return None


def parse_id(variable_id: Any) -> tuple[str, int]:
    """``(name, version)`` of a well-formed, canonical variable id; :class:`MalformedId` otherwise.

    Canonical means the version has no leading zero: ``x@01`` would name a node
    that ``x@1`` names too.

    >>> parse_id("mem:1@2")
    ('mem:1', 2)
    >>> parse_id("x@01")
    Traceback (most recent call last):
    ...
    memtrace_otel.wire.MalformedId: variable id 'x@01': version has a leading zero
    """
    name, version = parse_variable_id(variable_id)
    if variable_id[-1 - len(str(version))] != "@":
        raise MalformedId(f"variable id {variable_id[:80]!r}: version has a leading zero")
    return name, version
