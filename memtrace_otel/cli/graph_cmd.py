"""``memtrace graph``: the evolution graph (or a slice of it) as JSON, GraphML or DOT."""

from __future__ import annotations

import click
import networkx as nx

from memtrace_otel.cli.common import (
    files_argument,
    jaeger_option,
    load_graph,
    report_problems,
    strict_option,
)
from memtrace_otel.graph.errors import MemTraceGraphError
from memtrace_otel.graph.export import FORMATS, write_graph
from memtrace_otel.graph.query import backward_slice

__all__ = ["graph_command", "trace_subgraph"]


def trace_subgraph(G: nx.DiGraph, trace_id: str) -> nx.DiGraph:
    """The operations of one trace and the variables they read or wrote."""
    ops = [n for n, d in G.nodes(data=True) if d["type"] == "operation" and d["trace_id"] == trace_id]
    keep = set(ops)
    for op in ops:
        keep.update(G.predecessors(op))
        keep.update(G.successors(op))
    return G.subgraph(keep).copy()


@click.command("graph")
@files_argument
@click.option("--trace", "trace_id", help="Only the operations of this trace id (32 hex chars).")
@click.option("--answer", "answer",
              help="Only the backward slice of this variable id (e.g. answer:q1@1).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write here, not stdout.")
@strict_option
@jaeger_option
def graph_command(files: tuple[str, ...], trace_id: str | None, answer: str | None, fmt: str,
                  output: str | None, strict: bool, jaeger_url: str | None) -> None:
    """Rebuild the memory evolution graph from span FILES and write it out."""
    _, graph, problems = load_graph(files, jaeger_url=jaeger_url)
    code = report_problems(problems, strict=strict)
    try:
        if answer:
            graph = backward_slice(graph, answer)
    except MemTraceGraphError as error:
        raise click.ClickException(str(error)) from None
    if trace_id:
        trace_id = trace_id.lower()
        graph = trace_subgraph(graph, trace_id)
        if graph.number_of_nodes() == 0:
            raise click.ClickException(f"no memory operation of trace {trace_id} in the input")
    text = write_graph(graph, fmt)
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        click.echo(text, nl=False)
    raise SystemExit(code)
