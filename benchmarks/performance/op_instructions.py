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

    python benchmarks/performance/op_instructions.py [--calls 3000] [--one-shot] [--batch] [--simulate]
        [--json]    # needs valgrind

``--one-shot`` also counts the operation made by ``MemoryTracer.record`` (one call, the same span).
``--batch`` counts the set-up ``op_overhead.py`` and ``op_clock.py`` time instead: a ``BatchSpanProcessor``,
and the application thread's instructions only (callgrind's ``--separate-threads``), which is what their
thread clock sees. ``--simulate`` adds callgrind's cache and branch simulation (``--cache-sim=yes
--branch-sim=yes``: its own model of a level-1 cache and a simple predictor, not this CPU's) and reports,
per call, the level-1 instruction and data read misses and the mispredicted conditional and indirect
branches beside the instructions: what a time per call pays and an instruction count does not show.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


_BATCH = ("from opentelemetry.sdk.trace.export import BatchSpanProcessor as SimpleSpanProcessor",
          "SimpleSpanProcessor(ob.DiscardingExporter(), max_queue_size=1 << 16)")
_SIMULATED = {"Ir": "instructions", "I1mr": "l1_instruction_misses", "D1mr": "l1_data_read_misses",
              "Bcm": "mispredicted_conditional", "Bim": "mispredicted_indirect"}


def _script(batch: bool) -> str:
    script = _CHILD.format(here=str(Path(__file__).parent))
    if batch:  # op_overhead.py's processor (its export thread is left out of the count: see _events)
        script = script.replace("from opentelemetry.sdk.trace.export import SimpleSpanProcessor", _BATCH[0])
        script = script.replace("SimpleSpanProcessor(ob.DiscardingExporter())", _BATCH[1])
    return script


def _events(calls: int, mode: str, capture: str, batch: bool = False,
            simulate: bool = False) -> dict[str, int]:
    """Callgrind's totals for one child: every thread's, or with ``batch`` the main thread's only."""
    with tempfile.TemporaryDirectory() as out_dir:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg",
                   *(["--separate-threads=yes"] if batch else []),
                   *(["--cache-sim=yes", "--branch-sim=yes"] if simulate else []),
                   sys.executable, "-c", _script(batch), str(calls), mode, capture]
        out = subprocess.run(command, capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONHASHSEED="0"))  # dict and set layouts as in every run
        name = "cg-01" if batch else "cg"  # with --separate-threads, thread 1 (the main thread) is "-01"
        try:
            lines = Path(out_dir, name).read_text().splitlines()
        except FileNotFoundError:
            raise SystemExit(f"op_instructions: valgrind wrote no profile: {out.stderr[-300:]}") from None
    names = next((line.split()[1:] for line in lines if line.startswith("events:")), None)
    totals = next((line.split()[1:] for line in lines if line.startswith(("summary:", "totals:"))), None)
    if names is None or totals is None:
        raise SystemExit(f"op_instructions: valgrind's profile holds no totals: {out.stderr[-300:]}")
    return dict(zip(names, map(int, totals), strict=True))


def _instructions(calls: int, mode: str, capture: str) -> int:
    return _events(calls, mode, capture)["Ir"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one-shot", action="store_true",
                        help="also the operation in one call (MemoryTracer.record, the same span)")
    parser.add_argument("--batch", action="store_true",
                        help="a BatchSpanProcessor, the application thread only (what op_overhead.py times)")
    parser.add_argument("--simulate", action="store_true",
                        help="also callgrind's simulated level-1 misses and mispredicted branches per call")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("op_instructions: valgrind is not installed (apt-get install valgrind)")
    results: dict[str, dict[str, float]] = {}
    for capture in ("off", "on"):
        modes = ("traced", "floor", "one-shot") if args.one_shot else ("traced", "floor")
        per_call: dict[str, dict[str, float]] = {}
        for mode in modes:
            measured = _events(args.calls, mode, capture, args.batch, args.simulate)
            warm_up = _events(0, mode, capture, args.batch, args.simulate)
            per_call[mode] = {event: (measured[event] - warm_up[event]) / args.calls for event in measured}
        result = results[f"content_{capture}"] = {
            "traced_ir": per_call["traced"]["Ir"], "floor_ir": per_call["floor"]["Ir"],
            "traced_over_floor": per_call["traced"]["Ir"] / per_call["floor"]["Ir"]}
        if args.one_shot:
            result.update({"one_shot_ir": per_call["one-shot"]["Ir"],
                           "one_shot_over_floor": per_call["one-shot"]["Ir"] / per_call["floor"]["Ir"]})
        if args.simulate:
            for mode in modes:
                for event, name in _SIMULATED.items():
                    if event != "Ir":
                        result[f"{mode.replace('-', '_')}_{name}"] = per_call[mode][event]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        print(f"{name:12} traced {r['traced_ir']:9.0f} instructions  SDK floor {r['floor_ir']:9.0f}  "
              f"traced / floor {r['traced_over_floor']:.3f}x")
        for key, value in r.items():
            if key.endswith(("_misses", "_conditional", "_indirect")):
                print(f"{'':12} {key} {value:9.0f} a call")
        if "one_shot_ir" in r:
            print(f"{'':12} one-shot {r['one_shot_ir']:7.0f} instructions  one-shot / floor "
                  f"{r['one_shot_over_floor']:.3f}x")


if __name__ == "__main__":
    main()
