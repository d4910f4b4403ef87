"""Mem0-style: per message, fact extraction; per fact, a search of similar memories, an
ADD/UPDATE/DELETE/NONE decision, and its store effect.

``mem0.extract`` (extraction) reads a message and writes its facts. For each
fact, as mem0's ``add`` does:

* ``mem0.find_similar`` (retrieval, at ingest time) reads the speaker's most
  similar memory units and writes their names and similarities as ``similar:<dia id>/<n>``;
* ``mem0.decide`` (update) reads the fact and the search's result, asks the
  decider (rules offline, or an OpenAI-compatible model), records its event
  as the span's outcome (``add``, ``update``, ``delete``, ``none``) and
  writes it as ``decision:<dia id>/<n>``; a NONE decision ends here, with its span;
* the store effect reads the facts: ``mem0.add`` stores a new unit,
  ``mem0.update`` merges the fact into the target, ``mem0.delete`` deletes the
  contradicted target (and the new fact is then added).

Every store effect is its own operation, so a memory unit has versions.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable

from memtrace_bench.locomo import Session, Turn
from memtrace_bench.systems.base import (
    Fault,
    MemorySystem,
    Unit,
    record_changes,
    record_model_call,
    span_of,
)
from memtrace_bench.systems.interfaces import Decision, MemoryEvent, Sentence, SimilarMemory
from memtrace_bench.systems.oracle import Loss
from memtrace_otel.instrument import Operation, RetrievedRecord, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation, VariableKind
from memtrace_otel.text import content_tokens

__all__ = ["Mem0StyleSystem"]


class _SimilarityIndex:
    """Memory units by (speaker, content token), for the search of a fact's most similar units.

    Similarity is Jaccard over content tokens, among units whose first sentence has the fact's
    speaker; a unit sharing no token is not a result; among equal scores the older unit (lower
    ``mem:<n>``) comes first. Not thread-safe (one per system run).
    """

    def __init__(self) -> None:
        self._names: dict[tuple[str, str], set[str]] = {}
        self._units: dict[str, tuple[str, frozenset[str], int]] = {}

    def add(self, unit: Unit) -> None:
        speaker = unit.sentences[0].speaker if unit.sentences else ""
        self._units[unit.name] = (speaker, unit.tokens, int(unit.name.rsplit(":", 1)[1]))
        for token in unit.tokens:
            self._names.setdefault((speaker, token), set()).add(unit.name)

    def discard(self, name: str) -> None:
        entry = self._units.pop(name, None)
        if entry is not None:
            for token in entry[1]:
                self._names[(entry[0], token)].discard(name)

    def most_similar(self, fact: Sentence, k: int) -> list[tuple[str, float]]:
        """The ``k`` best unit names and their similarity to ``fact``, best first."""
        tokens = frozenset(content_tokens(f"{fact.speaker} {fact.text}"))
        shared: Counter[str] = Counter()
        for token in tokens:
            names = self._names.get((fact.speaker, token))
            if names:
                shared.update(names)
        size, units = len(tokens), self._units
        best = heapq.nsmallest(k, ((-(count / (size + len(units[name][1]) - count)), units[name][2], name)
                                   for name, count in shared.items()))
        return [(name, -negated) for negated, _, name in best]


class Mem0StyleSystem(MemorySystem):
    name = "mem0-style"
    applicable = tuple(ErrorType)
    search_k = 5
    top_k = 5
    _similarity: _SimilarityIndex | None = None

    def _ingest_session(self, session: Session) -> None:
        for turn in session.turns:
            facts, facts_var = self._extract(turn)
            for index, fact in enumerate(facts):
                self._ingest_fact(fact, facts_var, index)

    def _extract(self, turn: Turn) -> tuple[list[Sentence], Variable]:
        with self.tracer.operation("mem0.extract", Category.EXTRACTION, store_id=self.name) as op:
            message = self.read_message(op, turn)
            extraction = self.components.extractor.extract(turn)
            record_model_call(op, extraction)
            facts = extraction.facts
            fault = self.faulted(ErrorType.EXTRACTION)
            if fault is not None and fault.sentence in facts:
                # The fault: extraction drops the fact that carries the answer.
                self.mark_fault(op, fault)
                facts = self.drop_critical(facts, fault)
            else:
                lost = self.repair.lost([turn.dia_id], facts) if self.repair else []
                loss = self.repairable(op, ErrorType.EXTRACTION, lost)
                if self.repairing(loss):
                    facts = [*facts, *lost]  # the oracle extraction keeps the critical sentence
            op.step("llm_extract", [message])
            facts_var = op.write(f"facts:{turn.dia_id}", "\n".join(f.render() for f in facts),
                                 kind=VariableKind.FACTS)
            self.state.extra["last_turn"] = turn.dia_id
        return facts, facts_var

    def _ingest_fact(self, fact: Sentence, facts_var: Variable, index: int) -> None:
        similar, similar_var = self._find_similar(fact, facts_var, index)
        forced = self._fault_target(first=index == 0)
        decision, span = self._decide(fact, (facts_var, similar_var), similar, index, forced)
        loss = None
        if forced is None:
            decision, loss = self._oracle_decision(decision, fact, span)
        self._apply(decision, fact, facts_var, fault=forced[0] if forced else None, loss=loss)

    def _oracle_decision(self, decision: Decision, fact: Sentence,
                         span: dict[str, str]) -> tuple[Decision, Loss | None]:
        """A DELETE of a unit holding critical information, or a NONE that drops a fact carrying it
        (the unit it duplicates does not), loses it; the oracle decision is an ADD."""
        lost: list[Sentence] = []
        target = self.state.units.get(decision.target or "")
        if self.repair is not None and target is not None:
            if decision.event is MemoryEvent.DELETE:
                lost = self.repair.held(target.sentences)
            elif decision.event is MemoryEvent.NONE:
                lost = [k for k in self.repair.lost([fact.dia_id], target.sentences)
                        if self.repair.carries(fact, k)]
        error_type = ErrorType.DELETION if decision.event is MemoryEvent.DELETE else ErrorType.UPDATE
        loss = self.repairable(None, error_type, lost)
        if loss is not None:
            loss.span = span  # a DELETE's loss is its effect's span, set when that runs
        if self.repairing(loss):
            return Decision(MemoryEvent.ADD, reason="oracle: keeps the critical information"), loss
        return decision, loss

    def _find_similar(self, fact: Sentence, facts_var: Variable,
                      index: int) -> tuple[list[SimilarMemory], Variable]:
        """The ingest-time search: the speaker's units most similar to the fact (token Jaccard)."""
        with self.tracer.operation("mem0.find_similar", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.SEARCH_MEMORY.value,
                                   store_id=self.name) as op:
            op.read(facts_var)
            found = self._similar_units(fact)
            # Lineage only: the unit's content is on its writer's span, and repeating it on
            # every search (five per fact) would triple the benchmark's span files.
            records = [RetrievedRecord(op.read_record(unit.metadata, name=unit.name), score=score)
                       for unit, score in found]
            op.record_retrieval(records, query=fact.text, top_k=self.search_k)
            variable = op.write(f"similar:{fact.dia_id}/{index}",
                                "\n".join(f"{u.name} {score:.2f}" for u, score in found),
                                kind=VariableKind.CONTEXT)
        return [SimilarMemory(u.name, tuple(u.sentences), score) for u, score in found], variable

    def _similar_units(self, fact: Sentence) -> list[tuple[Unit, float]]:
        found = self._token_index().most_similar(fact, self.search_k)
        return [(self.state.units[name], score) for name, score in found]

    def _token_index(self) -> _SimilarityIndex:
        """Built from the state on first use (a run may start from a snapshot), then kept in step by
        :meth:`_index_unit` and :meth:`delete_unit`: the ingest-time search runs once per fact."""
        if self._similarity is None:
            self._similarity = _SimilarityIndex()
            for unit in self.state.units.values():
                self._similarity.add(unit)
        return self._similarity

    def _index_unit(self, unit: Unit) -> None:
        super()._index_unit(unit)
        if self._similarity is not None:
            self._similarity.discard(unit.name)
            self._similarity.add(unit)

    def delete_unit(self, op: Operation, unit: Unit) -> Unit:
        if self._similarity is not None:
            self._similarity.discard(unit.name)
        return super().delete_unit(op, unit)

    def _decide(self, fact: Sentence, inputs: tuple[Variable, Variable], similar: list[SimilarMemory],
                index: int, forced: tuple[Fault, Unit] | None) -> tuple[Decision, dict[str, str]]:
        with self.tracer.operation("mem0.decide", Category.UPDATE, store_id=self.name) as op:
            for variable in inputs:
                op.read(variable)
            decision = self._forced(*forced) if forced else self.components.decider.decide(fact, similar)
            record_model_call(op, decision)
            op.set_outcome(decision.event.value)
            record = f"{decision.event.name} {decision.target or ''}\n{fact.render()}"
            op.write(f"decision:{fact.dia_id}/{index}", record, kind=VariableKind.OTHER)
        return decision, span_of(op)

    @staticmethod
    def _forced(fault: Fault, target: Unit) -> Decision:
        # The fault: the decision picks the wrong memory to overwrite or delete.
        update = fault.error_type is ErrorType.UPDATE
        return Decision(MemoryEvent.UPDATE if update else MemoryEvent.DELETE, target.name)

    def _fault_target(self, first: bool) -> tuple[Fault, Unit] | None:
        """The fault and the critical unit, when this decision is the one an Update/Deletion fault
        perturbs."""
        fault = self.faulted(ErrorType.UPDATE) or self.faulted(ErrorType.DELETION)
        if not first or fault is None:
            return None
        unit = self.state.units.get(fault.unit)
        if unit is not None and fault.sentence in unit.sentences:
            return fault, unit
        if fault.message_scope:
            # Chained after another fault that took the critical sentence: the wrong decision then
            # hits what is left of its message (unit names differ once an earlier fault fired).
            left = next((u for u in self.state.units.values() if fault.aims_at(u.sentences)), None)
            if left is not None:
                return fault, left
        return None

    def _apply(self, decision: Decision, fact: Sentence, facts_var: Variable, *, fault: Fault | None,
               loss: Loss | None = None) -> None:
        """The store effect of a decision; under a fault it is the perturbed (gold) operation."""
        target = self.state.units.get(decision.target or "")
        if decision.event is MemoryEvent.NONE:
            return
        if decision.event is MemoryEvent.UPDATE and target is not None:
            # A faulty UPDATE overwrites the target with the fact; a sound one merges it in.
            sentences = [fact] if fault is not None else [*target.sentences, fact]
            self._effect("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY, facts_var,
                         lambda op: self.update_unit(op, target, sentences), fault=fault)
            return
        if decision.event is MemoryEvent.DELETE and target is not None:
            self._effect("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY, facts_var,
                         lambda op: self.delete_unit(op, target), fault=fault, loss=loss)
            if fault is not None:
                return
        self._effect("mem0.add", Category.EXTRACTION, GenAIOperation.CREATE_MEMORY, facts_var,
                     lambda op: self.store_unit(op, self.new_unit_name("mem"), [fact]))

    def _effect(self, name: str, category: Category, gen_ai: GenAIOperation, facts_var: Variable,
                action: Callable[[Operation], Unit], *, fault: Fault | None = None,
                loss: Loss | None = None) -> None:
        with self.tracer.operation(name, category, gen_ai_operation=gen_ai.value, store_id=self.name) as op:
            # The effect reads the fact, not the decision: the decision stays off the answer's
            # backward slice, so the slice (and what the baseline engines choose from) is the
            # same as before the decision was traced.
            op.read(facts_var)
            if fault is not None:
                self.mark_fault(op, fault)
            if loss is not None:
                loss.span = span_of(op)
            record_changes(op, [action(op).name])

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("mem0.search", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.SEARCH_MEMORY.value,
                                   store_id=self.name) as op:
            return self.retrieve_top_k(op, query, question, case_id, self.top_k)
