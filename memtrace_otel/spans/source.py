"""Bytes of one span input, bounded and truncation-tolerant, and the lines in them.

An input is a regular file, a pipe or standard input, plain or gzip (told by
its magic bytes, so a ``.gz`` on standard input works too). Reading never
holds more than one line beyond a chunk in memory, stops at a ceiling of
decompressed bytes, and keeps everything decoded before a truncation (a
writer killed mid-file, a ``.gz`` without its trailer) rather than failing
the whole input. Blank runs are skipped at C speed: a ``.gz`` of newlines
costs what decompressing it costs.

A gzip input is read member by member (the exporter writes one member per
batch). A member torn by a killed writer is followed by the members a
restarted writer appended: decoding resynchronises at the next member header
after the torn one's start, so those are read too (``gzip.GzipFile`` runs the
next member's bytes into the torn one's stream and stops there).
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

__all__ = ["CHUNK_BYTES", "InputStream", "iter_lines"]

CHUNK_BYTES = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_MEMBER_START = b"\x1f\x8b\x08"  # magic and deflate, the only method gzip defines
_GZIP_WBITS = 31  # zlib: one gzip member, header and trailer (CRC, size) checked
# Compressed bytes of the current member kept for a resync: a member torn further back than
# this is searched for the next header from this far back only.
_RESYNC_WINDOW = 8 << 20
_BLANK = re.compile(rb"[ \t\r\n]*").match  # JSON whitespace
_JSON_START = frozenset(b"{[")


class InputStream:
    """Chunks of one input's (decompressed) bytes, at most ``max_bytes`` of them.

    After :meth:`chunks` is exhausted, ``error`` says why reading stopped early
    (a truncated or corrupt stream), ``over_ceiling`` whether bytes were left
    unread at the ceiling, and ``torn_members`` how many corrupt gzip members
    were skipped (reading went on at the next member; each yields a ``\n``
    first, so a torn line ends there). Not thread-safe: one reader per input.
    """

    def __init__(self, raw: BinaryIO, max_bytes: int) -> None:
        # peek() without consuming: a raw file object gets a buffer around it first.
        buffered: Any = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[type-var]
        self.compressed = buffered.peek(2)[:2] == _GZIP_MAGIC
        self._stream: Any = buffered
        self.max_bytes = max_bytes
        self.bytes_read = 0
        self.over_ceiling = False
        self.error = ""
        self.torn_members = 0

    def chunks(self) -> Iterator[bytes]:
        read1 = _Members(self._stream.read1, self).read1 if self.compressed else self._stream.read1
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


class _Members:
    """``read1`` over the decompressed bytes of consecutive gzip members, past torn ones."""

    def __init__(self, read_raw: Any, stream: InputStream) -> None:
        self._read_raw = read_raw
        self._stream = stream
        self._buffer = b""  # compressed bytes not yet given to the decompressor (or searched)
        self._member = bytearray()  # compressed bytes the current member consumed (window)
        self._decoder: Any = zlib.decompressobj(_GZIP_WBITS)  # None while searching for a header
        self._ended = False  # no more compressed input

    def _fill(self) -> bool:
        if self._ended:
            return False
        more = self._read_raw(CHUNK_BYTES)
        if not more:
            self._ended = True
            return False
        self._buffer += more
        return True

    def read1(self, size: int) -> bytes:
        while True:
            if self._decoder is None and not self._search():
                return b""
            if not self._buffer and size > 0:  # output held back by an earlier size limit
                try:
                    out = self._decoder.decompress(b"", size)
                except zlib.error:
                    return self._torn()
                if out:
                    return out
            if not self._buffer and not self._fill():
                if self._member:  # input ended inside a member: a writer stopped mid-batch
                    self._member.clear()
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
                return b""
            decoder, fed = self._decoder, self._buffer
            try:
                out = decoder.decompress(fed, size) if size > 0 else b""
            except zlib.error:
                return self._torn()
            rest = decoder.unused_data if decoder.eof else decoder.unconsumed_tail
            self._member += fed[:len(fed) - len(rest)]
            if len(self._member) > _RESYNC_WINDOW:
                del self._member[:len(self._member) - _RESYNC_WINDOW]
            self._buffer = rest
            if decoder.eof:  # the next member starts here (padding before it is skipped by the search)
                self._decoder = None
                self._member = bytearray()
            if out or size <= 0:
                return out

    def _torn(self) -> bytes:
        """A corrupt member: search again from just after its start; end the torn line."""
        self._stream.torn_members += 1
        # The member's bytes: those it consumed, then those it failed on (still in the buffer).
        self._buffer = (bytes(self._member) + self._buffer)[1:]
        self._member = bytearray()
        self._decoder = None
        return b"\n"

    def _search(self) -> bool:
        """Find the next member header in the input; False at the end of the input."""
        while True:
            at = self._buffer.find(_MEMBER_START)
            if at >= 0:
                self._buffer = self._buffer[at:]
                self._decoder = zlib.decompressobj(_GZIP_WBITS)
                return True
            self._buffer = self._buffer[-(len(_MEMBER_START) - 1):]  # a header split across reads
            if not self._fill():
                self._buffer = b""
                return False
