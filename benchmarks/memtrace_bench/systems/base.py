"""What the four reference systems share: the store, tracing runs, the question path, faults.

A system keeps all of its state in one :class:`StoreState` (plain data, so a
snapshot is a deep copy), and emits spans only through
:class:`~memtrace_otel.instrument.MemoryTracer`. Records carry their
producer's traceparent in their metadata and are read back with
``op.read_record``, so a question's trace links to the ingestion traces that
wrote what it retrieved. A :class:`Fault` makes exactly one operation
misbehave; the system reports that operation's span in ``fault_span`` (with
several faults, the first that fired; ``fired`` has them all). A
:class:`~memtrace_bench.systems.oracle.Repair` does the reverse: the one
operation it targets keeps the critical information, and every operation that
lost some is recorded in ``losses``.
"""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from memtrace_bench.locomo import QA, Session, Turn
from memtrace_bench.systems.interfaces import AnswerResult, Components, ContextItem, ModelSpend, Sentence
from memtrace_bench.systems.oracle import Loss, Repair, missing_keys
from memtrace_otel.instrument import MemoryTracer, Operation, RetrievedRecord, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation, MemTraceBench, VariableKind
from memtrace_otel.spans.model import SpanRecord, record_from_readable
from memtrace_otel.text import bm25_idf, content_tokens

__all__ = [
    "LEXICAL_WEIGHT",
    "Fault",
    "MemorySystem",
    "QuestionOutcome",
    "SeededIdGenerator",
    "SpanSink",
    "StoreState",
    "TracedRun",
    "Unit",
    "idf_overlap",
    "record_changes",
    "record_model_call",
    "span_of",
]


# Retrieval: the weight of the lexical share against cosine similarity (0.8 to 2 gave nearly the same evidence
# recall on the development conversations; see docs/benchmark.md).
LEXICAL_WEIGHT = 1.0


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

    def __init__(self, seed: int, service: str, *, keep: bool = True) -> None:
        self.sink = SpanSink()
        self.provider = TracerProvider(id_generator=SeededIdGenerator(seed),
                                       resource=Resource.create({"service.name": service}))
        if keep:  # a replay whose spans are dropped skips their export (a third of a run's time)
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
    message_scope: bool = False
    """A chained fault (after another on the same information): a retrieval or generation fault
    then acts on whatever is left of the critical message, not only on its critical sentence."""

    def aims_at(self, sentences: Sequence[Sentence]) -> bool:
        """Whether ``sentences`` hold what this fault is aimed at."""
        if self.sentence in sentences:
            return True
        return self.message_scope and any(s.dia_id == self.sentence.dia_id for s in sentences)


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
                 state: StoreState | None = None, fault: Fault | None = None, faults: Sequence[Fault] = (),
                 repair: Repair | None = None) -> None:
        self.tracer = tracer
        self.components = components
        self.state = state if state is not None else StoreState()
        # At most one fault per error type: ``faulted`` finds a fault by its type.
        self.faults: tuple[Fault, ...] = ((fault,) if fault is not None else ()) + tuple(faults)
        self.fault_span: dict[str, str] | None = None
        self.fired: dict[int, dict[str, str]] = {}
        self.repair = repair
        self.losses: list[Loss] = []
        self.query_spans: dict[str, list[dict[str, str]]] = {}
        self._asked: list[dict[str, str]] = []
        self._session: int | None = None

    @property
    def fault(self) -> Fault | None:
        """The first injected fault (a single-fault case's only one)."""
        return self.faults[0] if self.faults else None

    # -- ingestion ----------------------------------------------------------
    def ingest_session(self, session: Session) -> None:
        """One trace per session: a root operation around the session's operations."""
        with self.tracer.operation(f"{self.name}.ingest_session", Category.INGEST,
                                   attributes={MemTraceBench.SESSION: session.index}):
            self._session = session.index
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

    def mark_fault(self, op: Operation, fault: Fault) -> None:
        """Remember the perturbed operation: the first to fire is the gold root cause of the case."""
        span = span_of(op)
        self.fired[self.faults.index(fault)] = span
        if self.fault_span is None:
            self.fault_span = span

    def faulted(self, error_type: ErrorType) -> Fault | None:
        """The fault of ``error_type`` when it has not fired yet."""
        for index, fault in enumerate(self.faults):
            if fault.error_type is error_type and index not in self.fired:
                return fault
        return None

    @staticmethod
    def drop_critical(sentences: list[Sentence], fault: Fault) -> list[Sentence]:
        return [s for s in sentences if s != fault.sentence]

    # -- counterfactual repair ----------------------------------------------
    def repairable(self, op: Operation | None, error_type: ErrorType,
                   lost: Sequence[Sentence]) -> Loss | None:
        """Count an ingestion-side operation that can lose critical information; its loss if it lost some.

        Every such operation gets the next ordinal (kept in the state, so a replay from a
        snapshot counts alike); ``op=None`` leaves the loss's span to be filled in later.
        """
        ordinal = self.state.extra["ordinal"] = self.state.extra.get("ordinal", 0) + 1
        if self.repair is None or not lost:
            return None
        loss = Loss(ordinal, error_type, tuple(lost), self._session, span_of(op) if op is not None else {})
        self.losses.append(loss)
        return loss

    def repairing(self, loss: Loss | None) -> bool:
        """Whether ``loss`` is the one operation this run repairs."""
        return loss is not None and self.repair is not None and self.repair.target == loss.ordinal

    def holds_key(self, unit: Unit) -> bool:
        assert self.repair is not None
        return any(self.repair.carries(s, k) for s in unit.sentences for k in self.repair.keys)

    def _oracle_retrieval(self, op: Operation, ranked: Sequence[tuple[Unit, float | None]],
                          k: int, chosen: list[tuple[Unit, float | None]]) -> list[tuple[Unit, float | None]]:
        """Question time: a retrieval that leaves out a unit holding a key is a loss; its oracle
        returns those units first and fills up with the best others (rank order kept)."""
        if self.repair is None:
            return chosen
        keyed = [(u, s) for u, s in ranked if self.holds_key(u)]
        picked = {u.name for u, _ in chosen}
        if all(u.name in picked for u, _ in keyed[:k]):
            return chosen
        self.losses.append(Loss(op.name, ErrorType.RETRIEVAL, self.repair.keys, None, span_of(op)))
        if self.repair.target != op.name:
            return chosen
        names = {u.name for u, _ in keyed[:k]}
        names.update(u.name for u, _ in [(u, s) for u, s in ranked if u.name not in names][:k - len(names)])
        return [(u, s) for u, s in ranked if u.name in names]

    # -- ranking helpers ----------------------------------------------------
    def rank_units(self, question: str, units: Sequence[Unit], *,
                   lexical_weight: float = LEXICAL_WEIGHT) -> list[tuple[Unit, float]]:
        """Units and their scores, best first: cosine similarity to the question plus ``lexical_weight``
        times :func:`idf_overlap`, the share of the question's words a unit says (ties keep the units'
        order)."""
        if not units:
            return []
        query = self.components.embedder.embed([question])[0]
        vectors: list[Any] = [u.vector for u in units]  # every indexed unit has its vector
        matrix = np.stack(vectors)
        cosine = matrix @ query
        lexical = idf_overlap(frozenset(content_tokens(question)), [u.tokens for u in units])
        scores = [float(c) + lexical_weight * share for c, share in zip(cosine, lexical, strict=True)]
        order = sorted(range(len(units)), key=lambda i: (-scores[i], i))
        return [(units[i], scores[i]) for i in order]

    def omit_critical(self, op: Operation, ranked: Sequence[tuple[Unit, float | None]],
                      k: int) -> list[tuple[Unit, float | None]]:
        """Top ``k`` of ``ranked`` (units and scores); under a RetrievalError fault the critical unit
        is left out."""
        self._asked.append(span_of(op))
        chosen = list(ranked[:k])
        fault = self.faulted(ErrorType.RETRIEVAL)
        hit = {u.name for u, _ in chosen if fault is not None
               and (u.name == fault.unit or (fault.message_scope and fault.aims_at(u.sentences)))}
        if fault is not None and hit:
            self.mark_fault(op, fault)
            return [(u, s) for u, s in ranked if u.name not in hit][:k]
        return self._oracle_retrieval(op, ranked, k, chosen)

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
        self._asked = self.query_spans[case_id] = []
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
            self._asked.append(span_of(op))
            result = self.components.answerer.answer(qa.question, items)
            record_model_call(op, result)
            fault = self.faulted(ErrorType.RESPONSE)
            if fault is not None and any(fault.aims_at(item.sentences) for item in items):
                self.mark_fault(op, fault)
                result = self._wrong_answer(qa, items, fault)
            elif self._oracle_answers(op, qa, result, items):
                # The oracle generation: the critical information is in its context, so it answers.
                result = AnswerResult(qa.answer, result.source, result.unit)
            answer = op.write(f"answer:{case_id}", result.text, kind=VariableKind.ANSWER)
        return result, answer

    def _oracle_answers(self, op: Operation, qa: QA, result: AnswerResult, items: list[ContextItem]) -> bool:
        if self.repair is None or missing_keys(self.repair, [s for i in items for s in i.sentences]):
            return False
        if self.components.judge.judge(qa.question, result.text, qa.answer).passed:
            return False
        self.losses.append(Loss(op.name, ErrorType.RESPONSE, self.repair.keys, None, span_of(op)))
        return self.repair.target == op.name

    def _wrong_answer(self, qa: QA, items: list[ContextItem], fault: Fault) -> AnswerResult:
        """A ResponseError: the reader settles on a sentence that does not answer."""
        candidates = getattr(self.components.answerer, "candidates", None)
        if candidates is not None:
            for candidate in candidates(qa.question, items):
                if candidate.source is not None and fault.aims_at([candidate.source]):
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


def span_of(op: Operation) -> dict[str, str]:
    """The trace id, span id and name of ``op``'s span, as labels name an operation."""
    context = op.span_context
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}", "name": op.name}


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


def idf_overlap(wanted: frozenset[str], said: Sequence[frozenset[str]]) -> list[float]:
    """For each token set in ``said``, the share of ``wanted``'s IDF mass it holds (0 to 1).

    IDF is BM25's, over ``said``: a word every unit says (the speaker's name, "really") counts
    for little, a rare one ("kundalini") for much. A plain count of shared words let chunks that
    repeat common words outrank the one that says the question's rare word.

    >>> shares = idf_overlap(frozenset({"ann", "yoga"}), [frozenset({"ann"}), frozenset({"ann", "yoga"})])
    >>> [round(x, 2) for x in shares]
    [0.21, 1.0]
    """
    idf = bm25_idf(wanted, said)
    # fsum: sums over sets, whose order follows the process's string hashing (see the reader).
    total = math.fsum(idf.values())
    if not total:
        return [0.0] * len(said)
    return [math.fsum(idf[t] for t in wanted & tokens) / total for tokens in said]
