"""An attribution verdict written back into the traces as new spans.

Stored spans are immutable in Jaeger and Tempo, but both accept late spans for
a trace id they already hold, so a verdict is added rather than edited in:

* ``memtrace.attribution``, in the failed trace, child of the evaluation span,
  with a link to the root-cause span;
* ``memtrace.root_cause``, in the root-cause span's own trace (often an older
  ingestion trace), child of the root-cause span, with a link back to the
  evaluation span.

A root cause that is a stage recorded as a ``memtrace.stage`` event (mem0's ``add``: its
extraction, search or decision; the graph node's ``stage_of``) has no span of its own: given the
graph, both spans then point at the span the event is on (``memtrace.root_cause`` is its child,
``memtrace.root_cause.span_id`` its id) and name the stage (``memtrace.root_cause.stage.id``, and
the stage's operation name as always).

Both carry the same fields (``memtrace.error_type``, ``memtrace.root_cause.*``,
``memtrace.attribution.*``; ``memtrace.attribution.step.*`` names the model call inside the
root cause that went wrong, when it made any), status ``ERROR`` and the GenAI
``gen_ai.evaluation.result`` event, so whoever opens either trace sees the
verdict, and a tag search finds both. When the root cause is in the failed
trace itself both spans are still written (one under each span).

Written for a reader of the trace UI (issue 25): given the graph (:func:`annotate`), the
explanation says in plain words what was lost and where (:mod:`~memtrace_otel.writeback.explain`),
the blamed span is named as the UI shows it (``memtrace.root_cause.span.name``), the runners-up
are one short line (``memtrace.attribution.alternatives``), and the evidence path, a long list of
graph ids, is in a ``memtrace.attribution.evidence`` event rather than among the tags, where Jaeger
would unfold it above the key ones.

Time: given the graph, a span lies inside its parent's time range (the parent's last nanosecond):
Jaeger's clock-skew adjuster warns on every child outside its parent when the spans carry no host
attributes, and a late span stamped "now" always is. Without the parent's times (the ``write_*``
calls without ``graph``) the span starts now and lasts as long as it takes to write it.

Every string value is cut to :data:`MAX_VALUE_CHARS` characters (lists to :data:`MAX_LIST_ITEMS`
items), with a marker: one failed trace with a 3 MiB operation name once made the backend refuse
every annotation batch it was in.

These are plain functions over a given tracer; they create nothing else and
run with instrumentation suppressed, so the write-back never traces itself.
Thread-safe as far as the tracer is (the SDK's is).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags, Tracer

from memtrace_otel.attribution import Attribution
from memtrace_otel.semconv import (
    EVIDENCE_EVENT,
    ROOT_CAUSE_EVALUATION_NAME,
    AnnotationSpan,
    GenAI,
    GenAIEvent,
    MemTraceAttribution,
)
from memtrace_otel.suppress import suppress_instrumentation
from memtrace_otel.writeback.explain import alternatives_text, plain_explanation, span_name_of

__all__ = [
    "Annotation",
    "annotate",
    "annotation_attributes",
    "annotations_of",
    "root_cause_context",
    "verdict_annotations",
    "write",
    "write_annotations",
    "write_attribution_span",
    "write_root_cause_span",
]

_A = MemTraceAttribution
MAX_VALUE_CHARS = 4096
"""Longest string an annotation attribute carries (the rest is cut, with a marker)."""
MAX_LIST_ITEMS = 128
"""Most items of a list attribute (an evidence path); the rest are cut, with a marker."""
_CUT = "…[cut]"


def _bounded(value: Any) -> Any:
    """``value`` within the limits above (strings cut, lists shortened and their strings cut).

    >>> len(_bounded("x" * 10_000)) == MAX_VALUE_CHARS
    True
    """
    if isinstance(value, str):
        return value if len(value) <= MAX_VALUE_CHARS else value[:MAX_VALUE_CHARS - len(_CUT)] + _CUT
    if isinstance(value, (list, tuple)):
        items = [_bounded(item) for item in value[:MAX_LIST_ITEMS]]
        return [*items, _CUT] if len(value) > MAX_LIST_ITEMS else items
    return value


def root_cause_context(attribution: Attribution) -> SpanContext | None:
    """The span context of the blamed operation, from the verdict's ids; ``None`` when unattributed.

    The span was recorded (it is in the graph), hence sampled.

    >>> from memtrace_otel.attribution import Attribution, FailureCase
    >>> verdict = Attribution("lineage", FailureCase("op:e"), trace_id="ab" * 16, span_id="cd" * 8)
    >>> f"{root_cause_context(verdict).span_id:016x}"
    'cdcdcdcdcdcdcdcd'
    """
    try:
        trace_id, span_id = int(attribution.trace_id or "", 16), int(attribution.span_id or "", 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return context if context.is_valid else None  # zero, negative or too long: not a span


def _stage_host(graph: nx.DiGraph | None, attribution: Attribution) -> str | None:
    """The span id a blamed stage is an event of (``stage_of``), when the graph says it is one."""
    if graph is None or attribution.operation is None or attribution.operation not in graph:
        return None
    host = graph.nodes[attribution.operation].get("stage_of")
    return host if isinstance(host, str) and host else None


def _blamed_context(attribution: Attribution, graph: nx.DiGraph | None) -> SpanContext | None:
    """The span the verdict's annotations point at: the blamed span, or the span its stage is an
    event of."""
    host = _stage_host(graph, attribution)
    if host is None:
        return root_cause_context(attribution)
    return root_cause_context(replace(attribution, span_id=host))


def annotation_attributes(
    attribution: Attribution, evaluation: SpanContext, role: AnnotationSpan, *,
    include_explanation: bool = True, marks: Mapping[str, Any] | None = None, graph: nx.DiGraph | None = None,
) -> dict[str, Any]:
    """The attributes both write-back spans carry (``role`` says which span this is).

    ``include_explanation=False`` writes a structural explanation (names, ids and
    error type) instead of the engine's, which may quote memory contents: use it
    when content capture is off. ``marks`` are added as they are (``memtrace serve``'s
    ``provisional`` / ``supersedes``). With the ``graph`` the verdict was made on, the explanation
    is in plain words (:func:`~memtrace_otel.writeback.explain.plain_explanation`, quoting contents
    only with ``include_explanation``) and the blamed span's name is added. The evidence path is
    not among them (see :func:`evidence_event`). Every value is length-limited (:data:`MAX_VALUE_CHARS`).

    >>> from memtrace_otel.attribution import Attribution, FailureCase
    >>> from memtrace_otel.semconv import ErrorType
    >>> verdict = Attribution("lineage", FailureCase("op:e"), operation="op:x", trace_id="ab" * 16,
    ...                       span_id="cd" * 8, operation_name="search", category="retrieval",
    ...                       error_type=ErrorType.RETRIEVAL, confidence=0.9)
    >>> evaluation = SpanContext(1, 2, is_remote=False)
    >>> attributes = annotation_attributes(verdict, evaluation, AnnotationSpan.ATTRIBUTION)
    >>> attributes["memtrace.error_type"], attributes["memtrace.root_cause.operation.name"]
    ('RetrievalError', 'search')
    """
    attributes: dict[str, Any] = {
        _A.ANNOTATION: role.value,
        _A.ENGINE: attribution.engine,
        _A.EVALUATION_TRACE_ID: f"{evaluation.trace_id:032x}",
        _A.EVALUATION_SPAN_ID: f"{evaluation.span_id:016x}",
    }
    attributes.update(marks or {})
    if attribution.operation is None:
        attributes[_A.FAILURE_REASON] = attribution.failure_reason or "no operation was blamed"
        return {key: _bounded(value) for key, value in attributes.items()}
    optional = {
        _A.ERROR_TYPE: attribution.error_type.value if attribution.error_type else None,
        _A.ROOT_CAUSE_OPERATION_NAME: attribution.operation_name,
        _A.ROOT_CAUSE_OPERATION_CATEGORY: attribution.category,
        _A.ROOT_CAUSE_TRACE_ID: attribution.trace_id,
        _A.ROOT_CAUSE_SPAN_ID: attribution.span_id,
        _A.ROOT_CAUSE_SPAN_NAME: span_name_of(graph, attribution.operation),
        _A.ALTERNATIVES: alternatives_text(graph, attribution),
        _A.STEP_SPAN_ID: attribution.step_span_id,  # the model call inside it that went wrong
        _A.STEP_NAME: attribution.step_name if attribution.step_span_id else None,
    }
    attributes.update((key, value) for key, value in optional.items() if value)
    host = _stage_host(graph, attribution)
    if host is not None:  # a stage of that span: the span is what a trace UI can open
        attributes[_A.ROOT_CAUSE_STAGE_ID] = attribution.span_id
        attributes[_A.ROOT_CAUSE_SPAN_ID] = host
        host_name = span_name_of(graph, f"op:{attribution.trace_id}:{host}")
        if host_name:
            attributes[_A.ROOT_CAUSE_SPAN_NAME] = host_name
    attributes[_A.CONFIDENCE] = float(attribution.confidence)
    attributes[_A.EXPLANATION] = (
        plain_explanation(graph, attribution, quotable=include_explanation)
        if graph is not None and attribution.operation in graph
        else _explanation(attribution, include_explanation))
    return {key: _bounded(value) for key, value in attributes.items()}


def evidence_event(attribution: Attribution) -> dict[str, Any] | None:
    """The attributes of the ``memtrace.attribution.evidence`` event: the evidence path (graph node
    ids, from the evidence to the evaluation through the root cause); ``None`` when it is empty.

    An event, not a tag: Jaeger lists a span's tags alphabetically and unfolds a list in place, so
    a dozen ids pushed the error type and the explanation out of sight; events are folded.
    """
    path = [node for node in attribution.evidence_path if isinstance(node, str)]
    return {_A.EVIDENCE_PATH: _bounded(path)} if path and attribution.operation else None


def _explanation(attribution: Attribution, include_explanation: bool) -> str:
    if include_explanation and attribution.explanation:
        return attribution.explanation
    # Without content capture the engine's words may quote what the spans deliberately left out.
    step = (f"; inside it, model call {attribution.step_name!r} (span {attribution.step_span_id})"
            if attribution.step_span_id else "")  # a name and an id: no content
    return (f"{attribution.operation_name} ({attribution.category}) is the root cause: "
            f"{_error_type(attribution)}, confidence {attribution.confidence:g}{step}")


def _error_type(attribution: Attribution) -> str:
    return attribution.error_type.value if attribution.error_type else "unknown error type"


def _result_event(attributes: dict[str, Any], reasoning: str | None = None) -> dict[str, Any]:
    """The GenAI ``gen_ai.evaluation.result`` event: the verdict as an evaluation of the failure.

    Its explanation is the engine's own reasoning when that may be written (``reasoning``), else the
    span's explanation."""
    event: dict[str, Any] = {GenAI.EVALUATION_NAME: ROOT_CAUSE_EVALUATION_NAME}
    if _A.ERROR_TYPE in attributes:
        event[GenAI.EVALUATION_SCORE_LABEL] = attributes[_A.ERROR_TYPE]
        event[GenAI.EVALUATION_SCORE_VALUE] = attributes[_A.CONFIDENCE]
    explanation = reasoning or attributes.get(_A.EXPLANATION) or attributes.get(_A.FAILURE_REASON)
    if explanation:
        event[GenAI.EVALUATION_EXPLANATION] = explanation
    return event


@dataclass(frozen=True, slots=True)
class _Extras:
    """What a span carries besides its attributes: the evidence event, the engine's reasoning for the
    result event, and its start and end (ns; ``None``: now)."""

    evidence: dict[str, Any] | None = None
    reasoning: str | None = None
    at: tuple[int, int] | None = None


def _extras(attribution: Attribution, include_explanation: bool) -> _Extras:
    reasoning = _bounded(attribution.explanation) if include_explanation and attribution.explanation else None
    return _Extras(evidence_event(attribution), reasoning)


@dataclass(frozen=True, slots=True)
class Annotation:
    """One write-back span as plain data: what :func:`write` gives a tracer, and what ``memtrace
    serve`` encodes as OTLP itself (``collector/otlp_encode.py``) without making an SDK span.

    ``events`` are ``(name, attributes)`` at the span's start; ``status`` is the ``ERROR`` status's
    description (``None``: unset); ``at`` is the span's start and end (ns; ``None``: now).
    """

    role: AnnotationSpan
    parent: SpanContext
    link: SpanContext | None
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    status: str | None = None
    at: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return self.role.value


def _annotation(role: AnnotationSpan, parent: SpanContext, link: SpanContext | None,
                attributes: dict[str, Any], extras: _Extras = _Extras()) -> Annotation:
    status = None
    if _A.ERROR_TYPE in attributes:
        status = _bounded(f"{attributes[_A.ERROR_TYPE]} in {attributes.get(_A.ROOT_CAUSE_OPERATION_NAME)}")
    events = [(GenAIEvent.EVALUATION_RESULT, _result_event(attributes, extras.reasoning))]
    if extras.evidence is not None:
        events.append((EVIDENCE_EVENT, extras.evidence))
    return Annotation(role, parent, link, attributes, tuple(events), status, extras.at)


def write(tracer: Tracer, annotation: Annotation) -> Span:
    """Write ``annotation`` through ``tracer`` (instrumentation suppressed); the ended span."""
    context = trace.set_span_in_context(trace.NonRecordingSpan(annotation.parent))
    links = [Link(annotation.link)] if annotation.link is not None else None
    at = annotation.at[0] if annotation.at else None
    with suppress_instrumentation():
        span = tracer.start_span(annotation.name, context=context, kind=SpanKind.INTERNAL,
                                 attributes=annotation.attributes, links=links, start_time=at)
        try:
            if annotation.status is not None:
                span.set_status(Status(StatusCode.ERROR, annotation.status))
            for name, attributes in annotation.events:
                span.add_event(name, attributes, timestamp=at)
        finally:
            span.end(end_time=annotation.at[1] if annotation.at else None)
    return span


def _attribution_annotation(
    attribution: Attribution, evaluation: SpanContext, root_cause: SpanContext | None,
    attributes: dict[str, Any], extras: _Extras, graph: nx.DiGraph | None,
) -> Annotation:
    link = (root_cause or _blamed_context(attribution, graph)) if attribution.operation else None
    at = _end_of(graph, attribution.case.evaluation)
    return _annotation(AnnotationSpan.ATTRIBUTION, evaluation, link, attributes, replace(extras, at=at))


def _root_cause_annotation(
    attribution: Attribution, evaluation: SpanContext, root_cause: SpanContext | None,
    attributes: dict[str, Any], extras: _Extras, graph: nx.DiGraph | None,
) -> Annotation | None:
    parent = root_cause or _blamed_context(attribution, graph)
    if parent is None or attribution.operation is None:
        return None
    at = _end_of(graph, attribution.operation)
    return _annotation(AnnotationSpan.ROOT_CAUSE, parent, evaluation, attributes, replace(extras, at=at))


def write_attribution_span(
    tracer: Tracer, attribution: Attribution, evaluation: SpanContext,
    root_cause: SpanContext | None = None, *, include_explanation: bool = True,
    marks: Mapping[str, Any] | None = None, graph: nx.DiGraph | None = None,
) -> Span:
    """Write ``memtrace.attribution`` as a child of ``evaluation``, linked to the root cause.

    Parameters
    ----------
    tracer:
        Where the span goes (a tracer of the application's provider).
    attribution:
        The verdict; an unattributed one gives a span with
        ``memtrace.attribution.failure_reason``, no link and status unset.
    evaluation:
        The failed evaluation span (remote contexts are fine).
    root_cause:
        The blamed span; by default made from the verdict's ids.
    graph:
        The graph the verdict was made on: the explanation in plain words, the blamed span's name,
        and the span placed at the evaluation's end (see the module's note on time).

    Returns
    -------
    Span
        The ended span.
    """
    attributes = annotation_attributes(attribution, evaluation, AnnotationSpan.ATTRIBUTION,
                                       include_explanation=include_explanation, marks=marks, graph=graph)
    return write(tracer, _attribution_annotation(attribution, evaluation, root_cause, attributes,
                                                 _extras(attribution, include_explanation), graph))


def write_root_cause_span(
    tracer: Tracer, attribution: Attribution, evaluation: SpanContext,
    root_cause: SpanContext | None = None, *, include_explanation: bool = True,
    marks: Mapping[str, Any] | None = None, graph: nx.DiGraph | None = None,
) -> Span | None:
    """Write ``memtrace.root_cause`` as a child of the blamed span, linked back to ``evaluation``.

    Returns the ended span, or ``None`` for an unattributed verdict (there is no root cause).
    ``graph`` as for :func:`write_attribution_span` (the span placed at the blamed span's end).
    """
    attributes = annotation_attributes(attribution, evaluation, AnnotationSpan.ROOT_CAUSE,
                                       include_explanation=include_explanation, marks=marks, graph=graph)
    annotation = _root_cause_annotation(attribution, evaluation, root_cause, attributes,
                                        _extras(attribution, include_explanation), graph)
    return write(tracer, annotation) if annotation is not None else None


def _end_of(graph: nx.DiGraph | None, node: str | None) -> tuple[int, int] | None:
    """Where an annotation under operation ``node``'s span is placed: the last nanosecond of that
    span (Jaeger stretches a zero-length span to one nanosecond, which would end past its parent)."""
    if graph is None or node is None or node not in graph:
        return None
    start, end = graph.nodes[node].get("start"), graph.nodes[node].get("end")
    if not isinstance(end, int) or end <= 0:
        return None
    return (max(start, end - 1) if isinstance(start, int) else end - 1), end


def verdict_annotations(
    attribution: Attribution, evaluation: SpanContext, root_cause: SpanContext | None = None, *,
    include_explanation: bool = True, marks: Mapping[str, Any] | None = None, graph: nx.DiGraph | None = None,
) -> list[Annotation]:
    """Both write-back spans of one verdict as data (one when it is unattributed): what
    :func:`write_annotations` writes."""
    attributes = annotation_attributes(attribution, evaluation, AnnotationSpan.ATTRIBUTION,
                                       include_explanation=include_explanation, marks=marks, graph=graph)
    extras = _extras(attribution, include_explanation)
    made = [_attribution_annotation(attribution, evaluation, root_cause, attributes, extras, graph)]
    # The same fields but the role: made once, the explanation being most of their cost.
    role = {**attributes, _A.ANNOTATION: AnnotationSpan.ROOT_CAUSE.value}
    other = _root_cause_annotation(attribution, evaluation, root_cause, role, extras, graph)
    if other is not None:
        made.append(other)
    return made


def write_annotations(
    tracer: Tracer, attribution: Attribution, evaluation: SpanContext,
    root_cause: SpanContext | None = None, *, include_explanation: bool = True,
    marks: Mapping[str, Any] | None = None, graph: nx.DiGraph | None = None,
) -> list[Span]:
    """Both write-back spans of one verdict (one when it is unattributed); ``graph`` as for
    :func:`write_attribution_span`.

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from memtrace_otel.attribution import Attribution, FailureCase
    >>> from memtrace_otel.semconv import ErrorType
    >>> verdict = Attribution("lineage", FailureCase("op:e"), operation="op:x", trace_id="ab" * 16,
    ...                       span_id="cd" * 8, operation_name="delete", category="deletion",
    ...                       error_type=ErrorType.DELETION, confidence=0.9)
    >>> tracer = TracerProvider().get_tracer("memtrace_otel.writeback")
    >>> evaluation = SpanContext(0xEF, 0x12, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    >>> [(s.name, f"{s.parent.span_id:x}", s.status.description)
    ...  for s in write_annotations(tracer, verdict, evaluation)]  # doctest: +NORMALIZE_WHITESPACE
    [('memtrace.attribution', '12', 'DeletionError in delete'),
     ('memtrace.root_cause', 'cdcdcdcdcdcdcdcd', 'DeletionError in delete')]
    """
    made = verdict_annotations(attribution, evaluation, root_cause, include_explanation=include_explanation,
                               marks=marks, graph=graph)
    return [write(tracer, annotation) for annotation in made]


def annotations_of(
    G: nx.DiGraph, attributions: Iterable[Attribution], *, include_explanation: bool = True,
    span_contexts: Mapping[tuple[str, str], SpanContext] | None = None,
    marks: Mapping[str, Any] | None = None,
) -> list[Annotation]:
    """What :func:`annotate` writes, as data (``memtrace serve`` encodes it itself); the same arguments."""
    contexts = span_contexts or {}
    made: list[Annotation] = []
    for attribution in attributions:
        data = G.nodes[attribution.case.evaluation]
        trace_id, span_id = data["trace_id"], data["span_id"]
        evaluation = contexts.get((trace_id, span_id)) or SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        blamed = _stage_host(G, attribution) or attribution.span_id or ""
        root = contexts.get((attribution.trace_id or "", blamed))
        made.extend(verdict_annotations(attribution, evaluation, root,
                                        include_explanation=include_explanation, marks=marks, graph=G))
    return made


def annotate(
    tracer: Tracer, G: nx.DiGraph, attributions: Iterable[Attribution], *, include_explanation: bool = True,
    span_contexts: Mapping[tuple[str, str], SpanContext] | None = None,
    marks: Mapping[str, Any] | None = None,
) -> list[Span]:
    """Write every verdict back (:func:`write_annotations`), finding the spans they hang under.

    The library's write-back call, shared by ``memtrace annotate`` and the in-process processor
    (``memtrace serve`` encodes the same :func:`annotations_of` itself).
    ``span_contexts`` maps ``(trace id, span id)`` to the live span contexts a process holds (the
    processor's own spans); an evaluation not in it is addressed by the graph's ids, as a remote
    span (``serve``), and a root cause not in it as :func:`root_cause_context` says.
    ``include_explanation=False`` leaves out the engine's words (they may quote contents);
    ``marks`` are extra attributes for every span (``memtrace serve``'s provisional / supersedes).
    """
    return [write(tracer, annotation) for annotation in annotations_of(
        G, attributions, include_explanation=include_explanation, span_contexts=span_contexts, marks=marks)]
