"""The library pipeline: span files or records -> traces gathered -> graph -> attributions.

Plain functions so that the CLI (``memtrace analyze``, ``graph``, ``inspect``, ``report``),
``memtrace serve``, the benchmark and library users share them:

- :func:`load_graph`: read the input, gather from the trace backend the traces its failures
  need (:func:`~memtrace_otel.spans.gather.gather_traces`: links, store search, links again),
  build the graph once;
- :func:`attribute_failures`: one verdict per failed evaluation, in one or several processes;
- :func:`analyze`: both, as one call (``memtrace_otel.analyze``).

Failures are systematic, so :func:`summarize` groups verdicts by the operation that caused
them: one bad extraction rule or one over-eager update shows up as one row with many failures.

:func:`process_map` is the one process pool: several processes (``jobs > 1``) each get the
graph once (inherited on fork, pickled otherwise) and their own engine; cases go out in chunks
and come back as :class:`~memtrace_otel.attribution.base.Attribution` objects. ``memtrace
report`` shares pipelines out through the same pool.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TypeVar

import networkx as nx

from memtrace_otel.attribution.base import INTERNAL_ERROR, Attribution, Engine, FailureCase, create_engine
from memtrace_otel.content.resolve import ContentResolver
from memtrace_otel.graph.build import ContentLookup, build_graph
from memtrace_otel.graph.node_types import VARIABLE
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.gather import Gathered, gather_traces
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.readers import SpanReadResult, read_span_files

__all__ = [
    "NO_CONTENT_WARNING",
    "Analysis",
    "analyze",
    "attribute_failures",
    "content_available",
    "load_graph",
    "missing_traces",
    "process_map",
    "summarize",
]

_logger = logging.getLogger(__name__)
NO_CONTENT_WARNING = (
    "the spans carry no variable contents (content capture was off: hashes and sizes only); "
    "attribution falls back to lineage alone and is less reliable. Set "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true where the spans are produced."
)
_CHUNK = 8
Progress = Callable[[int, int], None]
Item = TypeVar("Item")
Result = TypeVar("Result")
Source = Sequence[str | os.PathLike[str]] | Iterable[SpanRecord] | SpanReadResult

# The graph and engine of a worker process, set once by _init_worker.
_worker: dict[str, Any] = {}


def content_available(G: nx.DiGraph) -> bool:
    """Whether any variable of ``G`` has captured content."""
    return any(d.get("type") == VARIABLE and d.get("content") for _, d in G.nodes(data=True))


def missing_traces(attributions: Iterable[Attribution]) -> set[str]:
    """Trace ids that some verdict's lineage links to but the analysed input did not hold.

    One line for a report (``N traces missing; --jaeger/--tempo fetch them``),
    where each :class:`~memtrace_otel.attribution.base.Attribution` names its own.

    >>> missing_traces([])
    set()
    """
    return {trace for a in attributions for trace in a.missing_traces}


def _attribute_one(engine: Engine, G: nx.DiGraph, evaluation: str) -> Attribution:
    # Engine.attribute never raises: the base class turns a bad case into failure_reason.
    return engine.attribute(G, FailureCase.from_graph(G, evaluation))


def _init_worker(G: nx.DiGraph, engine: str, options: dict[str, Any]) -> None:
    _worker["graph"] = G
    _worker["engine"] = create_engine(engine, **options)


def _run_chunk(evaluations: Sequence[str]) -> list[Attribution]:
    return [_attribute_one(_worker["engine"], _worker["graph"], e) for e in evaluations]


def attribute_failures(
    G: nx.DiGraph,
    engine: str | Engine = "lineage",
    *,
    jobs: int = 1,
    engine_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    traces: Collection[str] | None = None,
    evaluations: Sequence[str] | None = None,
) -> list[Attribution]:
    """One attribution per failed evaluation of ``G`` (of ``traces`` only, when given), in execution order.

    Each verdict names the traces its lineage links to but ``G`` lacks
    (``Attribution.missing_traces``); :func:`missing_traces` gathers them for one
    report line.

    Parameters
    ----------
    engine:
        Registered engine name (``ValueError`` names the choices if unknown), or an engine
        object (used as it is in this process; worker processes create one by its name).
    jobs:
        Processes to use; 1 runs in this process.
    progress:
        Called as ``progress(done, total)`` after each case (or chunk).
    warn:
        Receives the warnings (default: the log): missing content, and how many cases the engine
        failed on (raised: a bug); each at most once per call, never per case.
    traces:
        Only the failures of these traces are attributed; the graph's other traces are context
        (traces fetched from a backend to complete the ones asked about).
    evaluations:
        These evaluation nodes, in this order, instead of every failed one (the processor's
        queued failures, a benchmark's labelled cases).
    """
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    options = engine_options or {}
    # An unknown name fails here, early.
    engine_object = engine if isinstance(engine, Engine) else create_engine(engine, **options)
    if evaluations is None:
        evaluations = failed_evaluations(G)
    if traces is not None:
        evaluations = [e for e in evaluations if G.nodes[e].get("trace_id") in traces]
    evaluations = list(evaluations)
    if evaluations and not content_available(G):
        (warn or _logger.warning)(NO_CONTENT_WARNING)
    if jobs == 1 or len(evaluations) <= _CHUNK:
        results = []
        for done, evaluation in enumerate(evaluations, 1):
            results.append(_attribute_one(engine_object, G, evaluation))
            if progress:
                progress(done, len(evaluations))
    else:
        name = engine if isinstance(engine, str) else engine_object.name
        results = _in_processes(G, name, options, evaluations, jobs, progress)
    _summarize_failures(engine_object.name, results, warn or _logger.warning)
    return results


def _summarize_failures(engine: str, results: list[Attribution], warn: Callable[[str], None]) -> None:
    """One line for the cases the engine raised on, however many (the log kept one per case before)."""
    failed = [r for a in results if (r := a.failure_reason) is not None and r.startswith(INTERNAL_ERROR)]
    if failed:
        warn(f"engine {engine} failed on {len(failed)} of {len(results)} case(s) (first: "
             f"{failed[0][len(INTERNAL_ERROR):][:200]}); their verdicts say so. Each case's traceback "
             "is logged at DEBUG level")


def _in_processes(
    G: nx.DiGraph,
    engine: str,
    options: dict[str, Any],
    evaluations: list[str],
    jobs: int,
    progress: Progress | None,
) -> list[Attribution]:
    chunks = [evaluations[i : i + _CHUNK] for i in range(0, len(evaluations), _CHUNK)]
    done = 0

    def tick(_index: int, found: list[Attribution]) -> None:
        nonlocal done
        done += len(found)
        if progress:
            progress(done, len(evaluations))

    results = process_map(_run_chunk, chunks, jobs=jobs, initializer=_init_worker,
                          initargs=(G, engine, options), on_result=tick)
    found = {attribution.case.evaluation: attribution for chunk in results for attribution in chunk}
    return [found[e] for e in evaluations]


def process_map(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    *,
    jobs: int,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
    first: Sequence[int] | None = None,
    on_result: Callable[[int, Result], None] | None = None,
) -> list[Result]:
    """``[function(item) for item in items]`` in ``jobs`` worker processes; results in ``items``' order.

    The one process pool of the package (attribution chunks here, ``memtrace report``'s
    pipelines): forked where the platform can (the parent's graph and imports are inherited,
    not pickled), each process set up once by ``initializer(*initargs)``. ``first`` is the
    order to submit in (e.g. the largest first); ``on_result(index, result)`` is called in
    this process as each finishes. An exception in a worker is raised here.
    """
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    results: dict[int, Result] = {}
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(items))), mp_context=context,
                             initializer=initializer, initargs=initargs) as pool:
        futures = {pool.submit(function, items[i]): i for i in (first or range(len(items)))}
        for future in as_completed(futures):
            index = futures[future]
            results[index] = future.result()
            if on_result is not None:
                on_result(index, results[index])
    return [results[i] for i in range(len(items))]


@dataclass
class Analysis:
    """What :func:`load_graph` read and gathered, and the verdicts :func:`analyze` made on it."""

    spans: SpanReadResult
    """The input and every span gathered from the backend."""
    graph: nx.DiGraph
    input_traces: set[str]
    """Traces the input held (before anything was gathered)."""
    gathered: Gathered | None = None
    """What the backend was asked for and gave; ``None`` without a backend."""
    problems: list[Problem] = field(default_factory=list)
    """Input, fetch, graph and content-store problems, in that order."""
    attributions: list[Attribution] = field(default_factory=list)

    @property
    def missing_traces(self) -> set[str]:
        """Traces some verdict's lineage needs that neither the input nor the backend gave."""
        return missing_traces(self.attributions)

    def summary(self, *, top: int = 10) -> dict[str, Any]:
        return summarize(self.attributions, top=top)


def _records(source: Source) -> SpanReadResult:
    if isinstance(source, SpanReadResult):
        return source
    items = list(source)
    if all(isinstance(item, SpanRecord) for item in items):
        result = SpanReadResult()
        result.add(items)  # type: ignore[arg-type]
        return result
    return read_span_files([os.fspath(item) for item in items])  # type: ignore[arg-type]


def load_graph(
    source: Source,
    *,
    backend: TraceBackend | None = None,
    store_lookback: float = 0.0,
    content_store: str | ContentResolver | None = None,
    content_by_hash: ContentLookup | None = None,
) -> Analysis:
    """Read ``source`` (span files and directories, or records), gather what its failures need, build
    the graph once.

    With a ``backend``, the traces the input links to are fetched, and with ``store_lookback`` >
    0 the traces that used the input's memory stores in that many seconds before too
    (:func:`~memtrace_otel.spans.gather.gather_traces`). ``content_store`` (a path or URL, or a
    :class:`~memtrace_otel.content.ContentResolver`) or ``content_by_hash`` fills in the contents
    the spans reference; a store that cannot be read, or lacks texts, is one problem each.
    """
    result = _records(source)
    input_traces = {span.trace_id for span in result.spans}
    gathered = None
    if backend is not None:
        gathered = gather_traces(result, backend, input_traces, store_lookback=store_lookback)
    resolver = ContentResolver(content_store, log=False) if isinstance(content_store, str) else content_store
    by_hash = resolver.get if resolver is not None else content_by_hash
    graph = build_graph(result.spans, content_by_hash=by_hash)
    graph.graph["input_traces"] = input_traces
    problems = [*result.problems, *(gathered.problems if gathered else []), *graph.graph["problems"],
                *_store_problems(resolver)]
    return Analysis(result, graph, input_traces, gathered, problems)


def _store_problems(resolver: ContentResolver | None) -> list[Problem]:
    if resolver is None:
        return []
    where = f"content store {resolver.url}"
    return [Problem(where, line.removeprefix(f"{where}: ")) for line in resolver.messages()]


def analyze(
    source: Source,
    engine: str | Engine = "lineage",
    *,
    backend: TraceBackend | None = None,
    store_lookback: float = 0.0,
    content_store: str | ContentResolver | None = None,
    content_by_hash: ContentLookup | None = None,
    traces: Collection[str] | None = None,
    jobs: int = 1,
    engine_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> Analysis:
    """Explain every failed evaluation in ``source``: :func:`load_graph`, then :func:`attribute_failures`.

    Only the failures of ``traces`` are attributed when given; by default, with a store search
    (``store_lookback`` > 0), those of the input (the traces found are context), otherwise all.

    >>> from memtrace_otel.spans.model import SpanRecord
    >>> analyze([SpanRecord("a" * 32, "1" * 16, "noop")]).attributions
    []
    """
    found = load_graph(source, backend=backend, store_lookback=store_lookback, content_store=content_store,
                       content_by_hash=content_by_hash)
    if traces is None and store_lookback > 0:
        traces = found.input_traces
    found.attributions = attribute_failures(found.graph, engine, jobs=jobs, engine_options=engine_options,
                                            progress=progress, warn=warn, traces=traces)
    return found


def summarize(attributions: Sequence[Attribution], *, top: int = 10) -> dict[str, Any]:
    """Error-type counts and where failures concentrate (by operation name, and by operation).

    >>> summarize([])["failures"]
    0
    """
    types = Counter(a.error_type.value for a in attributions if a.error_type)
    by_name: dict[tuple[str, str], list[Attribution]] = defaultdict(list)
    by_operation: dict[str, list[Attribution]] = defaultdict(list)
    for a in attributions:
        if a.operation is None:
            continue
        by_name[(a.operation_name or "?", a.category or "?")].append(a)
        by_operation[a.operation].append(a)
    total = len(attributions)
    names = sorted(by_name.items(), key=lambda item: (-len(item[1]), item[0]))[:top]
    operations = sorted(
        ((op, found) for op, found in by_operation.items() if len(found) > 1),
        key=lambda item: (-len(item[1]), item[0]),
    )[:top]
    return {
        "failures": total,
        "attributed": sum(a.operation is not None for a in attributions),
        "error_types": dict(types.most_common()),
        "operations": [
            {
                "name": name,
                "category": category,
                "failures": len(found),
                "share": round(len(found) / total, 4),
                "error_types": dict(Counter(a.error_type.value for a in found if a.error_type)),
            }
            for (name, category), found in names
        ],
        "hotspots": [
            {
                "operation": op,
                "name": found[0].operation_name,
                "trace_id": found[0].trace_id,
                "span_id": found[0].span_id,
                "failures": len(found),
            }
            for op, found in operations
        ],
    }
