"""``memtrace inspect``: what is in some span files (traces, operations, failed evaluations)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click
import networkx as nx
from rich.table import Table

from memtrace_otel.cli.common import (
    files_argument,
    jaeger_option,
    load_graph,
    print_json,
    report_problems,
    stdout,
    strict_option,
    tempo_option,
)
from memtrace_otel.cli.terminal import cell, number, safe_markup
from memtrace_otel.graph.node_types import VARIABLE
from memtrace_otel.graph.query import evaluations, failed_evaluations, operations
from memtrace_otel.semconv import Category
from memtrace_otel.spans.model import SpanRecord

__all__ = ["inspect_command", "summarize"]

_SHOWN_MISSING = 5


def summarize(spans: list[SpanRecord], G: nx.DiGraph) -> dict[str, Any]:
    """The data ``memtrace inspect`` shows, as plain JSON-able values."""
    ops = operations(G)
    by_category = Counter(G.nodes[n].get("category") for n in ops)
    traces = {s.trace_id for s in spans}
    failed = []
    for node in failed_evaluations(G):
        data = G.nodes[node]
        failed.append({key: data.get(key) for key in (
            "trace_id", "span_id", "case", "question", "prediction", "gold", "score", "signal", "evidence")})
    return {
        "spans": len(spans),
        "traces": len(traces),
        "services": sorted({str(s.service_name) for s in spans if s.service_name}),
        "operations": len(ops),
        "operations_by_category": {c.value: by_category.get(c.value, 0) for c in Category},
        "variables": sum(1 for _, d in G.nodes(data=True) if d["type"] == VARIABLE),
        "evaluations": len(evaluations(G)),
        "failed_evaluations": failed,
        "missing_traces": sorted(G.graph["missing_traces"]),
        "content_captured": any(G.nodes[n].get("content_captured") for n in ops),
    }


def _print_tables(summary: dict[str, Any]) -> None:
    stdout.print(
        f"[bold]{summary['spans']}[/] spans in [bold]{summary['traces']}[/] traces, "
        f"{summary['operations']} memory operations, {summary['variables']} variables, "
        f"{summary['evaluations']} evaluations ([red]{len(summary['failed_evaluations'])} failed[/])"
    )
    categories = Table(title="Operations by category")
    categories.add_column("category")
    categories.add_column("operations", justify="right")
    for category, count in summary["operations_by_category"].items():
        if count:
            categories.add_row(category, str(count))
    stdout.print(categories)
    if summary["failed_evaluations"]:
        failed = Table(title="Failed evaluations")
        failed.add_column("trace", no_wrap=True)
        for column in ("question", "prediction", "gold", "score"):
            failed.add_column(column, overflow="fold")
        for row in summary["failed_evaluations"]:
            failed.add_row(cell(row["trace_id"], 9), cell(row["question"]), cell(row["prediction"]),
                           cell(row["gold"]), number(row["score"]))
        stdout.print(failed)
    missing = summary["missing_traces"]
    if missing:
        stdout.print(f"{len(missing)} linked trace(s) were referenced but not read: "
                     + ", ".join(safe_markup(t) for t in missing[:_SHOWN_MISSING])
                     + (", …" if len(missing) > _SHOWN_MISSING else ""))
    if summary["operations"] and not summary["content_captured"]:
        stdout.print("[yellow]Spans carry no content (content capture was off): attribution will rely "
                     "on hashes and sizes only.[/]")


@click.command("inspect")
@files_argument
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@strict_option
@jaeger_option
@tempo_option
def inspect_command(files: tuple[str, ...], as_json: bool, strict: bool, jaeger_url: str | None,
                    tempo_url: str | None) -> None:
    """Summarise span FILEs: traces, memory operations by category, failed evaluations.

    A FILE may be a directory of span files, or - for standard input.
    """
    result, graph, problems = load_graph(files, jaeger_url=jaeger_url, tempo_url=tempo_url)
    code = report_problems(problems, strict=strict)
    summary = summarize(result.spans, graph)
    if as_json:
        print_json(summary)
    else:
        _print_tables(summary)
    raise SystemExit(code)
