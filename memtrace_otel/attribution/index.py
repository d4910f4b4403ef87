"""Per-graph facts the lineage engine asks for again and again, computed once.

Attribution runs one case at a time, but the cases of one span file share one
graph: tokenising every variable, ranking messages and the spectrum scores are
graph-wide work. :func:`graph_index` keeps one :class:`GraphIndex` per graph
(weakly, and rebuilt when the graph grows), so the per-case work is only the
walk along the evidence's lineage.

Thread safety: the cache map is guarded by a lock; one index's lazy fields
are filled idempotently (a race computes the same value twice).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import networkx as nx

from memtrace_otel.attribution.evidence import DocumentRanker
from memtrace_otel.attribution.presence import split_lines, tokenize
from memtrace_otel.attribution.spectrum import ochiai_scores

__all__ = ["STORED_KINDS", "GraphIndex", "graph_index"]

STORED_KINDS = frozenset({"memory_unit", "store"})
"""Variable kinds that are memory: what a later question can be answered from."""
_READ_SIDE = frozenset({"retrieval", "rerank"})
_NOT_STORED = frozenset(
    {"message", "query", "answer", "prompt", "response", "facts", "verdict", "context", "gold"}
)
_SPECIFIC_MESSAGES = 3

_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[nx.DiGraph, GraphIndex] = weakref.WeakKeyDictionary()


def graph_index(G: nx.DiGraph) -> GraphIndex:
    """The (cached) index of ``G``; a graph that changed size gets a fresh one."""
    signature = (G.number_of_nodes(), G.number_of_edges())
    with _lock:
        index = _cache.get(G)
        if index is None or index.signature != signature:
            index = GraphIndex(G)
            _cache[G] = index
    return index


class GraphIndex:
    """Lazily computed, read-mostly facts about one graph."""

    def __init__(self, G: nx.DiGraph) -> None:
        self.G = G
        self.signature = (G.number_of_nodes(), G.number_of_edges())
        self._tokens: dict[str, frozenset[str]] = {}
        self._lines: dict[str, list[frozenset[str]]] = {}
        self._postings: dict[str, set[str]] | None = None
        self._message_count = 0
        self._message_postings: dict[str, set[str]] | None = None
        self._versions: dict[str, list[str]] | None = None
        self._retrieved_names: set[str] | None = None
        self._ranker: DocumentRanker | None = None
        self._ochiai: dict[str, float] | None = None
        self.has_content = any(
            d.get("type") == "variable" and d.get("content") for _, d in G.nodes(data=True)
        )

    # -- nodes ------------------------------------------------------------
    def data(self, node: str) -> dict[str, Any]:
        return self.G.nodes[node]

    def order(self, op: str) -> int:
        return int(self.G.nodes[op].get("order", 0))

    def category(self, op: str) -> str:
        return str(self.G.nodes[op].get("category", "other"))

    def content(self, variable: str) -> str | None:
        return self.G.nodes[variable].get("content")

    def tokens(self, variable: str) -> frozenset[str]:
        found = self._tokens.get(variable)
        if found is None:
            found = tokenize(self.content(variable))
            self._tokens[variable] = found
        return found

    def lines(self, variable: str) -> list[frozenset[str]]:
        """Token sets of the lines of a variable's content (one per stored sentence)."""
        found = self._lines.get(variable)
        if found is None:
            found = [tokenize(line) for line in split_lines(self.content(variable))]
            self._lines[variable] = found
        return found

    def producer(self, variable: str) -> str | None:
        for pred in self.G.predecessors(variable):
            if self.G.nodes[pred].get("type") == "operation":
                return pred
        return None

    def produced_at(self, variable: str) -> int:
        """Execution order of the variable's producer; -1 for external inputs (always there)."""
        producer = self.producer(variable)
        return self.order(producer) if producer is not None else -1

    def inputs(self, op: str) -> list[str]:
        return [v for v, _, d in self.G.in_edges(op, data=True) if d.get("role") == "input"]

    def outputs(self, op: str) -> list[str]:
        return [v for _, v, d in self.G.out_edges(op, data=True) if d.get("role") == "output"]

    def readers(self, variable: str) -> list[str]:
        return [
            s for s in self.G.successors(variable) if self.G.nodes[s].get("type") == "operation"
        ]

    # -- memory -------------------------------------------------------------
    def versions(self, name: str) -> list[str]:
        """Variable ids of ``name``, oldest version first."""
        if self._versions is None:
            table: dict[str, list[tuple[int, str]]] = defaultdict(list)
            for node, d in self.G.nodes(data=True):
                if d.get("type") == "variable":
                    table[d["name"]].append((d["version"], node))
            self._versions = {n: [v for _, v in sorted(vs)] for n, vs in table.items()}
        return self._versions.get(name, [])

    def is_stored(self, variable: str) -> bool:
        """Whether ``variable`` is memory (a unit or store a later question can draw on)."""
        d = self.G.nodes[variable]
        if d.get("kind") in STORED_KINDS:
            return True
        if d.get("kind") in (
            "message",
            "query",
            "answer",
            "prompt",
            "response",
            "facts",
            "verdict",
        ):
            return False
        if self._retrieved_names is None:
            self._retrieved_names = {
                self.G.nodes[v]["name"]
                for op, od in self.G.nodes(data=True)
                if od.get("type") == "operation" and od.get("category") in _READ_SIDE
                for v in self.inputs(op)
            }
        return d.get("name") in self._retrieved_names

    def state_at(self, name: str, when: int) -> str | None:
        """The version of ``name`` current just before execution order ``when``."""
        current = None
        for variable in self.versions(name):
            if self.produced_at(variable) < when:
                current = variable
        return current

    def stored_variables(self) -> dict[str, set[str]]:
        """Inverted index: token -> stored variables (every version) whose content has it."""
        if self._postings is None:
            postings: dict[str, set[str]] = defaultdict(set)
            for node, d in self.G.nodes(data=True):
                if d.get("type") == "variable" and d.get("content") and self.is_stored(node):
                    for token in self.tokens(node):
                        postings[token].add(node)
            self._postings = postings
        return self._postings

    def candidates(self, tokens: list[str]) -> set[str]:
        """Stored variables holding any of ``tokens``: the only ones that can carry them."""
        postings = self.stored_variables()
        found: set[str] = set()
        for token in tokens:
            found |= postings.get(token, set())
        return found

    # -- message statistics -----------------------------------------------
    def _messages(self) -> dict[str, set[str]]:
        if self._message_postings is None:
            postings: dict[str, set[str]] = defaultdict(set)
            count = 0
            for node, d in self.G.nodes(data=True):
                if d.get("type") == "variable" and d.get("kind") == "message" and d.get("content"):
                    count += 1
                    for token in self.tokens(node):
                        postings[token].add(node)
            self._message_count = count
            self._message_postings = postings
        return self._message_postings

    def idf(self, token: str) -> float:
        """Inverse document frequency of ``token`` over the message variables (smoothed)."""
        df = len(self._messages().get(token, ()))
        return math.log(1 + (self._message_count + 1) / (df + 0.5))

    def specific(self, tokens: Iterable[str]) -> bool:
        """Whether so few messages hold all of ``tokens`` together that they identify a fact."""
        postings = self._messages()
        sets = [postings.get(t, set()) for t in tokens]
        if not sets:
            return False
        return len(set.intersection(*sets)) <= _SPECIFIC_MESSAGES

    # -- graph-wide rankings ------------------------------------------------
    def message_ranker(self) -> DocumentRanker:
        if self._ranker is None:
            messages = {
                n: d["content"]
                for n, d in self.G.nodes(data=True)
                if d.get("type") == "variable"
                and d.get("version") == 1
                and d.get("content")
                and (d.get("kind") == "message" or str(d.get("name", "")).startswith("msg:"))
            }
            self._ranker = DocumentRanker(messages)
        return self._ranker

    def ochiai(self) -> dict[str, float]:
        if self._ochiai is None:
            self._ochiai = ochiai_scores(self.G)
        return self._ochiai
