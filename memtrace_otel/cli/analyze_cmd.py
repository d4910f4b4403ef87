"""``memtrace analyze FILE...``: explain every failed answer in span files, and where failures gather.

For each failed evaluation the chosen engine (``lineage`` by default, offline)
names the root-cause operation and error type; the table lists them, and the
summary groups them by operation, because memory failures are systematic:
one extraction rule or one update policy usually accounts for many.
``--json`` writes data only on stdout; problems, warnings and the progress
bar go to stderr.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memtrace_otel.attribution.base import Attribution
from memtrace_otel.attribution.runner import attribute_failures, summarize
from memtrace_otel.cli import from_command_line
from memtrace_otel.cli.common import (
    EXIT_PARTIAL,
    EngineChoice,
    content_store_option,
    end_command,
    files_argument,
    jaeger_option,
    load_graph,
    print_json,
    report_problems,
    say,
    stderr,
    stdout,
    store_lookback_option,
    strict_option,
    tempo_option,
)
from memtrace_otel.cli.terminal import cell, safe_markup, safe_text
from memtrace_otel.graph.query import failed_evaluations

__all__ = ["analyze_command"]

_PROGRESS_FROM = 20  # cases; shorter runs finish before a bar would help
_SHOWN_CANDIDATES = 3  # the verdict and two runner-ups; --json has the whole list
# Narrower than this, the table's columns would split words ("Extractio|nError", a trace id in four
# pieces): each failure is printed as a few lines instead, which wrap at spaces.
_TABLE_MIN_WIDTH = 150


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
        "step": a.step,
        "step_name": a.step_name,
        "step_span_id": a.step_span_id,
        "explanation": a.explanation,
        "evidence_path": a.evidence_path,
        "confidence": a.confidence,
        "seconds": round(a.seconds, 6),
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
        "failure_reason": a.failure_reason,
        "ambiguous": a.ambiguous,
        "candidates": [c.to_dict() for c in a.candidates],
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
        # Identifiers are never split; free text wraps at spaces (and folds only a word longer than
        # its column).
        table.add_column(column, overflow="fold", no_wrap=column in {"#", "error type", "trace id"})
    for number, a in enumerate(attributions, 1):
        case = a.case
        if a.operation is None:
            cause = f"[red]not attributed[/red]: {cell(a.failure_reason)}"
        else:
            cause = f"{cell(a.operation_name)} [dim]({cell(a.category)})[/dim]"
            if a.step is not None:  # the model call inside it that went wrong
                cause += f"\n  step {cell(a.step_name)} [dim](span {cell(a.step_span_id, 16)})[/dim]"
            cause += _alternatives(a)
        table.add_row(
            str(number),
            cell(case.question),
            cell(case.prediction),
            cell(case.gold),
            cell(a.error_type.value if a.error_type else None),
            cause,
            cell(a.trace_id, 32),
        )
    return table


def _blocks(attributions: Sequence[Attribution]) -> list[str]:
    """The table's content as a few lines per failure, for terminals too narrow for the table."""
    blocks = ["[bold]Failed answers and their root causes[/bold]"]
    for number, a in enumerate(attributions, 1):
        case = a.case
        if a.operation is None:
            head = f"[red]not attributed[/red]: {cell(a.failure_reason)}"
        else:
            head = (f"[bold]{cell(a.error_type.value if a.error_type else None)}[/bold] at "
                    f"{cell(a.operation_name)} [dim]({cell(a.category)})[/dim]")
        lines = [f"{number}. {head}"]
        if a.trace_id:
            lines.append(f"   trace {cell(a.trace_id, 32)}")
        if a.step is not None:
            lines.append(f"   step {cell(a.step_name)} [dim](span {cell(a.step_span_id, 16)})[/dim]")
        lines.append(f"   question: {cell(case.question)}")
        lines.append(f"   prediction: {cell(case.prediction)}; gold: {cell(case.gold)}")
        alternatives = _alternatives(a).strip()
        if alternatives:
            lines.append(f"   {alternatives}")
        blocks.append("\n".join(lines))
    return blocks


def _alternatives(a: Attribution) -> str:
    """The runner-up candidates under the verdict; the verdict is marked when they tie it."""
    shown = [f"{cell(c.operation_name)} [dim]({cell(c.error_type.value if c.error_type else None)}, "
             f"{c.confidence:.2f})[/dim]" for c in a.candidates[1:_SHOWN_CANDIDATES]]
    if not shown:
        return ""
    head = "\n  [yellow]ambiguous[/yellow], or: " if a.ambiguous else "\n  or: "
    return head + "; ".join(shown)


def _summary_tables(summary: dict[str, Any]) -> list[Table]:
    types = Table(title="Error types")
    types.add_column("error type")
    types.add_column("failures", justify="right")
    for name, count in summary["error_types"].items():
        types.add_row(cell(name), str(count))
    where = Table(title="Where failures concentrate (root-cause operations by name)")
    for column in ("operation", "category", "failures", "share", "error types"):
        where.add_column(column, justify="right" if column in ("failures", "share") else "left")
    for row in summary["operations"]:
        kinds = ", ".join(f"{k} {v}" for k, v in row["error_types"].items())
        where.add_row(
            cell(row["name"]),
            cell(row["category"]),
            str(row["failures"]),
            f"{row['share']:.0%}",
            safe_markup(kinds),
        )
    tables = [types, where]
    if summary["hotspots"]:
        spots = Table(title="Single operations behind several failures")
        for column in ("operation", "trace id", "span id", "failures"):
            spots.add_column(column)
        for row in summary["hotspots"]:
            spots.add_row(
                cell(row["name"]),
                cell(row["trace_id"], 32),
                cell(row["span_id"], 16),
                str(row["failures"]),
            )
        tables.append(spots)
    return tables


def _run(graph: Any, engine: str, jobs: int, traces: set[str] | None) -> list[Attribution]:
    def warned(message: str) -> None:
        say(f"warning: {safe_markup(message)}")

    cases = sum(traces is None or graph.nodes[e].get("trace_id") in traces for e in failed_evaluations(graph))
    if cases < _PROGRESS_FROM:
        return attribute_failures(graph, engine, jobs=jobs, warn=warned, traces=traces)
    columns = (TextColumn("attributing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("attributing", total=cases)
        return attribute_failures(
            graph,
            engine,
            jobs=jobs,
            warn=warned,
            progress=lambda done, _total: bar.update(task, completed=done),
            traces=traces,
        )


def _missing_traces(attributions: Sequence[Attribution]) -> tuple[set[str], int]:
    """Traces absent from the input that wrote memory the failures' answers came from
    (the engines name them per case), and how many failures are affected."""
    missing: set[str] = set()
    affected = 0
    for a in attributions:
        if a.missing_traces:
            affected += 1
            missing.update(a.missing_traces)
    return missing, affected


def _report_missing(missing: set[str], failures: int, backend_url: str | None, *, strict: bool) -> int:
    if not missing:
        return 0
    where = (f"neither in the input nor at {safe_markup(backend_url)}" if backend_url
             else "not in the input; --jaeger URL or --tempo URL fetches them")
    say(f"{failures} failure(s) read memory written by {len(missing)} trace(s) {where} "
        "(their verdicts are less certain)")
    if strict:
        raise click.ClickException(f"{len(missing)} linked trace(s) missing and --strict was given")
    return EXIT_PARTIAL


@click.command("analyze")
@files_argument
@click.option("--engine", type=EngineChoice(), default="lineage", show_default=True,
              help="Attribution engine.")
@click.option(
    "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes."
)
@click.option("--json", "as_json", is_flag=True, help="Write the results as JSON on stdout.")
@strict_option
@jaeger_option
@tempo_option
@store_lookback_option
@content_store_option
def analyze_command(
    files: tuple[str, ...], engine: str, jobs: int, as_json: bool, strict: bool,
    jaeger_url: str | None, tempo_url: str | None, store_lookback: float, content_store: str | None,
) -> None:
    """Find the root-cause operation of every failed answer in span FILEs.

    A FILE may be a directory of span files, or - for standard input.
    Exit 3 when some input was skipped or repaired, or when failures read memory
    written in traces the input lacks (fetch them with --jaeger URL or --tempo URL),
    or when the --content-store cannot be read or lacks referenced contents.
    """
    # Only the graph is kept: the spans it was built from are freed, and attribution reuses their memory.
    graph, problems = load_graph(files, jaeger_url=jaeger_url, tempo_url=tempo_url,
                                 content_store=content_store, store_lookback=store_lookback)[1:]
    code = report_problems(problems, strict=strict)
    if from_command_line():
        # As in ``memtrace report``: the graph is only read from here on and this process ends without
        # freeing it (end_command), so the collector need not walk it again. Each full collection walks
        # all of it (about 0.5 s for a 100k-span file) to free nothing, and attribution keeps enough to
        # set off several. Frozen objects are still freed by reference count; in process (click's
        # runner, an application) the caller's collector is left as it was.
        gc.freeze()
    # The failures of the traces a store search brought in are not what was asked about.
    traces = graph.graph["input_traces"] if store_lookback > 0 else None
    try:
        attributions = _run(graph, engine, jobs, traces)
    except ValueError as error:  # e.g. an engine's options are wrong for this environment
        raise click.ClickException(safe_text(error)) from error
    missing, affected = _missing_traces(attributions)
    code = max(code, _report_missing(missing, affected, jaeger_url or tempo_url, strict=strict))
    summary = summarize(attributions)
    if as_json:
        print_json({"engine": engine, "failures": [_row(a) for a in attributions], "summary": summary,
                    "missing_traces": sorted(missing)})
    elif not attributions:
        stdout.print("No failed evaluations in the input.")
    else:
        if stdout.width >= _TABLE_MIN_WIDTH:
            stdout.print(_table(attributions))
        else:
            for block in _blocks(attributions):
                stdout.print(block, overflow="fold")
        for table in _summary_tables(summary):
            stdout.print(table)
    end_command(code)
