"""A verdict in plain words, for the people who open the annotation span in Jaeger or Grafana.

The engine's own explanation is written for the benchmark and the report (graph node ids, its
reasoning); a reader of a trace wants to know *what* was lost and *where*: which memory, from
which message and when, and which span to open. These functions build that text from the verdict's
fields (operation, error type, evidence path, candidates) and the graph, naming spans as the trace
UI shows them (their span name, ``update_memory tiny-memory``, not the application's operation
name ``agent.store``).

Contents are quoted only when the caller says they may be (``quotable``: content capture on and no
content store kept them out of the backend); otherwise the text says names, versions and times.
Plain functions, deterministic (the evidence path and the candidates are ordered lists).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import networkx as nx

from memtrace_otel.attribution import Attribution
from memtrace_otel.graph.node_types import OPERATION, VARIABLE
from memtrace_otel.semconv import ErrorType, VariableKind

__all__ = ["alternatives_text", "plain_explanation", "span_name_of"]

MAX_ALTERNATIVES = 3
"""Ranked alternatives named after the verdict (the rest are in the report, not the span)."""
_QUOTE_CHARS = 80
# The variable kinds that hold the information itself, preferred over queries and prompts when
# saying which memory was lost.
_HOLDERS = (VariableKind.MEMORY_UNIT, VariableKind.CONTEXT, VariableKind.FACTS, VariableKind.MESSAGE)


def span_name_of(G: nx.DiGraph | None, operation: str | None) -> str | None:
    """The span name the trace UI shows for ``operation`` (``None`` when the graph does not hold it)."""
    if G is None or operation is None or operation not in G:
        return None
    data = G.nodes[operation]
    name = data.get("span_name") or data.get("name")
    return str(name) if name else None


def _when(nanos: Any) -> str | None:
    if not isinstance(nanos, int) or nanos <= 0:
        return None
    moment = dt.datetime.fromtimestamp(nanos / 1e9, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _variable(G: nx.DiGraph, node: str) -> Mapping[str, Any] | None:
    data = G.nodes[node] if node in G else None
    return data if data is not None and data.get("type") == VARIABLE else None


def _label(G: nx.DiGraph, node: str, quotable: bool) -> str:
    """``memory mem:D1:1 (version 2)``, with its content quoted when allowed and captured."""
    data = _variable(G, node) or {}
    kind = str(data.get("kind") or "variable").replace("_", " ")
    text = f"{kind} {data.get('name', node)}"
    if data.get("version", 1) != 1:
        text += f" (version {data['version']})"
    content = data.get("content")
    if quotable and isinstance(content, str) and content:
        quoted = content if len(content) <= _QUOTE_CHARS else content[:_QUOTE_CHARS - 1] + "…"
        text += f' "{quoted}"'
    written = _written_at(G, node) if data.get("kind") == VariableKind.MESSAGE else None
    return text + (f" (recorded {written})" if written else "")


def _written_at(G: nx.DiGraph, variable: str) -> str | None:
    """When ``variable`` was written: the start of the operation that produced it."""
    for producer in sorted(G.predecessors(variable)):
        if G.nodes[producer].get("type") == OPERATION:
            return _when(G.nodes[producer].get("start"))
    return None


def _near(G: nx.DiGraph, path: list[str], index: int, step: int) -> str | None:
    """The variable of ``path`` nearest ``path[index]`` in direction ``step`` that holds information
    (a memory unit, context, facts or message); else the adjacent variable (a query, a prompt)."""
    adjacent = None
    position = index + step
    while 0 <= position < len(path):
        data = _variable(G, path[position])
        if data is not None:
            if data.get("kind") in _HOLDERS:
                return path[position]
            adjacent = adjacent or path[position]
        position += step
    return adjacent


def _what(error_type: ErrorType | None, before: str | None, after: str | None) -> str:
    """What the blamed operation did to the information, by error type."""
    if error_type is ErrorType.EXTRACTION:
        read = before or "the information"
        return (f"read {read} and wrote {after} without what it said" if after
                else f"read {read} and kept what it said in no memory")
    if error_type is ErrorType.UPDATE:
        return f"rewrote {before or 'the memory'}" + (f" as {after}" if after else "") + " without it"
    if error_type is ErrorType.DELETION:
        return f"deleted {before or 'the memory that held it'}"
    if error_type is ErrorType.RETRIEVAL:
        return f"did not bring {before or 'the memory that held it'} into the question's context"
    if error_type is ErrorType.RESPONSE:
        return f"answered from {before or 'a context that held the information'} without it"
    return "is where it was lost"


def plain_explanation(G: nx.DiGraph, attribution: Attribution, *, quotable: bool) -> str:
    """What was lost, where and when, in one or two sentences (``attribution`` is attributed).

    >>> G = nx.DiGraph()
    >>> G.add_node("msg:1@1", type="variable", name="msg:1", version=1, kind="message", content="Lisbon")
    >>> G.add_node("op:t:i", type="operation", name="ingest", span_name="ingest", start=0)
    >>> G.add_edge("op:t:i", "msg:1@1")
    >>> G.add_node("op:t:d", type="operation", name="agent.delete", span_name="delete_memory s",
    ...            start=1_700_000_000_000_000_000, service="app")
    >>> from memtrace_otel.attribution import FailureCase
    >>> verdict = Attribution("lineage", FailureCase("op:t:e"), operation="op:t:d",
    ...                       error_type=ErrorType.DELETION, evidence_path=["msg:1@1", "op:t:d"])
    >>> print(plain_explanation(G, verdict, quotable=False))  # doctest: +NORMALIZE_WHITESPACE
    DeletionError in span "delete_memory s" (service app, 2023-11-14 22:13:20 UTC):
    it deleted message msg:1.
    """
    operation = attribution.operation or ""
    data = G.nodes[operation] if operation in G else {}
    name = span_name_of(G, operation) or attribution.operation_name or operation
    where = ", ".join(part for part in (f"service {data['service']}" if data.get("service") else "",
                                        _when(data.get("start")) or "") if part)
    kind = attribution.error_type.value if attribution.error_type else "Root cause"
    head = f'{kind} in span "{name}"' + (f" ({where})" if where else "")
    path = [node for node in attribution.evidence_path if isinstance(node, str)]
    index = path.index(operation) if operation in path else -1
    # the model call inside it that went wrong: a name and an id, no content
    step = (f' Inside it, model call "{attribution.step_name}" (span {attribution.step_span_id}) went wrong.'
            if attribution.step_span_id else "")
    if index < 0:
        return f"{head}.{step}"
    before, after = _near(G, path, index, -1), _near(G, path, index, +1)
    what = _what(attribution.error_type, before and _label(G, before, quotable),
                 after and _label(G, after, quotable))
    sources = [node for node in path[:index]
               if (_variable(G, node) or {}).get("kind") == VariableKind.MESSAGE]
    source = sources[0] if sources else None
    if source is None or source == before:
        return f"{head}: it {what}.{step}"
    return f"{head}: what {_label(G, source, quotable)} said was lost here; it {what}.{step}"


def alternatives_text(G: nx.DiGraph | None, attribution: Attribution) -> str | None:
    """The runners-up, short: ``"generate" ResponseError 0.45; "search_memory s" RetrievalError 0.23``."""
    parts = []
    for candidate in attribution.candidates[1:1 + MAX_ALTERNATIVES]:
        name = span_name_of(G, candidate.operation) or candidate.operation_name or candidate.operation
        kind = candidate.error_type.value if candidate.error_type else "unknown"
        parts.append(f'"{name}" {kind} {candidate.confidence:.2g}')
    more = len(attribution.candidates) - 1 - MAX_ALTERNATIVES
    if more > 0:
        parts.append(f"{more} more")
    return "; ".join(parts) or None
