"""Instructions per traced operation and per SDK floor, counted by valgrind: a measure the machine's load
does not move (issue 28, item 2).

``op_overhead.py`` times the operation; on a VM other jobs keep busy its ratios move by ±0.03 from run
to run, more than a change of one part of the operation is worth. This counts the instructions a call
executes instead (callgrind's ``Ir``): a child process runs ``op_overhead.py``'s operation (or its SDK
floor) ``--calls`` times after a warm-up, another runs the warm-up only, and the difference over the
calls is the figure. The exporter discards, as ``op_overhead.py``'s, but through a
``SimpleSpanProcessor`` (on the calling thread): a batch processor's export thread wakes at times that
move the count by a thousand instructions a call. It says nothing about cache misses or branch
mispredictions, which the time of a call also pays; use it to compare two versions of the code,
beside ``op_overhead.py``.

    python benchmarks/performance/op_instructions.py [--calls 3000] [--one-shot] [--json]    # needs valgrind

``--one-shot`` also counts the operation made by ``MemoryTracer.record`` (one call, the same span).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_CHILD = """
import sys
sys.path.insert(0, {here!r})
import op_overhead as ob
from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.semconv import MemTrace, MemTraceLink
calls, mode, capture = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "on"
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ob.DiscardingExporter()))
tracer = provider.get_tracer("bench")
mt = MemoryTracer(provider, capture_content=capture)
with mt.operation("seed", Category.INGEST) as op:
    message = op.write("msg:D1:1", "I moved to Lisbon in March 2021.", kind=VariableKind.MESSAGE)
query_text = "Where did the user move in March?"
def traced():
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read(message)
        op.read("instructions", content=query_text, kind=VariableKind.PROMPT)
        op.write("mem:1", "User moved to Lisbon in March 2021", kind=VariableKind.MEMORY_UNIT)
payload = {{MemTrace.INPUTS: ["msg:D1:1@1", "instructions@1"], MemTrace.OUTPUTS: ["mem:1@1"],
           MemTrace.VARIABLES: ["prompt 33 a7b6eda801e5347d instructions@1",
                                "memory_unit 34 a7b6eda801e5347d mem:1@1"]}}
if capture:
    payload[MemTrace.VARIABLE_CONTENTS] = [query_text, "User moved to Lisbon in March 2021"]
def floor():
    start = {{MemTrace.OPERATION_CATEGORY: "extraction", MemTrace.OPERATION_NAME: "extract"}}
    with tracer.start_as_current_span("extract", attributes=start) as s:
        s.add_link(message.producer, {{MemTraceLink.VARIABLE: "msg:D1:1@1"}})
        s.set_attributes(payload)
reads = (message, ("instructions", query_text, VariableKind.PROMPT))
writes = (("mem:1", "User moved to Lisbon in March 2021", VariableKind.MEMORY_UNIT),)
def one_shot():
    mt.record("extract", Category.EXTRACTION, reads=reads, writes=writes)
function = {{"traced": traced, "floor": floor, "one-shot": one_shot}}[mode]
for _ in range(500):
    function()
for _ in range(calls):
    function()
provider.shutdown()
"""


def _instructions(calls: int, mode: str, capture: str) -> int:
    script = _CHILD.format(here=str(Path(__file__).parent))
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          "-c", script, str(calls), mode, capture],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONHASHSEED="0"))  # dict and set layouts as in every run
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"op_instructions: valgrind printed no instruction count: {out.stderr[-300:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one-shot", action="store_true",
                        help="also the operation in one call (MemoryTracer.record, the same span)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("op_instructions: valgrind is not installed (apt-get install valgrind)")
    results: dict[str, dict[str, float]] = {}
    for capture in ("off", "on"):
        modes = ("traced", "floor", "one-shot") if args.one_shot else ("traced", "floor")
        per_call = {mode: (_instructions(args.calls, mode, capture) - _instructions(0, mode, capture))
                    / args.calls for mode in modes}
        results[f"content_{capture}"] = {"traced_ir": per_call["traced"], "floor_ir": per_call["floor"],
                                         "traced_over_floor": per_call["traced"] / per_call["floor"]}
        if args.one_shot:
            results[f"content_{capture}"].update({
                "one_shot_ir": per_call["one-shot"],
                "one_shot_over_floor": per_call["one-shot"] / per_call["floor"]})
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        print(f"{name:12} traced {r['traced_ir']:9.0f} instructions  SDK floor {r['floor_ir']:9.0f}  "
              f"traced / floor {r['traced_over_floor']:.3f}x")
        if "one_shot_ir" in r:
            print(f"{'':12} one-shot {r['one_shot_ir']:7.0f} instructions  one-shot / floor "
                  f"{r['one_shot_over_floor']:.3f}x")


if __name__ == "__main__":
    main()
