"""Tokens per case of the three LLM engines on a benchmark directory, against the scripted server.

No model API is reachable here, so this measures the *plumbing and cost*, not
accuracy: it starts the tests' scripted OpenAI-compatible server on
127.0.0.1, plays :class:`OraclePolicy` (it is handed each case's gold
operation as a hint — an accuracy number from it would be meaningless and is
not printed as one), and runs ``llm-agent``, ``llm-all-at-once`` and
``flat-log`` on the same cases through the real ``openai`` client. Tokens
are the server's ``usage`` (one token per 4 characters of request JSON),
summed per case by the engines. ``shown`` counts cases where the labelled
operation reached the model (the oracle can only name what it was shown).
Target: ``llm-agent`` within its token
budget on every case.

    memtrace bench build --quick --out DIR
    python benchmarks/performance/llm_tokens.py DIR [--budget 30000] [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import networkx as nx

from memtrace_otel.attribution import Attribution, FailureCase, create_engine
from memtrace_otel.attribution.render import OperationIndex
from memtrace_otel.graph import build_graph
from memtrace_otel.graph.build import operation_node_id
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.spans import read_span_files

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from openai_server import OraclePolicy, ScriptedOpenAIServer

ENGINES = ("llm-agent", "llm-all-at-once", "flat-log")


def load_labels(directory: str) -> list[dict[str, Any]]:
    with open(os.path.join(directory, "labels.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _evaluation_for(G: nx.DiGraph, label: dict[str, Any]) -> str | None:
    failed = failed_evaluations(G)
    for key, value in (("case", label.get("case_id")), ("question", label.get("question"))):
        found = [e for e in failed if value and G.nodes[e].get(key) == value]
        if found:
            return found[-1]
    return None


def cases(directory: str, limit: int | None) -> Iterator[tuple[dict[str, Any], nx.DiGraph, FailureCase, str]]:
    """(label, graph, case, gold op node) per label whose spans and evaluation can be read."""
    graphs: dict[tuple[str, ...], nx.DiGraph] = {}
    for label in load_labels(directory)[:limit]:
        files = tuple(os.path.join(directory, p) for p in label["spans"])
        if files not in graphs:
            graphs.clear()  # labels of one graph are adjacent; keep memory flat
            graphs[files] = build_graph(read_span_files(list(files)).spans)
        G = graphs[files]
        evaluation = _evaluation_for(G, label)
        span = label.get("operation") or {}
        gold = operation_node_id(span.get("trace_id", ""), span.get("span_id", ""))
        if evaluation is None or gold not in G:
            print(f"skipped {label.get('case_id')}: evaluation or gold operation not in its spans",
                  file=sys.stderr)
            continue
        yield label, G, FailureCase.from_graph(G, evaluation), gold


def run(directory: str, budget: int, limit: int | None) -> list[dict[str, Any]]:
    oracle = OraclePolicy({})
    rows = []
    with ScriptedOpenAIServer(oracle) as server:
        engines = {name: create_engine(name, base_url=server.base_url, token_budget=budget, retry_delay=0)
                   for name in ENGINES}
        for label, G, case, gold in cases(directory, limit):
            oracle.hints = {case.question or "": (OperationIndex(G).alias(gold), label["error_type"])}
            for name, engine in engines.items():
                before = len(server.requests)
                result: Attribution = engine.attribute(G, case)
                rows.append({
                    "case_id": label.get("case_id"), "system": label.get("system"),
                    "error_type": label["error_type"], "engine": name, "tokens": result.tokens,
                    "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
                    "calls": len(server.requests) - before, "within_budget": result.tokens <= budget,
                    "failure_reason": result.failure_reason, "seconds": round(result.seconds, 4),
                    # With the oracle, the labelled op is answered only if the engine showed it to
                    # the model: this measures the walk / the prompt, not a model's accuracy.
                    "showed_labelled_op": result.operation == gold,
                    "graph_operations": sum(1 for _, d in G.nodes(data=True) if d.get("type") == "operation"),
                })
    return rows


def summary(rows: list[dict[str, Any]], budget: int) -> dict[str, dict[str, Any]]:
    by_engine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_engine[row["engine"]].append(row)
    result = {}
    for name, items in by_engine.items():
        tokens = [r["tokens"] for r in items]
        result[name] = {
            "cases": len(items), "budget": budget,
            "within_budget": sum(r["within_budget"] for r in items),
            "failed": sum(r["failure_reason"] is not None for r in items),
            "tokens_median": statistics.median(tokens), "tokens_mean": round(statistics.fmean(tokens)),
            "tokens_max": max(tokens), "tokens_min": min(tokens),
            "calls_mean": round(statistics.fmean(r["calls"] for r in items), 2),
            "showed_labelled_op": sum(r["showed_labelled_op"] for r in items),
            "failure_reasons": sorted({r["failure_reason"] for r in items if r["failure_reason"]}),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="output of `memtrace bench build`")
    parser.add_argument("--budget", type=int, default=30_000, help="token budget per case")
    parser.add_argument("--limit", type=int, default=None, help="first N labels only")
    parser.add_argument("--json", action="store_true", help="per-case rows and summary as JSON")
    args = parser.parse_args(argv)
    rows = run(args.directory, args.budget, args.limit)
    if not rows:
        print("no cases found", file=sys.stderr)
        return 1
    report = summary(rows, args.budget)
    if args.json:
        print(json.dumps({"summary": report, "cases": rows}, indent=2))
    else:
        print(f"{'engine':16} {'cases':>5} {'in budget':>9} {'failed':>6} {'median':>7} {'mean':>7} "
              f"{'max':>7} {'calls':>6} {'shown':>5}   (tokens per case, scripted server; "
              f"budget {args.budget})")
        for name, s in report.items():
            print(f"{name:16} {s['cases']:>5} {s['within_budget']:>9} {s['failed']:>6} "
                  f"{s['tokens_median']:>7} {s['tokens_mean']:>7} {s['tokens_max']:>7} {s['calls_mean']:>6} "
                  f"{s['showed_labelled_op']:>5}")
            for reason in s["failure_reasons"]:
                print(f"{'':16} failure: {reason}")
    agent = report.get("llm-agent")
    return 0 if agent and agent["within_budget"] == agent["cases"] else 2


if __name__ == "__main__":
    raise SystemExit(main())
