"""The two kinds of node of the memory evolution graph, as the ``type`` node attribute says them.

The graph is bipartite (networkx's ``bipartite`` attribute says the same: variables 0, operations
1). Plain strings rather than an enum, so that a graph written as GraphML, JSON or DOT (and read
back by other tools) carries the bare words.

>>> import networkx as nx
>>> G = nx.DiGraph(); G.add_node("op:t:1", type=OPERATION); G.add_node("fact@1", type=VARIABLE)
>>> sorted(n for n, d in G.nodes(data=True) if d["type"] == VARIABLE)
['fact@1']
"""

from __future__ import annotations

from typing import Final

__all__ = ["NODE_TYPE", "OPERATION", "VARIABLE"]

NODE_TYPE: Final = "type"
"""The node attribute that holds the node's kind."""
VARIABLE: Final = "variable"
"""A value: a message, a memory unit version, a query, a context, a prompt, an answer, a verdict."""
OPERATION: Final = "operation"
"""A span that read and wrote variables: extraction, update, deletion, retrieval, generation ..."""
