"""``memtrace analyze`` on a long-running app that reuses its variable names.

``examples/offline_memory_agent.py`` (three chat sessions, seven questions, three of them
answered wrong) is run ``--repeat`` times in one process with one :class:`MemoryTracer`, a
fresh memory each time: a service that handles the same kind of conversation again and
again. Every run writes ``msg:D1:1``, ``facts:D1:1``, ``mem:moved`` ... again, so each name
gets one version per run (``msg:D1:1@1`` ... ``msg:D1:1@N``) and the graph holds version
chains as long as the run count, across thousands of traces. With unique names
(``benchmarks/performance/analyze_scale.py``) the chains are short; this is the input that was quadratic
(issue 24: 10k spans 17 s, 20k 98 s).

For each size, in a fresh process (CPU time, one core): read the file, ``build_graph``,
``attribute_failures(G, "lineage")``; prints spans/s and the verdicts' error types counted
(every repetition fails the same three questions, so the counts must scale with the runs).

Target: 200k spans analysed in <= 60 s, time linear in spans.

    python benchmarks/performance/analyze_repeated.py [--spans 10000 20000 50000 100000 200000] \
        [--dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.spans import read_span_files

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import offline_memory_agent as example  # the example is a script, not a package


def _spans_per_run() -> int:
    """Spans (memory operations and application spans) one run of the example exports."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "one.jsonl")
        generate(path, 1)
        return len(read_span_files([path]).spans)


class _UserMemory(example.TinyMemory):
    """The example's memory for one user of many: the store names its records per user (a real store
    gives each new record an id of its own), everything else keeps the example's names."""

    def __init__(self, tracer: MemoryTracer, app_tracer: Any, user: int) -> None:
        super().__init__(tracer, app_tracer)
        self.user = user

    def _store(self, facts_var: object, fact: str) -> None:
        topic = fact.split()[1]
        record_id = f"mem:{self.user}:{topic}"
        existing = self.records.get(record_id)
        operation = "update_memory" if existing else "create_memory"
        category = Category.UPDATE if existing else Category.EXTRACTION
        with self.tracer.operation("agent.store", category, gen_ai_operation=operation,
                                   store_id="tiny-memory") as op:
            op.read(facts_var)
            if existing:
                unit = op.update(op.read_record(existing.metadata, content=existing.text), fact)
            else:
                unit = op.write(record_id, fact, kind=VariableKind.MEMORY_UNIT)
            self.records[record_id] = example.Record(fact, op.lineage_metadata(unit))


def generate(path: str, runs: int, *, shared_records: bool = False) -> None:
    """Run the example ``runs`` times in one process, one tracer, spans to ``path``.

    ``shared_records``: every run's store names its records as the example does (``mem:moved``),
    so memory units, too, get one version per run: version chains of stored memory across every
    conversation, which the engine follows as lineage (an update rewrites the unit).
    """
    provider = TracerProvider(resource=Resource.create({"service.name": "offline-memory-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path), max_queue_size=1 << 16))
    tracer = MemoryTracer(provider, capture_content=True)
    app_tracer = provider.get_tracer("offline-memory-agent")
    for run in range(runs):
        # a new user: the same message, query, context and answer names, records of its own
        memory = (example.TinyMemory(tracer, app_tracer) if shared_records
                  else _UserMemory(tracer, app_tracer, run))
        for number, session in enumerate(example.SESSIONS, start=1):
            with app_tracer.start_as_current_span(f"session {number}"):
                for dia_id, text in session:
                    memory.ingest(dia_id, text)
        for case_id, question, gold, evidence in example.QUESTIONS:
            memory.answer(case_id, question, gold, evidence)
    provider.shutdown()


_ANALYZE = """
import collections, json, sys, time, resource
from memtrace_otel.attribution.runner import attribute_failures
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files
start = time.process_time()
result = read_span_files([sys.argv[1]])
read = time.process_time()
graph = build_graph(result.spans)
built = time.process_time()
attributions = attribute_failures(graph, "lineage")
done = time.process_time()
types = collections.Counter(a.error_type.value if a.error_type else "none" for a in attributions)
print(json.dumps({
    "spans": len(result.spans), "failures": len(attributions), "read_seconds": read - start,
    "build_seconds": built - read, "attribute_seconds": done - built, "types": dict(sorted(types.items())),
    "longest_chain": max((len(v) for v in __import__("memtrace_otel.graph.index", fromlist=["x"])
                          .variables_by_name(graph).values()), default=0),
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def measure(path: str) -> dict[str, object]:
    """Read + build + attribute ``path`` in a fresh process; CPU seconds of each phase."""
    out = subprocess.run([sys.executable, "-c", _ANALYZE, path], check=True, capture_output=True, text=True)
    row = json.loads(out.stdout)
    row["analyze_seconds"] = row["build_seconds"] + row["attribute_seconds"]
    row["spans_per_second"] = row["spans"] / max(row["analyze_seconds"], 1e-9)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[10_000, 20_000, 50_000, 100_000, 200_000])
    parser.add_argument("--dir", help="keep (and reuse) the generated span files here")
    parser.add_argument("--shared-records", action="store_true",
                        help="memory records named alike in every run too (one user's unit rewritten)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with contextlib.redirect_stdout(io.StringIO()):  # the example's own prints
        per_run = _spans_per_run()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.dir or scratch
        os.makedirs(directory, exist_ok=True)
        rows = []
        for spans in args.spans:
            runs = max(1, round(spans / per_run))
            shared = "-shared" if args.shared_records else ""
            path = os.path.join(directory, f"analyze-repeated-{runs}{shared}.jsonl")
            if not os.path.exists(path):
                generate(path, runs, shared_records=args.shared_records)
            rows.append(measure(path))
            if not args.json:
                _print_row(rows[-1], first=len(rows) == 1)
    if args.json:
        print(json.dumps(rows, indent=2))


def _print_row(row: dict[str, object], *, first: bool) -> None:
    if first:
        print("CPU seconds of a fresh process, one core; analyze = build_graph + attribute_failures")
        print(f"{'spans':>8} {'failures':>8} {'chain':>6} {'read':>7} {'build':>7} {'attribute':>9} "
              f"{'analyze':>8} {'spans/s':>9} {'MiB':>6}  verdicts")
    print(f"{row['spans']:>8} {row['failures']:>8} {row['longest_chain']:>6} {row['read_seconds']:>7.2f} "
          f"{row['build_seconds']:>7.2f} {row['attribute_seconds']:>9.2f} {row['analyze_seconds']:>8.2f} "
          f"{row['spans_per_second']:>9,.0f} {row['peak_rss_mib']:>6.0f}  {row['types']}", flush=True)


if __name__ == "__main__":
    main()
