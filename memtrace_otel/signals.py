"""Failure signals from other tools: which ``gen_ai.evaluation.result`` says an answer failed.

An application that records its own verdicts uses ``Operation.record_evaluation`` (the
``memtrace.evaluation.*`` attributes). Evaluators people already run (an LLM judge, a guardrail,
an online-evaluation service) speak the GenAI conventions instead: a ``gen_ai.evaluation.result``
event on the span being evaluated, with ``gen_ai.evaluation.name``, ``.score.value``,
``.score.label`` and ``.explanation``. The conventions leave what a label or a score *means* to
the evaluator, so this module holds the one rule that decides "failing", for the graph builder,
the in-process processor and ``memtrace serve`` alike:

1. a recognised label decides: ``fail``, ``incorrect``, ``false``, ``not_relevant`` … fail;
   ``pass``, ``correct``, ``true``, ``relevant`` … pass (case, spaces and hyphens ignored);
2. otherwise a numeric score fails when it is below the threshold: ``0.5`` by default (the
   common 0..1, higher-is-better scale), ``MEMTRACE_EVALUATION_FAIL_BELOW`` or
   :class:`FailureRule` for another scale, ``off`` to ignore scores;
3. otherwise (an unknown label and no score, or ``error.type`` set: the evaluator itself failed)
   the event is not a failure.

memtrace's own events are skipped: ``record_evaluation`` writes the verdict as attributes too, and
annotation spans carry a ``memtrace.root_cause`` result (its score is a confidence, not a verdict).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memtrace_otel.config import evaluation_fail_below_from_env
from memtrace_otel.semconv import WRITEBACK_SCOPE, GenAI, GenAIEvent, MemTrace

__all__ = [
    "DEFAULT_FAIL_LABELS",
    "DEFAULT_PASS_LABELS",
    "EvaluatorVerdict",
    "FailureRule",
    "default_failure_rule",
    "failing_verdict",
    "is_failing",
]

DEFAULT_FAIL_LABELS = frozenset({
    "fail", "failed", "failure", "incorrect", "wrong", "false", "no", "bad", "negative",
    "not_relevant", "irrelevant", "unfaithful", "not_faithful", "hallucinated", "hallucination",
    "unhelpful", "not_helpful", "incomplete", "thumbs_down", "rejected", "unsupported", "toxic",
})
"""Labels read as a failure (normalised: lower case, spaces and hyphens as ``_``)."""
DEFAULT_PASS_LABELS = frozenset({
    "pass", "passed", "correct", "right", "true", "yes", "good", "positive", "relevant",
    "faithful", "helpful", "complete", "thumbs_up", "accepted", "supported",
})
"""Labels read as a pass, whatever the score says."""

_EVENT = GenAIEvent.EVALUATION_RESULT
_NAME, _LABEL = GenAI.EVALUATION_NAME, GenAI.EVALUATION_SCORE_LABEL
_SCORE, _EXPLANATION, _ERROR = GenAI.EVALUATION_SCORE_VALUE, GenAI.EVALUATION_EXPLANATION, GenAI.ERROR_TYPE


def _normal(label: str) -> str:
    return "_".join(label.strip().lower().replace("-", " ").split())


@dataclass(frozen=True, slots=True)
class FailureRule:
    """What makes a ``gen_ai.evaluation.result`` a failure.

    ``fail_below``: a score under it fails when the label does not decide (``None``: scores are
    ignored); by default ``MEMTRACE_EVALUATION_FAIL_BELOW`` or 0.5. ``names``: only these
    evaluation names count (``None``: all).

    >>> rule = FailureRule(fail_below=3.0)
    >>> rule.fails({"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 2})
    True
    >>> rule.fails({"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.label": "Relevant",
    ...             "gen_ai.evaluation.score.value": 2})
    False
    """

    fail_below: float | None = field(default_factory=evaluation_fail_below_from_env)
    fail_labels: frozenset[str] = DEFAULT_FAIL_LABELS
    pass_labels: frozenset[str] = DEFAULT_PASS_LABELS
    names: frozenset[str] | None = None

    def fails(self, event: Mapping[str, Any]) -> bool:
        """Whether the attributes of one ``gen_ai.evaluation.result`` event say the answer failed."""
        name = event.get(_NAME)
        if not isinstance(name, str) or name.startswith("memtrace."):
            return False  # required by the conventions; memtrace's own verdicts are read elsewhere
        if self.names is not None and name not in self.names:
            return False
        if event.get(_ERROR) is not None:
            return False  # the evaluation itself failed: no verdict on the answer
        label = event.get(_LABEL)
        if isinstance(label, str):
            normal = _normal(label)
            if normal in self.fail_labels:
                return True
            if normal in self.pass_labels:
                return False
        score = event.get(_SCORE)
        if (self.fail_below is None or isinstance(score, bool) or not isinstance(score, int | float)
                or not math.isfinite(score)):
            return False
        return score < self.fail_below


@dataclass(frozen=True, slots=True)
class EvaluatorVerdict:
    """A failing ``gen_ai.evaluation.result`` found on a span: what the graph turns into a failure."""

    name: str
    time_unix_nano: int
    score: float | None = None
    label: str | None = None
    explanation: str | None = None


def _events(span: Any) -> Iterable[tuple[str, int, Mapping[str, Any]]]:
    """``(name, time, attributes)`` of a span record's or an SDK span's events."""
    for event in span.events or ():
        name = event.name
        if name == _EVENT:
            yield name, getattr(event, "time_unix_nano", None) or getattr(event, "timestamp", 0) or 0, (
                event.attributes or {})


def failing_verdict(span: Any, rule: FailureRule | None = None) -> EvaluatorVerdict | None:
    """The first failing evaluator result on ``span`` (a :class:`~memtrace_otel.spans.model.SpanRecord`
    or an SDK ``ReadableSpan``), or ``None``.

    Spans that carry memtrace's own verdict (``memtrace.evaluation.passed``) and memtrace's
    annotation spans are never read here.

    >>> from memtrace_otel.spans.model import SpanEvent, SpanRecord
    >>> span = SpanRecord("a" * 32, "b" * 16, "chat", events=[SpanEvent("gen_ai.evaluation.result", 7, {
    ...     "gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": 0.2})])
    >>> failing_verdict(span)
    EvaluatorVerdict(name='faithfulness', time_unix_nano=7, score=0.2, label=None, explanation=None)
    """
    if not span.events:
        return None
    attributes = span.attributes or {}
    if MemTrace.EVALUATION_PASSED in attributes:
        return None
    scope = getattr(span, "scope_name", None)
    if scope is None:
        instrumentation = getattr(span, "instrumentation_scope", None)
        scope = instrumentation.name if instrumentation is not None else ""
    if scope == WRITEBACK_SCOPE:
        return None
    rule = rule or default_failure_rule()
    for _, at, event in _events(span):
        if rule.fails(event):
            score, label, explanation = event.get(_SCORE), event.get(_LABEL), event.get(_EXPLANATION)
            return EvaluatorVerdict(
                name=str(event[_NAME]), time_unix_nano=int(at),
                score=None if isinstance(score, bool) or not isinstance(score, int | float) else float(score),
                label=label if isinstance(label, str) else None,
                explanation=explanation if isinstance(explanation, str) else None)
    return None


def is_failing(span: Any, rule: FailureRule | None = None) -> bool:
    """Whether ``span`` holds a failed verdict: memtrace's own, or an evaluator's result.

    >>> from memtrace_otel.spans.model import SpanRecord
    >>> is_failing(SpanRecord("a" * 32, "b" * 16, "judge", attributes={"memtrace.evaluation.passed": False}))
    True
    """
    attributes = span.attributes or {}
    if attributes.get(MemTrace.EVALUATION_PASSED) is False:
        return True
    return failing_verdict(span, rule) is not None


_RULE: list[FailureRule] = []


def default_failure_rule() -> FailureRule:
    """The rule from the environment, read once per process (a hot path calls it per span with events)."""
    if not _RULE:
        _RULE.append(FailureRule())
    return _RULE[0]
