"""Lookups the graph queries share, computed once per graph and kept with it.

Attribution asks the same graph-wide questions once per failure (which
operations are evaluations, which variable holds evidence ``D1:3``, every
version of ``mem:7``); answered by scanning every node, that is quadratic in
the input. Each lookup here is built on first use and kept in networkx's own
per-graph cache, ``G.__networkx_cache__``, which networkx empties on every
structural change it makes (adding or removing nodes or edges,
``set_node_attributes``): invalidation costs nothing and needs no size
signature (``G.number_of_edges()`` is O(E)).

What such a cache cannot see is a node attribute changed in place
(``G.nodes[n]["order"] = 3``): call :func:`clear_index` after edits like that.
Graph views (``G.subgraph(...)``, ``nx.reverse_view``) are never cached: their
base graph can change under them; queries on views compute afresh.

Thread safety: a lookup is a pure function of the graph; two threads that race
to build one build equal values and either is kept. Lookups are never mutated
after they are stored (queries hand out copies).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import networkx as nx

from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.semconv import Category

__all__ = [
    "clear_index",
    "evaluation_nodes",
    "forget",
    "lookup",
    "missing_by_node",
    "operation_nodes",
    "position",
    "variables_by_name",
]

_KEY = "memtrace_otel.graph"
_EVALUATION = str(Category.EVALUATION.value)
_T = TypeVar("_T")


def _cache(G: nx.DiGraph) -> dict[Hashable, Any] | None:
    if getattr(G, "_graph", None) is not None:  # a view
        return None
    store = getattr(G, "__networkx_cache__", None)
    if store is None:
        return None
    cache = store.get(_KEY)
    if cache is None:
        cache = store[_KEY] = {}
    return cache


def lookup(G: nx.DiGraph, key: Hashable, build: Callable[[nx.DiGraph], _T]) -> _T:
    """``build(G)``, computed once per graph (per ``key``) until the graph changes.

    >>> G = nx.DiGraph([("a", "b")])
    >>> lookup(G, "n", len), lookup(G, "n", lambda G: -1)
    (2, 2)
    >>> G.add_edge("b", "c")
    >>> lookup(G, "n", len)
    3
    """
    cache = _cache(G)
    if cache is None:
        return build(G)
    try:
        return cache[key]
    except KeyError:
        value = cache[key] = build(G)
        return value


def clear_index(G: nx.DiGraph) -> None:
    """Forget every lookup of ``G``: call it after changing node attributes in place."""
    store = getattr(G, "__networkx_cache__", None)
    if store is not None:
        store.pop(_KEY, None)


def forget(G: nx.DiGraph, key: Hashable) -> None:
    """Forget one lookup of ``G`` (built again if asked for): to free a large one no longer needed.

    >>> G = nx.DiGraph([("a", "b")])
    >>> first = lookup(G, "n", lambda G: [len(G)])
    >>> lookup(G, "n", lambda G: [len(G)]) is first
    True
    >>> forget(G, "n"); lookup(G, "n", lambda G: [len(G)]) is first
    False
    """
    cache = _cache(G)
    if cache is not None:
        cache.pop(key, None)


def position(G: nx.DiGraph) -> dict[str, int]:
    """Each node's place in ``G``'s node order (the order the input first named it)."""
    return lookup(G, "position", lambda G: {node: i for i, node in enumerate(G)})


def _operations(G: nx.DiGraph) -> dict[str | None, tuple[str, ...]]:
    ops = [(d.get("order", 0), i, n) for i, (n, d) in enumerate(G.nodes(data=True))
           if d.get("type") == OPERATION]
    ops.sort()
    by_category: dict[str | None, list[str]] = defaultdict(list)
    for *_, node in ops:
        by_category[G.nodes[node].get("category")].append(node)
    result: dict[str | None, tuple[str, ...]] = {k: tuple(v) for k, v in by_category.items()}
    result[None] = tuple(node for *_, node in ops)
    return result


def operation_nodes(G: nx.DiGraph, category: str | None = None) -> tuple[str, ...]:
    """Operation nodes in execution order (``order``, then node order), all or of one category."""
    return lookup(G, "operations", _operations).get(category, ())


def evaluation_nodes(G: nx.DiGraph) -> tuple[str, ...]:
    """Evaluation operations that carry a verdict, in execution order."""
    return lookup(G, "evaluations", lambda G: tuple(
        n for n in operation_nodes(G, _EVALUATION) if "passed" in G.nodes[n]))


def _by_name(G: nx.DiGraph) -> dict[str, tuple[tuple[int, str], ...]]:
    versions: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for node, data in G.nodes(data=True):
        if data.get("type") == VARIABLE:
            versions[data.get("name", node)].append((data.get("version", 1), node))
    return {name: tuple(sorted(found)) for name, found in versions.items()}


def variables_by_name(G: nx.DiGraph) -> dict[str, tuple[tuple[int, str], ...]]:
    """Variable name -> its ``(version, node)`` pairs, oldest first."""
    return lookup(G, "by_name", _by_name)


def _missing_by_node(G: nx.DiGraph) -> dict[str, frozenset[str]] | None:
    # Forward from the nodes that carry missing_links, in topological order: a node's set is its
    # own links and its predecessors' sets. Nodes that reach none are left out; sets are shared
    # between a node and its parent when equal, so a long chain below one link costs one set.
    nodes, pred, succ = G._node, G._pred, G._succ
    region: set[str] = set()
    stack = [n for n, d in nodes.items() if d.get("missing_links")]
    while stack:
        node = stack.pop()
        if node not in region:
            region.add(node)
            stack.extend(s for s in succ[node] if s not in region)
    waiting = {n: sum(1 for p in pred[n] if p in region) for n in region}
    ready = [n for n, count in waiting.items() if count == 0]
    found: dict[str, frozenset[str]] = {}
    while ready:
        node = ready.pop()
        sets = [found[p] for p in pred[node] if p in found]
        own = nodes[node].get("missing_links")
        if own:
            sets.append(frozenset(own))
        widest = max(sets, key=len)
        found[node] = widest if all(s <= widest for s in sets) else frozenset().union(*sets)
        for child in succ[node]:
            if child in waiting:
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
    return found if len(found) == len(region) else None  # a cycle: callers search per node


def missing_by_node(G: nx.DiGraph) -> dict[str, frozenset[str]] | None:
    """Node -> trace ids that it or any node it depends on (its ancestors) links to but ``G`` lacks.

    Nodes whose lineage is complete are absent. ``None`` when lineage below a missing link has a
    cycle (graphs from :func:`~memtrace_otel.graph.build_graph` have none: it cuts them); a caller
    then searches the ancestors of its node. One pass over the graph, instead of one search of
    every ancestor per failure: with version chains across thousands of traces (a long-running
    app that reuses variable names) each failure's ancestors are a share of the whole graph.

    >>> G = nx.DiGraph([("a", "b"), ("b", "c"), ("x", "c")])
    >>> G.nodes["a"]["missing_links"] = ["t1"]
    >>> {n: sorted(v) for n, v in sorted(missing_by_node(G).items())}
    {'a': ['t1'], 'b': ['t1'], 'c': ['t1']}
    """
    return lookup(G, "missing_by_node", _missing_by_node)

