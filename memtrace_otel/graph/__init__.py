"""Graph: the memory evolution graph rebuilt from spans, and the queries over it."""

from memtrace_otel.graph.build import build_graph, operation_node_id
from memtrace_otel.graph.errors import MemTraceGraphError, NodeNotFound
from memtrace_otel.graph.export import FORMATS, write_graph
from memtrace_otel.graph.index import clear_index
from memtrace_otel.graph.query import (
    EvidenceRule,
    answer_of,
    backward_slice,
    evaluations,
    evidence_keys,
    evidence_variables,
    failed_evaluations,
    lineage_path,
    memory_life,
    missing_lineage,
    operations,
    operations_between,
    producer_of,
    trace_subgraph,
)

__all__ = [
    "FORMATS",
    "EvidenceRule",
    "MemTraceGraphError",
    "NodeNotFound",
    "answer_of",
    "backward_slice",
    "build_graph",
    "clear_index",
    "evaluations",
    "evidence_keys",
    "evidence_variables",
    "failed_evaluations",
    "lineage_path",
    "memory_life",
    "missing_lineage",
    "operation_node_id",
    "operations",
    "operations_between",
    "producer_of",
    "trace_subgraph",
    "write_graph",
]
