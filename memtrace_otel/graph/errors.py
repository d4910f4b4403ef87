"""One exception hierarchy for graph algorithms, rooted in networkx's own (its ``exception.py`` habit).

Code that already catches networkx's exceptions catches ours: a missing node is a
``networkx.NodeNotFound`` (and, as before, a ``KeyError``), and every error of a graph
query is a ``networkx.NetworkXException``.

>>> import networkx as nx
>>> issubclass(NodeNotFound, nx.NodeNotFound) and issubclass(MemTraceGraphError, nx.NetworkXException)
True
"""

from __future__ import annotations

import networkx as nx

__all__ = ["MemTraceGraphError", "NodeNotFound"]


class MemTraceGraphError(nx.NetworkXException):
    """Base class of errors raised by graph queries."""


class NodeNotFound(MemTraceGraphError, nx.NodeNotFound, KeyError):
    """A node (variable id or operation) asked for is not in the graph."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
