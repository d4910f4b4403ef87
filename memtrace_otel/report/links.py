"""Links from span ids into a trace backend's UI: Jaeger's trace view, or Tempo's trace API.

A :data:`SpanLinker` turns ``(trace_id, span_id)`` into a URL, or ``None`` when
the report was made without a backend URL (then ids are shown, not linked).
Ids are checked to be lowercase hex before they go into a URL, so nothing from
the input can shape the link beyond them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote

import networkx as nx

__all__ = ["SpanLinker", "jaeger_linker", "linking_stages", "no_links", "tempo_linker"]

SpanLinker = Callable[[str | None, str | None], "str | None"]
"""``linker(trace_id, span_id)`` -> a URL for that span (or its trace), or ``None``."""

_HEX = re.compile(r"[0-9a-f]{1,32}")


def _hex(value: str | None) -> str | None:
    return value if isinstance(value, str) and _HEX.fullmatch(value) else None


def no_links(trace_id: str | None, span_id: str | None) -> str | None:
    """The linker of a report made without a backend: nothing is linked.

    >>> no_links("ab", "cd") is None
    True
    """
    return None


def jaeger_linker(url: str) -> SpanLinker:
    """Links to Jaeger's trace view with the span found: ``{url}/trace/{trace}?uiFind={span}``.

    >>> jaeger_linker("http://127.0.0.1:16686/")("0af7", "b7ad")
    'http://127.0.0.1:16686/trace/0af7?uiFind=b7ad'
    """
    base = url.rstrip("/")

    def link(trace_id: str | None, span_id: str | None) -> str | None:
        trace, span = _hex(trace_id), _hex(span_id)
        if trace is None:
            return None
        return f"{base}/trace/{quote(trace)}" + (f"?uiFind={quote(span)}" if span else "")
    return link


def tempo_linker(url: str) -> SpanLinker:
    """Links to Tempo's trace-by-id API (``{url}/api/traces/{trace}``); Tempo has no UI of its own.

    >>> tempo_linker("http://127.0.0.1:3200")("0af7", "b7ad")
    'http://127.0.0.1:3200/api/traces/0af7'
    """
    base = url.rstrip("/")

    def link(trace_id: str | None, span_id: str | None) -> str | None:
        trace = _hex(trace_id)
        return f"{base}/api/traces/{quote(trace)}" if trace else None
    return link


def linking_stages(linker: SpanLinker, graph: nx.DiGraph) -> SpanLinker:
    """``linker`` with a stage's id read as the span the stage is an event of.

    A stage recorded as an event of its call's span (mem0's ``add``: ``memtrace.stage`` events,
    :mod:`memtrace_otel.graph.stages`) is an operation node whose ``span_id`` is the stage's own id,
    which no backend knows; the node's ``stage_of`` names the span that holds it, so the link opens
    that span.

    >>> G = nx.DiGraph()
    >>> G.add_node("op:t:5a", type="operation", span_id="5a", stage_of="b7ad")
    >>> linking_stages(jaeger_linker("http://127.0.0.1:16686"), G)("0af7", "5a")
    'http://127.0.0.1:16686/trace/0af7?uiFind=b7ad'
    """
    hosts = {data["span_id"]: data["stage_of"] for _, data in graph.nodes(data=True)
             if isinstance(data.get("stage_of"), str) and isinstance(data.get("span_id"), str)}
    if not hosts:
        return linker

    def link(trace_id: str | None, span_id: str | None) -> str | None:
        return linker(trace_id, hosts.get(span_id, span_id) if span_id else span_id)

    return link
