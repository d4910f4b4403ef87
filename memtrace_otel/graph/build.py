"""Build the memory evolution graph from span records.

The graph is a ``networkx.DiGraph`` with two kinds of node (``bipartite`` 0
and 1, networkx's convention):

* variable nodes, keyed by their id ``name@version``: ``type="variable"``,
  ``name``, ``version``, ``kind``, ``hash``, ``size``, ``content`` (or
  ``None``), ``deleted``;
* operation nodes, keyed ``op:<trace_id>:<span_id>``: ``type="operation"``,
  ``name``, ``category``, ``trace_id``, ``span_id``, ``order`` (execution
  order), ``start``, ``status``, evaluation fields on evaluations.

Edges: variable -> operation (``role="input"``), operation -> variable
(``role="output"``), and version ``v`` -> ``v+1`` of one variable name
(``role="version"``). Many files and traces become one graph, stitched by
variable ids; a producer that appears only as a traceparent (its trace was
not read) is listed in ``G.graph["missing_traces"]`` for the trace backend
to fetch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

import networkx as nx

from memtrace_otel.instrument.operation import parse_descriptor
from memtrace_otel.instrument.variables import split_variable_id
from memtrace_otel.semconv import Category, GenAI, MemTrace, MemTraceEvent, MemTraceStep
from memtrace_otel.spans.model import Problem, SpanRecord
from memtrace_otel.spans.readers import gc_paused

__all__ = ["ContentLookup", "build_graph", "operation_node_id"]

ContentLookup = Callable[[str], "str | None"]
"""Gives the content of a variable id when spans carry none (in-process attribution)."""

_MEMORY_OPERATIONS = {
    "create_memory": Category.EXTRACTION, "update_memory": Category.UPDATE,
    "upsert_memory": Category.UPDATE, "delete_memory": Category.DELETION,
    "search_memory": Category.RETRIEVAL, "retrieval": Category.RETRIEVAL,
}
_MAX_CYCLE_REPAIRS = 1000


def operation_node_id(trace_id: str, span_id: str) -> str:
    """Node key of the operation recorded by span ``span_id`` of trace ``trace_id``.

    >>> operation_node_id("ab" * 16, "cd" * 8)
    'op:abababababababababababababababab:cdcdcdcdcdcdcdcd'
    """
    return f"op:{trace_id}:{span_id}"


def _strings(value: Any, key: str, span: SpanRecord, problems: list[Problem]) -> list[str]:
    if value is None:
        return []
    if type(value) is list:
        for item in value:
            if type(item) is not str:
                break
        else:
            return value
    problems.append(Problem(span.source, f"span {span.span_id}: {key} is not a list of strings; ignored"))
    return []


def _column(attributes: dict[str, Any], key: str, length: int, default: Any) -> list[Any]:
    # Parallel arrays may be short or missing (older writers, hand-made spans): pad them.
    value = attributes.get(key)
    if not isinstance(value, list):
        return [default] * length
    return list(value[:length]) + [default] * (length - len(value))


def _category(attributes: dict[str, Any]) -> Category | None:
    raw = attributes.get(MemTrace.OPERATION_CATEGORY)
    if isinstance(raw, str):
        try:
            return Category(raw)
        except ValueError:
            return Category.OTHER
    gen_ai = attributes.get(GenAI.OPERATION_NAME)
    return _MEMORY_OPERATIONS.get(gen_ai) if isinstance(gen_ai, str) else None


def _operation_attributes(span: SpanRecord, category: Category) -> dict[str, Any]:
    a = span.attributes
    data: dict[str, Any] = {
        "type": "operation", "bipartite": 1,
        "name": str(a.get(MemTrace.OPERATION_NAME) or span.name), "span_name": span.name,
        "category": category.value, "trace_id": span.trace_id, "span_id": span.span_id,
        "parent_span_id": span.parent_span_id, "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano, "status": span.status_code, "service": span.service_name,
        "outcome": a.get(MemTrace.OPERATION_OUTCOME), "source": span.source,
        "gen_ai_operation": a.get(GenAI.OPERATION_NAME), "store_id": a.get(GenAI.MEMORY_STORE_ID),
        "content_captured": MemTrace.VARIABLE_CONTENTS in a,
    }
    if MemTrace.EVALUATION_PASSED in a:
        data.update(
            passed=bool(a.get(MemTrace.EVALUATION_PASSED)), score=a.get(MemTrace.EVALUATION_SCORE),
            signal=a.get(MemTrace.EVALUATION_SIGNAL), question=a.get(MemTrace.EVALUATION_QUESTION),
            prediction=a.get(MemTrace.EVALUATION_PREDICTION), gold=a.get(MemTrace.EVALUATION_GOLD),
            explanation=a.get(MemTrace.EVALUATION_EXPLANATION),
            evidence=list(a.get(MemTrace.EVALUATION_EVIDENCE) or ()),
            answer=a.get(MemTrace.EVALUATION_ANSWER), case=a.get(MemTrace.EVALUATION_CASE),
        )
    return data


class _Builder:
    """Accumulates one graph; not thread-safe (one builder per build).

    Nodes and edges are collected in plain dicts and lists and handed to networkx
    in bulk at the end: per-call ``add_node``/``add_edge`` cost more than the
    whole rest of the build.
    """

    def __init__(self, content: ContentLookup | None) -> None:
        self.problems: list[Problem] = []
        self.content = content
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: dict[tuple[str, str], str] = {}
        self.span_ops: set[tuple[str, str]] = set()
        self.links: list[tuple[str, str]] = []  # producers the operations linked to

    def touch(self, variable_id: str) -> dict[str, Any]:
        data = self.nodes.get(variable_id)
        if data is None:
            name, version = split_variable_id(variable_id)
            data = self.nodes[variable_id] = {
                "type": "variable", "bipartite": 0, "name": name, "version": version,
                "kind": "other", "hash": "", "size": 0, "content": None, "deleted": False}
        return data

    def describe(self, descriptor: Any, content: Any, span: SpanRecord) -> None:
        parsed = parse_descriptor(descriptor)
        if parsed is None:
            self.problems.append(Problem(span.source, f"span {span.span_id}: malformed "
                                                      f"{MemTrace.VARIABLES} entry {str(descriptor)[:80]!r}"))
            return
        variable_id, kind, size, digest = parsed
        data = self.touch(variable_id)
        if not data["hash"]:
            data.update(kind=kind, size=size, hash=digest)
        if data["content"] is None and isinstance(content, str):
            data["content"] = content

    def add_span(self, span: SpanRecord) -> None:
        category = _category(span.attributes)
        if category is None:
            return  # not a memory operation: ordinary application spans stay out of the graph
        node = operation_node_id(span.trace_id, span.span_id)
        self.span_ops.add((span.trace_id, span.span_id))
        a, problems, edges, touch = span.attributes, self.problems, self.edges, self.touch
        data = self.nodes[node] = _operation_attributes(span, category)
        for variable_id in _strings(a.get(MemTrace.INPUTS), MemTrace.INPUTS, span, problems):
            touch(variable_id)
            edges[(variable_id, node)] = "input"
        for variable_id in _strings(a.get(MemTrace.OUTPUTS), MemTrace.OUTPUTS, span, problems):
            touch(variable_id)
            edges[(node, variable_id)] = "output"
        descriptors = _strings(a.get(MemTrace.VARIABLES), MemTrace.VARIABLES, span, problems)
        contents = _column(a, MemTrace.VARIABLE_CONTENTS, len(descriptors), None)
        for descriptor, content in zip(descriptors, contents, strict=True):
            self.describe(descriptor, content, span)
        for deleted in _strings(a.get(MemTrace.DELETED), MemTrace.DELETED, span, problems):
            touch(deleted)["deleted"] = True
        if span.links:
            self.links.extend((link.trace_id, link.span_id) for link in span.links)
        steps = [e for e in span.events if e.name == MemTraceEvent.STEP] if span.events else None
        if steps:
            data["steps"] = [
                {"name": e.attributes.get(MemTraceStep.NAME, ""),
                 "inputs": list(e.attributes.get(MemTraceStep.INPUTS) or ()),
                 "outputs": list(e.attributes.get(MemTraceStep.OUTPUTS) or ())}
                for e in steps
            ]

    def finish(self) -> nx.DiGraph:
        nodes = self.nodes
        # A link to a span that is not here means its trace was not read: the trace backend
        # can be asked for it (Jaeger keeps links as references, without their attributes).
        missing = {trace_id for trace_id, span_id in self.links if (trace_id, span_id) not in self.span_ops}
        if self.content is not None:
            for variable_id, data in nodes.items():
                if data["type"] == "variable" and data["content"] is None:
                    data["content"] = self.content(variable_id)
        self._order_operations()
        self._version_edges()
        self.graph = graph = nx.DiGraph(problems=self.problems, missing_traces=missing)
        graph.add_nodes_from(nodes.items())
        graph.add_edges_from((u, v, {"role": role}) for (u, v), role in self.edges.items())
        self._break_cycles()
        return graph

    def _order_operations(self) -> None:
        ops = [(d["start"], d["trace_id"], d["span_id"], n) for n, d in self.nodes.items()
               if d["type"] == "operation"]
        for order, (*_, op_node) in enumerate(sorted(ops)):
            self.nodes[op_node]["order"] = order

    def _version_edges(self) -> None:
        versions: dict[str, list[int]] = defaultdict(list)
        for data in self.nodes.values():
            if data["type"] == "variable":
                versions[data["name"]].append(data["version"])
        for name, found in versions.items():
            if len(found) > 1:
                found.sort()
                for before, after in pairwise(found):
                    self.edges.setdefault((f"{name}@{before}", f"{name}@{after}"), "version")

    def _break_cycles(self) -> None:
        # A lineage cycle means some span lied about versions; cut the edge that closes it,
        # report it, and keep the rest usable (attribution needs a DAG). The common case, no
        # cycle, is one linear pass over the edge list; only nodes left on cycles are searched.
        remaining = _nodes_on_or_after_cycles(self.edges)
        for _ in range(_MAX_CYCLE_REPAIRS):
            if not remaining:
                return
            cycle = nx.find_cycle(self.graph.subgraph(remaining))
            source, target = cycle[-1][0], cycle[-1][1]
            op = source if source.startswith("op:") else target
            where = self.graph.nodes[op].get("source", "?") if op in self.graph else "?"
            self.problems.append(Problem(where, f"lineage cycle {' -> '.join(e[0] for e in cycle)}; "
                                                f"edge {source} -> {target} dropped"))
            self.graph.remove_edge(source, target)
            remaining = _nodes_on_or_after_cycles(dict.fromkeys(self.graph.subgraph(remaining).edges))


def _nodes_on_or_after_cycles(edges: Iterable[tuple[str, str]]) -> set[str]:
    """Nodes Kahn's algorithm cannot order: empty exactly when the edges form a DAG."""
    successors: dict[str, list[str]] = defaultdict(list)
    indegree: dict[str, int] = defaultdict(int)
    for source, target in edges:
        successors[source].append(target)
        indegree[target] += 1
    ready = [node for node in successors if indegree[node] == 0]
    while ready:
        for child in successors.get(ready.pop(), ()):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return {node for node, degree in indegree.items() if degree > 0}


def build_graph(spans: Iterable[SpanRecord], *, content: ContentLookup | None = None) -> nx.DiGraph:
    """The memory evolution graph of ``spans`` (any number of traces and files).

    Parameters
    ----------
    spans:
        Span records from any reader, or from live spans.
    content:
        Lookup of variable contents missing from the spans (the in-process
        :class:`~memtrace_otel.instrument.ContentStore`'s ``get``).

    Returns
    -------
    networkx.DiGraph
        ``G.graph["problems"]`` lists repaired inconsistencies,
        ``G.graph["missing_traces"]`` trace ids whose producers were referenced but not read.

    Examples
    --------
    >>> from memtrace_otel.spans.model import SpanRecord
    >>> span = SpanRecord("a" * 32, "b" * 16, "extract", attributes={
    ...     "memtrace.operation.category": "extraction",
    ...     "memtrace.inputs": ["msg:1@1"], "memtrace.outputs": ["fact:1@1"],
    ...     "memtrace.variables": ["facts 9 a7b6eda801e5347d fact:1@1"]})
    >>> G = build_graph([span])
    >>> sorted(G.successors("msg:1@1"))
    ['op:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbb']
    >>> G.nodes["fact:1@1"]["kind"]
    'facts'
    """
    builder = _Builder(content)
    with gc_paused():
        for span in spans:
            builder.add_span(span)
        return builder.finish()
