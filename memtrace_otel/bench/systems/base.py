"""What the four reference systems share: the store, tracing runs, the question path, faults.

A system keeps all of its state in one :class:`StoreState` (plain data, so a
snapshot is a deep copy), and emits spans only through
:class:`~memtrace_otel.instrument.MemoryTracer`. Records carry their
producer's traceparent in their metadata and are read back with
``op.read_record``, so a question's trace links to the ingestion traces that
wrote what it retrieved. A :class:`Fault` makes exactly one operation
misbehave; the system reports that operation's span in ``fault_span``.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from memtrace_otel.bench.locomo import QA, Session, Turn
from memtrace_otel.bench.systems.interfaces import AnswerResult, Components, ContextItem, ModelSpend, Sentence
from memtrace_otel.instrument import MemoryTracer, Operation, RetrievedRecord, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation, MemTraceBench, VariableKind
from memtrace_otel.spans.model import SpanRecord, record_from_readable
from memtrace_otel.text import content_tokens

__all__ = [
    "Fault",
    "MemorySystem",
    "QuestionOutcome",
    "SeededIdGenerator",
    "SpanSink",
    "StoreState",
    "TracedRun",
    "Unit",
    "record_changes",
    "record_model_call",
]


class SeededIdGenerator(IdGenerator):
    """Trace and span ids from a seeded RNG, so a rebuilt benchmark names the same spans."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


class SpanSink(SpanExporter):
    """Keeps finished spans as records until drained (single-threaded runs)."""

    def __init__(self) -> None:
        self._records: list[SpanRecord] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._records.extend(record_from_readable(s) for s in spans)
        return SpanExportResult.SUCCESS

    def drain(self) -> list[SpanRecord]:
        records, self._records = self._records, []
        return records


class TracedRun:
    """A TracerProvider with seeded ids, a sink, and a content-capturing MemoryTracer."""

    def __init__(self, seed: int, service: str) -> None:
        self.sink = SpanSink()
        self.provider = TracerProvider(id_generator=SeededIdGenerator(seed),
                                       resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.sink))
        # Whole contents, not the production default of 4096 chars: a long-context window or
        # an episodic context runs to tens of thousands, and attribution must see all of it.
        self.tracer = MemoryTracer(self.provider, capture_content=True, content_max_chars=1 << 20)

    def close(self) -> None:
        self.provider.shutdown()


@dataclass(slots=True)
class Unit:
    """One stored memory record: its sentences, lineage metadata and embedding."""

    name: str
    sentences: list[Sentence]
    metadata: dict[str, object] = field(default_factory=dict)
    vector: np.ndarray | None = None
    note: str = ""
    tokens: frozenset[str] = frozenset()

    @property
    def content(self) -> str:
        body = "\n".join(s.render() for s in self.sentences)
        return f"{body}\n{self.note}" if self.note else body


@dataclass(slots=True)
class StoreState:
    """Everything a system remembers; deep-copied to snapshot it between sessions."""

    units: dict[str, Unit] = field(default_factory=dict)
    counter: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault aimed at the sentence a correct answer was read from.

    ``unit`` is the memory unit holding ``sentence`` in the clean run;
    ``variant`` picks among equivalent places (e.g. which retrieval stage).
    """

    error_type: ErrorType
    unit: str
    sentence: Sentence
    case_id: str
    variant: int = 0


@dataclass(slots=True)
class QuestionOutcome:
    case_id: str
    question: str
    gold: str
    prediction: str
    passed: bool
    score: float
    category: int
    evidence: list[str]
    source: Sentence | None
    unit: str | None
    context_units: list[str]
    trace_id: str


class MemorySystem(abc.ABC):
    """A traced memory system over one conversation.

    Subclasses implement :meth:`_ingest_session` and :meth:`_retrieve`; the
    question path (retrieve, generate, evaluate) and the store effects live here.
    """

    name: ClassVar[str]
    applicable: ClassVar[tuple[ErrorType, ...]]
    not_applicable: ClassVar[dict[str, str]] = {}

    def __init__(self, tracer: MemoryTracer, components: Components, *,
                 state: StoreState | None = None, fault: Fault | None = None) -> None:
        self.tracer = tracer
        self.components = components
        self.state = state if state is not None else StoreState()
        self.fault = fault
        self.fault_span: dict[str, str] | None = None

    # -- ingestion ----------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        """One trace per session: a root operation around the session's operations."""
        with self.tracer.operation(f"{self.name}.ingest_session", Category.INGEST,
                                   attributes={MemTraceBench.SESSION: session.index}):
            self._ingest_session(session)

    @abc.abstractmethod
    def _ingest_session(self, session: Session) -> None: ...

    def read_message(self, op: Operation, turn: Turn) -> Variable:
        return op.read(f"msg:{turn.dia_id}", content=f"[{turn.date}] {turn.speaker}: {turn.text}",
                       kind=VariableKind.MESSAGE)

    # -- store effects --------------------------------------------------------
    def new_unit_name(self, prefix: str) -> str:
        self.state.counter += 1
        return f"{prefix}:{self.state.counter}"

    def store_unit(self, op: Operation, name: str, sentences: list[Sentence], note: str = "") -> Unit:
        unit = Unit(name, list(sentences), note=note)
        variable = op.write(name, unit.content, kind=VariableKind.MEMORY_UNIT)
        unit.metadata = dict(op.lineage_metadata(variable, {}))
        self._index_unit(unit)
        self.state.units[name] = unit
        return unit

    def read_unit(self, op: Operation, unit: Unit) -> Variable:
        return op.read_record(unit.metadata, content=unit.content, name=unit.name)

    def update_unit(self, op: Operation, unit: Unit, sentences: list[Sentence],
                    note: str | None = None) -> Unit:
        before = self.read_unit(op, unit)
        unit.sentences = list(sentences)
        if note is not None:
            unit.note = note
        after = op.update(before, unit.content, kind=VariableKind.MEMORY_UNIT)
        unit.metadata = dict(op.lineage_metadata(after, {}))
        self._index_unit(unit)
        return unit

    def _index_unit(self, unit: Unit) -> None:
        unit.vector = self.components.embedder.embed([unit.content])[0]
        unit.tokens = frozenset(content_tokens(" ".join(f"{s.speaker} {s.text}" for s in unit.sentences)))

    def delete_unit(self, op: Operation, unit: Unit) -> Unit:
        op.delete(self.read_unit(op, unit))
        del self.state.units[unit.name]
        return unit

    def mark_fault(self, op: Operation) -> None:
        """Remember the perturbed operation: it is the gold root cause of the case."""
        context = op.span_context
        self.fault_span = {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
                           "name": op.name}

    def faulted(self, error_type: ErrorType) -> bool:
        return self.fault is not None and self.fault.error_type is error_type and self.fault_span is None

    def drop_critical(self, sentences: list[Sentence]) -> list[Sentence]:
        assert self.fault is not None
        return [s for s in sentences if s != self.fault.sentence]

    # -- ranking helpers ----------------------------------------------------
    def rank_units(self, question: str, units: Sequence[Unit], *,
                   lexical_weight: float = 0.15) -> list[tuple[Unit, float]]:
        """Units and their scores, best first: cosine similarity to the question plus a lexical-overlap
        bonus (ties keep the units' order)."""
        if not units:
            return []
        query = self.components.embedder.embed([question])[0]
        matrix = np.stack([u.vector for u in units])
        cosine = matrix @ query
        wanted = set(content_tokens(question))
        scores = [float(c) + lexical_weight * len(wanted & u.tokens)
                  for c, u in zip(cosine, units, strict=True)]
        order = sorted(range(len(units)), key=lambda i: (-scores[i], i))
        return [(units[i], scores[i]) for i in order]

    def omit_critical(self, op: Operation, ranked: Sequence[tuple[Unit, float | None]],
                      k: int) -> list[tuple[Unit, float | None]]:
        """Top ``k`` of ``ranked`` (units and scores); under a RetrievalError fault the critical unit
        is left out."""
        chosen = list(ranked[:k])
        if self.faulted(ErrorType.RETRIEVAL) and any(u.name == self.fault.unit for u, _ in chosen):
            self.mark_fault(op)
            chosen = [(u, s) for u, s in ranked if u.name != self.fault.unit][:k]
        return chosen

    def read_retrieved(self, op: Operation, chosen: Sequence[tuple[Unit, float | None]], query: Variable, *,
                       top_k: int | None = None,
                       data_source_id: str | None = None) -> list[tuple[Unit, Variable]]:
        """Read the ``chosen`` units (best first) and say on ``op``'s span what the retrieval returned.

        Returns the units with the variables (versions) read.
        """
        read = [(unit, self.read_unit(op, unit)) for unit, _ in chosen]
        op.record_retrieval([RetrievedRecord(variable, score=score)
                             for (_, variable), (_, score) in zip(read, chosen, strict=True)],
                            query=query, top_k=top_k, data_source_id=data_source_id)
        return read

    # -- questions -----------------------------------------------------------
    @abc.abstractmethod
    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        """Retrieval operation(s): the units given to the answerer and the context variable."""

    def ask(self, qa: QA, case_id: str) -> QuestionOutcome:
        """Answer one question in its own trace: retrieve, generate, evaluate."""
        with self.tracer.operation(f"{self.name}.answer_question", Category.OTHER) as root:
            with self.tracer.operation(f"{self.name}.query", Category.INGEST) as op:
                query = op.write(f"query:{case_id}", qa.question, kind=VariableKind.QUERY)
            units, context = self._retrieve(query, qa.question, case_id)
            items = [ContextItem(u.name, list(u.sentences)) for u in units]
            result, answer = self._generate(query, context, qa, items, case_id)
            verdict = self._evaluate(answer, qa, result, case_id)
            trace_id = f"{root.span_context.trace_id:032x}"
        return QuestionOutcome(case_id, qa.question, qa.answer, result.text, verdict.passed, verdict.score,
                               qa.category, list(qa.evidence), result.source, result.unit,
                               [u.name for u in units], trace_id)

    def retrieve_top_k(self, op: Operation, query: Variable, question: str, case_id: str,
                       k: int, *, data_source_id: str | None = None) -> tuple[list[Unit], Variable]:
        """One-stage retrieval inside ``op``: rank every unit, keep ``k``, write the context."""
        op.read(query)
        ranked = self.rank_units(question, list(self.state.units.values()))
        read = self.read_retrieved(op, self.omit_critical(op, ranked, k), query, top_k=k,
                                   data_source_id=data_source_id)
        chosen = [unit for unit, _ in read]
        return chosen, self.write_context(op, case_id, chosen)

    def write_context(self, op: Operation, case_id: str, units: Sequence[Unit]) -> Variable:
        content = "\n\n".join(u.content for u in units)
        return op.write(f"context:{case_id}", content, kind=VariableKind.CONTEXT)

    def _generate(self, query: Variable, context: Variable, qa: QA, items: list[ContextItem],
                  case_id: str) -> tuple[AnswerResult, Variable]:
        with self.tracer.operation(f"{self.name}.generate", Category.GENERATION,
                                   gen_ai_operation=GenAIOperation.CHAT.value,
                                   store_id=self.name) as op:
            op.read(query)
            op.read(context)
            result = self.components.answerer.answer(qa.question, items)
            record_model_call(op, result)
            if self.faulted(ErrorType.RESPONSE) and self._context_has_critical(items):
                self.mark_fault(op)
                result = self._wrong_answer(qa, items)
            answer = op.write(f"answer:{case_id}", result.text, kind=VariableKind.ANSWER)
        return result, answer

    def _context_has_critical(self, items: list[ContextItem]) -> bool:
        assert self.fault is not None
        return any(self.fault.sentence in item.sentences for item in items)

    def _wrong_answer(self, qa: QA, items: list[ContextItem]) -> AnswerResult:
        """A ResponseError: the reader settles on a sentence that does not answer."""
        candidates = getattr(self.components.answerer, "candidates", None)
        if candidates is not None:
            for candidate in candidates(qa.question, items):
                if candidate.source == self.fault.sentence:  # type: ignore[union-attr]
                    continue
                if not self.components.judge.judge(qa.question, candidate.text, qa.answer).passed:
                    return candidate
        return AnswerResult("I don't know.")

    def _evaluate(self, answer: Variable, qa: QA, result: AnswerResult, case_id: str) -> Any:
        with self.tracer.operation(f"{self.name}.evaluate", Category.EVALUATION) as op:
            op.read(answer)
            op.read(f"gold:{case_id}", content=qa.answer, kind=VariableKind.GOLD)
            verdict = self.components.judge.judge(qa.question, result.text, qa.answer)
            record_model_call(op, verdict)
            op.record_evaluation(verdict.passed, score=verdict.score, question=qa.question,
                                 prediction=result.text, gold=qa.answer, explanation=verdict.explanation,
                                 evidence=list(qa.evidence), answer=answer, case_id=case_id)
        return verdict


def record_model_call(op: Operation, spend: ModelSpend) -> None:
    """Put the model and token usage of an LLM-backed step on its operation's span.

    An offline step names no model and records nothing: it called no model.
    """
    if spend.model is not None:
        op.record_llm_call(model=spend.model, provider=spend.provider, input_tokens=spend.input_tokens,
                           output_tokens=spend.output_tokens)


def record_changes(op: Operation, units: Sequence[str]) -> None:
    """Say on a create/update/delete operation's span how many memory units it wrote or deleted,
    and which one when it was one (``gen_ai.memory.record.count`` / ``.record.id``)."""
    op.record_memory(record_id=units[0] if len(units) == 1 else None, count=len(units))
