"""Bytes of one span input, bounded and truncation-tolerant, and the lines in them.

An input is a regular file, a pipe or standard input, plain or gzip (told by
its magic bytes, so a ``.gz`` on standard input works too). Reading never
holds more than one line beyond a chunk in memory, stops at a ceiling of
decompressed bytes, and keeps everything decoded before a truncation (a
writer killed mid-file, a ``.gz`` without its trailer) rather than failing
the whole input. Blank runs are skipped at C speed: a ``.gz`` of newlines
costs what decompressing it costs.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

__all__ = ["CHUNK_BYTES", "InputStream", "iter_lines"]

CHUNK_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_BLANK = re.compile(rb"[ \t\r\n]*").match  # JSON whitespace
_JSON_START = frozenset(b"{[")


class InputStream:
    """Chunks of one input's (decompressed) bytes, at most ``max_bytes`` of them.

    After :meth:`chunks` is exhausted, ``error`` says why reading stopped early
    (a truncated or corrupt stream) and ``over_ceiling`` whether bytes were left
    unread at the ceiling. Not thread-safe: one reader per input.
    """

    def __init__(self, raw: BinaryIO, max_bytes: int) -> None:
        # peek() without consuming: a raw file object gets a buffer around it first.
        buffered: Any = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[type-var]
        self.compressed = buffered.peek(2)[:2] == _GZIP_MAGIC
        self._stream: Any = gzip.GzipFile(fileobj=buffered, mode="rb") if self.compressed else buffered
        self.max_bytes = max_bytes
        self.bytes_read = 0
        self.over_ceiling = False
        self.error = ""

    def chunks(self) -> Iterator[bytes]:
        read1 = self._stream.read1
        while True:
            room = self.max_bytes - self.bytes_read
            try:
                # read1: one underlying read, so the bytes decoded before a truncation are
                # handed out before the error (read(n) would drop them with the exception).
                chunk = read1(min(CHUNK_BYTES, room)) if room > 0 else b""
                if room <= 0:
                    self.over_ceiling = bool(read1(1))
            except (EOFError, OSError, zlib.error) as error:
                self.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                return
            if not chunk:
                return
            self.bytes_read += len(chunk)
            yield chunk


def iter_lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of each non-blank line; numbers count from 1.

    A line whose first non-blank byte cannot start JSON (``{`` or ``[``) is
    yielded once as ``None`` and skipped without being buffered, so a stream
    of zeros costs no memory. The last line needs no newline.

    >>> list(iter_lines([b'{"a":1}\\n\\n  \\n[2', b']\\nxyz\\n']))
    [(1, b'{"a":1}'), (4, b'[2]'), (5, None)]
    """
    number = start = 1
    pending: list[bytes] = []
    skipping = False
    for chunk in chunks:
        pos, size = 0, len(chunk)
        while pos < size:
            if not pending and not skipping:
                blank = _BLANK(chunk, pos)
                assert blank is not None  # a starred pattern always matches
                end = blank.end()
                number += chunk.count(b"\n", pos, end)
                pos, start = end, number
                if pos == size:
                    break
                if chunk[pos] not in _JSON_START:
                    skipping = True
                    yield start, None
            newline = chunk.find(b"\n", pos)
            if newline < 0:
                if not skipping:
                    pending.append(chunk[pos:])
                break
            if not skipping:
                if pending:
                    pending.append(chunk[pos:newline])
                    yield start, b"".join(pending)
                    pending = []
                else:
                    yield start, chunk[pos:newline]
            skipping = False
            number += 1
            pos = newline + 1
    if pending:
        yield start, b"".join(pending)
