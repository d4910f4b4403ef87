"""The lineage wire format: how variables, versions and operations are written as text.

Both sides of the pipeline import this module and nothing else for it: the
instrumentation (which writes ``memtrace.inputs`` / ``memtrace.outputs`` /
``memtrace.variables`` and record metadata) and the graph builder (which reads
them back). Keeping the format in one small module is what lets the graph
layer stay independent of the writing side.

* A **variable id** is ``name@version``: ``version`` is a positive decimal
  integer in ASCII digits; the name may hold anything, ``@`` included (the
  last ``@`` separates the version).
* A **descriptor** (one element of ``memtrace.variables``) is
  ``"<kind> <size> <hash> <id>"``; the id goes last because names may hold
  spaces.
* An **operation node id** is ``op:<trace_id>:<span_id>`` (lowercase hex).
* An **evaluation text key** addresses one text of a verdict (question,
  prediction, gold, explanation) in a content store: ``<span_id>#<field>``.
* A **content hash** is 16 hex chars of BLAKE2b over the UTF-8 text; a descriptor's may be empty
  where nothing reads it (a stage's own variables without content capture: ``docs/conventions.md``),
  which readers take as no hash.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

__all__ = [
    "EVALUATION_TEXT_FIELDS",
    "MAX_VERSION_DIGITS",
    "Descriptor",
    "MalformedId",
    "content_hash",
    "describe",
    "evaluation_text_key",
    "operation_node_id",
    "parse_descriptor",
    "parse_variable_id",
    "split_variable_id",
    "variable_id",
]

EVALUATION_TEXT_FIELDS = ("question", "prediction", "gold", "explanation")
"""The texts of a verdict that are content: on spans only with capture, always in-process."""

MAX_VERSION_DIGITS = 18
"""Versions and sizes longer than this are malformed: they fit no int64 and are never written."""

_ASCII_DIGITS = frozenset("0123456789")

_BLAKE2B_8 = hashlib.blake2b(digest_size=8)
"""An empty 8-byte BLAKE2b, copied for each content hash: a copy is a third of the cost of making one
with ``digest_size`` (its parameter block set up again), and every traced write hashes its content.
Never updated itself, so copies from any thread start from the same state."""


class MalformedId(ValueError):
    """A variable id or descriptor that does not follow the wire format; the message says why."""


class Descriptor(NamedTuple):
    """One parsed ``memtrace.variables`` element."""

    id: str
    kind: str
    size: int
    hash: str


def _natural(text: str, what: str, *, positive: bool) -> int:
    # str.isdigit() accepts "²" and other Unicode digits that int() rejects; the wire format
    # is ASCII, and a 5,000-digit number is an attack, not a version.
    if not text or not set(text) <= _ASCII_DIGITS:
        raise MalformedId(f"{what} {text[:40]!r} is not an ASCII decimal number")
    if len(text) > MAX_VERSION_DIGITS:
        raise MalformedId(f"{what} has {len(text)} digits (at most {MAX_VERSION_DIGITS})")
    value = int(text)
    if positive and value < 1:
        raise MalformedId(f"{what} {text!r} is not >= 1")
    return value


def variable_id(name: str, version: int) -> str:
    """The id of version ``version`` of variable ``name``.

    >>> variable_id("memory:42", 3)
    'memory:42@3'
    """
    return f"{name}@{version}"


def parse_variable_id(text: object) -> tuple[str, int]:
    """``(name, version)`` of a well-formed variable id; :class:`MalformedId` otherwise.

    >>> parse_variable_id("memory:42@3")
    ('memory:42', 3)
    >>> parse_variable_id("y@notanint")
    Traceback (most recent call last):
    ...
    memtrace_otel.wire.MalformedId: version 'notanint' is not an ASCII decimal number
    """
    if not isinstance(text, str):
        raise MalformedId(f"variable id is a {type(text).__name__}, not a string")
    name, sep, version = text.rpartition("@")
    if not sep:
        raise MalformedId(f"variable id {text[:80]!r} has no @version")
    if not name:
        raise MalformedId(f"variable id {text[:80]!r} has an empty name")
    return name, _natural(version, "version", positive=True)


def split_variable_id(text: str) -> tuple[str, int]:
    """Lenient split of ``name@version`` for ids this process made: no version counts as 1.

    Readers of input use :func:`parse_variable_id`, which reports malformed ids.

    >>> split_variable_id("memory:42@3")
    ('memory:42', 3)
    >>> split_variable_id("question")
    ('question', 1)
    """
    try:
        return parse_variable_id(text)
    except MalformedId:
        return text, 1


def content_hash(content: str) -> str:
    """16 hex chars of BLAKE2b: enough to tell versions apart, too short to invert.

    >>> content_hash("hello")
    'a7b6eda801e5347d'
    """
    digest = _BLAKE2B_8.copy()
    try:
        digest.update(content.encode())
    except UnicodeEncodeError:  # a lone surrogate: hashed as "replace" encodes it, as always
        digest.update(content.encode("utf-8", "replace"))
    return digest.hexdigest()


def describe(kind: str, size: int, digest: str, var_id: str) -> str:
    """The ``memtrace.variables`` descriptor of one variable.

    >>> describe("message", 5, "a7b6eda801e5347d", "msg:D1:1@1")
    'message 5 a7b6eda801e5347d msg:D1:1@1'
    """
    return f"{kind} {size} {digest} {var_id}"


def parse_descriptor(descriptor: object) -> Descriptor:
    """The parts of a ``memtrace.variables`` descriptor; :class:`MalformedId` when malformed.

    >>> parse_descriptor("message 5 a7b6eda801e5347d msg:D1:1@1")
    Descriptor(id='msg:D1:1@1', kind='message', size=5, hash='a7b6eda801e5347d')
    >>> parse_descriptor("message ² x y@1")
    Traceback (most recent call last):
    ...
    memtrace_otel.wire.MalformedId: size '²' is not an ASCII decimal number
    """
    if not isinstance(descriptor, str):
        raise MalformedId(f"descriptor is a {type(descriptor).__name__}, not a string")
    parts = descriptor.split(" ", 3)
    if len(parts) != 4:
        raise MalformedId(f"descriptor {descriptor[:80]!r} is not '<kind> <size> <hash> <id>'")
    kind, size, digest, var_id = parts
    parse_variable_id(var_id)
    return Descriptor(var_id, kind, _natural(size, "size", positive=False), digest)


def operation_node_id(trace_id: str, span_id: str) -> str:
    """Graph node id of the operation recorded by span ``span_id`` of trace ``trace_id``.

    >>> operation_node_id("ab" * 16, "cd" * 8)
    'op:abababababababababababababababab:cdcdcdcdcdcdcdcd'
    """
    return f"op:{trace_id}:{span_id}"


def evaluation_text_key(span_id: str, field: str) -> str:
    """The content-store key of one text of the verdict recorded by span ``span_id``.

    >>> evaluation_text_key("00f067aa0ba902b7", "gold")
    '00f067aa0ba902b7#gold'
    """
    return f"{span_id}#{field}"
