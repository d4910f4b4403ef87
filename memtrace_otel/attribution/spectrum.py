"""Spectrum-based suspiciousness of operations across all evaluations of one graph.

Failures of a memory system are systematic: one bad extraction rule or one
over-eager update breaks many answers. An operation that lies on the
backward slice of many failed answers and few passed ones is more suspect
(Ochiai, from spectrum-based fault localisation). The lineage engine uses
this only to break ties between candidates its lineage reasoning cannot
separate.

>>> import networkx as nx
>>> G = nx.DiGraph()
>>> G.add_nodes_from(["op:a", "op:b", "op:j1", "op:j2"], type="operation")
>>> G.add_nodes_from(["x", "y"], type="variable")
>>> G.add_edges_from([("op:a", "x"), ("op:b", "y"), ("x", "op:j1"), ("y", "op:j2")])
>>> G.nodes["op:j1"].update(passed=False, category="evaluation")
>>> G.nodes["op:j2"].update(passed=True, category="evaluation")
>>> scores = ochiai_scores(G)
>>> scores["op:a"] > scores["op:b"]
True
"""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION

__all__ = ["ochiai", "ochiai_scores", "slice_operations"]


def slice_operations(G: nx.DiGraph, evaluation: str) -> set[str]:
    """Operations the verdict of ``evaluation`` depends on (its backward slice, itself excluded)."""
    return {n for n in nx.ancestors(G, evaluation) if G.nodes[n].get("type") == OPERATION}


def ochiai(failed_with: int, passed_with: int, failed_total: int) -> float:
    """Ochiai coefficient: failed_with / sqrt(failed_total * (failed_with + passed_with)).

    >>> round(ochiai(2, 0, 4), 3)
    0.707
    """
    denominator = math.sqrt(failed_total * (failed_with + passed_with))
    return failed_with / denominator if denominator else 0.0


def ochiai_scores(G: nx.DiGraph) -> dict[str, float]:
    """Ochiai score of every operation on some evaluation's backward slice."""
    failed: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    failed_total = 0
    for node, data in G.nodes(data=True):
        if data.get("type") != OPERATION or "passed" not in data:
            continue
        ops = slice_operations(G, node)
        if data["passed"]:
            passed.update(ops)
        else:
            failed.update(ops)
            failed_total += 1
    return {
        op: ochiai(failed[op], passed[op], failed_total) for op in failed.keys() | passed.keys()
    }
