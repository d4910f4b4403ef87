"""Reference memory systems (long-context, RAG, Mem0-style, episodic), instrumented, offline by default."""

from memtrace_bench.locomo import QA, Conversation, Session, Turn, conversation_ids, load_conversation
from memtrace_bench.systems.base import Fault, MemorySystem, QuestionOutcome, StoreState, TracedRun, Unit
from memtrace_bench.systems.episodic import EpisodicSystem
from memtrace_bench.systems.interfaces import (
    Answerer,
    AnswerResult,
    Components,
    ContextItem,
    Decider,
    Decision,
    Embedder,
    Extraction,
    Extractor,
    Judge,
    MemoryEvent,
    Sentence,
    SimilarMemory,
    Verdict,
)
from memtrace_bench.systems.long_context import LongContextSystem
from memtrace_bench.systems.mem0_style import Mem0StyleSystem
from memtrace_bench.systems.offline import offline_components
from memtrace_bench.systems.rag import RAGSystem

SYSTEMS: dict[str, type[MemorySystem]] = {
    cls.name: cls for cls in (LongContextSystem, RAGSystem, Mem0StyleSystem, EpisodicSystem)
}
"""The reference systems by name, in benchmark order."""

__all__ = [
    "QA",
    "SYSTEMS",
    "AnswerResult",
    "Answerer",
    "Components",
    "ContextItem",
    "Conversation",
    "Decider",
    "Decision",
    "Embedder",
    "EpisodicSystem",
    "Extraction",
    "Extractor",
    "Fault",
    "Judge",
    "LongContextSystem",
    "Mem0StyleSystem",
    "MemoryEvent",
    "MemorySystem",
    "QuestionOutcome",
    "RAGSystem",
    "Sentence",
    "Session",
    "SimilarMemory",
    "StoreState",
    "TracedRun",
    "Turn",
    "Unit",
    "Verdict",
    "conversation_ids",
    "load_conversation",
    "offline_components",
]
