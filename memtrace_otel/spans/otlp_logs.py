"""Evaluators' results sent as log records: OTLP/JSON ``LogsData`` lines in span files.

The GenAI conventions define ``gen_ai.evaluation.result`` as an *event*, and the OTel SDKs now
emit events as log records (``eventName``, or the older ``event.name`` attribute) correlated to the
span they are about by ``traceId`` / ``spanId``. A Collector's ``file`` exporter with a logs
pipeline writes them as ``resourceLogs`` lines, beside the ``resourceSpans`` ones. Each such
record whose result fails (:mod:`memtrace_otel.signals`) becomes one evaluation span record naming
the span it judges (``memtrace.evaluation.target.*``): the graph then treats it as it treats a
late verdict (:mod:`memtrace_otel.graph.verdicts`). Other log records are not spans and are left
out without a word; a failing result with no span to name is one problem.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from memtrace_otel.semconv import Category, EvaluationSignal, GenAI, GenAIEvent, MemTrace, MemTraceTarget
from memtrace_otel.signals import FailureRule, default_failure_rule
from memtrace_otel.spans.anyvalue import any_value, key_values, unsigned_nanos
from memtrace_otel.spans.model import Problem, SpanLink, SpanRecord
from memtrace_otel.spans.otlp_json import MalformedSpan, get_field, normalise_id

__all__ = ["is_logs_document", "records_from_logs_data"]

_EVENT = GenAIEvent.EVALUATION_RESULT
_SCOPE = "memtrace_otel.spans.otlp_logs"


def is_logs_document(document: Any) -> bool:
    """Whether ``document`` is an OTLP ``LogsData`` object (``resourceLogs``)."""
    return isinstance(document, dict) and ("resourceLogs" in document or "resource_logs" in document)


def _list(obj: Any, camel: str, snake: str) -> list[Any]:
    value = get_field(obj, camel, snake) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def _derived_span_id(trace_id: str, span_id: str, at: int, index: int) -> str:
    """A span id for the record, the same on every read of the same line (deterministic)."""
    digest = hashlib.blake2b(f"{trace_id}{span_id}{at}{index}".encode(), digest_size=8).hexdigest()
    return digest if digest != "0" * 16 else "0" * 15 + "1"


def records_from_logs_data(document: Any, where: str, problems: list[Problem],
                           rule: FailureRule | None = None) -> Iterator[SpanRecord]:
    """One evaluation span record per failing ``gen_ai.evaluation.result`` log record of ``document``.

    >>> problems = []
    >>> document = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{
    ...     "timeUnixNano": "7", "eventName": "gen_ai.evaluation.result", "traceId": "ab" * 16,
    ...     "spanId": "cd" * 8, "attributes": [
    ...         {"key": "gen_ai.evaluation.name", "value": {"stringValue": "correctness"}},
    ...         {"key": "gen_ai.evaluation.score.label", "value": {"stringValue": "incorrect"}}]}]}]}]}
    >>> [(r.name, r.attributes["memtrace.evaluation.target.span_id"]) for r in
    ...  records_from_logs_data(document, "f:1", problems)]
    [('gen_ai.evaluation.result', 'cdcdcdcdcdcdcdcd')]
    """
    rule = rule or default_failure_rule()
    index = 0
    for resource_logs in _list(document, "resourceLogs", "resource_logs"):
        resource = resource_logs.get("resource") if isinstance(resource_logs, dict) else None
        errors: list[tuple[str, str]] = []
        resource_attributes = key_values(resource.get("attributes"), errors) if isinstance(resource, dict) \
            else {}
        service = resource_attributes.get("service.name")
        for scope_logs in _list(resource_logs, "scopeLogs", "scope_logs"):
            for raw in _list(scope_logs, "logRecords", "log_records"):
                index += 1
                record = _record(raw, where, problems, rule, index)
                if record is not None:
                    record.service_name = service if isinstance(service, str) else ""
                    record.resource_attributes = resource_attributes
                    yield record


def _record(raw: Any, where: str, problems: list[Problem], rule: FailureRule,
            index: int) -> SpanRecord | None:
    if not isinstance(raw, dict):
        return None
    errors: list[tuple[str, str]] = []
    attributes = key_values(raw.get("attributes"), errors)
    name = get_field(raw, "eventName", "event_name") or attributes.get("event.name")
    if name != _EVENT:
        return None
    body = raw.get("body")
    if isinstance(body, dict):  # some emitters put the event's fields in a kvlist body
        try:
            fields = any_value(body)
        except ValueError:
            fields = None
        if isinstance(fields, dict):
            attributes = {**fields, **attributes}
    if not rule.fails(attributes):
        return None
    try:
        trace_id = normalise_id(get_field(raw, "traceId", "trace_id"), 32)
        span_id = normalise_id(get_field(raw, "spanId", "span_id"), 16)
    except MalformedSpan as error:
        problems.append(Problem(where, f"failing {_EVENT} log record skipped: it names no span ({error})"))
        return None
    try:
        raw_time = (get_field(raw, "timeUnixNano", "time_unix_nano")
                    or get_field(raw, "observedTimeUnixNano", "observed_time_unix_nano") or 0)
        at = unsigned_nanos(raw_time, "timeUnixNano")
    except ValueError:
        at = 0
    score = attributes.get(GenAI.EVALUATION_SCORE_VALUE)
    explanation = attributes.get(GenAI.EVALUATION_EXPLANATION)
    span_attributes: dict[str, Any] = {
        MemTrace.OPERATION_CATEGORY: str(Category.EVALUATION.value),
        MemTrace.OPERATION_NAME: str(attributes.get(GenAI.EVALUATION_NAME)),
        MemTrace.EVALUATION_PASSED: False,
        MemTrace.EVALUATION_SIGNAL: str(EvaluationSignal.JUDGE.value),
        MemTraceTarget.TRACE_ID: trace_id,
        MemTraceTarget.SPAN_ID: span_id,
    }
    if isinstance(score, int | float) and not isinstance(score, bool):
        span_attributes[MemTrace.EVALUATION_SCORE] = float(score)
    if isinstance(explanation, str):
        span_attributes[MemTrace.EVALUATION_EXPLANATION] = explanation
    # A child of the judged span in its trace, where the evaluator put it, linking to it as
    # record_feedback's spans do: a judged trace missing from the input is then named, and fetched
    # with --jaeger / --tempo.
    return SpanRecord(trace_id, _derived_span_id(trace_id, span_id, at, index), _EVENT,
                      parent_span_id=span_id, start_time_unix_nano=at, end_time_unix_nano=at,
                      attributes=span_attributes, links=[SpanLink(trace_id, span_id, {})], source=where,
                      scope_name=_SCOPE)
