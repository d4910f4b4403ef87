"""Attribute every failed evaluation of a graph with one engine, in one or several processes.

Plain functions so that the CLI (``memtrace analyze``), the benchmark and
library users share them. Failures are systematic, so :func:`summarize`
groups verdicts by the operation that caused them: one bad extraction rule
or one over-eager update shows up as one row with many failures.

Several processes (``jobs > 1``) each get the graph once (inherited on fork,
pickled otherwise) and their own engine; cases go out in chunks and come
back as :class:`~memtrace_otel.attribution.base.Attribution` objects.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import networkx as nx

from memtrace_otel.attribution.base import Attribution, Engine, FailureCase, create_engine
from memtrace_otel.graph.query import failed_evaluations

__all__ = [
    "NO_CONTENT_WARNING",
    "attribute_failures",
    "content_available",
    "missing_traces",
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

# The graph and engine of a worker process, set once by _init_worker.
_worker: dict[str, Any] = {}


def content_available(G: nx.DiGraph) -> bool:
    """Whether any variable of ``G`` has captured content."""
    return any(d.get("type") == "variable" and d.get("content") for _, d in G.nodes(data=True))


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
    engine: str = "lineage",
    *,
    jobs: int = 1,
    engine_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    traces: Collection[str] | None = None,
) -> list[Attribution]:
    """One attribution per failed evaluation of ``G`` (of ``traces`` only, when given), in execution order.

    Each verdict names the traces its lineage links to but ``G`` lacks
    (``Attribution.missing_traces``); :func:`missing_traces` gathers them for one
    report line.

    Parameters
    ----------
    engine:
        Registered engine name (``ValueError`` names the choices if unknown).
    jobs:
        Processes to use; 1 runs in this process.
    progress:
        Called as ``progress(done, total)`` after each case (or chunk).
    warn:
        Receives the one warning about missing content (default: the log);
        it is given once per call, never per case.
    traces:
        Only the failures of these traces are attributed; the graph's other traces are context
        (traces fetched from a backend to complete the ones asked about).
    """
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    options = engine_options or {}
    engine_object = create_engine(engine, **options)  # fail early on an unknown name
    evaluations = failed_evaluations(G)
    if traces is not None:
        evaluations = [e for e in evaluations if G.nodes[e].get("trace_id") in traces]
    if evaluations and not content_available(G):
        (warn or _logger.warning)(NO_CONTENT_WARNING)
    if jobs == 1 or len(evaluations) <= _CHUNK:
        results = []
        for done, evaluation in enumerate(evaluations, 1):
            results.append(_attribute_one(engine_object, G, evaluation))
            if progress:
                progress(done, len(evaluations))
        return results
    return _in_processes(G, engine, options, evaluations, jobs, progress)


def _in_processes(
    G: nx.DiGraph,
    engine: str,
    options: dict[str, Any],
    evaluations: list[str],
    jobs: int,
    progress: Progress | None,
) -> list[Attribution]:
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    chunks = [evaluations[i : i + _CHUNK] for i in range(0, len(evaluations), _CHUNK)]
    found: dict[str, Attribution] = {}
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(chunks)),
        mp_context=context,
        initializer=_init_worker,
        initargs=(G, engine, options),
    ) as pool:
        futures = [pool.submit(_run_chunk, chunk) for chunk in chunks]
        for future in as_completed(futures):
            for attribution in future.result():
                found[attribution.case.evaluation] = attribution
            if progress:
                progress(len(found), len(evaluations))
    return [found[e] for e in evaluations]


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
