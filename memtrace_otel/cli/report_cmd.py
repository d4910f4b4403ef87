"""``memtrace report FILE... --out report.html``: one HTML page showing why each answer failed.

Reads span files like ``analyze`` (same loaders, same problem lines and exit
codes), attributes every failed evaluation with the chosen engine, and writes
one self-contained page (:mod:`memtrace_otel.report`): summary charts, then a
section per failure with its lineage picture. ``--separate`` reads each FILE
as a pipeline of its own (a graph each), for inputs that share no memory, such
as the benchmark's conversations. With ``--jobs N`` pipelines are read,
attributed and drawn in N processes (one pipeline: its cases are). Nothing to
report (no failed evaluation) is one line on stderr and exit 1, not an empty page.

Other commands make the same page from pipelines of their own (:class:`Pipeline`,
:func:`write_report`, :func:`report_options`): ``memtrace bench report`` (the
benchmark package) reports a build's labelled cases, only the labelled
evaluation of each attributed (found by ``memtrace.evaluation.case``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

import click
import networkx as nx
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memtrace_otel.attribution.graph_index import release_graph_index
from memtrace_otel.attribution.runner import attribute_failures, process_map
from memtrace_otel.cli import from_command_line
from memtrace_otel.cli.common import (
    EXIT_PARTIAL,
    EngineChoice,
    content_resolver,
    content_store_option,
    end_command,
    jaeger_option,
    load_graph,
    report_problems,
    say,
    stderr,
    strict_option,
    tempo_option,
)
from memtrace_otel.cli.terminal import safe_markup, safe_text
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluation_of_case
from memtrace_otel.report import (
    DrawnFailure,
    ReportInput,
    StringTable,
    draw_failures,
    jaeger_linker,
    no_links,
    tempo_linker,
)
from memtrace_otel.report.figdata import reindex
from memtrace_otel.report.links import SpanLinker
from memtrace_otel.report.page import page_pieces
from memtrace_otel.spans.model import Problem
from memtrace_otel.spans.readers import SpanReadResult, gc_paused, read_span_files

__all__ = ["Pipeline", "report_command", "report_options", "write_report"]

F = TypeVar("F", bound=Callable[..., Any])


def _linker(jaeger_url: str | None, tempo_url: str | None) -> SpanLinker:
    if jaeger_url:
        return jaeger_linker(jaeger_url)
    return tempo_linker(tempo_url) if tempo_url else no_links


@dataclass(frozen=True, slots=True)
class _Settings:
    engine: str
    jaeger_url: str | None
    tempo_url: str | None
    max_nodes: int
    jobs: int = 1  # attribution processes inside one pipeline (when there is only one)
    content_store: str | None = None  # where the spans' content references point


@dataclass(frozen=True, slots=True)
class Pipeline:
    """One graph to report on, from span ``files``; with ``cases`` (case id, section label) only the
    failed evaluations that recorded those case ids, in that order, each under its label."""

    label: str | None
    files: tuple[str, ...]
    cases: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class _Drawn:
    """What a worker sends back: drawn failures, the strings their records index, what went wrong."""

    failures: list[DrawnFailure] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    missing: str | None = None  # --separate: this FILE does not exist


def _graph(p: Pipeline, s: _Settings, cache: dict[str, SpanReadResult]) -> tuple[nx.DiGraph, list[Problem]]:
    if not p.cases:
        _, graph, problems = load_graph(p.files, jaeger_url=s.jaeger_url, tempo_url=s.tempo_url,
                                        content_store=s.content_store)
        return graph, problems
    result = SpanReadResult()
    for path in p.files:  # a conversation's cases share its clean span files: each is parsed once
        if path not in cache:
            cache[path] = read_span_files([path])
        result.add(cache[path].spans)
        result.problems.extend(cache[path].problems)
    graph = build_graph(result.spans)
    return graph, [*result.problems, *graph.graph["problems"]]


def _labelled(graph: nx.DiGraph, p: Pipeline, s: _Settings, out: _Drawn) -> list[ReportInput]:
    found: list[tuple[str, str]] = []  # (evaluation, section label)
    for case_id, label in p.cases:
        evaluation = failed_evaluation_of_case(graph, case_id)
        if evaluation is None:
            out.problems.append(Problem(case_id, "no failed evaluation with this case id in its span files"))
            continue
        found.append((evaluation, label))
    verdicts = attribute_failures(graph, s.engine, evaluations=[evaluation for evaluation, _ in found],
                                  warn=out.warnings.append)
    return [ReportInput(graph, [verdict], label) for verdict, (_, label) in zip(verdicts, found, strict=True)]


def _run_batch(batch: Sequence[Pipeline], s: _Settings,
               tick: Callable[[int, int], None] | None = None) -> list[_Drawn]:
    """Read, attribute and draw the pipelines of ``batch`` (in a worker process, or in this one)."""
    cache: dict[str, SpanReadResult] = {}
    linker = _linker(s.jaeger_url, s.tempo_url)
    drawn = []
    for p in batch:
        out = _Drawn()
        drawn.append(out)
        try:
            graph, problems = _graph(p, s, cache)
        except click.ClickException as error:  # not one FILE exists
            out.missing = error.format_message()
            continue
        out.problems.extend(problems)
        if from_command_line():
            # The graph is read from here on, never changed, and this process ends without freeing it
            # (end_command): the collector need not walk it again. Each full collection walks all of it
            # (0.5-1 s for a 100k-span file), and a collection was due every few hundred thousand
            # objects attribution and drawing kept. Frozen objects are still freed when unreachable
            # (by reference count; the graph holds no cycles), and in process nothing is frozen.
            gc.freeze()
        inputs = _labelled(graph, p, s, out) if p.cases else [ReportInput(graph, attribute_failures(
            graph, s.engine, jobs=s.jobs, warn=out.warnings.append, progress=tick), p.label)]
        # Drawing reads the graph and the verdicts, not the engine's index of the graph (each variable's
        # tokens and lines): freed first, what drawing keeps does not add to it at the command's peak.
        release_graph_index(graph)
        table = StringTable()
        # Drawing keeps most of what it makes (a section and a record per failure): with the collector
        # on, that growth set off a full collection, which walks the whole graph (1.2 s of a 100k-span
        # file's 2.7 s of drawing) to free nothing. It makes no reference cycles.
        with gc_paused():
            for group in inputs:
                out.failures.extend(draw_failures(group, table, linker=linker, max_nodes=s.max_nodes))
        out.strings = table.strings
    return drawn


def _size(batch: Sequence[Pipeline]) -> int:
    return sum(os.path.getsize(f) for p in batch for f in p.files if os.path.isfile(f))


def _run(batches: list[list[Pipeline]], s: _Settings, jobs: int,
         tick: Callable[[int, int], None]) -> list[_Drawn]:
    """Every batch's results, in input order; ``jobs`` processes take the largest batches first."""
    if len(batches) == 1:
        return _run_batch(batches[0], replace(s, jobs=jobs), tick)
    results: list[list[_Drawn]] = [[] for _ in batches]
    if jobs == 1:
        for index, batch in enumerate(batches):
            results[index] = _run_batch(batch, s)
            tick(index + 1, len(batches))
        return [d for found in results for d in found]
    done = 0

    def finished(_index: int, _drawn: list[_Drawn]) -> None:
        nonlocal done
        done += 1
        tick(done, len(batches))

    order = sorted(range(len(batches)), key=lambda i: -_size(batches[i]))
    results = process_map(partial(_run_batch, s=s), batches, jobs=jobs, first=order, on_result=finished)
    return [d for found in results for d in found]


def _progress() -> Progress:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=stderr, transient=True)


def _pipelines(files: tuple[str, ...], separate: bool) -> list[list[Pipeline]]:
    """The batches of pipelines to run (a batch shares parsed span files)."""
    return [[Pipeline(f, (f,))] for f in files] if separate else [[Pipeline(None, files)]]


def _gather(drawn: list[_Drawn], separate: bool, strict: bool) -> tuple[list[DrawnFailure], StringTable, int]:
    """The failures of every pipeline, their records moved into one string table; problems said."""
    code, said = 0, set()
    failures, table = [], StringTable()
    for out in drawn:
        if out.missing is not None:
            if not separate:
                raise click.ClickException(safe_text(out.missing))
            say(safe_markup(out.missing))
            code = EXIT_PARTIAL
        for warning in out.warnings:
            if warning not in said:  # once per run, not per pipeline
                said.add(warning)
                say(f"warning: {safe_markup(warning)}")
        fresh = [p for p in out.problems if str(p) not in said]  # shared span files: said once
        said.update(str(p) for p in fresh)
        code = max(code, report_problems(fresh, strict=strict))
        for f in out.failures:
            failures.append(f)
            reindex(f.record, out.strings, table)
    return failures, table, code


def report_options(command: F) -> F:
    """The options of a page (output, engine, processes, picture size, backend, contents) that every
    command writing one shares."""
    for option in reversed((
        click.option("--out", "out", required=True, type=click.Path(dir_okay=False, writable=True),
                     help="The HTML file to write."),
        click.option("--engine", type=EngineChoice(), default="lineage", show_default=True,
                     help="Attribution engine."),
        click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Worker processes: pipelines (or, with one pipeline, its cases) are shared out."),
        click.option("--max-nodes", type=click.IntRange(min=10), default=200, show_default=True,
                     help="About how many nodes a lineage picture draws; the rest are folded."),
        strict_option, jaeger_option, tempo_option, content_store_option,
    )):
        command = option(command)
    return command


@click.command("report")
@click.argument("files", nargs=-1, required=True, metavar="FILE...",
                type=click.Path(dir_okay=True, allow_dash=True))
@click.option("--separate", is_flag=True,
              help="Read each FILE as a pipeline of its own (one graph each), e.g. one directory per user.")
@report_options
@click.pass_context
def report_command(ctx: click.Context, files: tuple[str, ...], separate: bool, **page: Any) -> None:
    """Write one self-contained HTML page explaining every failed answer in span FILEs.

    A FILE may be a directory of span files, or - for standard input. With
    --jaeger URL (or --tempo URL) linked traces are fetched from the backend
    and every span id links to it. Exit 1 when there is nothing to report, 3
    when some input was skipped or repaired.
    """
    write_report(ctx, _pipelines(files, separate), 0, separate=separate, **page)


def write_report(ctx: click.Context, batches: list[list[Pipeline]], code: int, *, out: str, engine: str,
                 jobs: int, max_nodes: int, strict: bool, jaeger_url: str | None, tempo_url: str | None,
                 content_store: str | None, separate: bool = False) -> None:
    """Read, attribute and draw ``batches`` (a batch's pipelines share parsed span files; one batch per
    process) into the page ``out``, say what was written, and exit: 1 when nothing failed, else the
    larger of ``code`` (the caller's problems so far) and this run's. Cases appear in ``batches``' order.

    ``separate``: a pipeline's missing FILE is a problem of that pipeline, not the end of the run.
    """
    if content_store:
        content_resolver(content_store)  # a store no filesystem serves is a usage error, said now
    settings = _Settings(engine, jaeger_url, tempo_url, max_nodes, content_store=content_store)
    with _progress() as bar:
        task = bar.add_task("reading, attributing, drawing", total=None)
        try:
            drawn = _run(batches, settings, jobs, lambda n, total: bar.update(task, completed=n, total=total))
        except ValueError as error:  # e.g. an engine's options are wrong for this environment
            raise click.ClickException(safe_text(error)) from error
    failures, table, found = _gather(drawn, separate, strict)
    code = max(code, found)
    if not failures:
        say("nothing to report: no failed evaluation in the input")
        ctx.exit(1)
    order = {case: i for i, case in enumerate(c for b in batches for p in b for c, _ in p.cases)}
    if order:  # the callers' case order, though cases sharing a graph were drawn together
        failures.sort(key=lambda f: order.get(f.attribution.case.case_id, len(order)))
    _write(out, page_pieces(failures, table, title=f"memtrace report: {len(failures)} failed answer(s)",
                            pipelines=sum(len(b) for b in batches)))
    say(f"wrote {safe_markup(out)}: {len(failures)} failed answer(s)")
    end_command(code)


def _write(path: str, page: Iterable[str]) -> None:
    """Write through a temporary file and rename, so a half-written report never replaces a good one.
    The page comes in pieces, written as they are made (never held whole)."""
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.writelines(page)
        os.replace(temporary, path)
    except OSError as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise click.ClickException(f"cannot write {safe_text(path)}: {safe_text(error.strerror or error)}") \
            from None
