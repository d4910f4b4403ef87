"""One self-contained HTML page: summary charts, then one section per failed answer with its lineage picture.

Everything is inline (CSS, the few lines of script, SVG): the file works
offline, from ``file://``, with no CDN. Every string from the input goes
through :func:`~memtrace_otel.report.svg.esc`. Each picture is kept as a compact
JSON record (:mod:`~memtrace_otel.report.figdata`: positions, marks, links and
indexes into one string table for the whole page, so a memory's content that
many failures read is stored once) in a ``<script type="application/json">``
element, and the page's script draws it into its section when it scrolls near
the viewport: a page of thousands of failures opens at the cost of its text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from memtrace_otel.report.charts import bar_chart, by_error_type, by_operation
from memtrace_otel.report.figdata import StringTable, lineage_data, script_json
from memtrace_otel.report.layout import layered_layout
from memtrace_otel.report.links import SpanLinker, linking_stages, no_links
from memtrace_otel.report.slice import LineageSlice, lineage_slice
from memtrace_otel.report.style import PAGE_CSS, PAGE_SCRIPT
from memtrace_otel.report.svg import ARROW_DEFS, esc, short

__all__ = ["DrawnFailure", "ReportInput", "draw_failures", "page_pieces", "render_page", "render_report"]

_SHOWN_TEXT = 2000
_SIGNAL_LABEL = {"gold": "gold answer", "correction": "user's correction", "judge": "judge",
                 "feedback": "feedback"}


@dataclass(slots=True)
class DrawnFailure:
    """One failure ready for the page: the verdict (for the charts), its section's escaped markup
    (heading, body, caption; the page numbers it) and its picture's record (:mod:`.figdata`)."""

    attribution: Any
    error: str
    heading: str
    body: str
    caption: str
    record: list[Any]


@dataclass(slots=True)
class ReportInput:
    """The failures of one pipeline: its graph, the verdicts on it, and a ``label`` when there are several."""

    graph: nx.DiGraph
    attributions: Sequence[Any]
    label: str | None = None


def _span(trace_id: str | None, span_id: str | None, linker: SpanLinker) -> str:
    if not span_id:
        return '<span class="none">no span</span>'
    url = linker(trace_id, span_id)
    text = f'<code class="span-id" title="trace {esc(trace_id)}">{esc(span_id)}</code>'
    if not url:
        return text
    return f'<a class="span-link" href="{esc(url)}" target="_blank" rel="noopener">{text}</a>'


def _row(name: str, value: str | None, css: str = "") -> str:
    shown = '<span class="none">not recorded</span>' if value is None else esc(short(value, _SHOWN_TEXT))
    return f'<tr class="{css}"><th>{esc(name)}</th><td>{shown}</td></tr>'


def _candidate(item: Any) -> tuple[str, Any, Any, Any, Any]:
    """Name, error type, confidence, trace and span of a ranked candidate (object or mapping)."""
    get = item.get if isinstance(item, dict) else lambda key, default=None: getattr(item, key, default)
    error = get("error_type")
    error = getattr(error, "value", error)
    name = get("operation_name") or get("name") or get("operation") or "?"
    return str(name), error, get("confidence"), get("trace_id"), get("span_id")


def _candidates(attribution: Any, linker: SpanLinker) -> str:
    items = getattr(attribution, "candidates", None) or ()
    if not isinstance(items, (list, tuple)) or not items:
        return ""
    rows = []
    for item in items[:10]:
        name, error, confidence, trace, span = _candidate(item)
        share = f"{confidence:.0%}" if isinstance(confidence, (int, float)) else "?"
        rows.append(f"<li><b>{esc(name)}</b> {esc(error or '')} <span class='conf'>{esc(share)}</span> "
                    f"{_span(trace, span, linker)}</li>")
    return f'<div class="candidates"><h3>Candidate root causes</h3><ol>{"".join(rows)}</ol></div>'


def _verdict(a: Any, linker: SpanLinker) -> str:
    if a.operation is None:
        reason = a.failure_reason or "no reason given"
        return (f'<p class="verdict unattributed">Not attributed: {esc(reason)}'
                f' <span class="engine">({esc(a.engine)})</span></p>')
    error = a.error_type.value if a.error_type else "no error type"
    return (f'<p class="verdict"><span class="error-type">{esc(error)}</span> in '
            f'<b class="root-op">{esc(a.operation_name or a.operation)}</b> ({esc(a.category or "?")}) '
            f'{_span(a.trace_id, a.span_id, linker)} <span class="conf">confidence {a.confidence:.2f}</span> '
            f'<span class="engine">({esc(a.engine)})</span></p>')


def _lost(G: nx.DiGraph, lineage: LineageSlice) -> str:
    if not lineage.lost:
        return ""
    items = []
    for node in lineage.lost:
        data = G.nodes[node]
        content = data.get("content")
        what = (f': “{esc(short(content, 300))}”' if isinstance(content, str)
                else ' <span class="none">(content not captured)</span>')
        items.append(f"<li><code>{esc(node)}</code>{' (deleted)' if data.get('deleted') else ''}{what}</li>")
    return f'<div class="lost"><h3>What the root cause lost</h3><ul>{"".join(items)}</ul></div>'


def _section(G: nx.DiGraph, a: Any, lineage: LineageSlice, label: str | None, linker: SpanLinker,
             record: list[Any]) -> DrawnFailure:
    case = a.case
    signal = str(case.signal or "gold")
    error = a.error_type.value if a.error_type else "unattributed"
    table = "".join([_row("question", case.question), _row("prediction", case.prediction, "prediction"),
                     _row(_SIGNAL_LABEL.get(signal, signal), case.gold, "gold"),
                     _row("evaluation's explanation", case.explanation) if case.explanation else "",
                     _row("engine's explanation", a.explanation or None)])
    missing = (f'<p class="missing">Lineage reaches {len(a.missing_traces)} trace(s) not in the input.</p>'
               if a.missing_traces else "")
    shown = sum(1 for n in lineage.nodes if n.kind != "collapsed")
    caption = (f"{shown} of {lineage.total} lineage nodes drawn, the rest folded or off the path; "
               f"{len(lineage.traces)} trace(s), earliest on the left")
    where = f'<p class="group">{esc(label)}</p>' if label else ""
    body = (f'{where}{_verdict(a, linker)}<table class="case">{table}</table>{missing}'
            f'{_lost(G, lineage)}{_candidates(a, linker)}')
    return DrawnFailure(a, esc(error), esc(short(case.question or case.evaluation, 200)), body, esc(caption),
                        record)


def _numbered(number: int, f: DrawnFailure) -> str:
    return (f'<section class="failure" id="failure-{number}" data-error-type="{f.error}">'
            f'<h2><span class="num">#{number}</span> {f.heading}</h2>{f.body}'
            f'<figure class="lineage-figure"><div class="figure" data-fig="{number - 1}">'
            f'<p class="placeholder">drawing…</p></div><figcaption>{f.caption}</figcaption>'
            '</figure></section>')


def _summary(attributions: Sequence[Any], inputs: int) -> str:
    attributed = sum(a.operation is not None for a in attributions)
    facts = (f"<p class='facts'><b>{len(attributions)}</b> failed answer(s), <b>{attributed}</b> attributed"
             + (f", from <b>{inputs}</b> pipelines" if inputs > 1 else "") + ".</p>")
    types = bar_chart("Failures by error type", by_error_type(attributions), chart_id="chart-error-types")
    where = bar_chart("Failures by root-cause operation", by_operation(attributions),
                      chart_id="chart-operations")
    return (f'<section id="summary"><h1>Why the answers failed</h1>{facts}<div class="charts">'
            f'{types}{where}</div>{_LEGEND}</section>')


_LEGEND = ('<p class="legend"><span class="key root-cause">root cause</span> '
           '<span class="key lost">lost</span> '
           '<span class="key deleted">deleted</span> <span class="key overwritten">overwritten</span> '
           '<span class="key evidence">evidence</span> <span class="key answer">answer</span> '
           '<span class="key collapsed">folded nodes</span> Operations are square, variables round; '
           'each shaded band is one trace.</p>')


def _figures(figures: list[list[Any]], table: StringTable) -> Iterator[str]:
    # JSON data elements: parsed only when a section is drawn; script_json leaves no "<" to end one.
    yield f'<script type="application/json" id="mt-strings">{script_json(table.strings)}</script>'
    for i, record in enumerate(figures):
        yield f'<script type="application/json" id="fig-{i}">{script_json(record)}</script>'


def draw_failures(group: ReportInput, table: StringTable, *, linker: SpanLinker = no_links,
                  max_nodes: int = 200) -> Iterator[DrawnFailure]:
    """Each failure of ``group`` ready for the page: sliced, laid out, its section's markup made.

    The pictures' strings go into ``table``; run it in worker processes with a
    table each and :func:`~memtrace_otel.report.figdata.reindex` the records into
    the page's table (:func:`render_page` takes them in any number).

    >>> list(draw_failures(ReportInput(nx.DiGraph(), []), StringTable()))
    []
    """
    linker = linking_stages(linker, group.graph)
    for a in group.attributions:
        lineage = lineage_slice(group.graph, a, max_nodes=max_nodes)
        record = lineage_data(lineage, layered_layout(lineage), table, linker=linker)
        yield _section(group.graph, a, lineage, group.label, linker, record)


def page_pieces(failures: Sequence[DrawnFailure], table: StringTable, *, title: str = "memtrace report",
                pipelines: int = 1) -> Iterator[str]:
    """:func:`render_page`'s text in pieces, a section or a picture's data at a time: ``memtrace report``
    writes them as they come, so a page of thousands of failures is never held whole (nor its
    sections and pictures joined apart), which was its command's peak memory."""
    summary = _summary([f.attribution for f in failures], pipelines)
    yield (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
           '<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<style>{PAGE_CSS}</style></head>'
           f'<body>{ARROW_DEFS}{summary}<main>')
    for number, f in enumerate(failures, 1):
        yield _numbered(number, f)
    yield '</main>'
    yield from _figures([f.record for f in failures], table)
    yield f'<script>{PAGE_SCRIPT}</script></body></html>'


def render_page(failures: Sequence[DrawnFailure], table: StringTable, *, title: str = "memtrace report",
                pipelines: int = 1) -> str:
    """The HTML page of drawn ``failures`` (their records indexing ``table``), numbered in order.

    >>> "<html" in render_page([], StringTable())
    True
    """
    return "".join(page_pieces(failures, table, title=title, pipelines=pipelines))


def render_report(inputs: Iterable[ReportInput], *, linker: SpanLinker = no_links,
                  title: str = "memtrace report", max_nodes: int = 200,
                  progress: Callable[[int], None] | None = None) -> str:
    """The HTML page for the failures of ``inputs``.

    Parameters
    ----------
    inputs:
        Graphs and the verdicts on their failed evaluations.
    linker:
        Span ids become links when it returns URLs (:mod:`memtrace_otel.report.links`).
    max_nodes:
        About how many nodes each lineage picture draws at most.
    progress:
        Called with the number of failures drawn so far.

    Returns
    -------
    str
        One self-contained HTML document.

    >>> "<html" in render_report([])
    True
    """
    table, failures = StringTable(), []
    groups = list(inputs)
    for group in groups:
        for drawn in draw_failures(group, table, linker=linker, max_nodes=max_nodes):
            failures.append(drawn)
            if progress:
                progress(len(failures))
    return render_page(failures, table, title=title, pipelines=len(groups))
