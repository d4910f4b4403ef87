"""Scoring an attribution engine on a built benchmark: plain functions, usable from code.

For each labelled case: build (and cache, per distinct set of span files) the
graph, find the failed evaluation whose ``case`` attribute is the case id,
run the engine, and compare its error type and operation span id with the
label (exact match, as MemTrace scores).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import networkx as nx

from memtrace_otel.attribution.base import Engine, ErrorType, FailureCase, create_engine
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluation_of_case
from memtrace_otel.semconv import CONTENT_KEYS, EvaluationSignal, GenAI, MemTrace
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import read_span_files

__all__ = [
    "CONTENT_CONDITIONS",
    "PARTS",
    "SIGNALS",
    "CaseResult",
    "GraphCache",
    "attribute_case",
    "degrade_case",
    "find_case_evaluation",
    "load_labels",
    "score_case",
    "score_cases",
    "strip_contents",
    "summarize",
]

ERROR_TYPES = [t.value for t in ErrorType]
NONE_LABEL = "none"
TOP_K = 3
DEFAULT_PART = "injected"
PARTS = ("injected", "natural", "multi", "distractor", "mem0-real-v1", "mem0-real-v2")
"""The benchmark's parts (a label's ``part``): single injected faults, natural failures labelled by
counterfactual repair, multi-fault cases, decoy (distractor) cases; the real mem0ai 1.x / 2.x failures
labelled by counterfactual replay (``memtrace bench mem0``, ``bench/mem0_real/``)."""
CONTENT_CONDITIONS = ("on", "off", "ref")
"""``--content``: contents on the spans; removed at read time; only in a side store (by reference)."""
# The evaluation's own texts (question, prediction, gold, explanation) are the failure signal, which
# ``--signal`` degrades; ``--content`` removes what the memory system's variables held.
_SIGNAL_KEYS = frozenset({
    GenAI.EVALUATION_EXPLANATION, MemTrace.EVALUATION_QUESTION, MemTrace.EVALUATION_PREDICTION,
    MemTrace.EVALUATION_GOLD, MemTrace.EVALUATION_EXPLANATION,
})
VARIABLE_CONTENT_KEYS = CONTENT_KEYS - _SIGNAL_KEYS


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
    candidate_spans: list[str] = field(default_factory=list)
    ambiguous: bool = False
    part: str = "injected"
    """The label's benchmark part: ``injected``, ``natural``, ``multi`` or ``distractor``."""
    gold_stated: bool | None = None
    """Real-mem0 labels: whether the key facts state the gold's words (``True``) or the reader infers
    it (``False``); ``None`` where a label does not say (not a bool: not said)."""
    also_passing: list[str] | None = None
    """Real-mem0 labels: the span ids of the other single repairs that also make the answer pass
    (the label is the earliest); ``None`` where a label does not say."""

    @property
    def type_correct(self) -> bool:
        return self.predicted_type == self.gold_type

    @property
    def operation_correct(self) -> bool:
        return self.predicted_span is not None and self.predicted_span == self.gold_span

    @property
    def any_passing_repair(self) -> bool:
        """Whether the predicted span is the label's or any other single repair that passes: a
        diagnostic of how many misses name a repair that also works, never the headline."""
        return self.operation_correct or (self.predicted_span is not None
                                          and self.predicted_span in (self.also_passing or []))

    @property
    def top_k_correct(self) -> bool:
        """Whether the labelled span is among the engine's first :data:`TOP_K` candidates."""
        return self.operation_correct or self.gold_span in self.candidate_spans[:TOP_K]


def load_labels(directory: str, *, limit: int | None = None,
                parts: Iterable[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Labelled cases of a benchmark directory, and one problem line per unreadable row.

    ``parts``: only the labels of these parts (a label without ``part`` is ``injected``);
    ``limit`` counts the labels kept.
    """
    wanted = None if parts is None else frozenset(parts)
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
            problem = _label_problem(row, directory)
            if problem:
                problems.append(f"{path}:{number}: {problem}; skipped")
                continue
            if wanted is not None and _part(row) not in wanted:
                continue
            labels.append(row)
            if limit is not None and len(labels) >= limit:
                break
    return labels, problems


def _label_problem(row: Any, directory: str) -> str | None:
    """What makes a label row unusable, in a few words; ``None`` when it is usable.

    Its span files must lie inside the benchmark directory: a labels file is input, and a
    path in it (``/etc/passwd``, ``../../secret``, a symlink out) must not open anything else.
    """
    if not isinstance(row, dict):
        return f"is {type(row).__name__}, not an object"
    missing = [k for k in ("case_id", "error_type", "operation", "spans") if k not in row]
    if missing:
        return f"missing {', '.join(missing)}"
    for key in ("case_id", "error_type"):
        if not isinstance(row[key], str):
            return f"{key} is {type(row[key]).__name__}, not a string"
    if not isinstance(row["operation"], dict):
        return f"operation is {type(row['operation']).__name__}, not an object"
    spans = row["spans"]
    if not isinstance(spans, list) or not spans or not all(isinstance(p, str) and p for p in spans):
        return "spans is not a list of span file paths"
    root = os.path.realpath(directory)
    for span_path in spans:
        if os.path.isabs(span_path) or os.path.commonpath(
                [root, os.path.realpath(os.path.join(root, span_path))]) != root:
            return f"span file {span_path[:80]!r} is outside the benchmark directory"
    return None


def _gold_stated(label: dict[str, Any]) -> bool | None:
    stated = label.get("gold_stated")
    return stated if isinstance(stated, bool) else None


def _also_passing(label: dict[str, Any]) -> list[str] | None:
    others = label.get("also_passing")
    if not isinstance(others, list):
        return None
    return [str(o["span_id"]) for o in others if isinstance(o, dict) and o.get("span_id")]


def _part(label: dict[str, Any]) -> str:
    part = label.get("part", DEFAULT_PART)
    return part if isinstance(part, str) else DEFAULT_PART


def strip_contents(spans: Iterable[SpanRecord]) -> int:
    """Remove the memory system's contents from ``spans`` in place, as capture-off spans are exported.

    Kinds, sizes, hashes, ids and outcomes stay; the evaluation's own texts
    (the failure signal) stay too. Returns how many attributes were removed.

    >>> span = SpanRecord(trace_id="1" * 32, span_id="2" * 16, name="s", attributes={
    ...     "memtrace.variable.contents": ["x"], "memtrace.variable.outputs": ["a@1"]})
    >>> strip_contents([span]), sorted(span.attributes)
    (1, ['memtrace.variable.outputs'])
    """
    removed = 0
    for span in spans:
        for key in VARIABLE_CONTENT_KEYS.intersection(span.attributes):
            del span.attributes[key]
            removed += 1
    return removed


class GraphCache:
    """Graphs by the set of span files they are built from (a few kept: cases are grouped).

    ``content`` is the condition the graphs are built under (:data:`CONTENT_CONDITIONS`):
    ``off`` strips contents at read time; ``ref`` moves them into a side store under
    ``store_dir`` (a temporary directory by default) and resolves them from there.
    """

    def __init__(self, directory: str, max_graphs: int = 4, *, content: str = "on",
                 store_dir: str | None = None) -> None:
        if content not in CONTENT_CONDITIONS:
            raise ValueError(f"content must be one of {', '.join(CONTENT_CONDITIONS)}, not {content!r}")
        self.directory = directory
        self.max_graphs = max_graphs
        self.content = content
        self._graphs: OrderedDict[tuple[str, ...], tuple[nx.DiGraph, list[str]]] = OrderedDict()
        self.builds = 0
        self._side = _SideStore(store_dir) if content == "ref" else None

    def get(self, spans: Iterable[str]) -> tuple[nx.DiGraph, list[str]]:
        key = tuple(sorted(spans))
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        result = read_span_files([os.path.join(self.directory, p) for p in key])
        if self._side is not None:
            graph = self._side.build(result.spans)
        else:
            if self.content == "off":
                strip_contents(result.spans)
            graph = build_graph(result.spans)
        entry = (graph, [str(p) for p in result.problems])
        self.builds += 1
        self._graphs[key] = entry
        if len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
        return entry


find_case_evaluation = failed_evaluation_of_case
"""The failed evaluation operation recorded for ``case_id`` (the graph query, under the name the
benchmark's callers know)."""


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
                        str(label["operation"].get("span_id", "")), part=_part(label),
                        gold_stated=_gold_stated(label), also_passing=_also_passing(label))
    evaluation = find_case_evaluation(G, label["case_id"])
    if evaluation is None:
        result.problem = "no failed evaluation with this case id in its span files"
        return result
    return attribute_case(engine, G, evaluation, signal, result)


def attribute_case(engine: Engine, G: nx.DiGraph, evaluation: str, signal: str,
                   result: CaseResult) -> CaseResult:
    """Run ``engine`` on the failure of ``evaluation`` seen through ``signal``; its verdict into ``result``.

    Shared by every benchmark format (this one, MemTraceBench's), so a case is scored alike.
    """
    attribution = engine.attribute(G, degrade_case(FailureCase.from_graph(G, evaluation), signal))
    result.seconds = attribution.seconds
    result.predicted_type = attribution.error_type.value if attribution.error_type else None
    result.predicted_span = attribution.span_id
    result.input_tokens, result.output_tokens = attribution.input_tokens, attribution.output_tokens
    result.problem = attribution.failure_reason
    result.explanation = attribution.explanation
    result.candidate_spans = [str(c.span_id) for c in attribution.candidates if c.span_id]
    result.ambiguous = attribution.ambiguous
    return result


def score_cases(directory: str, engine_name: str, *, limit: int | None = None,
                engine_options: dict[str, Any] | None = None, signal: str = EvaluationSignal.GOLD,
                content: str = "on", store_dir: str | None = None, parts: Iterable[str] | None = None,
                progress: Callable[[int, int], None] | None = None) -> tuple[list[CaseResult], list[str]]:
    """Score engine ``engine_name`` on the benchmark in ``directory``; results and problem lines.

    ``signal`` degrades the failure signal (:func:`degrade_case`), ``content`` the spans
    (:class:`GraphCache`; ``store_dir`` is the side store of ``content="ref"``); ``parts`` keeps
    only the labels of those parts (:data:`PARTS`).
    """
    EvaluationSignal(signal)  # a bad signal is a bad argument (ValueError), not a problem of every case
    labels, problems = load_labels(directory, limit=limit, parts=parts)
    engine = create_engine(engine_name, **(engine_options or {}))
    cache = GraphCache(directory, content=content, store_dir=store_dir)
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
        return {"cases": 0, "type_accuracy": None, "operation_accuracy": None,
                "top_k_operation_accuracy": None}
    return {
        "cases": n,
        "type_accuracy": sum(r.type_correct for r in results) / n,
        "operation_accuracy": sum(r.operation_correct for r in results) / n,
        "top_k_operation_accuracy": sum(r.top_k_correct for r in results) / n,
        "ambiguous": sum(r.ambiguous for r in results),
        "seconds_per_case": sum(r.seconds for r in results) / n,
        "tokens_per_case": sum(r.input_tokens + r.output_tokens for r in results) / n,
        "input_tokens_per_case": sum(r.input_tokens for r in results) / n,
        "output_tokens_per_case": sum(r.output_tokens for r in results) / n,
        "unattributed": sum(r.predicted_span is None for r in results),
        # Labels listing the other passing single repairs (the real-mem0 parts): the share whose
        # predicted operation is any of them or the label's. A diagnostic; the accuracy is above.
        **({"diagnostic_any_passing_repair_share": sum(r.any_passing_repair for r in results) / n}
           if any(r.also_passing is not None for r in results) else {}),
    }


def summarize(results: list[CaseResult], engine: str) -> dict[str, Any]:
    """Accuracies per system, per error type, per benchmark part, per (system, error type) cell and
    overall, and the type confusion matrix.

    >>> r = [CaseResult("a", "rag", "RetrievalError", "1", "RetrievalError", "1"),
    ...      CaseResult("b", "rag", "ResponseError", "2", "RetrievalError", "3")]
    >>> s = summarize(r, "x")
    >>> s["overall"]["type_accuracy"], s["overall"]["operation_accuracy"]
    (0.5, 0.5)
    >>> s["confusion"]["ResponseError"]["RetrievalError"]
    1
    >>> s["cells"]["rag"]["ResponseError"]["type_accuracy"]
    0.0
    >>> s["by_part"]["injected"]["cases"]
    2
    >>> r[0].gold_stated, r[1].gold_stated = True, False
    >>> {k: v["operation_accuracy"] for k, v in summarize(r, "x")["by_gold_stated"].items()}
    {'stated': 1.0, 'inferred': 0.0}
    >>> r[1].also_passing = ["3"]  # the other speaker's search also passes, and the engine named it
    >>> summarize(r, "x")["overall"]["diagnostic_any_passing_repair_share"]
    1.0
    """
    by_system: dict[str, list[CaseResult]] = defaultdict(list)
    by_type: dict[str, list[CaseResult]] = defaultdict(list)
    by_part: dict[str, list[CaseResult]] = defaultdict(list)
    cells: dict[str, dict[str, list[CaseResult]]] = defaultdict(lambda: defaultdict(list))
    confusion: dict[str, Counter[str]] = {t: Counter() for t in ERROR_TYPES}
    for r in results:
        by_system[r.system].append(r)
        by_type[r.gold_type].append(r)
        by_part[r.part].append(r)
        cells[r.system][r.gold_type].append(r)
        confusion.setdefault(r.gold_type, Counter())[r.predicted_type or NONE_LABEL] += 1
    return {
        "engine": engine,
        "overall": _rates(results),
        "by_system": {s: _rates(rs) for s, rs in sorted(by_system.items())},
        "by_error_type": {t: _rates(by_type[t]) for t in ERROR_TYPES if by_type.get(t)},
        "by_part": {p: _rates(by_part[p]) for p in _part_order(by_part)},
        "cells": {s: {t: _rates(types[t]) for t in ERROR_TYPES if types.get(t)}
                  for s, types in sorted(cells.items())},
        "confusion": {g: dict(c) for g, c in confusion.items()},
        # Labels that say whether their key facts state the gold (the real-mem0 parts): how much of
        # the accuracy is on golds the reader must infer, where "carries the information" is hardest.
        "by_gold_stated": {name: _rates(rs) for name, stated in (("stated", True), ("inferred", False))
                           if (rs := [r for r in results if r.gold_stated is stated])},
        "top_k": TOP_K,
        "cases": [dict(asdict(r), type_correct=r.type_correct, operation_correct=r.operation_correct,
                       top_k_correct=r.top_k_correct) for r in results],
    }


def _part_order(parts: Iterable[str]) -> list[str]:
    """The known parts in :data:`PARTS` order, then any others by name."""
    present = set(parts)
    return [p for p in PARTS if p in present] + sorted(present.difference(PARTS))


class _SideStore:
    """``--content ref``: contents moved into a side store, spans stripped, graphs resolved from it.

    The store is ``store_dir``, or a temporary directory removed with this object.
    """

    def __init__(self, store_dir: str | None) -> None:
        from memtrace_otel.content import ContentResolver, open_store

        self._temporary = None if store_dir else tempfile.TemporaryDirectory(prefix="memtrace-content-")
        self.store = open_store(store_dir or self._temporary.name)  # type: ignore[union-attr]
        self.resolver = ContentResolver(self.store)

    def build(self, spans: list[SpanRecord]) -> nx.DiGraph:
        from memtrace_otel.content import externalize_contents

        return build_graph(externalize_contents(spans, self.store), content_by_hash=self.resolver.get)
