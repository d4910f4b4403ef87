"""A laid-out lineage slice as compact data for the page's script to draw: numbers and string indexes.

A page of thousands of failures would be mostly SVG markup if every picture
were stored drawn: the same tags, attributes and tooltips (a memory's content
repeats in every failure that reads it) thousands of times. Instead each
picture is a small JSON array of positions, marks and links, and every string
(node ids, labels, details, trace and span ids, contents, URLs) is an index
into one :class:`StringTable` shared by the whole page. The page's script
(:data:`~memtrace_otel.report.style.PAGE_SCRIPT`) builds the SVG from it with
``createElementNS`` and ``textContent``, so no string from the input is ever
parsed as markup.

The record of one picture (:func:`lineage_data`) is
``[width, height, bands, nodes, edges]``:

* ``bands``: ``[trace, x0, x1, url]`` per trace band;
* ``nodes``: ``[x, y, kind, id, label, detail, trace, span, content, marks, url]``
  per node; ``kind`` indexes :data:`KINDS`, ``marks`` is a bit set over
  :data:`~memtrace_otel.report.slice.MARKS`;
* ``edges``: flat ``[u, v, u, v, ...]`` indexes into ``nodes``.

String fields are indexes into the table, ``-1`` for none. Thread safety:
a :class:`StringTable` is not locked; use one per page being built.
"""

from __future__ import annotations

import json
from typing import Any

from memtrace_otel.report.layout import Layout
from memtrace_otel.report.links import SpanLinker, no_links
from memtrace_otel.report.slice import MARKS, LineageSlice

__all__ = ["KINDS", "StringTable", "lineage_data", "reindex", "script_json"]

KINDS = ("operation", "variable", "collapsed")
_KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
_MARK_BIT = {mark: 1 << bit for bit, mark in enumerate(MARKS)}
_CONTENT_TOOLTIP = 600  # characters of content a node's tooltip shows


class StringTable:
    """Distinct strings in first-seen order; :meth:`index` gives a string's position (``-1`` for ``None``).

    >>> table = StringTable()
    >>> table.index("a"), table.index("b"), table.index("a"), table.index(None), table.strings
    (0, 1, 0, -1, ['a', 'b'])
    """

    def __init__(self) -> None:
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def index(self, value: str | None) -> int:
        if value is None:
            return -1
        found = self._index.get(value)
        if found is None:
            found = self._index[value] = len(self.strings)
            self.strings.append(value)
        return found


def script_json(value: Any) -> str:
    """``value`` as JSON safe as the text of a ``<script>`` element: no ``<`` can end it.

    >>> script_json(["</script><b>"])
    '["\\\\u003c/script>\\\\u003cb>"]'
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _marks(marks: frozenset[str]) -> int:
    return sum(_MARK_BIT.get(mark, 0) for mark in marks)


def lineage_data(lineage: LineageSlice, layout: Layout, table: StringTable, *,
                 linker: SpanLinker = no_links) -> list[Any]:
    """The picture of ``lineage`` at ``layout``'s positions as a compact record (see the module's doc).

    Parameters
    ----------
    lineage, layout:
        The slice and its layout (:func:`~memtrace_otel.report.layout.layered_layout`).
    table:
        The page's string table; the record's strings are added to it.
    linker:
        Turns an operation's span (and a band's trace) into a URL.

    Returns
    -------
    list
        ``[width, height, bands, nodes, edges]``, ready for :func:`script_json`.

    >>> from memtrace_otel.report.layout import layered_layout
    >>> from memtrace_otel.report.slice import SliceNode
    >>> s = LineageSlice([SliceNode("<m>", "variable", "<m>", 0, "t")], [], ["t"])
    >>> table = StringTable()
    >>> record = lineage_data(s, layered_layout(s), table)
    >>> record[3][0][3], table.strings[record[3][0][3]]
    (1, '<m>')
    """
    s = table.index
    bands = [[s(b.trace_id or None), round(b.x0), round(b.x1),
              s(linker(b.trace_id, None) if b.trace_id else None)] for b in layout.bands]
    position: dict[str, int] = {}
    nodes: list[list[Any]] = []
    for node in lineage.nodes:
        x, y = layout.positions[node.id]
        position[node.id] = len(nodes)
        content = node.content if node.content is None or len(node.content) <= _CONTENT_TOOLTIP \
            else node.content[: _CONTENT_TOOLTIP - 1] + "…"
        url = linker(node.trace_id, node.span_id) if node.span_id else None
        nodes.append([round(x), round(y), _KIND_CODE[node.kind], s(node.id), s(node.label), s(node.detail),
                      s(node.trace_id), s(node.span_id), s(content), _marks(node.marks), s(url)])
    edges = [i for u, v in lineage.edges if u in position and v in position
             for i in (position[u], position[v])]
    return [round(layout.width), round(layout.height), bands, nodes, edges]


_BAND_STRINGS, _NODE_STRINGS = (0, 3), (3, 4, 5, 6, 7, 8, 10)


def reindex(record: list[Any], strings: list[str], table: StringTable) -> list[Any]:
    """``record``, whose string fields index ``strings``, with them indexing ``table`` instead (in place).

    For records made in another process with a table of its own.

    >>> mine, page = StringTable(), StringTable()
    >>> page.index("other")
    0
    >>> record = [1, 1, [[mine.index("t"), 0, 1, -1]], [], []]
    >>> reindex(record, mine.strings, page)[2], page.strings
    ([[1, 0, 1, -1]], ['other', 't'])
    """
    def move(row: list[Any], fields: tuple[int, ...]) -> None:
        for i in fields:
            if row[i] >= 0:
                row[i] = table.index(strings[row[i]])
    for band in record[2]:
        move(band, _BAND_STRINGS)
    for node in record[3]:
        move(node, _NODE_STRINGS)
    return record
