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

from collections.abc import Callable

from memtrace_otel.bench.locomo import Session, Turn
from memtrace_otel.bench.systems.base import MemorySystem, Unit, record_changes, record_model_call
from memtrace_otel.bench.systems.interfaces import Decision, MemoryEvent, Sentence, SimilarMemory
from memtrace_otel.instrument import Operation, RetrievedRecord, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation, VariableKind
from memtrace_otel.text import content_tokens

__all__ = ["Mem0StyleSystem"]


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity; the union's size is counted, not built (this runs per fact and unit)."""
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


class Mem0StyleSystem(MemorySystem):
    name = "mem0-style"
    applicable = tuple(ErrorType)
    search_k = 5
    top_k = 5

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
            if self.faulted(ErrorType.EXTRACTION) and self.fault.sentence in facts:  # type: ignore[union-attr]
                # The fault: extraction drops the fact that carries the answer.
                self.mark_fault(op)
                facts = self.drop_critical(facts)
            op.step("llm_extract", [message])
            facts_var = op.write(f"facts:{turn.dia_id}", "\n".join(f.render() for f in facts),
                                 kind=VariableKind.FACTS)
            self.state.extra["last_turn"] = turn.dia_id
        return facts, facts_var

    def _ingest_fact(self, fact: Sentence, facts_var: Variable, index: int) -> None:
        similar, similar_var = self._find_similar(fact, facts_var, index)
        forced = self._fault_target(first=index == 0)
        decision = self._decide(fact, (facts_var, similar_var), similar, index, forced)
        self._apply(decision, fact, facts_var, fault=forced is not None)

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
        tokens = frozenset(content_tokens(f"{fact.speaker} {fact.text}"))
        scored = []
        for unit in self.state.units.values():
            if tokens.isdisjoint(unit.tokens) or unit.sentences[0].speaker != fact.speaker:
                continue  # no shared token: similarity 0, not a result
            scored.append((unit, _similarity(tokens, unit.tokens)))
        # Stable sort: among equal scores the older unit comes first.
        return sorted(scored, key=lambda item: -item[1])[:self.search_k]

    def _decide(self, fact: Sentence, inputs: tuple[Variable, Variable], similar: list[SimilarMemory],
                index: int, forced: Unit | None) -> Decision:
        with self.tracer.operation("mem0.decide", Category.UPDATE, store_id=self.name) as op:
            for variable in inputs:
                op.read(variable)
            decision = self._forced(forced) if forced else self.components.decider.decide(fact, similar)
            record_model_call(op, decision)
            op.set_outcome(decision.event.value)
            record = f"{decision.event.name} {decision.target or ''}\n{fact.render()}"
            op.write(f"decision:{fact.dia_id}/{index}", record, kind=VariableKind.OTHER)
        return decision

    def _forced(self, target: Unit) -> Decision:
        # The fault: the decision picks the wrong memory to overwrite or delete.
        assert self.fault is not None
        update = self.fault.error_type is ErrorType.UPDATE
        return Decision(MemoryEvent.UPDATE if update else MemoryEvent.DELETE, target.name)

    def _fault_target(self, first: bool) -> Unit | None:
        """The critical unit, when this decision is the one an Update/Deletion fault perturbs."""
        fault = self.fault
        if not first or fault is None or fault.unit not in self.state.units:
            return None
        if fault.sentence not in self.state.units[fault.unit].sentences:
            return None
        if self.faulted(ErrorType.UPDATE) or self.faulted(ErrorType.DELETION):
            return self.state.units[fault.unit]
        return None

    def _apply(self, decision: Decision, fact: Sentence, facts_var: Variable, *, fault: bool) -> None:
        """The store effect of a decision; under a fault it is the perturbed (gold) operation."""
        target = self.state.units.get(decision.target or "")
        if decision.event is MemoryEvent.NONE:
            return
        if decision.event is MemoryEvent.UPDATE and target is not None:
            # A faulty UPDATE overwrites the target with the fact; a sound one merges it in.
            sentences = [fact] if fault else [*target.sentences, fact]
            self._effect("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY, facts_var,
                         lambda op: self.update_unit(op, target, sentences), fault=fault)
            return
        if decision.event is MemoryEvent.DELETE and target is not None:
            self._effect("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY, facts_var,
                         lambda op: self.delete_unit(op, target), fault=fault)
            if fault:
                return
        self._effect("mem0.add", Category.EXTRACTION, GenAIOperation.CREATE_MEMORY, facts_var,
                     lambda op: self.store_unit(op, self.new_unit_name("mem"), [fact]))

    def _effect(self, name: str, category: Category, gen_ai: GenAIOperation, facts_var: Variable,
                action: Callable[[Operation], Unit], *, fault: bool = False) -> None:
        with self.tracer.operation(name, category, gen_ai_operation=gen_ai.value, store_id=self.name) as op:
            # The effect reads the fact, not the decision: the decision stays off the answer's
            # backward slice, so the slice (and what the baseline engines choose from) is the
            # same as before the decision was traced.
            op.read(facts_var)
            if fault:
                self.mark_fault(op)
            record_changes(op, [action(op).name])

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("mem0.search", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.SEARCH_MEMORY.value,
                                   store_id=self.name) as op:
            return self.retrieve_top_k(op, query, question, case_id, self.top_k)
