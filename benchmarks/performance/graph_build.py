"""Graph build from a large OTLP/JSON Lines file, against merely parsing it with the json module.

Generates a file of about ``--spans`` spans from a Mem0-shaped pipeline (ingest ->
extract -> store, then search -> answer -> judge), then measures, each in a fresh
process so that peak memory is its own:

* ``parse``: ``json.loads`` of every line, nothing else;
* ``graph``: ``read_span_files`` + ``build_graph`` (the whole of ``memtrace graph``'s work).

Targets: >= 50k spans/s on one core, and <= 2x the bare parse time.

    python benchmarks/performance/graph_build.py [--spans 100000] [--file PATH] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

_SPANS_PER_ROUND = 6


def generate(path: str, spans: int) -> None:
    """Write about ``spans`` spans of a memory pipeline to ``path`` (content captured)."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path), max_queue_size=1 << 16,
                                                   max_export_batch_size=512))
    mt = MemoryTracer(provider, capture_content=True)
    app = provider.get_tracer("bench")
    for i in range(spans // _SPANS_PER_ROUND):
        with app.start_as_current_span("turn"):
            with mt.operation("ingest", Category.INGEST) as op:
                message = op.write(f"msg:D{i // 20}:{i}", f"I told you about event {i} on day {i % 28}",
                                   kind=VariableKind.MESSAGE)
            with mt.operation("extract", Category.EXTRACTION, gen_ai_operation="create_memory",
                              store_id="bench") as op:
                op.read(message)
                unit = op.write(f"mem:{i % 500}", f"User had event {i} on day {i % 28}",
                                kind=VariableKind.MEMORY_UNIT)
            with mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory",
                              store_id="bench") as op:
                query = op.write(f"query:{i}", f"What happened on day {i % 28}?", kind=VariableKind.QUERY)
                op.read(unit)
                context = op.write(f"context:{i}", unit.content, kind=VariableKind.CONTEXT)
            with mt.operation("generate", Category.GENERATION) as op:
                op.read(query)
                op.read(context)
                answer = op.write(f"answer:{i}", f"event {i}", kind=VariableKind.ANSWER)
            with mt.operation("judge", Category.EVALUATION) as op:
                op.read(answer)
                op.record_evaluation(i % 3 != 0, score=float(i % 3 != 0), gold=f"event {i}",
                                     evidence=[f"D{i // 20}:{i}"], answer=answer, case_id=str(i))
    provider.shutdown()


_PARSE = """
import json, sys, time, resource
start = time.process_time()
spans = 0
with open(sys.argv[1], encoding="utf-8") as handle:
    for line in handle:
        document = json.loads(line)
        for rs in document["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans += len(ss["spans"])
print(spans, time.process_time() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

_GRAPH = """
import sys, time, resource
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files
start = time.process_time()
result = read_span_files([sys.argv[1]])
read = time.process_time() - start
graph = build_graph(result.spans)
assert not result.problems, result.problems[:3]
print(len(result.spans), time.process_time() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      read)
"""


def _run(script: str, path: str) -> dict[str, float]:
    # CPU time of one fresh process: one core's work, whatever else the machine is doing.
    out = subprocess.run([sys.executable, "-c", script, path], check=True, capture_output=True, text=True)
    spans, seconds, maxrss_kib, *read = out.stdout.split()
    result = {"spans": int(spans), "cpu_seconds": float(seconds),
              "spans_per_second": int(spans) / float(seconds),
              "peak_rss_mib": int(maxrss_kib) / 1024}
    if read:  # the graph run also says how its time splits between reading and building
        result["read_cpu_seconds"] = float(read[0])
        result["build_cpu_seconds"] = float(seconds) - float(read[0])
    return result


def _median_run(script: str, path: str, runs: list[dict[str, float]]) -> dict[str, float]:
    keys = runs[0].keys()
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--file", help="use (or create) this span file instead of a temporary one")
    parser.add_argument("--repeat", type=int, default=5,
                        help="alternating parse/graph runs; medians are reported (this VM is noisy)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = args.file or os.path.join(directory, "spans.jsonl")
        if not os.path.exists(path):
            generate(path, args.spans)
        pairs = [(_run(_PARSE, path), _run(_GRAPH, path)) for _ in range(max(args.repeat, 1))]
    ratios = sorted(g["cpu_seconds"] / p["cpu_seconds"] for p, g in pairs)
    parse = _median_run(_PARSE, path, [p for p, _ in pairs])
    graph = _median_run(_GRAPH, path, [g for _, g in pairs])
    results = {"runs": len(pairs), "parse": parse, "graph": graph,
               "time_ratio": statistics.median(ratios), "time_ratio_range": [ratios[0], ratios[-1]],
               "memory_ratio": graph["peak_rss_mib"] / parse["peak_rss_mib"]}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"medians of {len(pairs)} alternating runs, CPU time of fresh processes")
    for name in ("parse", "graph"):
        r = results[name]
        print(f"{name:6} {r['spans']:>7.0f} spans  {r['cpu_seconds']:6.2f} s CPU  "
              f"{r['spans_per_second']:>9,.0f} spans/s  peak {r['peak_rss_mib']:6.0f} MiB")
    print(f"graph = read {graph['read_cpu_seconds']:.2f} s + build {graph['build_cpu_seconds']:.2f} s CPU")
    print(f"graph/parse: time {results['time_ratio']:.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}; "
          f"target <= 2x), memory {results['memory_ratio']:.2f}x; graph build "
          f"{graph['spans_per_second']:,.0f} spans/s (target >= 50,000)")


if __name__ == "__main__":
    main()
