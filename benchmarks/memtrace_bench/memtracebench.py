"""Scoring an engine on MemTraceBench files (smartcomment graphs with annotations), MemTrace's way.

Each annotated failure of a smartcomment graph becomes, when read
(:mod:`memtrace_otel.spans.smartcomment`), a failed evaluation whose gold
labels (``final_error_type``, ``final_op_id``) sit in ``smartcomment.label.*``
span attributes that the graph builder does not read, so an engine sees the
failure exactly as in production. Here each file's graph is built once, the
engine attributes every labelled failure, and the verdict is compared with the
labels by exact match: on the error type, and on the operation (the span the
``final_op_id`` was converted to). :func:`~memtrace_bench.score.summarize`
then gives accuracies overall, per error type and per system (the graph's
``project_id``), and the confusion matrix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import networkx as nx

from memtrace_bench.score import CaseResult, attribute_case
from memtrace_otel.attribution.base import Engine, ErrorType, create_engine
from memtrace_otel.graph.build import build_graph
from memtrace_otel.semconv import SMARTCOMMENT_SCOPE, EvaluationSignal, MemTrace, SmartComment
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import SPAN_FILE_SUFFIXES, read_span_files
from memtrace_otel.wire import operation_node_id

__all__ = ["expand_paths", "labelled_cases", "normalize_error_type", "score_memtracebench"]

_NOT_LETTERS = re.compile(r"[^a-z]")
_TYPES = {_NOT_LETTERS.sub("", t.value.lower()): t.value for t in ErrorType}
_TYPES.update({key.removesuffix("error"): value for key, value in list(_TYPES.items())})


def normalize_error_type(text: str) -> str | None:
    """The :class:`ErrorType` value a label names, however it is spelled; ``None`` if none.

    >>> normalize_error_type("extraction_error"), normalize_error_type("Update"), normalize_error_type("x")
    ('ExtractionError', 'UpdateError', None)
    """
    return _TYPES.get(_NOT_LETTERS.sub("", text.lower()))


def expand_paths(paths: Iterable[str]) -> Iterator[str]:
    """Files, and the span files (``.json``, ``.jsonl``, ``.gz``) of directories, sorted."""
    for path in paths:
        if os.path.isdir(path):
            yield from (os.path.join(path, name) for name in sorted(os.listdir(path))
                        if name.endswith(SPAN_FILE_SUFFIXES) and os.path.isfile(os.path.join(path, name)))
        else:
            yield path


def labelled_cases(spans: Iterable[SpanRecord]) -> Iterator[tuple[SpanRecord, dict[str, str]]]:
    """Evaluation spans converted from annotations, with their gold labels (never given to an engine)."""
    for span in spans:
        a = span.attributes
        if span.scope_name == SMARTCOMMENT_SCOPE and isinstance(a.get(MemTrace.EVALUATION_CASE), str) \
                and (SmartComment.LABEL_ERROR_TYPE in a or SmartComment.LABEL_OP_ID in a):
            yield span, {"case_id": a[MemTrace.EVALUATION_CASE],
                         "error_type": str(a.get(SmartComment.LABEL_ERROR_TYPE, "")),
                         "span_id": str(a.get(SmartComment.LABEL_SPAN_ID, ""))}


def _score_one(engine: Engine, G: nx.DiGraph, span: SpanRecord, label: dict[str, str], signal: str,
               problems: list[str]) -> CaseResult:
    gold_type = normalize_error_type(label["error_type"])
    if gold_type is None:
        problems.append(f"{span.source}: case {label['case_id']!r}: final_error_type "
                        f"{label['error_type'][:60]!r} is not one of the five error types")
    result = CaseResult(label["case_id"], span.service_name or "?", gold_type or label["error_type"],
                        label["span_id"])
    evaluation = operation_node_id(span.trace_id, span.span_id)
    if evaluation not in G:
        result.problem = "its evaluation is not in the graph"
        return result
    return attribute_case(engine, G, evaluation, signal, result)


def score_memtracebench(
    paths: Iterable[str], engine_name: str, *, engine_options: dict[str, Any] | None = None,
    signal: str = EvaluationSignal.GOLD, progress: Callable[[int, int], None] | None = None,
) -> tuple[list[CaseResult], list[str]]:
    """Score engine ``engine_name`` on the annotated failures of MemTraceBench files.

    Parameters
    ----------
    paths:
        smartcomment graph files (``.json``, ``.json.gz``) and directories of them; each file is one graph.
    engine_name:
        A registered engine.
    signal:
        Score with a poorer failure signal than the gold answer (see :func:`degrade_case`).

    Returns
    -------
    (results, problems)
        One :class:`CaseResult` per labelled failure, in file order; problem lines of the inputs.

    >>> score_memtracebench([], "lineage")
    ([], [])
    """
    EvaluationSignal(signal)
    engine = create_engine(engine_name, **(engine_options or {}))
    files = list(expand_paths(paths))
    results: list[CaseResult] = []
    problems: list[str] = []
    for done, path in enumerate(files, 1):
        read = read_span_files([path])
        problems.extend(str(p) for p in read.problems)
        cases = list(labelled_cases(read.spans))
        if not cases and not read.problems:
            problems.append(f"{path}: no annotated failures (data.annotations) in this graph")
        if cases:
            G = build_graph(read.spans)
            results.extend(_score_one(engine, G, span, label, signal, problems) for span, label in cases)
        if progress:
            progress(done, len(files))
    return results, problems
