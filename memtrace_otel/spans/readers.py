"""Read span files of any supported format into :class:`SpanRecord` s.

Bad input never stops a read: each problem becomes one :class:`Problem`
naming the file, line and what is wrong, and the rest is still read.
Duplicate spans (same trace and span id) are kept once.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from memtrace_otel.spans.jaeger_json import records_from_jaeger
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.otlp_json import MAX_ATTRIBUTE_CHARS, records_from_traces_data

try:  # orjson parses OTLP/JSON several times faster; the json module is the fallback
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _loads = json.loads

__all__ = ["SpanReadResult", "gc_paused", "read_span_files", "records_from_document"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector during a bulk load.

    Spans and graph nodes are millions of small acyclic containers; with the
    collector on, each allocation burst rescans the growing heap, which made
    reading 100k spans several times slower than parsing them. Nothing built
    here forms a reference cycle, so nothing is leaked while it is paused.

    On the way out, what was allocated is promoted to the oldest generation
    unscanned (``gc.freeze`` then ``gc.unfreeze``): the loaded data is long-lived,
    so the young-generation collection that would otherwise follow would walk
    all of it (a third of a second per 100k spans) to free nothing. Full
    collections still examine it as usual. Skipped when the application keeps
    objects frozen itself, since unfreezing would hand those back.
    """
    was_enabled = gc.isenabled()
    promote = gc.get_freeze_count() == 0
    gc.disable()
    try:
        yield
    finally:
        if promote and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


class SpanReadResult:
    """Spans read from some files, and what was wrong with them."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()

    def add(self, records: Iterable[SpanRecord]) -> None:
        seen, spans = self._seen, self.spans
        for record in records:
            key = (record.trace_id, record.span_id)
            if key in seen:
                self.problems.append(Problem(record.source, f"duplicate span {record.span_id} of trace "
                                                           f"{record.trace_id} ignored"))
                continue
            seen.add(key)
            spans.append(record)


def records_from_document(
    document: Any, where: str, problems: list[Problem], *, text_length: int | None = None
) -> Iterator[SpanRecord]:
    """Spans of one parsed JSON document, OTLP or Jaeger, chosen by its shape.

    ``text_length``, the length of the JSON text, lets short documents skip the
    search for over-long attributes.
    """
    if isinstance(document, dict) and "data" in document and "resourceSpans" not in document:
        return records_from_jaeger(document, where, problems)
    check_long = text_length is None or text_length > MAX_ATTRIBUTE_CHARS
    return records_from_traces_data(document, where, problems, check_long=check_long)


def _open(path: str) -> TextIO:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _read_lines(path: str, handle: TextIO, result: SpanReadResult) -> None:
    problems = result.problems
    line_number = 0
    try:
        for line_number, line in enumerate(handle, start=1):
            if not line or line.isspace():  # not line.strip(), without copying the line
                continue
            where = f"{path}:{line_number}"
            try:
                document = _loads(line)
            except ValueError as error:
                problems.append(Problem(where, f"invalid JSON ({error}); line skipped"))
                continue
            result.add(records_from_document(document, where, problems, text_length=len(line)))
    except (OSError, EOFError) as error:
        problems.append(Problem(f"{path}:{line_number + 1}", f"file is truncated or unreadable: {error}"))


def _read_file(path: str, result: SpanReadResult) -> None:
    try:
        with _open(path) as handle:
            head = handle.read(1 << 16)
            handle.seek(0)
            if _looks_like_one_document(head):
                _read_document(path, handle, result)
            else:
                _read_lines(path, handle, result)
    except FileNotFoundError:
        result.problems.append(Problem(path, "no such file"))
    except IsADirectoryError:
        result.problems.append(Problem(path, "is a directory (pass the files in it)"))
    except (OSError, EOFError) as error:
        result.problems.append(Problem(path, f"cannot read: {error}"))


def _looks_like_one_document(head: str) -> bool:
    # JSON Lines put a whole object on line one; a pretty-printed document (Jaeger's
    # download, an /api/traces response saved with indentation) opens with a short first
    # line that is not JSON by itself. A first line longer than the head is JSON Lines, and
    # so is a compact one-line document (it is valid JSON Lines too).
    first, newline, _ = head.lstrip().partition("\n")
    if not newline:
        return False
    first = first.strip()
    return first in ("{", "[") or (first.startswith("{") and first.endswith(("{", "[", ",")))


def _read_document(path: str, handle: TextIO, result: SpanReadResult) -> None:
    text = handle.read()
    try:
        document = json.loads(text)  # the json module's errors carry the line number
    except ValueError as error:
        line = getattr(error, "lineno", 1)
        result.problems.append(Problem(f"{path}:{line}", f"invalid JSON document ({error}); "
                                                         "trying it as JSON Lines"))
        handle.seek(0)
        _read_lines(path, handle, result)
        return
    result.add(records_from_document(document, f"{path}:1", result.problems))


def read_span_files(paths: Iterable[str | os.PathLike[str]]) -> SpanReadResult:
    """Read OTLP/JSON Lines (``.gz`` too), OTLP/JSON documents and Jaeger JSON files.

    Directories are expanded to the ``.json``, ``.jsonl`` and ``.gz`` files in them.
    """
    result = SpanReadResult()
    with gc_paused():
        for path in _expand(paths):
            _read_file(path, result)
    return result


def _expand(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    for raw in paths:
        path = os.fspath(raw)
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if name.endswith((".json", ".jsonl", ".gz")):
                    yield os.path.join(path, name)
        else:
            yield path
