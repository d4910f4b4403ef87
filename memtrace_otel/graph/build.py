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

from memtrace_otel.semconv import (
    GENAI_OPERATION_CATEGORY,
    Category,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceStep,
)
from memtrace_otel.spans.model import Problem, SpanLink, SpanRecord
from memtrace_otel.spans.readers import gc_paused
from memtrace_otel.wire import (
    EVALUATION_TEXT_FIELDS,
    MalformedId,
    evaluation_text_key,
    operation_node_id,
    parse_descriptor,
    split_variable_id,
)

__all__ = ["ContentLookup", "build_graph", "operation_node_id"]

ContentLookup = Callable[[str], "str | None"]
"""Gives the content of a variable id when spans carry none (in-process attribution)."""

_MAX_CYCLE_REPAIRS = 1000
_INPUTS, _OUTPUTS, _DELETED = MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.DELETED
_VARIABLES, _VARIABLE_CONTENTS = MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS


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


# Category values as plain strings: enum calls and ``.value`` are slow in a per-span loop.
_CATEGORIES = {category.value: str(category.value) for category in Category}
_OTHER = str(Category.OTHER.value)
_MEMORY_CATEGORIES = {str(op.value): str(category.value) for op, category in GENAI_OPERATION_CATEGORY.items()}
_CATEGORY, _GEN_AI_OPERATION = MemTrace.OPERATION_CATEGORY, GenAI.OPERATION_NAME
_NAME, _OUTCOME, _STORE = MemTrace.OPERATION_NAME, MemTrace.OPERATION_OUTCOME, GenAI.MEMORY_STORE_ID
_PASSED = MemTrace.EVALUATION_PASSED


def _category(attributes: dict[str, Any]) -> str | None:
    """The operation's category value, None for a span that is not a memory operation."""
    raw = attributes.get(_CATEGORY)
    if isinstance(raw, str):
        return _CATEGORIES.get(raw, _OTHER)
    gen_ai = attributes.get(_GEN_AI_OPERATION)
    return _MEMORY_CATEGORIES.get(gen_ai) if isinstance(gen_ai, str) else None


def _operation_attributes(span: SpanRecord, category: str) -> dict[str, Any]:
    a = span.attributes
    data: dict[str, Any] = {
        "type": "operation", "bipartite": 1,
        "name": str(a.get(_NAME) or span.name), "span_name": span.name,
        "category": category, "trace_id": span.trace_id, "span_id": span.span_id,
        "parent_span_id": span.parent_span_id, "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano, "status": span.status_code, "service": span.service_name,
        "outcome": a.get(_OUTCOME), "source": span.source,
        "gen_ai_operation": a.get(_GEN_AI_OPERATION), "store_id": a.get(_STORE),
        "content_captured": _VARIABLE_CONTENTS in a,
    }
    if _PASSED in a:
        data.update({
            "passed": bool(a.get(_PASSED)), "score": a.get(MemTrace.EVALUATION_SCORE),
            "signal": a.get(MemTrace.EVALUATION_SIGNAL), "question": a.get(MemTrace.EVALUATION_QUESTION),
            "prediction": a.get(MemTrace.EVALUATION_PREDICTION), "gold": a.get(MemTrace.EVALUATION_GOLD),
            "explanation": a.get(MemTrace.EVALUATION_EXPLANATION),
            "evidence": list(a.get(MemTrace.EVALUATION_EVIDENCE) or ()),
            "answer": a.get(MemTrace.EVALUATION_ANSWER), "case": a.get(MemTrace.EVALUATION_CASE),
        })
    return data


class _Builder:
    """Accumulates one graph; not thread-safe (one builder per build).

    Nodes and adjacency are collected in the plain dicts a ``networkx.DiGraph`` keeps
    (``_node``, ``_succ``, ``_pred``) and installed in the graph at the end: per-call
    ``add_node``/``add_edge``, and even networkx's bulk calls, cost more than the whole rest
    of the build. The layout is exactly the one ``add_nodes_from`` + ``add_edges_from``
    make: every node in all three dicts in one order, one data dict per edge shared by
    ``succ[u][v]`` and ``pred[v][u]``, a node only an edge names added with empty data.
    """

    def __init__(self, content: ContentLookup | None) -> None:
        self.problems: list[Problem] = []
        self.content = content
        self.nodes: dict[str, dict[str, Any]] = {}
        self.succ: dict[str, dict[str, dict[str, Any]]] = {}
        self.pred: dict[str, dict[str, dict[str, Any]]] = {}
        self.span_ops: set[tuple[str, str]] = set()
        self.links: list[SpanLink] = []  # producers the operations linked to
        # Lineage in the order it was added, replayed only to report a cycle in a stable order.
        self.lineage: list[tuple[str, list[str], list[str]]] = []
        self.version_edges: list[tuple[str, str]] = []

    def touch(self, variable_id: str) -> dict[str, Any]:
        data = self.nodes.get(variable_id)
        if data is None:
            name, version = split_variable_id(variable_id)
            data = self.nodes[variable_id] = {
                "type": "variable", "bipartite": 0, "name": name, "version": version,
                "kind": "other", "hash": "", "size": 0, "content": None, "deleted": False}
            self.succ[variable_id], self.pred[variable_id] = {}, {}
        return data

    def describe(self, descriptor: Any, content: Any, span: SpanRecord) -> None:
        try:
            variable_id, kind, size, digest = parse_descriptor(descriptor)
        except MalformedId as error:
            self.problems.append(Problem(span.source, f"span {span.span_id}: {MemTrace.VARIABLES} "
                                                      f"entry skipped: {error}"))
            return
        data = self.nodes.get(variable_id) or self.touch(variable_id)
        if not data["hash"]:
            data["kind"], data["size"], data["hash"] = kind, size, digest
        if data["content"] is None and isinstance(content, str):
            data["content"] = content

    def add_span(self, span: SpanRecord) -> None:
        a = span.attributes
        category = _category(a)
        if category is None:
            return  # not a memory operation: ordinary application spans stay out of the graph
        node = f"op:{span.trace_id}:{span.span_id}"  # operation_node_id, inlined (hot path)
        self.span_ops.add((span.trace_id, span.span_id))
        problems, nodes, succ, pred, touch = self.problems, self.nodes, self.succ, self.pred, self.touch
        if node not in succ:
            succ[node], pred[node] = {}, {}
        data = nodes[node] = _operation_attributes(span, category)
        inputs = _strings(a.get(_INPUTS), _INPUTS, span, problems)
        ins = pred[node]
        for variable_id in inputs:
            if variable_id not in nodes:
                touch(variable_id)
            succ[variable_id][node] = ins[variable_id] = {"role": "input"}
        outputs = _strings(a.get(_OUTPUTS), _OUTPUTS, span, problems)
        outs = succ[node]
        for variable_id in outputs:
            if variable_id not in nodes:
                touch(variable_id)
            outs[variable_id] = pred[variable_id][node] = {"role": "output"}
        self.lineage.append((node, inputs, outputs))
        descriptors = _strings(a.get(_VARIABLES), _VARIABLES, span, problems)
        if descriptors:
            contents = _column(a, _VARIABLE_CONTENTS, len(descriptors), None)
            for descriptor, content in zip(descriptors, contents, strict=True):
                self.describe(descriptor, content, span)
        deleted = a.get(_DELETED)
        if deleted is not None:
            for variable_id in _strings(deleted, _DELETED, span, problems):
                touch(variable_id)["deleted"] = True
        if span.links:
            self.links.extend(span.links)
        if span.events:
            steps = [e for e in span.events if e.name == MemTraceEvent.STEP]
            if steps:
                data["steps"] = [
                    {"name": e.attributes.get(MemTraceStep.NAME, ""),
                     "inputs": list(e.attributes.get(MemTraceStep.INPUTS) or ()),
                     "outputs": list(e.attributes.get(MemTraceStep.OUTPUTS) or ())}
                    for e in steps
                ]

    def _fill_contents(self) -> None:
        # Spans exported without content, read in the process that made them: the in-process
        # store still has what variables and verdicts said.
        lookup = self.content
        for node, data in self.nodes.items():
            if data["type"] == "variable":
                if data["content"] is None:
                    data["content"] = lookup(node)
            elif "passed" in data:
                for field_name in EVALUATION_TEXT_FIELDS:
                    if data.get(field_name) is None:
                        data[field_name] = lookup(evaluation_text_key(data["span_id"], field_name))

    def finish(self) -> nx.DiGraph:
        nodes, span_ops = self.nodes, self.span_ops
        # A link to a span that is not here means its trace was not read: the trace backend
        # can be asked for it (Jaeger keeps links as references, without their attributes).
        missing = {link.trace_id for link in self.links if (link.trace_id, link.span_id) not in span_ops}
        if self.content is not None:
            self._fill_contents()
        self._order_operations()
        self._version_edges()
        self.graph = graph = nx.DiGraph(problems=self.problems, missing_traces=missing)
        # networkx's descriptors for these three reset its cached views: the supported way
        # for a builder to install its own dicts.
        graph._node, graph._succ, graph._pred = nodes, self.succ, self.pred
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
        succ, pred, nodes = self.succ, self.pred, self.nodes
        for name, found in versions.items():
            if len(found) > 1:
                found.sort()
                for before, after in pairwise(found):
                    source, target = f"{name}@{before}", f"{name}@{after}"
                    for end in (source, target):  # "x@01" names node "x@1" nobody wrote
                        if end not in succ:
                            succ[end], pred[end], nodes[end] = {}, {}, {}
                    if target not in succ[source]:  # an edge already there keeps its role
                        succ[source][target] = pred[target][source] = {"role": "version"}
                        self.version_edges.append((source, target))

    def _edge_order(self) -> dict[tuple[str, str], None]:
        """The edges in the order they were first added (the order cycles are searched in)."""
        edges: dict[tuple[str, str], None] = {}
        for node, inputs, outputs in self.lineage:
            edges.update(((variable_id, node), None) for variable_id in inputs)
            edges.update(((node, variable_id), None) for variable_id in outputs)
        edges.update(dict.fromkeys(self.version_edges))
        return edges

    def _break_cycles(self) -> None:
        # A lineage cycle means some span lied about versions; cut the edge that closes it,
        # report it, and keep the rest usable (attribution needs a DAG). The common case, no
        # cycle, is one linear pass over the adjacency; only nodes left on cycles are searched.
        if _is_dag(self.succ, self.pred):
            return
        remaining = _nodes_on_or_after_cycles(self._edge_order())
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


def _is_dag(succ: dict[str, dict[str, Any]], pred: dict[str, dict[str, Any]]) -> bool:
    """Kahn's algorithm over the adjacency dicts: True when every node can be ordered."""
    indegree = dict(zip(pred, map(len, pred.values()), strict=True))
    ordered = [node for node, degree in indegree.items() if not degree]
    for node in ordered:  # grows while it is walked: each node freed by its last parent
        for child in succ[node]:
            left = indegree[child] - 1
            indegree[child] = left
            if not left:
                ordered.append(child)
    return len(ordered) == len(indegree)


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
