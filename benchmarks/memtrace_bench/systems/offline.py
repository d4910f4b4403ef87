"""Deterministic offline stand-ins for the LLM components: a reader, a judge, an extractor, an update
decider, embedders.

They are features, not mocks: they let the reference systems run anywhere,
reproducibly, fast enough to build a benchmark in minutes, and they fail the
way real components fail (a lexical reader picks the wrong sentence, a rule
extractor drops facts phrased as questions).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from nltk.stem.porter import PorterStemmer

from memtrace_bench.locomo import Turn
from memtrace_bench.systems.interfaces import (
    Components,
    Decision,
    Extraction,
    MemoryEvent,
    Sentence,
    SimilarMemory,
    Verdict,
)
from memtrace_bench.systems.reader import ExtractiveAnswerer
from memtrace_otel.embeddings import load_wordllama
from memtrace_otel.text import content_tokens, sentences, token_f1

__all__ = [
    "ExtractiveAnswerer",
    "F1Judge",
    "LexicalEmbedder",
    "RuleDecider",
    "RuleExtractor",
    "WordLlamaEmbedder",
    "default_embedder",
    "load_wordllama",
    "offline_components",
    "porter_stem",
]

_logger = logging.getLogger(__name__)
DEFAULT_F1_THRESHOLD = 0.4
_PORTER = PorterStemmer()  # NLTK's default mode, as LoCoMo's evaluation builds it


@functools.lru_cache(maxsize=65536)
def porter_stem(word: str) -> str:
    """Porter's stem of a lower-case word, memoised (judges see the same words all build long).

    >>> [porter_stem(w) for w in ["agencies", "painting", "paints"]]
    ['agenc', 'paint', 'paint']
    """
    return _PORTER.stem(word)


_NEGATION = re.compile(r"\b(no longer|not anymore|any more|stopped|quit|gave up|broke up|sold)\b", re.I)


class F1Judge:
    """Pass when the normalised token F1 against the gold reaches ``threshold``.

    Tokens are normalised and stemmed as LoCoMo's own evaluation does (``task_eval/evaluation.py``
    in snap-research/locomo: SQuAD normalisation without "and", then NLTK's Porter stemmer), so
    "adoption agency" answers "Adoption agencies". One difference, on purpose: LoCoMo scores its
    multi-hop category item by item (the gold and the answer split at commas, each gold item's best
    F1 averaged); a judge here is not told the category, so every answer is scored whole
    (docs/benchmark.md gives the reader's accuracy under both).

    >>> F1Judge().judge("What did Ann research?", "adoption agency", "Adoption agencies").passed
    True
    """

    def __init__(self, threshold: float = DEFAULT_F1_THRESHOLD) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold

    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        score = token_f1(prediction, gold, porter_stem)
        passed = score >= self.threshold
        return Verdict(passed, score, f"token F1 {score:.2f} {'>=' if passed else '<'} {self.threshold}")


class RuleExtractor:
    """Keeps the sentences of a message that state something (two content words, not a question)."""

    def extract(self, turn: Turn) -> Extraction:
        facts = []
        for text in sentences(turn.text):
            if text.endswith("?") or len(content_tokens(text)) < 2:
                continue
            facts.append(Sentence(turn.dia_id, turn.speaker, turn.date, text))
        return Extraction(facts)


class RuleDecider:
    """Mem0's update decision by rules over the search's similarity (token Jaccard).

    A near-duplicate of the best match (``>= duplicate``) is NONE; a related fact
    (``>= related``) that negates it ("no longer", "quit", ...) DELETEs it, one
    that does not UPDATEs (merges into) it while it holds fewer than
    ``max_sentences``; anything else is ADDed.
    """

    def __init__(self, duplicate: float = 0.7, related: float = 0.3, max_sentences: int = 3) -> None:
        if not 0.0 <= related <= duplicate <= 1.0:
            raise ValueError("need 0 <= related <= duplicate <= 1")
        self.duplicate, self.related, self.max_sentences = duplicate, related, max_sentences

    def decide(self, fact: Sentence, similar: Sequence[SimilarMemory]) -> Decision:
        best = similar[0] if similar else None
        if best is None or best.score < self.related:
            return Decision(MemoryEvent.ADD, reason="no related memory")
        if best.score >= self.duplicate:
            return Decision(MemoryEvent.NONE, best.unit, f"near-duplicate ({best.score:.2f})")
        if _NEGATION.search(fact.text):
            return Decision(MemoryEvent.DELETE, best.unit, f"negates a related memory ({best.score:.2f})")
        if len(best.sentences) < self.max_sentences:
            return Decision(MemoryEvent.UPDATE, best.unit, f"related ({best.score:.2f})")
        return Decision(MemoryEvent.ADD, reason=f"related memory {best.unit} is full")


class LexicalEmbedder:
    """Hashed bag of stemmed content words: the fallback when wordllama is absent."""

    name = "lexical-hash-512"

    def __init__(self, dimensions: int = 512) -> None:
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in content_tokens(text):
                digest = hashlib.blake2b(token.encode(), digest_size=4).digest()
                matrix[row, int.from_bytes(digest, "little") % self.dimensions] += 1.0
        return _unit_rows(matrix)


class WordLlamaEmbedder:
    """wordllama's static token embeddings (weights ship inside the package).

    Single texts are memoised (at most ``cache_size``, then the memo starts over): fault and
    repair runs re-ingest what the clean run embedded, and the model is deterministic, so
    a cached row is the row the model would give. Thread safety: one instance per process
    (the benchmark's jobs are processes), not shared by threads.
    """

    name = "wordllama-256"

    def __init__(self, model: Any, *, cache_size: int = 100_000) -> None:
        self._model = model
        self._cache: dict[str, np.ndarray] = {}
        self._cache_size = cache_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 256), dtype=np.float32)
        if len(texts) == 1:
            return self._one(texts[0])[None, :]
        return self._rows(texts)

    def _rows(self, texts: Sequence[str]) -> np.ndarray:
        return _unit_rows(np.asarray(self._model.embed(list(texts)), dtype=np.float32))

    def _one(self, text: str) -> np.ndarray:
        row = self._cache.get(text)
        if row is None:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            row = self._cache[text] = self._rows([text])[0]
            row.setflags(write=False)
        return row


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def default_embedder(prefer: str = "auto") -> WordLlamaEmbedder | LexicalEmbedder:
    """wordllama when available (``prefer="auto"``), else the lexical embedder."""
    if prefer not in ("auto", "lexical", "wordllama"):
        raise ValueError("prefer must be auto, lexical or wordllama")
    model = load_wordllama() if prefer != "lexical" else None
    if model is None:
        if prefer == "wordllama":
            raise RuntimeError("wordllama is not available (pip install -e ./benchmarks installs it)")
        return LexicalEmbedder()
    return WordLlamaEmbedder(model)


def offline_components(*, embedder: str = "auto", threshold: float = DEFAULT_F1_THRESHOLD) -> Components:
    """The deterministic offline components."""
    chosen = default_embedder(embedder)
    return Components(ExtractiveAnswerer(), F1Judge(threshold), RuleExtractor(), chosen, RuleDecider(),
                      {"answerer": "extractive", "judge": f"token-f1>={threshold}",
                       "extractor": "rules", "decider": "rules", "embedder": chosen.name})
