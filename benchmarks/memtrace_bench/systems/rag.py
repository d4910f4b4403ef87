"""RAG: messages chunked (three turns a chunk), embedded, retrieved top-k.

``rag.index_chunk`` (extraction) turns a chunk of messages into one stored
unit; ``rag.retrieve`` ranks units by embedding similarity plus a lexical
bonus. Chunks are never updated or deleted, so UpdateError and DeletionError
do not apply.
"""

from __future__ import annotations

from typing import ClassVar

from memtrace_bench.locomo import Session, Turn
from memtrace_bench.systems.base import MemorySystem, Unit, record_changes
from memtrace_bench.systems.interfaces import Sentence
from memtrace_otel.instrument import Variable
from memtrace_otel.semconv import Category, ErrorType, GenAIOperation
from memtrace_otel.text import sentences

__all__ = ["RAGSystem"]


class RAGSystem(MemorySystem):
    name = "rag"
    applicable = (ErrorType.EXTRACTION, ErrorType.RETRIEVAL, ErrorType.RESPONSE)
    not_applicable: ClassVar[dict[str, str]] = {
        ErrorType.UPDATE.value: "chunks are written once and never updated",
        ErrorType.DELETION.value: "chunks are never deleted",
    }
    chunk_turns = 3
    top_k = 5

    def _ingest_session(self, session: Session) -> None:
        turns = session.turns
        for start in range(0, len(turns), self.chunk_turns):
            self._index(turns[start:start + self.chunk_turns])

    def _index(self, chunk: list[Turn]) -> None:
        with self.tracer.operation("rag.index_chunk", Category.EXTRACTION,
                                   gen_ai_operation=GenAIOperation.CREATE_MEMORY.value,
                                   store_id=self.name) as op:
            parts: list[Sentence] = []
            for turn in chunk:
                self.read_message(op, turn)
                parts.extend(Sentence(turn.dia_id, turn.speaker, turn.date, s) for s in sentences(turn.text))
            fault = self.faulted(ErrorType.EXTRACTION)
            if fault is not None and fault.sentence in parts:
                # The fault: the chunker loses the sentence that carries the answer.
                self.mark_fault(op, fault)
                parts = self.drop_critical(parts, fault)
            record_changes(op, [self.store_unit(op, self.new_unit_name("chunk"), parts).name])

    def _retrieve(self, query: Variable, question: str, case_id: str) -> tuple[list[Unit], Variable]:
        with self.tracer.operation("rag.retrieve", Category.RETRIEVAL,
                                   gen_ai_operation=GenAIOperation.RETRIEVAL.value,
                                   store_id=self.name) as op:
            return self.retrieve_top_k(op, query, question, case_id, self.top_k, data_source_id=self.name)
