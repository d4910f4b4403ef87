"""What every subcommand that reads span files shares: reading, problem lines, exit codes.

Exit codes: 0 all read; 1 a domain error (or a problem under ``--strict``);
2 a usage error (click); 3 the command ran but some input was skipped or
repaired (each problem was printed on stderr as one line).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
import networkx as nx
from rich.console import Console
from rich.markup import escape

from memtrace_otel.config import ENV_JAEGER_URL
from memtrace_otel.graph.build import build_graph
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import SpanReadResult, read_span_files

__all__ = [
    "EXIT_PARTIAL",
    "files_argument",
    "jaeger_option",
    "load_graph",
    "print_json",
    "report_problems",
    "stderr",
    "stdout",
    "strict_option",
]

EXIT_PARTIAL = 3
_MAX_FETCH_ROUNDS = 5
MAX_PROBLEM_LINES = 50

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)

files_argument = click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
strict_option = click.option(
    "--strict", is_flag=True, help="Treat any skipped or repaired input as fatal (exit 1)."
)


def report_problems(problems: Sequence[Problem], *, strict: bool) -> int:
    """Print each problem as one line on stderr; the exit code they call for."""
    for problem in problems[:MAX_PROBLEM_LINES]:
        stderr.print(f"memtrace: {escape(str(problem))}", soft_wrap=True)
    if len(problems) > MAX_PROBLEM_LINES:
        stderr.print(f"memtrace: ... and {len(problems) - MAX_PROBLEM_LINES} more problems")
    if not problems:
        return 0
    if strict:
        raise click.ClickException(f"{len(problems)} input problem(s) and --strict was given")
    return EXIT_PARTIAL


jaeger_option = click.option(
    "--jaeger", "jaeger_url", envvar=ENV_JAEGER_URL, metavar="URL",
    help="Jaeger query URL (e.g. http://127.0.0.1:16686): fetch the linked traces the files "
         f"point at but do not hold, such as the ingestion that wrote a memory [env {ENV_JAEGER_URL}].")


def load_graph(
    files: Sequence[str], *, jaeger_url: str | None = None
) -> tuple[SpanReadResult, nx.DiGraph, list[Problem]]:
    """Read ``files`` and build one graph; all problems, reading and building, together.

    With ``jaeger_url``, traces the graph links to but the files lack are fetched
    from Jaeger (and the traces those link to, a few rounds deep): the trace
    backend, not memtrace, is where writes and later reads meet again.
    """
    result = read_span_files(files)
    if not result.spans and result.problems and all("no such file" in p.message for p in result.problems):
        raise click.ClickException("; ".join(str(p) for p in result.problems))
    graph = build_graph(result.spans)
    if jaeger_url:
        graph = _complete_from_jaeger(result, graph, jaeger_url)
    return result, graph, [*result.problems, *graph.graph["problems"]]


def _complete_from_jaeger(result: SpanReadResult, graph: nx.DiGraph, url: str) -> nx.DiGraph:
    from memtrace_otel.exporters.jaeger_query import fetch_traces_as_records

    asked: set[str] = set()
    for _ in range(_MAX_FETCH_ROUNDS):
        missing = graph.graph["missing_traces"] - asked
        if not missing:
            break
        asked |= missing
        try:
            fetched = fetch_traces_as_records(url, sorted(missing))
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--jaeger") from None
        result.add(fetched.spans)
        result.problems.extend(fetched.problems)
        stderr.print(f"memtrace: fetched {len(missing) - len(fetched.problems)} of {len(missing)} "
                     f"linked trace(s) from {escape(url)}")
        graph = build_graph(result.spans)
    return graph


def print_json(data: Any) -> None:
    """Data only, on stdout (logs and problems go to stderr)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
