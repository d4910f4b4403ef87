"""The report's summary charts: horizontal bar charts as inline SVG (no library, no script).

Failures are systematic (one extraction rule, one update policy), so the
summary counts failures by error type and by root-cause operation; a bar per
row, longest first, labels escaped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from memtrace_otel.report.svg import esc, short

__all__ = ["bar_chart", "by_error_type", "by_operation"]

_LABEL_WIDTH, _BAR_WIDTH, _ROW, _TOP = 230, 360, 24, 8
_NOT_ATTRIBUTED = "not attributed"


def by_error_type(attributions: Iterable[Any]) -> list[tuple[str, int]]:
    """``(error type, failures)`` rows, most first; verdicts without one count as "not attributed".

    >>> by_error_type([])
    []
    """
    counts = Counter(a.error_type.value if a.error_type else _NOT_ATTRIBUTED for a in attributions)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def by_operation(attributions: Iterable[Any], *, top: int = 12) -> list[tuple[str, int]]:
    """``("name (category)", failures)`` per root-cause operation name, most first, the ``top`` ones.

    >>> by_operation([])
    []
    """
    counts = Counter(f"{a.operation_name or '?'} ({a.category or '?'})" if a.operation else _NOT_ATTRIBUTED
                     for a in attributions)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]


def bar_chart(title: str, rows: Sequence[tuple[str, int]], *, chart_id: str) -> str:
    """A horizontal bar chart: one labelled bar per ``(label, count)`` row.

    Parameters
    ----------
    title:
        Shown above the chart (escaped).
    rows:
        Labels (escaped) and counts, in the order to draw them.
    chart_id:
        The ``id`` of the ``<figure>`` (tests and links find the chart by it).

    Returns
    -------
    str
        A ``<figure class="chart">`` with an inline ``<svg>``.

    >>> "&lt;b&gt;" in bar_chart("t", [("<b>", 3)], chart_id="c")
    True
    """
    peak = max((count for _, count in rows), default=1) or 1
    height = _TOP + _ROW * len(rows) + 4
    width = _LABEL_WIDTH + _BAR_WIDTH + 60
    bars = []
    for index, (label, count) in enumerate(rows):
        y = _TOP + index * _ROW
        length = max(2.0, _BAR_WIDTH * count / peak)
        bars.append(
            f'<g class="bar" data-label="{esc(label)}" data-count="{count}"><title>{esc(label)}: {count}'
            f'</title><text class="bar-label" x="{_LABEL_WIDTH - 8}" y="{y + 15}" text-anchor="end">'
            f'{esc(short(label, 34))}</text><rect x="{_LABEL_WIDTH}" y="{y + 3}" width="{length:.1f}" '
            f'height="{_ROW - 6}" rx="2"/><text class="bar-count" x="{_LABEL_WIDTH + length + 6:.1f}" '
            f'y="{y + 15}">{count}</text></g>')
    return (f'<figure class="chart" id="{esc(chart_id)}"><figcaption>{esc(title)}</figcaption>'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">{"".join(bars)}'
            '</svg></figure>')
