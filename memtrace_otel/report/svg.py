"""Inline SVG of a laid-out lineage slice; every string from the input is escaped.

Node classes carry the slice's marks (``root_cause``, ``lost``, ``deleted``,
``overwritten``, ``evidence`` ...) so the page's CSS, not this module, decides
colours. A node's ``<title>`` holds its full id, detail and content (when the
spans carried content) as a tooltip; operations link to their span when the
report has a :data:`~memtrace_otel.report.links.SpanLinker`. The arrowhead
marker is defined once per page (:data:`ARROW_DEFS`), not per figure.
"""

from __future__ import annotations

from html import escape

from memtrace_otel.report.layout import NODE_HEIGHT, NODE_WIDTH, Layout
from memtrace_otel.report.links import SpanLinker, no_links
from memtrace_otel.report.slice import LineageSlice, SliceNode

__all__ = ["ARROW_DEFS", "esc", "lineage_svg", "short"]

ARROW_DEFS = ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
              '<marker id="mt-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
              'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z"/></marker>'
              '</defs></svg>')
_CONTENT_TOOLTIP = 600


def esc(value: object) -> str:
    """``value`` as text safe inside HTML or SVG, attributes included.

    >>> esc('<script>alert("x")</script>')
    '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;'
    """
    return escape(str(value), quote=True)


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis.

    >>> short("mem:user-42:facts@17", 10)
    'mem:user-…'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tooltip(node: SliceNode) -> str:
    lines = [node.id if node.kind != "collapsed" else node.label, node.detail]
    if node.span_id:
        lines.append(f"trace {node.trace_id} span {node.span_id}")
    if node.content is not None:
        lines.append(f"content: {short(node.content, _CONTENT_TOOLTIP)}")
    marks = sorted(node.marks - {"path"})
    if marks:
        lines.append("marked: " + ", ".join(m.replace("_", " ") for m in marks))
    return "\n".join(line for line in lines if line)


def _node(node: SliceNode, x: float, y: float, linker: SpanLinker) -> str:
    classes = " ".join(["node", node.kind, *sorted(m.replace("_", "-") for m in node.marks)])
    badge = "root cause" if "root_cause" in node.marks else "lost" if "lost" in node.marks else ""
    if badge:
        badge = f'<text class="badge" x="{x + NODE_WIDTH - 6}" y="{y - 4}" text-anchor="end">{badge}</text>'
    body = (f'<g class="{classes}" data-node="{esc(node.id)}"><title>{esc(_tooltip(node))}</title>'
            f'<rect x="{x}" y="{y}"/>'  # size and corners come from the page's CSS: smaller pages
            f'<text x="{x + 8}" y="{y + 17}">{esc(short(node.label, 24))}</text>'
            f'<text class="sub" x="{x + 8}" y="{y + 33}">{esc(short(node.detail, 30))}</text>{badge}</g>')
    url = linker(node.trace_id, node.span_id) if node.span_id else None
    return f'<a href="{esc(url)}" target="_blank" rel="noopener">{body}</a>' if url else body


def _edge(layout: Layout, u: str, v: str) -> str:
    (ux, uy), (vx, vy) = layout.positions[u], layout.positions[v]
    x1, y1 = ux + NODE_WIDTH, uy + NODE_HEIGHT / 2
    x2, y2 = vx, vy + NODE_HEIGHT / 2
    bend = max(30.0, abs(x2 - x1) / 2)
    back = " back" if x2 <= x1 else ""
    return (f'<path class="edge{back}" d="M{x1:.0f},{y1:.0f} C{x1 + bend:.0f},{y1:.0f} '
            f'{x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}" marker-end="url(#mt-arrow)"/>')


def _band(band_trace: str, x0: float, x1: float, height: float, linker: SpanLinker) -> str:
    label = f"trace {short(band_trace, 16)}" if band_trace else "no trace"
    text = f'<text class="band-label" x="{x0 + 6}" y="16">{esc(label)}</text>'
    url = linker(band_trace, None) if band_trace else None
    if url:
        text = f'<a href="{esc(url)}" target="_blank" rel="noopener">{text}</a>'
    return (f'<g class="band" data-trace="{esc(band_trace)}"><title>{esc(band_trace or "no trace")}</title>'
            f'<rect x="{x0}" y="2" width="{max(x1 - x0, 1):.0f}" height="{height - 4:.0f}" rx="6"/>'
            f'{text}</g>')


def lineage_svg(lineage: LineageSlice, layout: Layout, *, linker: SpanLinker = no_links) -> str:
    """One ``<svg>`` element drawing ``lineage`` at ``layout``'s positions.

    Parameters
    ----------
    lineage:
        The slice (:func:`~memtrace_otel.report.slice.lineage_slice`).
    layout:
        Its layout (:func:`~memtrace_otel.report.layout.layered_layout`).
    linker:
        Turns an operation's span into a URL; :func:`~memtrace_otel.report.links.no_links` by default.

    Returns
    -------
    str
        SVG markup; needs :data:`ARROW_DEFS` once in the page for arrowheads.

    >>> from memtrace_otel.report.layout import layered_layout
    >>> s = LineageSlice([SliceNode("<m>", "variable", "<m>", 0, "t")], [], ["t"])
    >>> "<m>" in lineage_svg(s, layered_layout(s)), "&lt;m&gt;" in lineage_svg(s, layered_layout(s))
    (False, True)
    """
    height = layout.height
    parts = [f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {layout.width:.0f} {height:.0f}" role="img" '
             f'aria-label="lineage of the failed answer">']
    parts.extend(_band(b.trace_id, b.x0, b.x1, height, linker) for b in layout.bands)
    parts.extend(_edge(layout, u, v) for u, v in lineage.edges
                 if u in layout.positions and v in layout.positions)
    for node in lineage.nodes:
        x, y = layout.positions[node.id]
        parts.append(_node(node, x, y, linker))
    parts.append("</svg>")
    return "".join(parts)
