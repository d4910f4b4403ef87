"""``memtrace report``: one self-contained HTML page showing why each answer failed.

Above attribution, beside write-back: it reads a graph and the verdicts on it.
:func:`~.slice.lineage_slice` cuts a failure's lineage to what a reader needs,
:func:`~.layout.layered_layout` places it left to right in time (one band per
trace), :func:`~.figdata.lineage_data` turns it into a compact record the
page's script draws (:func:`~.svg.lineage_svg` draws it as SVG markup instead),
:mod:`.charts` draws the summary, and :func:`~.page.render_report` puts it all
in one page (:func:`~.page.draw_failures` and :func:`~.page.render_page` are its
two halves, for drawing pipelines in several processes).
"""

from memtrace_otel.report.figdata import StringTable, lineage_data
from memtrace_otel.report.layout import Layout, layered_layout
from memtrace_otel.report.links import SpanLinker, jaeger_linker, linking_stages, no_links, tempo_linker
from memtrace_otel.report.page import DrawnFailure, ReportInput, draw_failures, render_page, render_report
from memtrace_otel.report.slice import LineageSlice, SliceNode, lineage_slice
from memtrace_otel.report.svg import lineage_svg

__all__ = [
    "DrawnFailure",
    "Layout",
    "LineageSlice",
    "ReportInput",
    "SliceNode",
    "SpanLinker",
    "StringTable",
    "draw_failures",
    "jaeger_linker",
    "layered_layout",
    "lineage_data",
    "lineage_slice",
    "lineage_svg",
    "linking_stages",
    "no_links",
    "render_page",
    "render_report",
    "tempo_linker",
]
