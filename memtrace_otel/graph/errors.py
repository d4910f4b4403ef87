"""One exception hierarchy for graph algorithms (networkx's ``exception.py`` habit)."""

from __future__ import annotations

__all__ = ["MemTraceGraphError", "NodeNotFound"]


class MemTraceGraphError(Exception):
    """Base class of errors raised by graph queries."""


class NodeNotFound(MemTraceGraphError, KeyError):
    """A node (variable id or operation) asked for is not in the graph."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
