"""Mem0-style: per message, fact extraction, search of similar memories, ADD/UPDATE/DELETE/NONE.

``mem0.extract`` (extraction) reads a message and writes its facts; for each
fact the update decision compares it with the speaker's existing memories:
a near-duplicate is NONE, a related fact UPDATEs (merges into) the memory,
a negation of a related memory DELETEs it, anything else is ADDed as a new
unit. Every store effect is its own operation, so a memory unit has versions.
"""

from __future__ import annotations

import re

from memtrace_otel.attribution.base import ErrorType
from memtrace_otel.instrument import Variable
from memtrace_otel.semconv import Category, GenAIOperation, VariableKind
from memtrace_otel.systems.base import MemorySystem, Unit
from memtrace_otel.systems.interfaces import Sentence
from memtrace_otel.systems.locomo import Session, Turn
from memtrace_otel.systems.text import content_tokens

__all__ = ["Mem0StyleSystem"]

_NEGATION = re.compile(r"\b(no longer|not anymore|any more|stopped|quit|gave up|broke up|sold)\b", re.I)


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class Mem0StyleSystem(MemorySystem):
    name = "mem0-style"
    applicable = tuple(ErrorType)
    duplicate = 0.7
    related = 0.3
    max_sentences = 3
    top_k = 5

    def _ingest_session(self, session: Session) -> None:
        for turn in session.turns:
            facts, facts_var = self._extract(turn)
            for index, fact in enumerate(facts):
                self._decide(fact, facts_var, first=index == 0)

    def _extract(self, turn: Turn) -> tuple[list[Sentence], Variable]:
        with self.tracer.operation("mem0.extract", Category.EXTRACTION, store_id=self.name) as op:
            message = self.read_message(op, turn)
            facts = self.components.extractor.extract(turn)
            if self.faulted(ErrorType.EXTRACTION) and self.fault.sentence in facts:  # type: ignore[union-attr]
                # The fault: extraction drops the fact that carries the answer.
                self.mark_fault(op)
                facts = self.drop_critical(facts)
            op.step("llm_extract", [message])
            facts_var = op.write(f"facts:{turn.dia_id}", "\n".join(f.render() for f in facts),
                                 kind=VariableKind.FACTS)
            self.state.extra["last_turn"] = turn.dia_id
        return facts, facts_var

    def _decide(self, fact: Sentence, facts_var: Variable, *, first: bool) -> None:
        target = self._fault_target(first)
        if target is not None:
            self._apply_fault(fact, facts_var, target)
            return
        tokens = frozenset(content_tokens(f"{fact.speaker} {fact.text}"))
        best, score = self._most_similar(fact.speaker, tokens)
        if best is not None and score >= self.duplicate:
            return  # NONE: already known
        if best is not None and score >= self.related and _NEGATION.search(fact.text):
            self._effect("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY, facts_var,
                         lambda op: self.delete_unit(op, best))
        elif best is not None and score >= self.related and len(best.sentences) < self.max_sentences:
            self._effect("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY, facts_var,
                         lambda op: self.update_unit(op, best, [*best.sentences, fact]))
            return
        self._effect("mem0.add", Category.EXTRACTION, GenAIOperation.CREATE_MEMORY, facts_var,
                     lambda op: self.store_unit(op, self.new_unit_name("mem"), [fact]))

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

    def _apply_fault(self, fact: Sentence, facts_var: Variable, target: Unit) -> None:
        # The fault: the update decision picks the wrong memory and overwrites or deletes it.
        if self.fault.error_type is ErrorType.UPDATE:  # type: ignore[union-attr]
            self._effect("mem0.update", Category.UPDATE, GenAIOperation.UPDATE_MEMORY, facts_var,
                         lambda op: self.update_unit(op, target, [fact]), fault=True)
        else:
            self._effect("mem0.delete", Category.DELETION, GenAIOperation.DELETE_MEMORY, facts_var,
                         lambda op: self.delete_unit(op, target), fault=True)

    def _effect(self, name: str, category: Category, gen_ai: GenAIOperation, facts_var: Variable,
                action: object, *, fault: bool = False) -> None:
        with self.tracer.operation(name, category, gen_ai_operation=gen_ai.value, store_id=self.name) as op:
            op.read(facts_var)
            if fault:
                self.mark_fault(op)
            action(op)  # type: ignore[operator]

    def _most_similar(self, speaker: str, tokens: frozenset[str]) -> tuple[Unit | None, float]:
        best, best_score = None, 0.0
        for unit in self.state.units.values():
            if unit.sentences and unit.sentences[0].speaker == speaker:
                score = _similarity(tokens, unit.tokens)
                if score > best_score:
                    best, best_score = unit, score
        return best, best_score

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("mem0.search", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.SEARCH_MEMORY.value,
                                   store_id=self.name) as op:
            return self.retrieve_top_k(op, query, question, case_id, self.top_k)
