"""Episodic (EverMemOS-style): boundary detection, episode memories, two-stage retrieval.

Per session, ``episodic.segment`` cuts the messages into episodes where the
topic shifts; ``episodic.extract`` (extraction) turns each episode into one
memory unit of its fact sentences; ``episodic.consolidate`` (update) links a
new episode to older ones on the same topic (a new version of the older
unit). At question time ``episodic.retrieve`` takes a wide candidate set by
embedding similarity and ``episodic.rerank`` keeps the best few by lexical
overlap. Episodes are never deleted, so DeletionError does not apply.
"""

from __future__ import annotations

from typing import ClassVar

from memtrace_bench.locomo import Session, Turn
from memtrace_bench.systems.base import MemorySystem, Unit, record_changes, record_model_call
from memtrace_bench.systems.interfaces import Sentence
from memtrace_otel.instrument import Operation, RetrievedRecord, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation, VariableKind
from memtrace_otel.text import content_tokens

__all__ = ["EpisodicSystem"]


class EpisodicSystem(MemorySystem):
    name = "episodic"
    applicable = (ErrorType.EXTRACTION, ErrorType.UPDATE, ErrorType.RETRIEVAL, ErrorType.RESPONSE)
    not_applicable: ClassVar[dict[str, str]] = {
        ErrorType.DELETION.value: "episode memories are never deleted",
    }
    min_episode, max_episode = 4, 8
    link_threshold = 0.25
    wide_k, top_k = 12, 4

    def _ingest_session(self, session: Session) -> None:
        episodes = self._segment(session)
        created = [self._extract(index, turns) for index, turns in enumerate(episodes)]
        self._consolidate(session, [u for u in created if u is not None])

    def _segment(self, session: Session) -> list[list[Turn]]:
        with self.tracer.operation("episodic.segment", Category.OTHER, store_id=self.name) as op:
            for turn in session.turns:
                self.read_message(op, turn)
            episodes: list[list[Turn]] = []
            previous: set[str] = set()
            for turn in session.turns:
                tokens = set(content_tokens(turn.text))
                current = episodes[-1] if episodes else None
                shift = current is not None and len(current) >= self.min_episode and not tokens & previous
                if current is None or shift or len(current) >= self.max_episode:
                    episodes.append([])
                episodes[-1].append(turn)
                previous = tokens | (previous if not shift else set())
            op.write(f"episodes:S{session.index}",
                     "\n".join(" ".join(t.dia_id for t in e) for e in episodes), kind=VariableKind.OTHER)
        return episodes

    def _extract(self, index: int, turns: list[Turn]) -> Unit | None:
        with self.tracer.operation("episodic.extract", Category.EXTRACTION,
                                   gen_ai_operation=GenAIOperation.CREATE_MEMORY.value,
                                   store_id=self.name) as op:
            per_turn: list[tuple[str, list[Sentence]]] = []
            for turn in turns:
                self.read_message(op, turn)
            for turn in turns:
                extraction = self.components.extractor.extract(turn)
                record_model_call(op, extraction)
                per_turn.append((turn.dia_id, extraction.facts))
            facts = [f for _, found in per_turn for f in found]
            fault = self.faulted(ErrorType.EXTRACTION)
            if fault is not None and fault.sentence in facts:
                # The fault: the episode memory leaves out the sentence that carries the answer.
                self.mark_fault(op, fault)
                facts = self.drop_critical(facts, fault)
            else:
                lost = self.repair.lost([t.dia_id for t in turns], facts) if self.repair else []
                if self.repairing(self.repairable(op, ErrorType.EXTRACTION, lost)):
                    # The oracle extraction keeps each critical sentence after its message's facts.
                    facts = [f for dia_id, found in per_turn
                             for f in [*found, *(k for k in lost if k.dia_id == dia_id)]]
            if not facts:
                op.set_outcome("empty")
                return None
            unit = self.store_unit(op, self.new_unit_name("episode"), facts)
            record_changes(op, [unit.name])
            return unit

    def _consolidate(self, session: Session, created: list[Unit]) -> None:
        links = [(new, old) for new in created for old in self._related(new, created)]
        fault = self.faulted(ErrorType.UPDATE)
        wrong = (fault is not None and fault.unit in self.state.units
                 and fault.sentence in self.state.units[fault.unit].sentences)
        if not links and not wrong:
            return
        with self.tracer.operation("episodic.consolidate", Category.UPDATE,
                                   gen_ai_operation=GenAIOperation.UPDATE_MEMORY.value,
                                   store_id=self.name) as op:
            updated = []
            for new, old in links:
                self.read_unit(op, new)
                note = f"{old.note} {new.name}".strip() if old.note else f"related: {new.name}"
                updated.append(self.update_unit(op, old, old.sentences, note=note).name)
            if wrong:
                # The fault: consolidation rewrites the episode and loses the critical sentence.
                self.mark_fault(op, fault)  # type: ignore[arg-type]
                unit = self.state.units[fault.unit]  # type: ignore[union-attr]
                updated.append(self.update_unit(op, unit, self.drop_critical(unit.sentences, fault)).name)  # type: ignore[arg-type]
            record_changes(op, list(dict.fromkeys(updated)))

    def _related(self, new: Unit, created: list[Unit]) -> list[Unit]:
        fresh = {u.name for u in created}
        found = []
        for old in self.state.units.values():
            if old.name in fresh or not old.tokens:
                continue
            overlap = len(new.tokens & old.tokens) / len(new.tokens | old.tokens)
            if overlap >= self.link_threshold:
                found.append(old)
        return found[:2]

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("episodic.retrieve", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.SEARCH_MEMORY.value,
                                   store_id=self.name) as op:
            op.read(query)
            ranked = self.rank_units(question, list(self.state.units.values()), lexical_weight=0.0)
            found = self.read_retrieved(op, self._stage(op, ranked, self.wide_k, variant=0), query,
                                        top_k=self.wide_k)
            stage_one = [unit for unit, _ in found]
            read = {unit.name: variable for unit, variable in found}
            candidates = op.write(f"candidates:{case_id}", "\n\n".join(u.content for u in stage_one),
                                  kind=VariableKind.CONTEXT)
        with self.tracer.operation("episodic.rerank", Category.RERANK, store_id=self.name) as op:
            op.read(query)
            op.read(candidates)
            reranked = self.rank_units(question, stage_one, lexical_weight=1.0)
            chosen = self._stage(op, reranked, self.top_k, variant=1)
            # The rerank returns versions stage one read; it reads the candidates, not the units again.
            op.record_retrieval([RetrievedRecord(read[u.name], score=s) for u, s in chosen], query=query,
                                top_k=self.top_k)
            units = [u for u, _ in chosen]
            return units, self.write_context(op, case_id, units)

    def _stage(self, op: Operation, ranked: list[tuple[Unit, float]], k: int, *,
               variant: int) -> list[tuple[Unit, float | None]]:
        # A RetrievalError fault hits stage one or the rerank, as the fault's variant says.
        fault = self.faulted(ErrorType.RETRIEVAL)
        if fault is not None and fault.variant % 2 != variant:
            return list(ranked[:k])
        return self.omit_critical(op, ranked, k)
