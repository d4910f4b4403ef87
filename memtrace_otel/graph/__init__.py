"""Graph: the memory evolution graph rebuilt from spans, and the queries over it."""

from memtrace_otel.graph.build import build_graph, operation_node_id
from memtrace_otel.graph.errors import MemTraceGraphError, NodeNotFound
from memtrace_otel.graph.export import FORMATS, write_graph
from memtrace_otel.graph.query import (
    answer_of,
    backward_slice,
    evaluations,
    evidence_variables,
    failed_evaluations,
    lineage_path,
    memory_life,
    operations,
    operations_between,
    producer_of,
)

__all__ = [
    "FORMATS",
    "MemTraceGraphError",
    "NodeNotFound",
    "answer_of",
    "backward_slice",
    "build_graph",
    "evaluations",
    "evidence_variables",
    "failed_evaluations",
    "lineage_path",
    "memory_life",
    "operation_node_id",
    "operations",
    "operations_between",
    "producer_of",
    "write_graph",
]
