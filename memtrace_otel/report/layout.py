"""A layered left-to-right layout of a lineage slice, one vertical band per trace.

Traces are placed left to right in the order they started, each in a band of
its own, so a trace boundary is a band edge and a lineage edge that crosses
one is a link between traces. Inside a band, a node's column is one more than
its latest predecessor's in the band (longest-path layering, in time order);
inside a column, nodes are ordered by the mean row of their predecessors
(one barycentre pass: few crossings for the cost of a sort). Width grows with
the length of the lineage, height with its widest column, so 200 nodes stay
readable in a scrolling box.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from memtrace_otel.report.slice import LineageSlice, SliceNode

__all__ = ["COLUMN_GAP", "NODE_HEIGHT", "NODE_WIDTH", "Band", "Layout", "layered_layout"]

NODE_WIDTH, NODE_HEIGHT = 172, 42
COLUMN_GAP, ROW_GAP, BAND_PAD, TOP = 60, 16, 14, 40


@dataclass(frozen=True, slots=True)
class Band:
    """One trace's vertical band: ``x0`` to ``x1`` in pixels; ``trace_id`` ``""`` for nodes of no trace."""

    trace_id: str
    x0: float
    x1: float


@dataclass(slots=True)
class Layout:
    """Top-left corner of every node's box, the picture's size, and the trace bands."""

    positions: dict[str, tuple[float, float]] = field(default_factory=dict)
    width: float = 0.0
    height: float = 0.0
    bands: list[Band] = field(default_factory=list)


def _band_of(node: SliceNode, traces: set[str]) -> str:
    return node.trace_id if node.trace_id in traces else ""


def _columns(lineage: LineageSlice) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """Global column of each node, and the column range of each band."""
    traces = set(lineage.traces)
    band_order = ([""] if any(_band_of(n, traces) == "" for n in lineage.nodes) else []) + lineage.traces
    preds: dict[str, list[str]] = defaultdict(list)
    for u, v in lineage.edges:
        preds[v].append(u)
    band = {n.id: _band_of(n, traces) for n in lineage.nodes}
    local: dict[str, int] = {}
    for node in lineage.nodes:  # time order: a predecessor placed later is ignored (no cycles)
        here = band[node.id]
        local[node.id] = max((local[p] + 1 for p in preds[node.id] if p in local and band[p] == here),
                             default=0)
    widths = {b: 0 for b in band_order}
    for node_id, layer in local.items():
        widths[band[node_id]] = max(widths[band[node_id]], layer + 1)
    offsets, ranges, start = {}, {}, 0
    for b in band_order:
        if widths[b]:
            offsets[b], ranges[b] = start, (start, start + widths[b])
            start += widths[b]
    return {n: offsets[band[n]] + layer for n, layer in local.items()}, ranges


def _rows(lineage: LineageSlice, column: dict[str, int]) -> dict[str, int]:
    preds: dict[str, list[str]] = defaultdict(list)
    for u, v in lineage.edges:
        preds[v].append(u)
    by_column: dict[int, list[SliceNode]] = defaultdict(list)
    for node in lineage.nodes:
        by_column[column[node.id]].append(node)
    row: dict[str, int] = {}
    for c in sorted(by_column):
        def centre(node: SliceNode) -> tuple[float, float, str]:
            placed = [row[p] for p in preds[node.id] if p in row]
            return (sum(placed) / len(placed) if placed else float("inf"), node.time, node.id)
        for index, node in enumerate(sorted(by_column[c], key=centre)):
            row[node.id] = index
    return row


def layered_layout(lineage: LineageSlice) -> Layout:
    """Positions for every node of ``lineage``, left to right in time, one band per trace.

    Parameters
    ----------
    lineage:
        A slice from :func:`~memtrace_otel.report.slice.lineage_slice`.

    Returns
    -------
    Layout
        Pixel positions (top-left of each node's box), the size, and one band per trace.

    >>> from memtrace_otel.report.slice import LineageSlice, SliceNode
    >>> nodes = [SliceNode("m", "variable", "m", 0, "t1"), SliceNode("o", "operation", "o", 1, "t2")]
    >>> s = LineageSlice(nodes, [("m", "o")], ["t1", "t2"])
    >>> layout = layered_layout(s)
    >>> layout.positions["m"][0] < layout.positions["o"][0], [b.trace_id for b in layout.bands]
    (True, ['t1', 't2'])
    """
    column, ranges = _columns(lineage)
    row = _rows(lineage, column)
    step_x, step_y = NODE_WIDTH + COLUMN_GAP, NODE_HEIGHT + ROW_GAP
    positions: dict[str, tuple[float, float]] = {
        n: (BAND_PAD + c * step_x, TOP + row[n] * step_y) for n, c in column.items()}
    bands = [Band(b, lo * step_x, hi * step_x - COLUMN_GAP + 2 * BAND_PAD - 4)
             for b, (lo, hi) in ranges.items()]
    columns = max(column.values(), default=-1) + 1
    rows = max(row.values(), default=-1) + 1
    width = columns * step_x - COLUMN_GAP + 2 * BAND_PAD
    return Layout(positions, width, TOP + rows * step_y + BAND_PAD, bands)
