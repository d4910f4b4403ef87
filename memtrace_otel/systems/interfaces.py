"""The pluggable LLM steps of the reference systems, and the values they exchange.

Each step (answering, judging, fact extraction, embedding) has a deterministic
offline implementation (:mod:`memtrace_otel.systems.offline`) and an
OpenAI-compatible one (:mod:`memtrace_otel.systems.openai_steps`); a system
only sees these protocols, so either can be plugged in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from memtrace_otel.systems.locomo import Turn

__all__ = [
    "AnswerResult",
    "Answerer",
    "Components",
    "ContextItem",
    "Embedder",
    "Extractor",
    "Judge",
    "Sentence",
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


@dataclass(slots=True)
class AnswerResult:
    """An answer, and (for extractive answerers) the sentence it was read from."""

    text: str
    source: Sentence | None = None
    unit: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    score: float
    explanation: str = ""
    input_tokens: int = 0
    output_tokens: int = 0


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
    def extract(self, turn: Turn) -> list[Sentence]:
        """The facts worth remembering in one message."""


@runtime_checkable
class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length row vectors, one per text."""


@dataclass(slots=True)
class Components:
    """The LLM steps one system run uses."""

    answerer: Answerer
    judge: Judge
    extractor: Extractor
    embedder: Embedder
    description: dict[str, str] = field(default_factory=dict)
