"""Import speed of smartcomment graphs: edges per second, read + convert + OTLP/JSON file written.

Generates one large graph in smartcomment's export schema (what ``ExecNetwork.export_graph()``
writes: sessions, content-hash-named variables, edges grouped by op_id, mutation version edges,
NONE-sentinel edges, annotations), then times ``memtrace import smartcomment`` 's two steps.

    .venv/bin/python benchmarks/performance/smartcomment_import.py --operations 20000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time

from memtrace_otel.cli.import_cmd import smartcomment_spans, write_otlp_json
from memtrace_otel.graph.build import build_graph


def _stamp(i: int) -> str:
    return f"2026-01-01 00:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}"


def _node(full_id: str, value: str, category: str, session: str, i: int) -> dict:
    name, _, version = full_id.rpartition("@")
    return {
        "created_at": _stamp(i),
        "filename": "gen.py",
        "lineno": 1,
        "name": name,
        "version": int(version),
        "value": repr(value),
        "comment": None,
        "category": category,
        "graph_id": "graph-bench",
        "user_id": None,
        "class_name": None,
        "project_id": "bench",
        "session_id": session,
        "metadata": {},
        "full_node_id": full_id,
    }


def synthetic_graph(operations: int) -> dict:
    nodes, edges, ops, annotations = {}, [], [], []
    sessions = [
        {
            "session_id": f"s{k}",
            "session_name": f"session {k}",
            "category": "ingest",
            "created_at": _stamp(0),
            "graph_id": "graph-bench",
        }
        for k in range(10)
    ]
    categories = ["extraction", "update", "retrieval", "generation", "evaluation"]
    previous, outputs = "str:seed@1", []
    nodes[previous] = _node(previous, "seed", "message", "s0", 0)
    for i in range(operations):
        session, category = f"s{i * 10 // operations}", categories[i % 5]
        op_id = f"op-{i:08d}"
        ops.append(
            {
                "op_id": op_id,
                "op_name": f"bench.{category}",
                "category": category,
                "created_at": _stamp(i),
                "session_id": session,
                "graph_id": "graph-bench",
                "comment": None,
            }
        )
        message = f"str:{hashlib.sha1(str(i).encode()).hexdigest()}@1"
        nodes[message] = _node(message, f"message {i}", "message", session, i)
        output = f"memory:m{i % 997}@{i // 997 + 1}" if category == "update" else f"str:out{i}@1"
        nodes[output] = _node(output, f"value {i}", "memory_unit", session, i)
        for source in (previous, message, outputs[-2] if len(outputs) > 1 else previous):
            edges.append(
                {
                    "edge_id": f"e-{len(edges)}",
                    "op_id": op_id,
                    "category": category,
                    "created_at": _stamp(i),
                    "source_full_node_id": source,
                    "target_full_node_id": output,
                    "session_id": session,
                }
            )
        edges.append(
            {
                "edge_id": f"e-{len(edges)}",
                "op_id": op_id,
                "category": category,
                "created_at": _stamp(i),
                "source_full_node_id": message,
                "target_full_node_id": "COMMENT:NONE@1",
                "session_id": session,
            }
        )
        previous = output
        outputs.append(output)
        if category == "evaluation" and i % 50 == 4:
            annotations.append(
                {
                    "query_id": f"q{i}",
                    "query": f"message {i}",
                    "golden_answers": ["x"],
                    "prediction": f"value {i}",
                    "source_evidence_ids": [],
                    "final_error_type": "RetrievalError",
                    "final_op_id": f"op-{i - 2:08d}",
                }
            )
    nodes["COMMENT:NONE@1"] = _node("COMMENT:NONE@1", "NONE", "sentinel", "__none__", 0)
    return {
        "graph_id": "graph-bench",
        "project_id": "bench",
        "created_at": _stamp(0),
        "data": {
            "nodes": list(nodes.values()),
            "edges": edges,
            "operations": ops,
            "sessions": sessions,
            "annotations": annotations,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--operations", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "graph.json")
        graph = synthetic_graph(args.operations)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(graph, handle)
        edges = len(graph["data"]["edges"])
        started = time.perf_counter()
        spans, problems = smartcomment_spans([path])
        read = time.perf_counter() - started
        write_otlp_json(spans, os.path.join(tmp, "out.jsonl"))
        total = time.perf_counter() - started
        started = time.perf_counter()
        G = build_graph(spans)
        graph_seconds = time.perf_counter() - started
    print(f"{edges:,} edges, {args.operations:,} operations, {len(spans):,} spans, {len(problems)} problems")
    print(f"read + convert: {read:.2f} s ({edges / read:,.0f} edges/s)")
    print(f"import (read + convert + OTLP/JSON file): {total:.2f} s ({edges / total:,.0f} edges/s)")
    print(f"graph build from the spans: {graph_seconds:.2f} s ({G.number_of_nodes():,} nodes)")


if __name__ == "__main__":
    main()
