"""Two trivial baseline engines, so the scorer has a floor to compare real engines with.

``random-slice`` blames a random operation on the answer's backward slice
(seeded per case, so scores are reproducible); ``last-operation`` blames the
last operation before the answer was written (the generation, almost always).
Both name the error type from the blamed operation's category (the one
mapping, :data:`~memtrace_otel.semconv.CATEGORY_ERROR_TYPE`).
"""

from __future__ import annotations

import random
import zlib

import networkx as nx

from memtrace_otel.attribution.base import (
    Attribution,
    Engine,
    ErrorType,
    FailureCase,
    NotAttributed,
    register_engine,
)
from memtrace_otel.graph.node_types import OPERATION
from memtrace_otel.graph.query import backward_slice, producer_of
from memtrace_otel.semconv import CATEGORY_ERROR_TYPE, Category, error_type_of_category

__all__ = ["LastOperationEngine", "RandomSliceEngine"]

_NO_CANDIDATE = "the answer has no blameable operation on its backward slice"


# The roles a baseline picks among: every role with an error type except ``ingest``, which only
# records the messages (the extraction after it decides what memory holds). Kept as it was when
# the baselines' scores were first measured, so those scores stay comparable.
_BLAMEABLE = frozenset(CATEGORY_ERROR_TYPE) - {Category.INGEST}


def _candidates(G: nx.DiGraph, case: FailureCase) -> list[str]:
    """Operations of the answer's backward slice that a baseline may blame, in execution order."""
    if case.answer is None or case.answer not in G:
        return []
    sliced = backward_slice(G, case.answer)
    ops = [n for n, d in sliced.nodes(data=True)
           if d.get("type") == OPERATION and d.get("category") in _BLAMEABLE]
    return sorted(ops, key=lambda n: (G.nodes[n].get("order", 0), n))


def _verdict(G: nx.DiGraph, case: FailureCase, result: Attribution, operation: str | None,
             why: str) -> None:
    if operation is None:
        raise NotAttributed(_NO_CANDIDATE)
    # A baseline always names a type: an operation of no role (``other``) is taken as the answer's.
    result.blame(G, operation, error_type_of_category(G.nodes[operation].get("category"))
                 or ErrorType.RESPONSE)
    result.explanation = why
    result.evidence_path = [operation, case.answer or ""]


class RandomSliceEngine(Engine):
    """Blames a uniformly random operation of the answer's backward slice."""

    name = "random-slice"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        ops = _candidates(G, case)
        rng = random.Random(self.seed ^ zlib.crc32((case.case_id or case.evaluation).encode()))
        chosen = rng.choice(ops) if ops else None
        _verdict(G, case, result, chosen, "random operation on the backward slice")


class LastOperationEngine(Engine):
    """Blames the operation that wrote the answer (else the last one of the slice)."""

    name = "last-operation"

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        chosen = producer_of(G, case.answer) if case.answer and case.answer in G else None
        if chosen is None:
            ops = _candidates(G, case)
            chosen = ops[-1] if ops else None
        _verdict(G, case, result, chosen, "last operation before the answer")


register_engine(RandomSliceEngine.name, RandomSliceEngine)
register_engine(LastOperationEngine.name, LastOperationEngine)
