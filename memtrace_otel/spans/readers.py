"""Read span files of any supported format into :class:`SpanRecord` s.

Bad input never stops a read: each problem becomes one :class:`Problem`
naming the file, line and what is wrong, and the rest is still read.
Duplicate spans (same trace and span id) are kept once.
"""

from __future__ import annotations

import gc
import itertools
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from memtrace_otel.config import ENV_MAX_INPUT_BYTES, max_input_bytes_from_env
from memtrace_otel.spans.jaeger_json import records_from_jaeger
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.otlp_json import MAX_ATTRIBUTE_CHARS, records_from_traces_data
from memtrace_otel.spans.otlp_logs import is_logs_document, records_from_logs_data
from memtrace_otel.spans.smartcomment import is_smartcomment_document, records_from_smartcomment
from memtrace_otel.spans.source import InputStream, iter_lines

try:  # orjson parses OTLP/JSON several times faster, and bounds nesting (1024) without recursing
    from orjson import JSONDecodeError as _JSONError
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    import json

    _JSONError = ValueError  # type: ignore[assignment,misc]
    _orjson_loads = None  # type: ignore[assignment]

__all__ = [
    "SPAN_FILE_SUFFIXES",
    "STDIN",
    "SpanReadResult",
    "gc_paused",
    "read_span_files",
    "records_from_document",
]

STDIN = "-"
"""The path that means standard input (read as one stream)."""
SPAN_FILE_SUFFIXES = (".json", ".jsonl", ".gz")
"""Files a directory is expanded to."""
_HEAD_BYTES = 1 << 16


def _loads(data: bytes) -> Any:
    if _orjson_loads is not None:
        return _orjson_loads(data)
    try:  # pragma: no cover - without orjson
        return json.loads(data)
    except RecursionError:  # pragma: no cover
        raise ValueError("nested too deeply") from None


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
    """Spans read from some inputs, and what was wrong with them.

    Not thread-safe: fill it from one thread.
    """

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()

    def add(self, records: Iterable[SpanRecord]) -> int:
        """Keep each span not seen before (a duplicate is one problem); returns how many were offered."""
        seen, spans = self._seen, self.spans
        before, duplicates = len(spans), 0
        for record in records:
            key = (record.trace_id, record.span_id)
            if key in seen:
                duplicates += 1
                self.problems.append(Problem(record.source, f"duplicate span {record.span_id} of trace "
                                                           f"{record.trace_id} ignored"))
                continue
            seen.add(key)
            spans.append(record)
        return len(spans) - before + duplicates


def records_from_document(
    document: Any, where: str, problems: list[Problem], *, text_length: int | None = None
) -> Iterator[SpanRecord]:
    """Spans of one parsed JSON document, OTLP, Jaeger or smartcomment, chosen by its shape.

    ``text_length``, the length of the JSON text, lets short documents skip the
    search for over-long attributes.

    >>> problems = []
    >>> list(records_from_document({"data": []}, "f:1", problems)), problems
    ([], [])
    """
    if is_smartcomment_document(document):  # its "data" is an object; Jaeger's is a list
        return records_from_smartcomment(document, where, problems)
    if is_logs_document(document):  # a logs pipeline's line: evaluators' results as log records
        return records_from_logs_data(document, where, problems)
    if isinstance(document, dict) and "data" in document and "resourceSpans" not in document:
        return records_from_jaeger(document, where, problems)
    check_long = text_length is None or text_length > MAX_ATTRIBUTE_CHARS
    return records_from_traces_data(document, where, problems, check_long=check_long)


class _FileReader:
    """Reads one input into a :class:`SpanReadResult`; counts what it must report once."""

    def __init__(self, name: str, result: SpanReadResult) -> None:
        self.name, self.result = name, result
        self.offered = 0  # spans found, duplicates included
        self.bad_utf8_lines: list[int] = []
        self.problems_before = len(result.problems)

    def parse(self, data: bytes, number: int) -> Any:
        """The JSON value of ``data``; invalid UTF-8 is replaced (and counted) rather than fatal."""
        try:
            return _loads(data)
        except _JSONError:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                self.bad_utf8_lines.append(number)
                return _loads(data.decode("utf-8", "replace").encode("utf-8"))
            raise

    def read_line(self, number: int, line: bytes | None) -> None:
        where = f"{self.name}:{number}"
        if line is None:
            self.result.problems.append(Problem(where, "invalid JSON (the line does not start with "
                                                       "'{' or '['); line skipped"))
            return
        try:
            document = self.parse(line, number)
        except _JSONError as error:
            self.result.problems.append(Problem(where, f"invalid JSON ({error}); line skipped"))
            return
        self.offered += self.result.add(records_from_document(document, where, self.result.problems,
                                                              text_length=len(line)))

    def read_lines(self, chunks: Iterable[bytes]) -> None:
        for number, line in iter_lines(chunks):
            self.read_line(number, line)

    def read_document(self, data: bytes) -> None:
        try:
            document = self.parse(data, 1)
        except _JSONError as error:
            self._retry_as_lines(data, Problem(f"{self.name}:{getattr(error, 'lineno', 1)}",
                                               f"invalid JSON document ({error}); file skipped"))
            return
        records = records_from_document(document, f"{self.name}:1", self.result.problems)
        self.offered += self.result.add(records)

    def _retry_as_lines(self, data: bytes, problem: Problem) -> None:
        # A JSON Lines file can look like a document (a first line cut after a comma): read it as
        # lines, and keep their problems only if that finds spans. A broken pretty-printed
        # document stays one problem, not one per line.
        problems = self.result.problems
        before, offered = len(problems), self.offered
        self.read_lines([data])
        if self.offered == offered:
            del problems[before:]
            problems.append(problem)

    def finish(self, stream: InputStream) -> None:
        problems = self.result.problems
        if stream.error:
            problems.append(Problem(self.name, f"input is truncated or unreadable after "
                                               f"{stream.bytes_read:,} bytes ({stream.error}); what came "
                                               "before was read"))
        if stream.torn_members:
            problems.append(Problem(self.name, f"{stream.torn_members} torn gzip member(s) skipped (a writer "
                                               "killed mid-batch); the members after each were read"))
        if stream.over_ceiling:
            problems.append(Problem(self.name, f"only the first {stream.max_bytes:,} bytes were read "
                                               f"(ceiling {ENV_MAX_INPUT_BYTES}); the rest skipped"))
        if self.bad_utf8_lines:
            lines = self.bad_utf8_lines
            problems.append(Problem(self.name, f"{len(lines)} line(s) had invalid UTF-8 bytes, replaced by "
                                               f"U+FFFD (first at line {lines[0]})"))
        if not self.offered and len(problems) == self.problems_before:  # else those problems say why
            problems.append(Problem(self.name, "no spans in file"))


def _read_stream(name: str, raw: BinaryIO, result: SpanReadResult, max_bytes: int) -> None:
    stream = InputStream(raw, max_bytes)
    reader = _FileReader(name, result)
    chunks = stream.chunks()
    head = _head(chunks)
    if _looks_like_one_document(b"".join(head)):
        data = b"".join(itertools.chain(head, chunks))
        if stream.over_ceiling:
            result.problems.append(Problem(name, "JSON document larger than the input ceiling; file skipped"))
        else:
            reader.read_document(data)
    else:
        reader.read_lines(itertools.chain(head, chunks))
    reader.finish(stream)


def _head(chunks: Iterator[bytes]) -> list[bytes]:
    """The first chunks, enough to see the first line (or 64 KiB of it)."""
    head: list[bytes] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size >= _HEAD_BYTES or b"\n" in chunk.lstrip():
            break
    return head


def _looks_like_one_document(head: bytes) -> bool:
    # JSON Lines put a whole object on line one; a pretty-printed document (Jaeger's
    # download, an /api/traces response saved with indentation) opens with a short first
    # line that is not JSON by itself. A first line longer than the head is JSON Lines, and
    # so is a compact one-line document (it is valid JSON Lines too).
    first, newline, _ = head.lstrip().partition(b"\n")
    if not newline:
        return False
    first = first.strip()
    return first in (b"{", b"[") or (first.startswith(b"{") and first.endswith((b"{", b"[", b",")))


def _read_path(path: str, from_directory: bool, result: SpanReadResult, max_bytes: int) -> None:
    if path == STDIN:
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:
            result.problems.append(Problem("<stdin>", "standard input is not readable here"))
        else:
            _read_stream("<stdin>", stdin, result, max_bytes)
        return
    try:
        handle = _open_regular(path) if from_directory else open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        result.problems.append(Problem(path, "no such file"))
        return
    except IsADirectoryError:
        result.problems.append(Problem(path, "is a directory (pass the files in it)"))
        return
    except OSError as error:
        result.problems.append(Problem(path, f"cannot read: {error.strerror or error}"))
        return
    if handle is None:
        result.problems.append(Problem(path, "not a regular file (a pipe or device?); skipped"))
        return
    with handle:
        _read_stream(path, handle, result, max_bytes)


def _open_regular(path: str) -> BinaryIO | None:
    """Open ``path`` only if it is a regular file, without blocking on a FIFO that appeared in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_span_files(
    paths: Iterable[str | os.PathLike[str]], *, max_bytes: int | None = None
) -> SpanReadResult:
    """Read OTLP/JSON Lines, OTLP/JSON documents and Jaeger JSON files, plain or gzip.

    Parameters
    ----------
    paths:
        Files, directories (expanded to their regular ``.json``, ``.jsonl`` and
        ``.gz`` files) and ``"-"`` for standard input.
    max_bytes:
        Ceiling on the decompressed bytes read from one input; default from
        ``MEMTRACE_MAX_INPUT_BYTES`` (1 GiB).

    Returns
    -------
    SpanReadResult
        The spans, and one :class:`Problem` per thing skipped or repaired (an
        input without spans is one too).

    >>> read_span_files([]).spans
    []
    """
    limit = max_input_bytes_from_env() if max_bytes is None else max_bytes
    if limit < 1:
        raise ValueError(f"max_bytes must be >= 1, not {limit}")
    result = SpanReadResult()
    with gc_paused():
        for path, from_directory in _expand(paths, result.problems):
            _read_path(path, from_directory, result, limit)
    return result


def _expand(paths: Iterable[str | os.PathLike[str]], problems: list[Problem]) -> Iterator[tuple[str, bool]]:
    for raw in paths:
        path = os.fspath(raw)
        if path == STDIN or not os.path.isdir(path):
            yield path, False
            continue
        try:
            names = sorted(entry.name for entry in os.scandir(path)
                           if entry.name.endswith(SPAN_FILE_SUFFIXES))
        except OSError as error:
            problems.append(Problem(path, f"cannot list directory: {error.strerror or error}"))
            continue
        if not names:
            problems.append(Problem(path, f"no span files ({', '.join(SPAN_FILE_SUFFIXES)}) in directory"))
        for name in names:
            yield os.path.join(path, name), True
