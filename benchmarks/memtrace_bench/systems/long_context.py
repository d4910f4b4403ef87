"""Long-context: a word-budgeted window of the most recent messages; trimming is its update.

Every message enters the window as one unit (``lc.append``); when the window
exceeds its budget, ``lc.trim`` (category update) evicts the oldest units.
At question time ``lc.assemble_context`` hands the whole window to the reader.
There is no extraction step, so ExtractionError does not apply; eviction is
done by the trim (update) operation, so DeletionError does not apply either.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from memtrace_bench.locomo import Session, Turn
from memtrace_bench.systems.base import MemorySystem, Unit, record_changes
from memtrace_bench.systems.interfaces import Sentence
from memtrace_otel.instrument import Operation, Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation
from memtrace_otel.text import sentences, words

__all__ = ["LongContextSystem"]


class LongContextSystem(MemorySystem):
    name = "long-context"
    applicable = (ErrorType.UPDATE, ErrorType.RETRIEVAL, ErrorType.RESPONSE)
    not_applicable: ClassVar[dict[str, str]] = {
        ErrorType.EXTRACTION.value: "messages enter the window verbatim: there is no extraction step",
        ErrorType.DELETION.value: "units leave the window only by trimming, which is the update operation",
    }
    # About a 16k-token model window: it holds three quarters of a LoCoMo conversation, so
    # early sessions are trimmed away (a natural failure) and the rest is read in context.
    budget_words = 12_000

    def _ingest_session(self, session: Session) -> None:
        for turn in session.turns:
            self._append(turn)
            self._trim()

    def _append(self, turn: Turn) -> None:
        with self.tracer.operation("lc.append", Category.INGEST,
                                   gen_ai_operation=GenAIOperation.CREATE_MEMORY.value,
                                   store_id=self.name) as op:
            self.read_message(op, turn)
            parts = [Sentence(turn.dia_id, turn.speaker, turn.date, s) for s in sentences(turn.text)]
            record_changes(op, [self.store_unit(op, f"lc:{turn.dia_id}", parts).name])
            self.state.extra["words"] = self.state.extra.get("words", 0) + len(words(turn.text))

    def _trim(self) -> None:
        units = self.state.units
        over = self.state.extra.get("words", 0) > self.budget_words
        fault = self.faulted(ErrorType.UPDATE)
        wrong = fault is not None and fault.unit in units
        if not over and not wrong:
            return
        with self.tracer.operation("lc.trim", Category.UPDATE,
                                   gen_ai_operation=GenAIOperation.DELETE_MEMORY.value,
                                   store_id=self.name) as op:
            evicted = []
            if wrong:
                # The fault: the trim evicts a unit the budget did not ask to evict.
                self.mark_fault(op, fault)  # type: ignore[arg-type]
                evicted.append(self._evict(op, units[fault.unit]))  # type: ignore[union-attr]
            oldest = self._oldest(op)
            while self.state.extra["words"] > self.budget_words and units:
                unit = next(oldest, None)
                if unit is None:
                    break
                evicted.append(self._evict(op, unit))
            record_changes(op, evicted)

    def _oldest(self, op: Operation) -> Iterator[Unit]:
        """The units a budget trim evicts, oldest first; the oracle trim (repair) skips those holding
        critical information, and a trim that evicts them without repair is a loss."""
        units = self.state.units
        order = list(units.values())
        if self.repair is None:
            yield from order
            return
        total = self.state.extra["words"]
        doomed, freed = [], 0
        for unit in order:  # what the budget evicts, as the plain trim would
            if total - freed <= self.budget_words:
                break
            doomed.append(unit)
            freed += sum(len(words(s.text)) for s in unit.sentences)
        lost = self.repair.held(s for u in doomed for s in u.sentences)
        loss = self.repairable(op, ErrorType.UPDATE, lost)
        keep = self.repairing(loss)
        yield from (u for u in order if not (keep and self.holds_key(u)))

    def _evict(self, op: Operation, unit: Unit) -> str:
        self.state.extra["words"] -= sum(len(words(s.text)) for s in unit.sentences)
        return self.delete_unit(op, unit).name

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("lc.assemble_context", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.RETRIEVAL.value,
                                   store_id=self.name) as op:
            op.read(query)
            # The whole window, oldest first: a recency order, no scores, no k asked for.
            window: list[tuple[Unit, float | None]] = [(u, None) for u in self.state.units.values()]
            read = self.read_retrieved(op, self.omit_critical(op, window, len(window)), query,
                                       data_source_id=self.name)
            chosen = [unit for unit, _ in read]
            return chosen, self.write_context(op, case_id, chosen)
