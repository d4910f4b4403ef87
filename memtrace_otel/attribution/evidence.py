"""Finding the evidence of a failed answer, and the path from it to the blamed operation.

The evaluation names its evidence (ids such as LoCoMo's ``D1:3``, matched to
message variables by :func:`~memtrace_otel.graph.query.evidence_variables`).
When it names none, the graph's messages are ranked against the question plus
the gold answer (:mod:`.ranking`), and the best ranked that hold the gold are
taken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import networkx as nx

from memtrace_otel.attribution.base import FailureCase
from memtrace_otel.attribution.index import graph_index
from memtrace_otel.attribution.presence import critical_information
from memtrace_otel.graph.query import evidence_variables
from memtrace_otel.semconv import VariableKind

__all__ = ["evidence_path", "find_evidence"]

_RANKED_EVIDENCE = 3


def find_evidence(G: nx.DiGraph, case: FailureCase, *, use_embeddings: bool = True,
                  stores: Iterable[str] | None = None) -> tuple[list[str], bool]:
    """Evidence message variables of ``case`` and whether they were given (not ranked).

    Parameters
    ----------
    use_embeddings:
        Rank with the offline embedding model as well as BM25 (when installed).
    stores:
        Rank only the messages of these memory stores (the ones the failed
        answer read; see :meth:`.GraphIndex.message_ranker`); all when ``None``.

    Returns
    -------
    tuple
        The message variable ids (sorted when given, best first when ranked),
        and ``True`` when the evaluation named them.
    """
    given = sorted(evidence_variables(G, case.evidence))
    # Other variables may be named after the turn too (facts:D1:3); the message is the evidence.
    messages = [v for v in given if G.nodes[v].get("kind") == VariableKind.MESSAGE]
    if messages or given:
        return messages or given, True
    query = " ".join(filter(None, (case.question, case.gold)))
    if not query:
        return [], False
    index = graph_index(G)
    ranked = index.message_ranker(use_embeddings=use_embeddings, stores=stores).rank(query)
    if not ranked:
        return [], False
    info = critical_information(case.gold, case.question)
    holding = [
        m for m in ranked[:_RANKED_EVIDENCE] if info.carried_by(index.tokens(m), threshold=0.5)
    ]
    return (holding or ranked[:1]), False


def evidence_path(
    G: nx.DiGraph, evidence: list[str], carrier: str | None, operation: str, failure: FailureCase
) -> list[str]:
    """Variables and operations from the evidence through the blamed op to the failed verdict."""
    path: list[str] = []
    start = evidence[0] if evidence else None
    waypoint = carrier if carrier in G else None
    for source, target in ((start, waypoint), (waypoint or start, operation)):
        if source is None or target is None:
            continue
        try:
            segment = nx.shortest_path(G, source, target)
        except nx.NetworkXNoPath:
            segment = [source, target]
        path.extend(n for n in segment if not path or n != path[-1])
    if not path or path[-1] != operation:
        path.append(operation)
    if failure.answer in G:
        with contextlib.suppress(nx.NetworkXNoPath):
            path.extend(nx.shortest_path(G, operation, failure.answer)[1:])
    path.append(failure.evaluation)
    return list(dict.fromkeys(path))
