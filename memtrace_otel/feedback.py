"""A verdict that arrives later: thumbs-down, correction or judge verdict, against an answer's span.

The answer was given in one request; the user's thumbs-down, their correction, or an offline
judge's verdict comes in another request, another process, minutes or days later. All that
travels with the answer is its span context (as a W3C ``traceparent`` string, handed to the client
with the answer, or stored beside it). :func:`record_feedback` records the verdict as an
evaluation span in the *current* trace (the feedback request's) that links to the answer's span
and names it (``memtrace.evaluation.target.*``). The graph builder finds the answer that span
stands for (:mod:`memtrace_otel.graph.verdicts`), so ``memtrace analyze`` on both traces' files,
the in-process :class:`~memtrace_otel.writeback.AttributionSpanProcessor`, and ``memtrace serve``
(which fetches the linked answer trace from Jaeger or Tempo) all attribute it.

In the answering request::

    with tracer.operation("answer", Category.GENERATION) as op:
        ...
        reply["traceparent"] = traceparent(op.span_context)   # goes to the client with the answer

In the feedback request, any process::

    record_feedback(reply["traceparent"], correction="Lisbon")        # or signal="feedback"
"""

from __future__ import annotations

import re

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, TraceFlags

from memtrace_otel.instrument import MemoryTracer
from memtrace_otel.semconv import Category, EvaluationSignal, MemTraceTarget

__all__ = ["FEEDBACK_OPERATION", "parse_traceparent", "record_feedback", "traceparent"]

FEEDBACK_OPERATION = "memtrace.feedback"
"""``memtrace.operation.name`` (and default ``gen_ai.evaluation.name``) of a feedback span."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def traceparent(context: SpanContext | Span) -> str:
    """The W3C ``traceparent`` of a span (context): what to hand out with an answer.

    >>> traceparent(SpanContext(0xab, 0xcd, is_remote=False, trace_flags=TraceFlags(1)))
    '00-000000000000000000000000000000ab-00000000000000cd-01'
    """
    if isinstance(context, Span):
        context = context.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parse_traceparent(value: str) -> SpanContext:
    """The span context a W3C ``traceparent`` names; ``ValueError`` (one line) when it names none.

    >>> parse_traceparent("00-000000000000000000000000000000ab-00000000000000cd-01").span_id
    205
    >>> parse_traceparent("not a traceparent")
    Traceback (most recent call last):
    ...
    ValueError: 'not a traceparent' is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)
    """
    found = _TRACEPARENT.match(value.strip().lower()) if isinstance(value, str) else None
    if (found is None or found.group(1) == "ff" or set(found.group(2)) == {"0"}
            or set(found.group(3)) == {"0"}):
        raise ValueError(f"{str(value)[:80]!r} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
    return SpanContext(int(found.group(2), 16), int(found.group(3), 16), is_remote=True,
                       trace_flags=TraceFlags(int(found.group(4), 16)))


def _context(target: SpanContext | Span | str) -> SpanContext:
    if isinstance(target, str):
        return parse_traceparent(target)
    if isinstance(target, Span):
        target = target.get_span_context()
    if not isinstance(target, SpanContext) or not target.is_valid:
        raise ValueError(f"target must be a valid span context, a span or a traceparent, not {target!r}")
    return target


def record_feedback(
    target: SpanContext | Span | str,
    *,
    passed: bool = False,
    signal: EvaluationSignal | str | None = None,
    correction: str | None = None,
    explanation: str | None = None,
    question: str | None = None,
    score: float | None = None,
    name: str = FEEDBACK_OPERATION,
    tracer: MemoryTracer | None = None,
) -> SpanContext:
    """Record a verdict on the answer of span ``target``, from any request or process.

    Parameters
    ----------
    target:
        The answer's span: its :class:`~opentelemetry.trace.SpanContext`, the span, or its W3C
        ``traceparent`` (:func:`traceparent`). The span that made the answer (a generation
        operation), a model call inside it, or the request span around the turn all work.
    passed:
        ``False`` (the default) records a failure to attribute; ``True`` a thumbs-up.
    signal:
        ``correction`` when ``correction`` is given, else ``feedback`` (a thumbs-down: only the
        question, if any, is known); ``judge`` for an offline judge's verdict with an explanation.
    correction:
        What the answer should have been: plays the gold answer's part in attribution.
    explanation, question, score:
        What else the signal says (question, correction and explanation are content: on the
        span only with content capture on, as with ``record_evaluation``).
    name:
        ``memtrace.operation.name`` and ``gen_ai.evaluation.name`` of the verdict.
    tracer:
        The :class:`~memtrace_otel.MemoryTracer` to record with (its content settings and
        store); by default one on the global tracer provider.

    Returns
    -------
    SpanContext
        The feedback span's.

    Raises
    ------
    ValueError
        ``target`` names no span, or ``signal`` is not an :class:`EvaluationSignal`.
    """
    context = _context(target)
    chosen = EvaluationSignal(signal) if signal is not None else (
        EvaluationSignal.CORRECTION if correction is not None else EvaluationSignal.FEEDBACK)
    memory = tracer or MemoryTracer()
    attributes = {MemTraceTarget.TRACE_ID: f"{context.trace_id:032x}",
                  MemTraceTarget.SPAN_ID: f"{context.span_id:016x}"}
    with memory.operation(name, Category.EVALUATION, attributes=attributes) as op:
        # The link lets trace UIs jump to the answer and serve fetch its trace (gather follows links).
        op.span.add_link(context)
        op.record_evaluation(passed, score=score, signal=chosen, metric=name, question=question,
                             gold=correction, explanation=explanation)
        return op.span_context


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, or ``None`` outside one (convenience for handlers)."""
    context = trace.get_current_span().get_span_context()
    return traceparent(context) if context.is_valid else None


__all__ += ["current_traceparent"]
