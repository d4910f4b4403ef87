"""Scoring an attribution engine on a built benchmark: plain functions, usable from code.

For each labelled case: build (and cache, per distinct set of span files) the
graph, find the failed evaluation whose ``case`` attribute is the case id,
run the engine, and compare its error type and operation span id with the
label (exact match, as MemTrace scores).
"""

from __future__ import annotations

import json
import os
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import networkx as nx

from memtrace_otel.attribution.base import Engine, ErrorType, FailureCase, create_engine
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.semconv import EvaluationSignal
from memtrace_otel.spans.readers import read_span_files

__all__ = [
    "SIGNALS",
    "CaseResult",
    "GraphCache",
    "degrade_case",
    "find_case_evaluation",
    "load_labels",
    "score_case",
    "score_cases",
    "summarize",
]

ERROR_TYPES = [t.value for t in ErrorType]
NONE_LABEL = "none"


@dataclass(slots=True)
class CaseResult:
    """One case scored: gold against predicted."""

    case_id: str
    system: str
    gold_type: str
    gold_span: str
    predicted_type: str | None = None
    predicted_span: str | None = None
    seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    problem: str | None = None
    explanation: str = ""

    @property
    def type_correct(self) -> bool:
        return self.predicted_type == self.gold_type

    @property
    def operation_correct(self) -> bool:
        return self.predicted_span is not None and self.predicted_span == self.gold_span


def load_labels(directory: str, *, limit: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Labelled cases of a benchmark directory, and one problem line per unreadable row."""
    path = os.path.join(directory, "labels.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no labels file (build one with `memtrace bench build`)")
    labels, problems = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append(f"{path}:{number}: not JSON ({error.msg}); skipped")
                continue
            missing = [k for k in ("case_id", "error_type", "operation", "spans") if k not in row]
            if missing:
                problems.append(f"{path}:{number}: missing {', '.join(missing)}; skipped")
                continue
            labels.append(row)
            if limit is not None and len(labels) >= limit:
                break
    return labels, problems


class GraphCache:
    """Graphs by the set of span files they are built from (a few kept: cases are grouped)."""

    def __init__(self, directory: str, max_graphs: int = 4) -> None:
        self.directory = directory
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple[str, ...], tuple[nx.DiGraph, list[str]]] = OrderedDict()
        self.builds = 0

    def get(self, spans: Iterable[str]) -> tuple[nx.DiGraph, list[str]]:
        key = tuple(sorted(spans))
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        result = read_span_files([os.path.join(self.directory, p) for p in key])
        graph = build_graph(result.spans)
        entry = (graph, [str(p) for p in result.problems])
        self.builds += 1
        self._graphs[key] = entry
        if len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
        return entry


def find_case_evaluation(G: nx.DiGraph, case_id: str) -> str | None:
    """The failed evaluation operation recorded for ``case_id``."""
    for node in failed_evaluations(G):
        if G.nodes[node].get("case") == case_id:
            return node
    return None


SIGNALS = tuple(s.value for s in EvaluationSignal)


def degrade_case(case: FailureCase, signal: str) -> FailureCase:
    """``case`` as it would look with a poorer failure signal than a gold answer.

    Production rarely has gold answers; scoring the same cases with less
    information measures how much each signal costs (``--signal``):

    * ``correction``: the user's correction plays the gold's role, but names no evidence;
    * ``judge``: a fail verdict with a generic explanation: no gold, no evidence;
    * ``feedback``: a thumbs-down on the question: nothing but question and prediction.

    >>> c = degrade_case(FailureCase("op:x", question="q", gold="g", evidence=["D1:1"]), "judge")
    >>> (c.gold, c.evidence, c.signal)
    (None, [], 'judge')
    """
    signal = EvaluationSignal(signal).value
    if signal == EvaluationSignal.GOLD:
        return case
    degraded = replace(case, evidence=[], signal=signal)
    if signal == EvaluationSignal.JUDGE:
        degraded.gold = None
        degraded.explanation = f"The answer {case.prediction!r} is not supported by the conversation."
    elif signal == EvaluationSignal.FEEDBACK:
        degraded.gold = None
        degraded.explanation = None
    return degraded


def score_case(engine: Engine, G: nx.DiGraph, label: dict[str, Any], *,
               signal: str = EvaluationSignal.GOLD) -> CaseResult:
    """Run ``engine`` on one labelled case of ``G`` (seen through ``signal``) and compare with the label.

    A case the engine cannot attribute, or fails on, comes back with ``problem`` set:
    :meth:`Engine.attribute` never raises, so one broken case does not stop a run.
    """
    result = CaseResult(label["case_id"], label.get("system", "?"), label["error_type"],
                        str(label["operation"].get("span_id", "")))
    evaluation = find_case_evaluation(G, label["case_id"])
    if evaluation is None:
        result.problem = "no failed evaluation with this case id in its span files"
        return result
    attribution = engine.attribute(G, degrade_case(FailureCase.from_graph(G, evaluation), signal))
    result.seconds = attribution.seconds
    result.predicted_type = attribution.error_type.value if attribution.error_type else None
    result.predicted_span = attribution.span_id
    result.input_tokens, result.output_tokens = attribution.input_tokens, attribution.output_tokens
    result.problem = attribution.failure_reason
    result.explanation = attribution.explanation
    return result


def score_cases(directory: str, engine_name: str, *, limit: int | None = None,
                engine_options: dict[str, Any] | None = None, signal: str = EvaluationSignal.GOLD,
                progress: Callable[[int, int], None] | None = None) -> tuple[list[CaseResult], list[str]]:
    """Score engine ``engine_name`` on the benchmark in ``directory``; results and problem lines."""
    EvaluationSignal(signal)  # a bad signal is a bad argument (ValueError), not a problem of every case
    labels, problems = load_labels(directory, limit=limit)
    engine = create_engine(engine_name, **(engine_options or {}))
    cache = GraphCache(directory)
    # Cases that share span files are scored together, so each graph is built once.
    ordered = sorted(labels, key=lambda row: tuple(sorted(row["spans"])))
    results = []
    for done, label in enumerate(ordered, 1):
        graph, read_problems = cache.get(label["spans"])
        problems.extend(f"{label['case_id']}: {p}" for p in read_problems[:1])
        results.append(score_case(engine, graph, label, signal=signal))
        if progress:
            progress(done, len(ordered))
    order = {row["case_id"]: i for i, row in enumerate(labels)}
    results.sort(key=lambda r: order[r.case_id])
    return results, problems


def _rates(results: list[CaseResult]) -> dict[str, Any]:
    n = len(results)
    if not n:
        return {"cases": 0, "type_accuracy": None, "operation_accuracy": None}
    return {
        "cases": n,
        "type_accuracy": sum(r.type_correct for r in results) / n,
        "operation_accuracy": sum(r.operation_correct for r in results) / n,
        "seconds_per_case": sum(r.seconds for r in results) / n,
        "tokens_per_case": sum(r.input_tokens + r.output_tokens for r in results) / n,
        "input_tokens_per_case": sum(r.input_tokens for r in results) / n,
        "output_tokens_per_case": sum(r.output_tokens for r in results) / n,
        "unattributed": sum(r.predicted_span is None for r in results),
    }


def summarize(results: list[CaseResult], engine: str) -> dict[str, Any]:
    """Accuracies per system, per error type, per (system, error type) cell and overall, and the
    type confusion matrix.

    >>> r = [CaseResult("a", "rag", "RetrievalError", "1", "RetrievalError", "1"),
    ...      CaseResult("b", "rag", "ResponseError", "2", "RetrievalError", "3")]
    >>> s = summarize(r, "x")
    >>> s["overall"]["type_accuracy"], s["overall"]["operation_accuracy"]
    (0.5, 0.5)
    >>> s["confusion"]["ResponseError"]["RetrievalError"]
    1
    >>> s["cells"]["rag"]["ResponseError"]["type_accuracy"]
    0.0
    """
    by_system: dict[str, list[CaseResult]] = defaultdict(list)
    by_type: dict[str, list[CaseResult]] = defaultdict(list)
    cells: dict[str, dict[str, list[CaseResult]]] = defaultdict(lambda: defaultdict(list))
    confusion: dict[str, Counter[str]] = {t: Counter() for t in ERROR_TYPES}
    for r in results:
        by_system[r.system].append(r)
        by_type[r.gold_type].append(r)
        cells[r.system][r.gold_type].append(r)
        confusion.setdefault(r.gold_type, Counter())[r.predicted_type or NONE_LABEL] += 1
    return {
        "engine": engine,
        "overall": _rates(results),
        "by_system": {s: _rates(rs) for s, rs in sorted(by_system.items())},
        "by_error_type": {t: _rates(by_type[t]) for t in ERROR_TYPES if by_type.get(t)},
        "cells": {s: {t: _rates(types[t]) for t in ERROR_TYPES if types.get(t)}
                  for s, types in sorted(cells.items())},
        "confusion": {g: dict(c) for g, c in confusion.items()},
        "cases": [dict(asdict(r), type_correct=r.type_correct, operation_correct=r.operation_correct)
                  for r in results],
    }
