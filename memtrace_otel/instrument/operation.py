"""Memory operations as OpenTelemetry spans.

:class:`MemoryTracer` is the entry point: it wraps the application's
TracerProvider (the global one by default), installs no exporter, and opens
one :class:`Operation` per memory operation. An operation is a span whose
``memtrace.*`` attributes say which variables it read and wrote, with a span
link to the producer of every input whose producer is known.

Thread and asyncio safety: the current operation lives in a ``ContextVar``
(the same mechanism as the OTel context), so threads and tasks each see
their own; one :class:`Operation` belongs to the task that opened it and is
not meant to be shared.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, TracerProvider

from memtrace_otel.config import ContentCapture, content_capture_from_env, content_max_chars_from_env
from memtrace_otel.instrument.record_lineage import lineage_from_metadata, write_lineage
from memtrace_otel.instrument.variables import ContentStore, Variable, VariableRegistry
from memtrace_otel.semconv import (
    Category,
    EvaluationSignal,
    GenAI,
    GenAIEvent,
    MemTrace,
    MemTraceEvent,
    MemTraceLink,
    MemTraceStep,
    VariableKind,
)
from memtrace_otel.version import __version__
from memtrace_otel.wire import EVALUATION_TEXT_FIELDS, evaluation_text_key, split_variable_id
from memtrace_otel.wire import describe as describe_variable

__all__ = ["MemoryTracer", "Operation", "current_operation", "describe"]

_logger = logging.getLogger(__name__)
_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "memtrace_current_operation", default=None
)
F = TypeVar("F", bound=Callable[..., Any])


def _kind(kind: VariableKind | str) -> VariableKind:
    return kind if isinstance(kind, VariableKind) else VariableKind(kind)


def current_operation() -> Operation | None:
    """The operation open in this thread or task, if any."""
    return _current.get()


class MemoryTracer:
    """Opens traced memory operations on the application's TracerProvider.

    Parameters
    ----------
    tracer_provider:
        Provider to create spans with; the global one when ``None``.
    capture_content:
        Record variable contents on spans. ``None`` decides from
        ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (off unless set).
    content_max_chars:
        Truncation limit of one captured content string.
    keep_content_in_process:
        How many variable contents to keep in this process's
        :class:`ContentStore` for in-process attribution, exported or not
        (0 disables).

    Thread-safe: the registry and content store carry their own locks.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        content_max_chars: int | None = None,
        keep_content_in_process: int = 50_000,
        registry: VariableRegistry | None = None,
    ) -> None:
        if content_max_chars is not None and content_max_chars < 1:
            raise ValueError("content_max_chars must be >= 1")
        if capture_content is None:
            capture_content = content_capture_from_env() is ContentCapture.SPAN
        self.capture_content = capture_content
        self.content_max_chars = content_max_chars or content_max_chars_from_env()
        self.registry = registry if registry is not None else VariableRegistry()
        self.contents = ContentStore(keep_content_in_process)
        self._tracer = trace.get_tracer("memtrace_otel", __version__, tracer_provider=tracer_provider)

    def operation(
        self,
        name: str,
        category: Category | str = Category.OTHER,
        *,
        gen_ai_operation: str | None = None,
        store_id: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        span_name: str | None = None,
    ) -> Operation:
        """A traced operation, used as ``with tracer.operation(...) as op:``.

        ``gen_ai_operation`` (``create_memory``, ``search_memory`` ...) makes it
        a GenAI memory-client span named ``{operation} {store_id}``.
        """
        return Operation(
            self,
            name,
            Category(category),
            gen_ai_operation=gen_ai_operation,
            store_id=store_id,
            attributes=attributes,
            span_name=span_name,
        )

    def traced(
        self, name: str | None = None, category: Category | str = Category.OTHER, **options: Any
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`operation`, for sync and async functions.

        The function finds its operation with :func:`current_operation`.
        """

        def decorate(function: F) -> F:
            op_name = name or function.__qualname__
            if inspect.iscoroutinefunction(function):

                @functools.wraps(function)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.operation(op_name, category, **options):
                        return await function(*args, **kwargs)

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.operation(op_name, category, **options):
                    return function(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate


class Operation:
    """One traced memory operation: a span plus the variables it read and wrote.

    Lifecycle: ``__enter__`` starts the span and makes it current;
    ``__exit__`` writes the lineage attributes, marks an exception as
    ``ERROR`` with ``error.type``, ends the span and restores the context.
    Finishing twice is a no-op.
    """

    def __init__(
        self,
        owner: MemoryTracer,
        name: str,
        category: Category,
        *,
        gen_ai_operation: str | None,
        store_id: str | None,
        attributes: Mapping[str, Any] | None,
        span_name: str | None,
    ) -> None:
        self._owner = owner
        self.name = name
        self.category = category
        self._gen_ai_operation = gen_ai_operation
        self._store_id = store_id
        self._attributes = attributes
        self._span_name = span_name
        self.span: Span = trace.INVALID_SPAN
        self.inputs: list[Variable] = []
        self.outputs: list[Variable] = []
        self._steps: list[str] = []
        self._recording = False
        self._finished = False
        self._token: object | None = None
        self._op_token: contextvars.Token[Operation | None] | None = None

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> Operation:
        attributes: dict[str, Any] = {MemTrace.OPERATION_CATEGORY: self.category.value}
        span_name = self._span_name or self.name
        if span_name != self.name or self._gen_ai_operation:
            # Only when the span name does not already say it: every attribute costs.
            attributes[MemTrace.OPERATION_NAME] = self.name
        if self._gen_ai_operation:
            attributes[GenAI.OPERATION_NAME] = self._gen_ai_operation
            if self._store_id:
                attributes[GenAI.MEMORY_STORE_ID] = self._store_id
            span_name = self._span_name or f"{self._gen_ai_operation} {self._store_id or self.name}"
        if self._attributes:
            attributes.update(self._attributes)
        kind = SpanKind.CLIENT if self._gen_ai_operation else SpanKind.INTERNAL
        self.span = self._owner._tracer.start_span(span_name, kind=kind, attributes=attributes)
        self._recording = self.span.is_recording()
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self._op_token = _current.set(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            if exc is not None and self._recording:
                self.span.record_exception(exc)
                self.span.set_status(Status(StatusCode.ERROR, str(exc)))
                self.span.set_attribute(GenAI.ERROR_TYPE, type(exc).__qualname__)
            if self._recording:
                self._flush_lineage()
        finally:
            if self._op_token is not None:
                _current.reset(self._op_token)
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            self.span.end()

    async def __aenter__(self) -> Operation:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    @property
    def span_context(self) -> SpanContext:
        return self.span.get_span_context()

    # -- variables ---------------------------------------------------------
    def read(
        self,
        variable: Variable | str,
        *,
        content: str | None = None,
        kind: VariableKind | str = VariableKind.OTHER,
    ) -> Variable:
        """Declare that this operation reads ``variable``.

        A name (not a :class:`Variable`) resolves to the newest version this
        process knows; an unknown name becomes version 1 with no producer (an
        external input such as a user message).
        """
        if isinstance(variable, str):
            name, version = split_variable_id(variable) if "@" in variable else (variable, 0)
            known = self._owner.registry.latest(name)
            if known is not None and version in (0, known.version):
                variable = known
            else:
                variable = Variable(name, version or 1, _kind(kind), content)
                self._owner.registry.register(variable)
                self._remember_content(variable)
        self.inputs.append(variable)
        if self._recording and variable.producer is not None and variable.producer.is_valid:
            self.span.add_link(variable.producer, {MemTraceLink.VARIABLE: variable.id})
        return variable

    def read_record(
        self,
        metadata: Mapping[str, object] | None,
        *,
        content: str | None = None,
        name: str | None = None,
        kind: VariableKind | str = VariableKind.MEMORY_UNIT,
    ) -> Variable:
        """Read a stored memory record, taking its lineage from the record's metadata.

        This is what links a query trace to the ingestion trace (and process)
        that wrote the record. Records stored without lineage fall back to
        ``name`` (or the newest version this process knows).
        """
        variable_id, producer = lineage_from_metadata(metadata)
        if variable_id is None:
            if name is None:
                raise ValueError("record has no memtrace lineage and no name was given")
            return self.read(name, content=content, kind=kind)
        var_name, version = split_variable_id(variable_id)
        variable = Variable(var_name, version, _kind(kind), content, producer)
        self._owner.registry.register(variable)
        self._remember_content(variable)
        return self.read(variable)

    def write(
        self, name: str, content: str | None = None, *, kind: VariableKind | str = VariableKind.OTHER
    ) -> Variable:
        """Declare a new variable (or a new version of ``name``) written by this operation."""
        producer = self.span_context if self._recording else None
        variable = self._owner.registry.new_version(name, _kind(kind), content, producer)
        self._remember_content(variable)
        self.outputs.append(variable)
        return variable

    def update(
        self, variable: Variable | str, content: str | None, *, kind: VariableKind | str | None = None
    ) -> Variable:
        """In-place change: read version v of ``variable`` and write version v+1."""
        before = self.read(variable, kind=kind or VariableKind.MEMORY_UNIT)
        after = Variable(
            before.name,
            before.version + 1,
            _kind(kind) if kind else before.kind,
            content,
            self.span_context if self._recording else None,
        )
        return self._output(after)

    def delete(self, variable: Variable | str) -> Variable:
        """Delete a unit: read version v and write a tombstone version v+1."""
        tombstone = self.update(variable, None)
        tombstone.deleted = True
        return tombstone

    def lineage_metadata(
        self, variable: Variable, metadata: MutableMapping[str, object] | None = None
    ) -> MutableMapping[str, object]:
        """Write ``variable``'s id and producer traceparent into a record's ``metadata``."""
        target: MutableMapping[str, object] = {} if metadata is None else metadata
        write_lineage(target, variable.id, variable.producer)
        return target

    def step(
        self,
        name: str,
        inputs: Sequence[Variable] = (),
        outputs: Sequence[Variable] = (),
    ) -> None:
        """Record an internal step (prompt -> raw LLM response -> parsed facts)."""
        self._steps.append(name)
        if self._recording:
            self.span.add_event(
                MemTraceEvent.STEP,
                {
                    MemTraceStep.NAME: name,
                    MemTraceStep.INPUTS: [v.id for v in inputs],
                    MemTraceStep.OUTPUTS: [v.id for v in outputs],
                },
            )

    def intermediate(
        self, name: str, content: str | None, *, kind: VariableKind | str = VariableKind.OTHER
    ) -> Variable:
        """An intermediate variable of an internal step (a prompt, a raw LLM response).

        It is an output of this operation like any other; the steps say which later
        step read it.
        """
        return self.write(name, content, kind=kind)

    # -- outcome -----------------------------------------------------------
    def set_outcome(self, outcome: str) -> None:
        """Mark how the operation ended (``noop``, ``skipped``, ``added`` ...)."""
        if self._recording:
            self.span.set_attribute(MemTrace.OPERATION_OUTCOME, outcome)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._recording:
            self.span.set_attributes(attributes)

    def record_evaluation(
        self,
        passed: bool,
        *,
        score: float | None = None,
        signal: EvaluationSignal | str = EvaluationSignal.GOLD,
        metric: str = "memtrace.answer_correctness",
        question: str | None = None,
        prediction: str | None = None,
        gold: str | None = None,
        explanation: str | None = None,
        evidence: Iterable[str] = (),
        answer: Variable | None = None,
        case_id: str | None = None,
    ) -> None:
        """Record a verdict on an answer, plus the GenAI ``gen_ai.evaluation.result`` event.

        Question, prediction, gold and explanation are content: they go on the
        span only with content capture on.
        """
        if not self._recording:
            return
        signal = EvaluationSignal(signal)
        attributes: dict[str, Any] = {
            MemTrace.EVALUATION_PASSED: passed,
            MemTrace.EVALUATION_SIGNAL: signal.value,
            MemTrace.EVALUATION_EVIDENCE: list(evidence),
        }
        if score is not None:
            attributes[MemTrace.EVALUATION_SCORE] = float(score)
        if answer is not None:
            attributes[MemTrace.EVALUATION_ANSWER] = answer.id
        if case_id is not None:
            attributes[MemTrace.EVALUATION_CASE] = case_id
        if self._owner.capture_content:
            for key, value in (
                (MemTrace.EVALUATION_QUESTION, question),
                (MemTrace.EVALUATION_PREDICTION, prediction),
                (MemTrace.EVALUATION_GOLD, gold),
                (MemTrace.EVALUATION_EXPLANATION, explanation),
            ):
                if value is not None:
                    attributes[key] = self._truncate(value)
        self.span.set_attributes(attributes)
        event: dict[str, Any] = {
            GenAI.EVALUATION_NAME: metric,
            GenAI.EVALUATION_SCORE_LABEL: "pass" if passed else "fail",
        }
        if score is not None:
            event[GenAI.EVALUATION_SCORE_VALUE] = float(score)
        if explanation is not None and self._owner.capture_content:
            event[GenAI.EVALUATION_EXPLANATION] = self._truncate(explanation)
        self.span.add_event(GenAIEvent.EVALUATION_RESULT, event)
        # The in-process content store keeps the verdict's text even when spans do not, so
        # in-process attribution (GraphSpanExporter(content=...)) still knows the gold.
        span_id = f"{self.span_context.span_id:016x}"
        for field_name, value in zip(EVALUATION_TEXT_FIELDS, (question, prediction, gold, explanation),
                                     strict=True):
            if value is not None:
                self._owner.contents.put(evaluation_text_key(span_id, field_name), value)

    # -- internals ---------------------------------------------------------
    def _output(self, variable: Variable) -> Variable:
        self._owner.registry.register(variable)
        self._remember_content(variable)
        self.outputs.append(variable)
        return variable

    def _remember_content(self, variable: Variable) -> None:
        if variable.content is not None and self._recording:
            self._owner.contents.put(variable.id, variable.content)

    def _truncate(self, text: str) -> str:
        limit = self._owner.content_max_chars
        return text if len(text) <= limit else text[:limit]

    def _flush_lineage(self) -> None:
        attributes: dict[str, Any] = {}
        if self.inputs:
            attributes[MemTrace.INPUTS] = [v.id for v in self.inputs]
        if self.outputs:
            attributes[MemTrace.OUTPUTS] = [v.id for v in self.outputs]
            deleted = [v.id for v in self.outputs if v.deleted]
            if deleted:
                attributes[MemTrace.DELETED] = deleted
        # Describe each variable once: outputs here, external inputs (no producer) at first read.
        described = [v for v in self.inputs if v.producer is None] + self.outputs
        if described:
            attributes[MemTrace.VARIABLES] = [describe(v) for v in described]
            if self._owner.capture_content:
                attributes[MemTrace.VARIABLE_CONTENTS] = [self._truncate(v.content or "") for v in described]
        if self._steps:
            attributes[MemTrace.STEP_NAMES] = self._steps
        if attributes:
            self.span.set_attributes(attributes)


def describe(variable: Variable) -> str:
    """The ``memtrace.variables`` descriptor of ``variable`` (see :mod:`memtrace_otel.wire`).

    >>> from memtrace_otel.semconv import VariableKind
    >>> describe(Variable("msg:D1:1", 1, VariableKind.MESSAGE, "hello"))
    'message 5 a7b6eda801e5347d msg:D1:1@1'
    """
    return describe_variable(variable.kind.value, variable.size, variable.hash, variable.id)
