"""Two trivial baseline engines, so the scorer has a floor to compare real engines with.

``random-slice`` blames a random operation on the answer's backward slice
(seeded per case, so scores are reproducible); ``last-operation`` blames the
last operation before the answer was written (the generation, almost always).
Both name the error type from the blamed operation's category.
"""

from __future__ import annotations

import random
import time
import zlib

import networkx as nx

from memtrace_otel.attribution.base import Attribution, Engine, ErrorType, FailureCase, register_engine
from memtrace_otel.graph.query import backward_slice, producer_of

__all__ = ["LastOperationEngine", "RandomSliceEngine", "error_type_of_category"]

_BY_CATEGORY = {
    "extraction": ErrorType.EXTRACTION, "update": ErrorType.UPDATE, "deletion": ErrorType.DELETION,
    "retrieval": ErrorType.RETRIEVAL, "rerank": ErrorType.RETRIEVAL, "generation": ErrorType.RESPONSE,
}
_BLAMEABLE = frozenset(_BY_CATEGORY)


def error_type_of_category(category: str | None) -> ErrorType:
    """The error type an operation category stands for (ResponseError when unknown).

    >>> error_type_of_category("rerank").value
    'RetrievalError'
    """
    return _BY_CATEGORY.get(category or "", ErrorType.RESPONSE)


def _candidates(G: nx.DiGraph, case: FailureCase) -> list[str]:
    if case.answer is None or case.answer not in G:
        return []
    sliced = backward_slice(G, case.answer)
    ops = [n for n, d in sliced.nodes(data=True)
           if d.get("type") == "operation" and d.get("category") in _BLAMEABLE]
    return sorted(ops, key=lambda n: G.nodes[n].get("order", 0))


def _verdict(engine: str, G: nx.DiGraph, case: FailureCase, operation: str | None, started: float,
             why: str) -> Attribution:
    result = Attribution(engine=engine, case=case)
    if operation is None:
        result.failure_reason = "the answer has no blameable operation on its backward slice"
    else:
        result.blame(G, operation)
        result.error_type = error_type_of_category(result.category)
        result.explanation = why
        result.evidence_path = [operation, case.answer or ""]
    result.seconds = time.perf_counter() - started
    return result


class RandomSliceEngine(Engine):
    """Blames a uniformly random operation of the answer's backward slice."""

    name = "random-slice"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def attribute(self, G: nx.DiGraph, case: FailureCase) -> Attribution:
        started = time.perf_counter()
        ops = _candidates(G, case)
        rng = random.Random(self.seed ^ zlib.crc32((case.case_id or case.evaluation).encode()))
        chosen = rng.choice(ops) if ops else None
        return _verdict(self.name, G, case, chosen, started, "random operation on the backward slice")


class LastOperationEngine(Engine):
    """Blames the operation that wrote the answer (else the last one of the slice)."""

    name = "last-operation"

    def attribute(self, G: nx.DiGraph, case: FailureCase) -> Attribution:
        started = time.perf_counter()
        chosen = producer_of(G, case.answer) if case.answer and case.answer in G else None
        if chosen is None:
            ops = _candidates(G, case)
            chosen = ops[-1] if ops else None
        return _verdict(self.name, G, case, chosen, started, "last operation before the answer")


register_engine(RandomSliceEngine.name, RandomSliceEngine)
register_engine(LastOperationEngine.name, LastOperationEngine)
