"""The pluggable LLM components of the reference systems, and the values they exchange.

Each component (answering, judging, fact extraction, the Mem0-style update
decision, embedding) has a deterministic offline implementation
(:mod:`memtrace_bench.systems.offline`); all but embedding also have an
OpenAI-compatible one (:mod:`memtrace_bench.systems.openai_llm`). A
system only sees these protocols, so either can be plugged in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np

from memtrace_bench.locomo import Turn

__all__ = [
    "AnswerResult",
    "Answerer",
    "Components",
    "ContextItem",
    "Decider",
    "Decision",
    "Embedder",
    "Extraction",
    "Extractor",
    "Judge",
    "MemoryEvent",
    "ModelSpend",
    "Sentence",
    "SimilarMemory",
    "Verdict",
]


@dataclass(frozen=True, slots=True)
class Sentence:
    """One fact-sized piece of a message, with where and when it was said."""

    dia_id: str
    speaker: str
    date: str
    text: str

    def render(self) -> str:
        return f"[{self.date}] {self.speaker}: {self.text}"


@dataclass(slots=True)
class ContextItem:
    """One retrieved memory unit as the answerer sees it."""

    unit: str
    sentences: list[Sentence]

    def render(self) -> str:
        return "\n".join(s.render() for s in self.sentences)


class ModelSpend(Protocol):
    """What a component's result says of the model it called: ``model`` is ``None`` offline.

    Every component result (:class:`AnswerResult`, :class:`Verdict`, :class:`Extraction`,
    :class:`Decision`) has these fields; the systems put them on the span of the operation that used
    it.
    """

    # Read-only members, so frozen dataclasses (Verdict, Extraction, Decision) match too.
    @property
    def model(self) -> str | None: ...
    @property
    def provider(self) -> str | None: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


@dataclass(slots=True)
class AnswerResult:
    """An answer, and (for extractive answerers) the sentence it was read from."""

    text: str
    source: Sentence | None = None
    unit: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    score: float
    explanation: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class Extraction:
    """The facts an extractor found in one message, and what its model call cost."""

    facts: list[Sentence]
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    provider: str | None = None


class MemoryEvent(StrEnum):
    """Mem0's four update decisions for a new fact (its ``event`` values, lower-cased)."""

    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class SimilarMemory:
    """An existing memory unit the ingest-time search found for a new fact, and how similar it is."""

    unit: str
    sentences: tuple[Sentence, ...]
    score: float

    def render(self) -> str:
        return " ".join(s.text for s in self.sentences)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a new fact; ``target`` names the unit an UPDATE or DELETE acts on."""

    event: MemoryEvent
    target: str | None = None
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    provider: str | None = None


@runtime_checkable
class Answerer(Protocol):
    def answer(self, question: str, context: Sequence[ContextItem]) -> AnswerResult:
        """Answer ``question`` from ``context`` only."""


@runtime_checkable
class Judge(Protocol):
    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        """Whether ``prediction`` answers ``question`` as ``gold`` does."""


@runtime_checkable
class Extractor(Protocol):
    def extract(self, turn: Turn) -> Extraction:
        """The facts worth remembering in one message."""


@runtime_checkable
class Decider(Protocol):
    def decide(self, fact: Sentence, similar: Sequence[SimilarMemory]) -> Decision:
        """ADD, UPDATE, DELETE or NONE for ``fact``, given the most similar memories (best first)."""


@runtime_checkable
class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length row vectors, one per text."""


@dataclass(slots=True)
class Components:
    """The LLM components one system run uses."""

    answerer: Answerer
    judge: Judge
    extractor: Extractor
    embedder: Embedder
    decider: Decider
    description: dict[str, str] = field(default_factory=dict)
