"""Ranking texts against a query: what finds the evidence of a failed answer when its ids are not recorded.

Documents (message contents) are ranked against a query (question plus gold
answer) by two rankers that fail differently: BM25 (exact words, good at
names and dates) and embedding cosine similarity (paraphrase). Their rankings
are fused by reciprocal rank fusion, which needs no score calibration between
them. Ties are broken by document id, so a ranking never depends on the order
the documents came in.

Embeddings come from wordllama (weights shipped in the package, loaded without
network) when it and numpy are installed (``pip install memtrace-otel[bench]``);
otherwise the second ranker is a token-overlap (Jaccard) ranking, so that a
plain install stays offline and deterministic.

>>> docs = {"m1": "I adopted a dog named Max", "m2": "We went hiking in Boston", "m3": "Lunch"}
>>> bm25_scores(BM25Index(docs), "Where did they go hiking? Boston")[0][0]
'm2'
>>> reciprocal_rank_fusion([["a", "b", "c"], ["b", "a", "c"]])[:2]
['a', 'b']
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memtrace_otel.attribution.presence import tokenize
from memtrace_otel.embeddings import load_wordllama

__all__ = [
    "BM25Index",
    "DocumentRanker",
    "bm25_scores",
    "embedder",
    "rank_documents",
    "reciprocal_rank_fusion",
]

_RRF_K = 60
Embedder = Callable[[Sequence[str]], Any]


class BM25Index:
    """Okapi BM25 over a fixed set of documents (k1=1.2, b=0.75). Immutable after build."""

    def __init__(self, documents: Mapping[str, str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.ids = list(documents)
        self.texts = [documents[i] for i in self.ids]
        self.k1, self.b = k1, b
        self.terms: list[Counter[str]] = [Counter(_terms(t)) for t in self.texts]
        self.lengths = [sum(c.values()) for c in self.terms]
        self.average = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for counts in self.terms:
            df.update(counts.keys())
        n = len(self.ids)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(self, query_terms: Sequence[str], index: int) -> float:
        counts, length = self.terms[index], self.lengths[index]
        norm = self.k1 * (1 - self.b + self.b * length / (self.average or 1.0))
        total = 0.0
        for term in query_terms:
            tf = counts.get(term, 0)
            if tf:
                total += self.idf.get(term, 0.0) * tf * (self.k1 + 1) / (tf + norm)
        return total


@functools.lru_cache(maxsize=100_000)
def _terms(text: str) -> tuple[str, ...]:
    # BM25 wants term frequencies, so tokenize word by word (tokenize() returns a set). Memoised:
    # the graphs of one conversation (one per benchmark case) index the same messages again.
    return tuple(t for word in text.split() for t in tokenize(word))


def bm25_scores(index: BM25Index, query: str) -> list[tuple[str, float]]:
    """Documents by descending BM25 score for ``query`` (ties by document id)."""
    terms = list(dict.fromkeys(_terms(query)))
    scored = [(index.ids[i], index.score(terms, i)) for i in range(len(index.ids))]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], *, k: int = _RRF_K) -> list[str]:
    """Fuse rankings: each item scores sum(1 / (k + rank)); best first, ties by first ranking."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    first = {item: i for i, item in enumerate(rankings[0])} if rankings else {}
    return sorted(scores, key=lambda item: (-scores[item], first.get(item, len(first))))


@functools.cache
def embedder() -> Embedder | None:
    """A text -> unit-vector matrix function, or ``None`` when no offline model is available.

    Uses the one wordllama loader of the package (one model per process, loaded from
    the package's own weights with downloads disabled); ``None`` without numpy or
    wordllama (a plain install), and the caller ranks by token overlap instead.
    """
    if not _importable("numpy"):
        return None
    model = load_wordllama()
    return None if model is None else _normalised(model.embed)


def _importable(module: str) -> bool:
    # find_spec raises ValueError for a module blocked as sys.modules[name] = None.
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_EMBEDDING_CACHE = 200_000
"""Texts whose vectors are kept per process: benchmark cases share most of their messages, and a
graph per case would otherwise embed the same conversation again and again (~1 KB per text)."""


def _normalised(embed: Callable[..., Any]) -> Embedder:
    import numpy as np

    known: dict[str, Any] = {}

    def run(texts: Sequence[str]) -> Any:
        # Only texts not seen yet go through the model; a dict's get/set are atomic under the GIL,
        # so concurrent callers at worst embed one text twice.
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            vectors = np.asarray(embed(missing), dtype=np.float32)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            if len(known) + len(missing) > _EMBEDDING_CACHE:
                known.clear()
            known.update(zip(missing, vectors / np.where(norms == 0, 1.0, norms), strict=True))
        return np.stack([known[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)

    return run


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


class DocumentRanker:
    """BM25 and embedding rankings of one document set, fused by RRF.

    Built once per graph (the BM25 statistics and the embedding matrix are the
    expensive part) and queried once per failed case. Read-only after the
    first query, so one ranker may serve many cases.

    >>> ranker = DocumentRanker({"a": "the cat sat", "b": "dogs bark at night"}, use_embeddings=False)
    >>> ranker.rank("do dogs bark?")
    ['b', 'a']
    """

    def __init__(self, documents: Mapping[str, str], *, use_embeddings: bool = True) -> None:
        self.documents = dict(documents)
        self.index = BM25Index(self.documents)
        self._embed = embedder() if use_embeddings else None
        self._matrix: Any = None

    def _semantic(self, query: str) -> list[str]:
        ids = self.index.ids
        if self._embed is not None:
            if self._matrix is None:
                self._matrix = self._embed(self.index.texts)
            scores = (self._matrix @ self._embed([query])[0]).tolist()
        else:
            wanted = tokenize(query)
            scores = [_jaccard(wanted, tokenize(text)) for text in self.index.texts]
        return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))]

    def rank(self, query: str) -> list[str]:
        """Document ids, best first."""
        if not self.documents:
            return []
        lexical = [doc for doc, _ in bm25_scores(self.index, query)]
        return reciprocal_rank_fusion([lexical, self._semantic(query)])


def rank_documents(
    documents: Mapping[str, str], query: str, *, use_embeddings: bool = True
) -> list[str]:
    """Document ids best first for ``query``: BM25 and embedding rankings fused by RRF."""
    return DocumentRanker(documents, use_embeddings=use_embeddings).rank(query)
