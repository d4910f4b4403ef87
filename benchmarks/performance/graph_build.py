"""Graph build from a large OTLP/JSON Lines file, against merely parsing it with the json module, and
what the ``memtrace`` commands cost on the same file.

Generates a file of about ``--spans`` spans from a Mem0-shaped pipeline (ingest ->
extract -> store, then search -> answer -> judge), then measures, each in a fresh
process so that peak memory is its own:

* ``parse``: ``json.loads`` of every line, nothing else;
* ``parsed list``: the same, keeping every parsed span in a list (what holding the input costs);
* ``graph``: ``read_span_files`` + ``build_graph`` (the library's read + build);
* ``analyze (library)``: read + build + ``attribute_failures(G, "lineage")``;
* with ``--commands``: ``memtrace graph -o FILE``, ``memtrace analyze --json``, ``memtrace report``.

Peak memory is the process's own high-water mark: ``VmHWM`` from ``/proc/self/status`` for the
scripts, GNU time's ``%M`` for the commands. Not ``ru_maxrss`` read in the child: on Linux it
starts from the parent's high-water mark at fork, so a child of this script (which generated
the file) reported this script's memory, not its own.

Targets: >= 50k spans/s on one core, and <= 2x the bare parse time (the graph); the commands at
<= 0.8x the parsed list's memory and <= 1.3x the library's CPU for the same work (issue 28).

    python benchmarks/performance/graph_build.py [--spans 100000] [--file PATH] [--repeat 5] [--commands]
                                                 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


_HWM = """
def peak_mib():
    # VmHWM: this process's own high-water mark (ru_maxrss would include the parent's at fork).
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
"""

_PARSE = _HWM + """
import json, sys, time
start = time.process_time()
spans = 0
with open(sys.argv[1], encoding="utf-8") as handle:
    for line in handle:
        document = json.loads(line)
        for rs in document["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans += len(ss["spans"])
print(spans, time.process_time() - start, peak_mib())
"""

_PARSED_LIST = _HWM + """
import json, sys, time
start = time.process_time()
kept = []
with open(sys.argv[1], encoding="utf-8") as handle:
    for line in handle:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                kept.extend(ss["spans"])
print(len(kept), time.process_time() - start, peak_mib())
"""

_GRAPH = _HWM + """
import sys, time
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files
start = time.process_time()
result = read_span_files([sys.argv[1]])
read = time.process_time() - start
graph = build_graph(result.spans)
assert not result.problems, result.problems[:3]
print(len(result.spans), time.process_time() - start, peak_mib(), read)
"""

_ANALYZE = _HWM + """
import sys, time
from memtrace_otel.attribution.runner import attribute_failures
from memtrace_otel.graph import build_graph
from memtrace_otel.spans import read_span_files
start = time.process_time()
result = read_span_files([sys.argv[1]])
read = time.process_time() - start
graph = build_graph(result.spans)
attribute_failures(graph, "lineage")
print(len(result.spans), time.process_time() - start, peak_mib(), read)
"""


def _run(script: str, path: str) -> dict[str, float]:
    # CPU time of one fresh process: one core's work, whatever else the machine is doing.
    out = subprocess.run([sys.executable, "-c", script, path], check=True, capture_output=True, text=True)
    spans, seconds, peak_mib, *read = out.stdout.split()
    result = {"spans": int(spans), "cpu_seconds": float(seconds),
              "spans_per_second": int(spans) / float(seconds), "peak_rss_mib": float(peak_mib)}
    if read:  # the graph run also says how its time splits between reading and building
        result["read_cpu_seconds"] = float(read[0])
        result["build_cpu_seconds"] = float(seconds) - float(read[0])
    return result


def _command(args: list[str], scratch: str) -> dict[str, float]:
    """A ``memtrace`` command under GNU time: its user + system CPU and its own peak RSS."""
    time_binary = shutil.which("time", path="/usr/bin:/bin") or "/usr/bin/time"
    memtrace = str(Path(sys.executable).with_name("memtrace"))
    report = os.path.join(scratch, "time.txt")
    with open(os.devnull, "w") as sink:
        code = subprocess.run([time_binary, "-f", "%M %U %S", "-o", report, memtrace, *args],
                              stdout=sink, stderr=subprocess.DEVNULL).returncode
    if code not in (0, 3):  # 3: the command ran, some input was partial
        sys.exit(f"graph_build: memtrace {' '.join(args)} exited {code}")
    with open(report, encoding="utf-8") as handle:
        peak_kib, user, system = handle.read().split()[-3:]
    return {"cpu_seconds": float(user) + float(system), "peak_rss_mib": int(peak_kib) / 1024}


def _commands(path: str, scratch: str) -> dict[str, list[str]]:
    return {"memtrace graph": ["graph", path, "-o", os.path.join(scratch, "graph.json")],
            "memtrace analyze --json": ["analyze", "--json", path],
            "memtrace report": ["report", path, "--out", os.path.join(scratch, "report.html")]}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = runs[0].keys()
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--file", help="use (or create) this span file instead of a temporary one")
    parser.add_argument("--repeat", type=int, default=5,
                        help="alternating runs of each measurement; medians are reported (this VM is noisy)")
    parser.add_argument("--commands", action="store_true",
                        help="also the parsed list, the library's analyze and the memtrace commands")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scripts = {"parse": _PARSE, "graph": _GRAPH}
    if args.commands:
        scripts.update({"parsed list": _PARSED_LIST, "analyze (library)": _ANALYZE})
    with tempfile.TemporaryDirectory() as directory:
        path = args.file or os.path.join(directory, "spans.jsonl")
        if not os.path.exists(path):
            generate(path, args.spans)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in scripts}
        commands = _commands(path, directory) if args.commands else {}
        runs.update({name: [] for name in commands})
        for _ in range(max(args.repeat, 1)):  # alternating: the machine's drift hits each alike
            for name, script in scripts.items():
                runs[name].append(_run(script, path))
            for name, command in commands.items():
                runs[name].append(_command(command, directory))
    pairs = list(zip(runs["parse"], runs["graph"], strict=True))
    ratios = sorted(g["cpu_seconds"] / p["cpu_seconds"] for p, g in pairs)
    medians = {name: _median(found) for name, found in runs.items()}
    parse, graph = medians["parse"], medians["graph"]
    results: dict[str, object] = {
        "runs": len(pairs), **medians, "time_ratio": statistics.median(ratios),
        "time_ratio_range": [ratios[0], ratios[-1]],
        "memory_ratio": graph["peak_rss_mib"] / parse["peak_rss_mib"]}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"medians of {len(pairs)} alternating runs, CPU time of fresh processes")
    for name in ("parse", "graph"):
        r = medians[name]
        print(f"{name:6} {r['spans']:>7.0f} spans  {r['cpu_seconds']:6.2f} s CPU  "
              f"{r['spans_per_second']:>9,.0f} spans/s  peak {r['peak_rss_mib']:6.0f} MiB")
    print(f"graph = read {graph['read_cpu_seconds']:.2f} s + build {graph['build_cpu_seconds']:.2f} s CPU")
    print(f"graph/parse: time {results['time_ratio']:.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}; "
          f"target <= 2x), memory {results['memory_ratio']:.2f}x; graph build "
          f"{graph['spans_per_second']:,.0f} spans/s (target >= 50,000)")
    if not args.commands:
        return
    listed = medians["parsed list"]["peak_rss_mib"]
    print(f"\n{'':26} {'CPU s':>6} {'peak MiB':>9} {'/ parsed list':>14} {'CPU / library':>14}")
    library = {"memtrace graph": "graph", "memtrace analyze --json": "analyze (library)",
               "memtrace report": "analyze (library)"}
    for name, r in medians.items():
        if name == "parse":
            continue
        cpu = f"{r['cpu_seconds'] / medians[library[name]]['cpu_seconds']:.2f}x" if name in library else ""
        print(f"{name:26} {r['cpu_seconds']:>6.2f} {r['peak_rss_mib']:>9.0f} "
              f"{r['peak_rss_mib'] / listed:>13.2f}x {cpu:>14}")


if __name__ == "__main__":
    main()
