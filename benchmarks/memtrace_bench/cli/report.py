"""``memtrace bench report DIR --out FILE``: the HTML report of a benchmark build's labelled cases.

The page is ``memtrace report``'s (:mod:`memtrace_otel.cli.report_cmd`); what is the benchmark's is
reading its labels: one graph per distinct set of span files (as ``bench score``), only the labelled
evaluation attributed on it, the clean span files a conversation's cases share read once, one
conversation per batch (one process parses its files), cases in the labels file's order.
"""

from __future__ import annotations

import os
from typing import Any

import click

from memtrace_otel.cli.common import EXIT_PARTIAL, say
from memtrace_otel.cli.report_cmd import Pipeline, report_options, write_report
from memtrace_otel.cli.terminal import safe_markup, safe_text

__all__ = ["report_command"]


def labelled_pipelines(directory: str) -> tuple[list[list[Pipeline]], int]:
    """The batches of labelled pipelines of a build, and the exit code so far (3 if a row was unusable)."""
    from memtrace_bench.score import load_labels  # scoring needs no extra, but keep --help light

    try:
        labels, problems = load_labels(directory)
    except (FileNotFoundError, OSError) as error:
        raise click.ClickException(safe_text(error)) from None
    by_files: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in labels:  # load_labels kept only rows with a string case id and span paths inside the build
        by_files.setdefault(tuple(sorted(row["spans"])), []).append(row)
    batches: dict[str, list[Pipeline]] = {}
    for spans, rows in by_files.items():
        cases = tuple((r["case_id"], _case_label(r)) for r in rows)
        paths = tuple(os.path.join(directory, p) for p in spans)
        # One batch per conversation (spans/<system>/<conversation>/...): one process parses its files.
        conversation = os.path.dirname(os.path.dirname(spans[-1]))
        batches.setdefault(conversation, []).append(Pipeline(None, paths, cases))
    for line in problems:
        say(safe_markup(line))
    return list(batches.values()), EXIT_PARTIAL if problems else 0


def _case_label(row: dict[str, Any]) -> str:
    operation = row.get("operation")
    name = operation.get("name") if isinstance(operation, dict) else None
    return f"{row['case_id']}: labelled {row.get('error_type')} in {name or '?'}"


@click.command("report")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@report_options
@click.pass_context
def report_command(ctx: click.Context, directory: str, **page: Any) -> None:
    """Write one HTML page explaining the labelled cases of the benchmark build DIRECTORY.

    Each case is its labelled evaluation attributed on the graph of its own span files (DIRECTORY/
    labels.jsonl), titled with its label. Exit 1 when there is nothing to report, 3 when a label
    row or some input was skipped.
    """
    batches, code = labelled_pipelines(directory)
    write_report(ctx, batches, code, **page)
