"""``memtrace graph``: the evolution graph (or a slice of it) as JSON, GraphML or DOT."""

from __future__ import annotations

import sys

import click

from memtrace_otel.cli.common import (
    content_store_option,
    end_command,
    files_argument,
    jaeger_option,
    load_graph,
    report_problems,
    strict_option,
    tempo_option,
)
from memtrace_otel.cli.terminal import safe_text
from memtrace_otel.graph.errors import MemTraceGraphError
from memtrace_otel.graph.export import FORMATS, dump_graph, write_graph
from memtrace_otel.graph.query import backward_slice, trace_subgraph

__all__ = ["graph_command"]


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
@tempo_option
@content_store_option
def graph_command(files: tuple[str, ...], trace_id: str | None, answer: str | None, fmt: str,
                  output: str | None, strict: bool, jaeger_url: str | None, tempo_url: str | None,
                  content_store: str | None) -> None:
    """Rebuild the memory evolution graph from span FILEs and write it out.

    A FILE may be a directory of span files, or - for standard input.
    """
    # The spans stay referenced until the command ends: the peak is the build's, when spans and graph
    # are both alive, and freeing 100k span records one by one before writing (0.2 s of CPU) is work
    # the memtrace command's exit (end_command) leaves to the operating system.
    _spans, graph, problems = load_graph(files, jaeger_url=jaeger_url, tempo_url=tempo_url,
                                         content_store=content_store)
    code = report_problems(problems, strict=strict)
    try:
        if answer:
            graph = backward_slice(graph, answer)
    except MemTraceGraphError as error:
        raise click.ClickException(safe_text(error)) from None
    if trace_id:
        trace_id = trace_id.lower()
        graph = trace_subgraph(graph, trace_id)
        if graph.number_of_nodes() == 0:
            raise click.ClickException(f"no memory operation of trace {safe_text(trace_id)} in the input")
    if output:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                dump_graph(graph, fmt, handle)
        except OSError as error:
            reason = safe_text(error.strerror or error)
            raise click.ClickException(f"cannot write {safe_text(output)}: {reason}") from None
    elif fmt == "json":  # ASCII only (json escapes the rest): written as it is made
        dump_graph(graph, fmt, sys.stdout)
    else:
        click.echo(write_graph(graph, fmt), nl=False)
    end_command(code)
