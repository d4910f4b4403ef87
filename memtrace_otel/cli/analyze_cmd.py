"""``memtrace analyze FILE...``: explain every failed answer in span files, and where failures gather.

For each failed evaluation the chosen engine (``lineage`` by default, offline)
names the root-cause operation and error type; the table lists them, and the
summary groups them by operation, because memory failures are systematic:
one extraction rule or one update policy usually accounts for many.
``--json`` writes data only on stdout; problems, warnings and the progress
bar go to stderr.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memtrace_otel.attribution.base import Attribution, available_engines
from memtrace_otel.attribution.runner import attribute_failures, summarize
from memtrace_otel.cli.common import (
    files_argument,
    jaeger_option,
    load_graph,
    print_json,
    report_problems,
    stderr,
    stdout,
    strict_option,
)
from memtrace_otel.graph.query import failed_evaluations

__all__ = ["analyze_command"]

_CELL = 60
_PROGRESS_FROM = 20  # cases; shorter runs finish before a bar would help


def _cell(text: str | None, limit: int = _CELL) -> str:
    """User content for a table cell: one line, cut, and escaped so it cannot inject markup."""
    if text is None:
        return "[dim]-[/dim]"
    flat = " ".join(str(text).split())
    return escape(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _row(a: Attribution) -> dict[str, Any]:
    case = a.case
    return {
        "evaluation": case.evaluation,
        "case_id": case.case_id,
        "question": case.question,
        "prediction": case.prediction,
        "gold": case.gold,
        "error_type": a.error_type.value if a.error_type else None,
        "operation": a.operation,
        "operation_name": a.operation_name,
        "category": a.category,
        "trace_id": a.trace_id,
        "span_id": a.span_id,
        "explanation": a.explanation,
        "evidence_path": a.evidence_path,
        "confidence": a.confidence,
        "seconds": round(a.seconds, 6),
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
        "failure_reason": a.failure_reason,
    }


def _table(attributions: Sequence[Attribution]) -> Table:
    table = Table(title="Failed answers and their root causes", show_lines=False)
    columns = (
        "#",
        "question",
        "prediction",
        "gold",
        "error type",
        "root-cause operation",
        "trace id",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for number, a in enumerate(attributions, 1):
        case = a.case
        if a.operation is None:
            cause = f"[red]not attributed[/red]: {_cell(a.failure_reason)}"
        else:
            cause = f"{_cell(a.operation_name)} [dim]({_cell(a.category)})[/dim]"
        table.add_row(
            str(number),
            _cell(case.question),
            _cell(case.prediction),
            _cell(case.gold),
            _cell(a.error_type.value if a.error_type else None),
            cause,
            _cell(a.trace_id, 32),
        )
    return table


def _summary_tables(summary: dict[str, Any]) -> list[Table]:
    types = Table(title="Error types")
    types.add_column("error type")
    types.add_column("failures", justify="right")
    for name, count in summary["error_types"].items():
        types.add_row(escape(name), str(count))
    where = Table(title="Where failures concentrate (root-cause operations by name)")
    for column in ("operation", "category", "failures", "share", "error types"):
        where.add_column(column, justify="right" if column in ("failures", "share") else "left")
    for row in summary["operations"]:
        kinds = ", ".join(f"{k} {v}" for k, v in row["error_types"].items())
        where.add_row(
            _cell(row["name"]),
            _cell(row["category"]),
            str(row["failures"]),
            f"{row['share']:.0%}",
            escape(kinds),
        )
    tables = [types, where]
    if summary["hotspots"]:
        spots = Table(title="Single operations behind several failures")
        for column in ("operation", "trace id", "span id", "failures"):
            spots.add_column(column)
        for row in summary["hotspots"]:
            spots.add_row(
                _cell(row["name"]),
                _cell(row["trace_id"], 32),
                _cell(row["span_id"], 16),
                str(row["failures"]),
            )
        tables.append(spots)
    return tables


def _run(graph: Any, engine: str, jobs: int, cases: int) -> list[Attribution]:
    def warned(message: str) -> None:
        stderr.print(f"memtrace: warning: {escape(message)}", soft_wrap=True)

    if cases < _PROGRESS_FROM:
        return attribute_failures(graph, engine, jobs=jobs, warn=warned)
    columns = (TextColumn("attributing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("attributing", total=cases)
        return attribute_failures(
            graph,
            engine,
            jobs=jobs,
            warn=warned,
            progress=lambda done, _total: bar.update(task, completed=done),
        )


@click.command("analyze")
@files_argument
@click.option(
    "--engine",
    default="lineage",
    show_default=True,
    help="Attribution engine (see `memtrace analyze --help` for the list).",
)
@click.option(
    "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes."
)
@click.option("--json", "as_json", is_flag=True, help="Write the results as JSON on stdout.")
@strict_option
@jaeger_option
@click.pass_context
def analyze_command(
    ctx: click.Context, files: tuple[str, ...], engine: str, jobs: int, as_json: bool, strict: bool,
    jaeger_url: str | None,
) -> None:
    """Find the root-cause operation of every failed answer in the span FILES."""
    if engine not in available_engines():
        choices = ", ".join(available_engines())
        raise click.UsageError(f"unknown engine {engine!r}; choose one of {choices}")
    _, graph, problems = load_graph(files, jaeger_url=jaeger_url)
    code = report_problems(problems, strict=strict)
    cases = len(failed_evaluations(graph))
    try:
        attributions = _run(graph, engine, jobs, cases)
    except ValueError as error:  # e.g. an engine's options are wrong for this environment
        raise click.ClickException(str(error)) from error
    summary = summarize(attributions)
    if as_json:
        print_json(
            {"engine": engine, "failures": [_row(a) for a in attributions], "summary": summary}
        )
    elif not attributions:
        stdout.print("No failed evaluations in the input.")
    else:
        stdout.print(_table(attributions))
        for table in _summary_tables(summary):
            stdout.print(table)
    ctx.exit(code)
