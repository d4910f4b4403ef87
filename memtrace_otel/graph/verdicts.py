"""Failures recorded by other tools, and verdicts recorded apart from the answer they judge.

Two kinds of failure reach the graph without ``record_evaluation`` on the answer's own trace:

* an evaluator's failing ``gen_ai.evaluation.result`` event on a span (the rule that says
  "failing" is :mod:`memtrace_otel.signals`). The builder makes it an evaluation operation node
  of its own, :func:`evaluator_node_id` (the judged span may be a memory operation already), whose
  ``span_id`` is the judged span's: the annotation then hangs under the span the evaluator judged;
* an evaluation span that names the span it judges (``memtrace.evaluation.target.*``, written by
  :func:`memtrace_otel.feedback.record_feedback`: a thumbs-down, correction or judge verdict from
  another request or process), linked to it.

Either way the answer is not named, only a span. :func:`resolve_targets` finds the answer that
span stands for, in this order: an answer the judged span's operation wrote; one written by an
operation above it (a model call inside the generation); the last one written below it (the
application's request span around the whole turn); else the last answer written in the judged
span's trace. The question (the nearest ``query`` variable the answer depends on) and the
prediction (the answer's content) fill in what the verdict does not say, so such a failure is
attributed as the ``judge`` / ``feedback`` signals are (``docs/benchmark.md``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.semconv import Category, EvaluationSignal, VariableKind
from memtrace_otel.signals import EvaluatorVerdict
from memtrace_otel.spans.model import SpanRecord

__all__ = ["evaluator_node", "evaluator_node_id", "resolve_targets"]

_ANSWER, _QUERY = str(VariableKind.ANSWER.value), str(VariableKind.QUERY.value)
_GENERATION, _EVALUATION = str(Category.GENERATION.value), str(Category.EVALUATION.value)
_MAX_HOPS = 64
_MAX_QUESTION_DEPTH = 8


def evaluator_node_id(trace_id: str, span_id: str) -> str:
    """Graph node id of the failure an evaluator recorded on span ``span_id`` of trace ``trace_id``.

    >>> evaluator_node_id("ab" * 16, "cd" * 8)
    'op:abababababababababababababababab:cdcdcdcdcdcdcdcd:evaluation'
    """
    return f"op:{trace_id}:{span_id}:evaluation"


def evaluator_node(span: SpanRecord, verdict: EvaluatorVerdict) -> dict[str, Any]:
    """Node data of the evaluation operation an evaluator's failing result on ``span`` stands for."""
    at = verdict.time_unix_nano or span.end_time_unix_nano
    return {
        "type": OPERATION, "bipartite": 1, "name": verdict.name, "span_name": span.name,
        "category": _EVALUATION, "trace_id": span.trace_id, "span_id": span.span_id,
        "parent_span_id": span.parent_span_id, "start": at, "end": at, "status": span.status_code,
        "service": span.service_name, "outcome": None, "source": span.source, "gen_ai_operation": None,
        "store_id": None, "content_captured": False, "passed": False, "score": verdict.score,
        "signal": str(EvaluationSignal.JUDGE.value), "evidence": [], "answer": None, "question": None,
        "prediction": None, "gold": None, "explanation": verdict.explanation, "case": None,
        "evaluator_label": verdict.label,
    }


def _answer_written(G: nx.DiGraph, op: str) -> str | None:
    """The answer ``op`` wrote: its last output of kind ``answer``, or of a generation its last output."""
    outputs = sorted(v for v, d in G._succ[op].items() if d.get("role") == "output")
    answers = [v for v in outputs if G.nodes[v].get("kind") == _ANSWER]
    if answers:
        return answers[-1]
    if G.nodes[op].get("category") == _GENERATION and outputs:
        return outputs[-1]
    return None


def _parent(G: nx.DiGraph, parents: dict[tuple[str, str], str], trace: str, span: str) -> str:
    node = G._node.get(f"op:{trace}:{span}")
    if node is not None and node.get("type") == OPERATION:
        return node.get("parent_span_id") or ""
    return parents.get((trace, span), "")


def _answer_for(G: nx.DiGraph, parents: dict[tuple[str, str], str], writers: dict[str, list[str]],
                trace: str, span: str) -> str | None:
    """The answer judged span ``span`` of ``trace`` stands for (the module's rule), or None."""
    current, hops = span, 0
    while current and hops < _MAX_HOPS:  # the span itself, then the operations above it
        node = f"op:{trace}:{current}"
        if node in G._node and G._node[node].get("type") == OPERATION:
            answer = _answer_written(G, node)
            if answer is not None:
                return answer
        current, hops = _parent(G, parents, trace, current), hops + 1
    written = writers.get(trace, [])
    for op in reversed(written):  # the last one written below it
        current, hops = G.nodes[op].get("parent_span_id") or "", 0
        while current and hops < _MAX_HOPS:
            if current == span:
                return _answer_written(G, op)
            current, hops = _parent(G, parents, trace, current), hops + 1
    return _answer_written(G, written[-1]) if written else None


def _question(G: nx.DiGraph, answer: str) -> str | None:
    """The content of the nearest ``query`` variable ``answer`` depends on (breadth first, bounded)."""
    seen, queue = {answer}, deque([(answer, 0)])
    while queue:
        node, depth = queue.popleft()
        data = G.nodes[node]
        if data.get("type") == VARIABLE and data.get("kind") == _QUERY and data.get("content"):
            return str(data["content"])
        if depth < _MAX_QUESTION_DEPTH * 2:
            for pred in sorted(G._pred[node]):
                if pred not in seen:
                    seen.add(pred)
                    queue.append((pred, depth + 1))
    return None


def resolve_targets(G: nx.DiGraph, targets: dict[str, tuple[str, str]],
                    parents: dict[tuple[str, str], str]) -> None:
    """Give each evaluation node of ``targets`` (node -> judged ``(trace, span)``) its answer.

    ``parents``: ``(trace, span) -> parent span`` of the spans that are not operations. The
    answer becomes an input of the evaluation and its ``answer``; the question and the prediction
    are filled in when the verdict did not carry them. Run after execution order is set.
    """
    if not targets:
        return
    writers: dict[str, list[str]] = {}
    ops = sorted((d.get("order", 0), n) for n, d in G._node.items() if d.get("type") == OPERATION
                 and d.get("category") != _EVALUATION)
    wanted = {trace for trace, _ in targets.values()}
    for _, op in ops:
        trace = G.nodes[op].get("trace_id")
        if trace in wanted and _answer_written(G, op) is not None:
            writers.setdefault(trace, []).append(op)
    for node in sorted(targets):
        data = G.nodes[node]
        if data.get("answer") in G:
            continue
        answer = _answer_for(G, parents, writers, *targets[node])
        if answer is None:
            continue
        data["answer"] = answer
        if node not in G._succ[answer]:
            G.add_edge(answer, node, role="input")
        if data.get("question") is None:
            data["question"] = _question(G, answer)
        if data.get("prediction") is None and G.nodes[answer].get("content"):
            data["prediction"] = G.nodes[answer]["content"]
