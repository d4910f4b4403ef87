"""How well failures reported by an evaluator's ``gen_ai.evaluation.result`` event are attributed.

The benchmark's cases record their verdict with ``record_evaluation`` (an evaluation span with the
gold answer, the question, evidence ids). Here each case's verdict is replaced by what an evaluator
that knows no gold would leave: its evaluation span no longer carries a verdict, and the span that
wrote the failed answer gets a failing ``gen_ai.evaluation.result`` event (label ``incorrect``, the
generic explanation the ``--signal judge`` column uses). The graph then finds the failure, its
answer and its question on its own (``memtrace_otel/graph/verdicts.py``), and ``lineage`` is scored
against the same labels as ``memtrace bench score`` (top-1 / top-3 operation, error type).

    python benchmarks/performance/evaluator_signal.py DIR [--part injected] [--limit N] [--json]

DIR is a ``memtrace bench build`` directory. Compare with
``memtrace bench score --engine lineage DIR --part injected --signal judge``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from memtrace_bench.score import CaseResult, attribute_case, load_labels, summarize
from memtrace_otel.attribution import create_engine
from memtrace_otel.graph import build_graph
from memtrace_otel.graph.verdicts import evaluator_node_id
from memtrace_otel.semconv import GenAI, GenAIEvent, MemTrace
from memtrace_otel.spans import read_span_files
from memtrace_otel.spans.model import SpanEvent, SpanRecord

_VERDICT_KEYS = [key for name, key in vars(MemTrace).items()
                 if name.startswith("EVALUATION_") and isinstance(key, str)]


def _own(spans: list[SpanRecord], span: SpanRecord) -> SpanRecord:
    """A copy of ``span`` in ``spans`` that may be changed (the clean sessions' records are shared)."""
    mine = replace(span, attributes=dict(span.attributes), events=list(span.events))
    spans[next(i for i, s in enumerate(spans) if s is span)] = mine
    return mine


def _as_evaluator(spans: list[SpanRecord], case_id: str) -> tuple[str, str] | None:
    """Turn the verdict of ``case_id`` into an evaluator's event on the answer's span (on copies);
    the judged span's ``(trace, span)``, or None when the case's answer has no producer here."""
    evaluation = next((s for s in spans if s.attributes.get(MemTrace.EVALUATION_CASE) == case_id), None)
    if evaluation is None:
        return None
    evaluation = _own(spans, evaluation)
    a = evaluation.attributes
    answer = a.get(MemTrace.EVALUATION_ANSWER)
    prediction = a.get(MemTrace.EVALUATION_PREDICTION)
    producer = next((s for s in spans if answer in (s.attributes.get(MemTrace.OUTPUTS) or ())), None)
    if producer is None:
        return None
    producer = _own(spans, producer)
    for key in _VERDICT_KEYS:  # the evaluation span stays (it read the answer), without its verdict
        a.pop(key, None)
    producer.events.append(SpanEvent(GenAIEvent.EVALUATION_RESULT, evaluation.end_time_unix_nano, {
        GenAI.EVALUATION_NAME: "correctness", GenAI.EVALUATION_SCORE_LABEL: "incorrect",
        GenAI.EVALUATION_EXPLANATION: f"The answer {prediction!r} is not supported by the conversation."}))
    return producer.trace_id, producer.span_id


def score(directory: str, parts: Iterable[str], limit: int | None) -> tuple[list[CaseResult], list[str]]:
    labels, problems = load_labels(directory, limit=limit, parts=parts)
    engine = create_engine("lineage")
    shared: dict[str, list[SpanRecord]] = {}  # the clean sessions' spans, read once
    results = []
    for label in labels:
        result = CaseResult(label["case_id"], label.get("system", "?"), label["error_type"],
                            str(label["operation"].get("span_id", "")), part=label.get("part", "injected"))
        spans: list[SpanRecord] = []
        for path in label["spans"]:
            if path not in shared:
                shared.clear() if len(shared) > 64 else None  # bounded: cases come grouped by files
                shared[path] = read_span_files([os.path.join(directory, path)]).spans
            spans.extend(shared[path])
        judged = _as_evaluator(spans, label["case_id"])
        if judged is None:
            result.problem = "no failed evaluation with an answer producer for this case"
            results.append(result)
            continue
        G = build_graph(spans)
        node = evaluator_node_id(*judged)
        if node not in G:
            result.problem = "the evaluator's result was not read as a failure"
            results.append(result)
            continue
        results.append(attribute_case(engine, G, node, "gold", result))  # "gold": the case as read
    return results, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--part", action="append", default=None, help="benchmark part(s); default injected")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results, problems = score(args.directory, args.part or ["injected"], args.limit)
    summary: dict[str, Any] = summarize(results, "lineage")
    unread = sum(r.problem is not None and r.predicted_span is None for r in results)
    if args.json:
        print(json.dumps({"overall": summary["overall"], "unread": unread, "problems": problems[:5]},
                         indent=2))
        return
    overall = summary["overall"]
    print(f"{overall['cases']} cases: operation top-1 {overall['operation_accuracy']:.1%}, "
          f"top-3 {overall['top_k_operation_accuracy']:.1%}, error type {overall['type_accuracy']:.1%}; "
          f"{unread} not attributed")
    for line in problems[:5]:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
