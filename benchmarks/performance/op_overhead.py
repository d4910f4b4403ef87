"""Cost of one traced memory operation against a bare OpenTelemetry span on the same provider.

The traced operation reads two variables (one with a known producer, so one span
link) and writes one; the bare span does nothing. Both run on one SDK
TracerProvider with a BatchSpanProcessor feeding an exporter that discards, the
shape of a production pipeline without the network. Targets: ratio <= 2x with
content capture off, <= 3x with it on.

``--clock thread`` times the calling thread's CPU (``time.thread_time``) instead
of the wall clock: what the application thread pays, steady on a machine that
other jobs keep busy (the export thread's work is then not counted).

"Traced / SDK floor" (issue 28: <= 1.1x) pairs each round's traced operation with the floor measured
next to it (bare, traced and floor rotate round by round, median of the rounds' ratios).

``--apart`` measures the traced operation and its floor each in a process of its own instead (fresh
processes, traced and floor alternating, thread clock), each after a warm-up longer than the in-process
content store's bound, as in a long-running application: in one process the floor shares the heap,
and the garbage collections, that the traced operation's writes leave, and pays part of their cost.
It also reports the thread time each spent in the garbage collector (``gc.callbacks``).

    python benchmarks/performance/op_overhead.py [--iterations 30000] [--clock wall|thread] [--json] [--parts]
    python benchmarks/performance/op_overhead.py --apart [--processes 3] [--iterations 90000] [--inlined]
        [--one-shot] [--json]

``--one-shot`` adds, content off and on, the same operation made by ``MemoryTracer.record`` (one call, the
same span: :func:`_one_shot`).

``--inlined`` adds, content off, the operation's bookkeeping written out in one function (the same span;
:func:`_inlined`): what the work itself costs, apart from the API's calls.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from memtrace_otel import Category, MemoryTracer, Variable, VariableKind
from memtrace_otel.semconv import MemTrace, MemTraceLink


class DiscardingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardingExporter(), max_queue_size=1 << 16))
    return provider


_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}
_clock = time.perf_counter


def _per_call(function: Callable[[], None], iterations: int) -> float:
    start = _clock()
    for _ in range(iterations):
        function()
    return (_clock() - start) / iterations


def _interleaved(bare: Callable[[], None], traced: Callable[[], None], iterations: int,
                 repeats: int = 9) -> tuple[float, float]:
    """Median seconds per call of each, measured in alternating rounds so both see the same load."""
    bare_samples, traced_samples = [], []
    for _ in range(repeats):
        bare_samples.append(_per_call(bare, iterations // repeats))
        traced_samples.append(_per_call(traced, iterations // repeats))
    return statistics.median(bare_samples), statistics.median(traced_samples)


def _rotated(functions: Sequence[Callable[[], None]], iterations: int,
             repeats: int = 15) -> list[list[float]]:
    """Seconds per call of each function in each round; the order rotates from round to round, so
    each sees the same load and none always follows another (a ratio of one round's pair is paired)."""
    rounds = []
    for r in range(repeats):
        times = [0.0] * len(functions)
        for i in [(r + k) % len(functions) for k in range(len(functions))]:
            times[i] = _per_call(functions[i], iterations // repeats)
        rounds.append(times)
    return rounds


_WARM_UP_ALONE = 60_000
"""Calls before an ``--apart`` process measures: past the in-process content store's 50,000 writes."""


def _functions(capture_content: bool) -> tuple[TracerProvider, Callable[[], None], Callable[[], None]]:
    """The provider, the traced operation and its SDK floor, as :func:`measure` runs them."""
    provider = _provider()
    tracer = provider.get_tracer("bench")
    mt = MemoryTracer(provider, capture_content=capture_content)
    with mt.operation("seed", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon in March 2021.", kind=VariableKind.MESSAGE)
    query_text = "Where did the user move in March?"

    def traced() -> None:
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.read(message)
            op.read("instructions", content=query_text, kind=VariableKind.PROMPT)
            op.write("mem:1", "User moved to Lisbon in March 2021", kind=VariableKind.MEMORY_UNIT)

    link_to = message.producer
    payload = {MemTrace.INPUTS: ["msg:D1:1@1", "instructions@1"], MemTrace.OUTPUTS: ["mem:1@1"],
               MemTrace.VARIABLES: ["prompt 33 a7b6eda801e5347d instructions@1",
                                    "memory_unit 34 a7b6eda801e5347d mem:1@1"]}
    if capture_content:
        payload[MemTrace.VARIABLE_CONTENTS] = [query_text, "User moved to Lisbon in March 2021"]

    def sdk_floor() -> None:
        # The same span, link and attributes set straight through the SDK, with no memtrace
        # logic: what the payload itself costs.
        start = {MemTrace.OPERATION_CATEGORY: "extraction", MemTrace.OPERATION_NAME: "extract"}
        with tracer.start_as_current_span("extract", attributes=start) as s:
            s.add_link(link_to, {MemTraceLink.VARIABLE: "msg:D1:1@1"})
            s.set_attributes(payload)

    return provider, traced, sdk_floor


def _inlined(capture_content: bool) -> tuple[TracerProvider, Callable[[], None]]:
    """The traced operation's bookkeeping written out in one function, content off (a diagnostic, not an
    API): the same span, link and attributes, the version registry's lock and new ``Variable`` per write,
    the lookup of the external input by name, the content store's ``put_version``, the BLAKE2b descriptor
    and the current-operation context variable, without ``Operation``'s frames and general checks. What
    ``traced`` costs above this is the price of the API's shape (a call per read and write, the ``with``)."""
    if capture_content:
        raise SystemExit("op_overhead: the inlined form is content off only")
    from memtrace_otel.instrument import operation as operation_module

    provider = _provider()
    mt = MemoryTracer(provider, capture_content=False)
    with mt.operation("seed", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon in March 2021.", kind=VariableKind.MESSAGE)
    query_text = "Where did the user move in March?"
    with mt.operation("seed", Category.INGEST) as op:
        op.read("instructions", content=query_text, kind=VariableKind.PROMPT)  # known, described once
    latest, lock, put = mt.registry._latest, mt.registry._lock, mt.contents.put_version
    attach, detach, in_context = otel_context.attach, otel_context.detach, trace.set_span_in_context
    current, blake2b_8, tracer = operation_module._current, operation_module._EMPTY_BLAKE2B, mt._tracer
    link_to, kind = message.producer, VariableKind.MEMORY_UNIT
    assert link_to is not None
    category_key, name_key = MemTrace.OPERATION_CATEGORY, MemTrace.OPERATION_NAME

    def inlined() -> None:
        span = tracer.start_span("extract", attributes={category_key: "extraction", name_key: "extract"})
        context = span.get_span_context()
        token, op_token = attach(in_context(span)), current.set(None)
        span.add_link(link_to, {MemTraceLink.VARIABLE: message.id})
        with lock:
            known = latest["instructions"]
            latest.move_to_end("instructions")
        content = "User moved to Lisbon in March 2021"
        with lock:
            before = latest.get("mem:1")
            written = Variable("mem:1", (before.version if before else 0) + 1, kind, content, context)
            latest["mem:1"] = written
            latest.move_to_end("mem:1")
        put("mem:1", written.version, content)
        hasher = blake2b_8.copy()
        hasher.update(content.encode())
        span.set_attributes({MemTrace.INPUTS: [message.id, known.id], MemTrace.OUTPUTS: [written.id],
                             MemTrace.VARIABLES: [known.descriptor or "", f"memory_unit {len(content)} "
                                                  f"{hasher.hexdigest()} {written.id}"]})
        current.reset(op_token)
        detach(token)
        span.end()

    return provider, inlined


def _one_shot(capture_content: bool) -> tuple[TracerProvider, Callable[[], None]]:
    """The traced operation of :func:`_functions` made by ``MemoryTracer.record``: the same span, one call."""
    provider = _provider()
    mt = MemoryTracer(provider, capture_content=capture_content)
    with mt.operation("seed", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon in March 2021.", kind=VariableKind.MESSAGE)
    reads = (message, ("instructions", "Where did the user move in March?", VariableKind.PROMPT))
    writes = (("mem:1", "User moved to Lisbon in March 2021", VariableKind.MEMORY_UNIT),)

    def one_shot() -> None:
        mt.record("extract", Category.EXTRACTION, reads=reads, writes=writes)

    return provider, one_shot


def measure(iterations: int, capture_content: bool) -> dict[str, float]:
    provider, traced, sdk_floor = _functions(capture_content)
    tracer = provider.get_tracer("bench")

    def bare() -> None:
        with tracer.start_as_current_span("bare"):
            pass

    _rotated((bare, traced, sdk_floor), iterations // 10, repeats=1)  # warm up
    rounds = _rotated((bare, traced, sdk_floor), iterations)
    provider.shutdown()
    bare_s, traced_s, floor_s = (statistics.median(r[i] for r in rounds) for i in range(3))
    return {"bare_us": bare_s * 1e6, "traced_us": traced_s * 1e6, "ratio": traced_s / bare_s,
            "sdk_floor_us": floor_s * 1e6, "sdk_floor_ratio": floor_s / bare_s,
            # traced against the floor measured next to it, round by round: the figure issue 28 targets
            "traced_over_floor": statistics.median(t / f for _, t, f in rounds)}


def measure_alone(which: str, iterations: int, capture_content: bool) -> tuple[float, float]:
    """Seconds per call of the traced operation or of its floor, the only thing this process runs
    (median of 15 rounds, after :data:`_WARM_UP_ALONE` calls), and of that, the seconds per call the
    garbage collector took (its collections' thread time over the same calls)."""
    if which == "inlined":
        provider, function = _inlined(capture_content)
    elif which == "one-shot":
        provider, function = _one_shot(capture_content)
    else:
        provider, traced, sdk_floor = _functions(capture_content)
        function = traced if which == "traced" else sdk_floor
    for _ in range(_WARM_UP_ALONE):
        function()
    in_gc, started = [0.0], [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = _clock()
        else:
            in_gc[0] += _clock() - started[0]

    gc.callbacks.append(timed)
    per_round = [_per_call(function, iterations // 15) for _ in range(15)]
    gc.callbacks.remove(timed)
    provider.shutdown()
    return statistics.median(per_round), in_gc[0] / (iterations // 15 * 15)


def measure_apart(iterations: int, processes: int, inlined: bool = False,
                  one_shot: bool = False) -> dict[str, dict[str, Any]]:
    """Traced and floor in fresh processes of their own, alternating: medians over ``processes`` each
    (with ``inlined``, content off, the inlined form too: :func:`_inlined`; with ``one_shot``, content off
    and on, ``MemoryTracer.record``: :func:`_one_shot`)."""
    results = {}
    for capture in ("off", "on"):
        roles: tuple[str, ...] = ("traced", "floor")
        if one_shot:
            roles += ("one-shot",)
        if inlined and capture == "off":
            roles += ("inlined",)
        samples: dict[str, list[float]] = {which: [] for which in roles}
        in_gc: dict[str, list[float]] = {which: [] for which in roles}
        for _ in range(processes):
            for which in roles:
                out = subprocess.run([sys.executable, __file__, "--alone", which, "--capture", capture,
                                      "--iterations", str(iterations), "--clock", "thread"],
                                     capture_output=True, text=True, check=True)
                per_call, gc_per_call = out.stdout.split()
                samples[which].append(float(per_call))
                in_gc[which].append(float(gc_per_call))
        traced_s, floor_s = statistics.median(samples["traced"]), statistics.median(samples["floor"])
        results[f"content_{capture}"] = {
            "traced_us": traced_s * 1e6, "sdk_floor_us": floor_s * 1e6,
            "traced_over_floor": traced_s / floor_s,
            "traced_gc_us": statistics.median(in_gc["traced"]) * 1e6,
            "sdk_floor_gc_us": statistics.median(in_gc["floor"]) * 1e6,
            "pairs": [t / f for t, f in zip(samples["traced"], samples["floor"], strict=True)]}
        if "one-shot" in samples:
            one_shot_s = statistics.median(samples["one-shot"])
            results[f"content_{capture}"].update({
                "one_shot_us": one_shot_s * 1e6, "one_shot_over_floor": one_shot_s / floor_s,
                "one_shot_pairs": [o / f for o, f in zip(samples["one-shot"], samples["floor"],
                                                         strict=True)]})
        if "inlined" in samples:
            inlined_s = statistics.median(samples["inlined"])
            results[f"content_{capture}"].update({
                "inlined_us": inlined_s * 1e6, "inlined_over_floor": inlined_s / floor_s,
                "inlined_pairs": [i / f for i, f in zip(samples["inlined"], samples["floor"], strict=True)]})
    return results


def measure_off(iterations: int) -> dict[str, float]:
    """A traced operation with tracing off (API only: the no-op provider)."""
    mt = MemoryTracer(trace.NoOpTracerProvider(), capture_content=True)
    message = Variable("msg:D1:1", 1, VariableKind.MESSAGE, "I moved to Lisbon in March 2021.")

    def traced() -> None:
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.read(message)
            op.read("instructions", content="Where did the user move in March?", kind=VariableKind.PROMPT)
            op.write("mem:1", "User moved to Lisbon in March 2021", kind=VariableKind.MEMORY_UNIT)

    def nothing() -> None:
        pass

    empty_s, traced_s = _interleaved(nothing, traced, iterations)
    return {"traced_us": (traced_s - empty_s) * 1e6}


def measure_parts(iterations: int) -> dict[str, dict[str, float]]:
    """The traced operation taken apart, content off: each part alone in an operation, next to the SDK
    calls that record the same thing on a span opened by ``start_as_current_span`` (rotated rounds,
    medians). ``extra_us`` is what memtrace's own work adds to that part."""
    provider = _provider()
    tracer = provider.get_tracer("bench")
    mt = MemoryTracer(provider, capture_content=False)
    with mt.operation("seed", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon in March 2021.", kind=VariableKind.MESSAGE)
    link_to, query_text = message.producer, "Where did the user move in March?"
    start = {MemTrace.OPERATION_CATEGORY: "extraction", MemTrace.OPERATION_NAME: "extract"}

    def op_only() -> None:
        with mt.operation("extract", Category.EXTRACTION):
            pass

    def op_read_linked() -> None:
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.read(message)

    def op_read_external() -> None:
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.read("instructions", content=query_text, kind=VariableKind.PROMPT)

    def op_write() -> None:
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.write("mem:1", "User moved to Lisbon in March 2021", kind=VariableKind.MEMORY_UNIT)

    def sdk(payload: dict[str, object] | None, link: bool) -> Callable[[], None]:
        def run() -> None:
            with tracer.start_as_current_span("extract", attributes=start) as s:
                if link:
                    s.add_link(link_to, {MemTraceLink.VARIABLE: "msg:D1:1@1"})
                if payload:
                    s.set_attributes(payload)
        return run

    parts = {
        "start and end": (op_only, sdk(None, False)),
        "read with a link": (op_read_linked, sdk({MemTrace.INPUTS: ["msg:D1:1@1"]}, True)),
        "read of an external input": (op_read_external, sdk(
            {MemTrace.INPUTS: ["instructions@1"],
             MemTrace.VARIABLES: ["prompt 33 a7b6eda801e5347d instructions@1"]}, False)),
        "write": (op_write, sdk({MemTrace.OUTPUTS: ["mem:1@1"],
                                 MemTrace.VARIABLES: ["memory_unit 34 a7b6eda801e5347d mem:1@1"]}, False)),
    }
    functions = [f for pair in parts.values() for f in pair]
    _rotated(functions, iterations // 10, repeats=1)  # warm up
    rounds = _rotated(functions, iterations)
    provider.shutdown()
    result = {}
    for i, name in enumerate(parts):
        traced = statistics.median(r[2 * i] for r in rounds)
        floor = statistics.median(r[2 * i + 1] for r in rounds)
        result[name] = {"traced_us": traced * 1e6, "sdk_us": floor * 1e6, "extra_us": (traced - floor) * 1e6}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30_000)
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--parts", action="store_true",
                        help="only the operation taken apart (content off), each part against its SDK calls")
    parser.add_argument("--apart", action="store_true",
                        help="traced and floor each in fresh processes of their own (thread clock)")
    parser.add_argument("--processes", type=int, default=3,
                        help="--apart: processes of each, per content mode")
    parser.add_argument("--inlined", action="store_true",
                        help="--apart: also the operation's bookkeeping in one function (content off)")
    parser.add_argument("--one-shot", action="store_true",
                        help="--apart: also the operation in one call, MemoryTracer.record (content off, on)")
    parser.add_argument("--alone", choices=("traced", "floor", "inlined", "one-shot"), help=argparse.SUPPRESS)
    parser.add_argument("--capture", choices=("on", "off"), default="off", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global _clock
    _clock = _CLOCKS[args.clock]
    if args.alone:
        print(*measure_alone(args.alone, args.iterations, args.capture == "on"))
        return
    if args.apart:
        apart = measure_apart(args.iterations, args.processes, args.inlined, args.one_shot)
        if args.json:
            print(json.dumps(apart, indent=2))
            return
        for name, r in apart.items():
            pairs = ", ".join(f"{p:.3f}" for p in r["pairs"])
            print(f"{name:12} traced {r['traced_us']:6.1f} us  SDK floor {r['sdk_floor_us']:6.1f} us  "
                  f"traced / floor {r['traced_over_floor']:.3f}x (pairs: {pairs}); in the garbage "
                  f"collector: traced {r['traced_gc_us']:.1f} us, floor {r['sdk_floor_gc_us']:.1f} us")
            if "one_shot_us" in r:
                pairs = ", ".join(f"{p:.3f}" for p in r["one_shot_pairs"])
                print(f"{'':12} one-shot {r['one_shot_us']:6.1f} us  one-shot / floor "
                      f"{r['one_shot_over_floor']:.3f}x (pairs: {pairs})")
            if "inlined_us" in r:
                pairs = ", ".join(f"{p:.3f}" for p in r["inlined_pairs"])
                print(f"{'':12} inlined {r['inlined_us']:6.1f} us  inlined / floor "
                      f"{r['inlined_over_floor']:.3f}x (pairs: {pairs})")
        return
    if args.parts:
        parts = measure_parts(args.iterations)
        if args.json:
            print(json.dumps(parts, indent=2))
            return
        for name, r in parts.items():
            print(f"{name:26} traced {r['traced_us']:6.2f} us  SDK {r['sdk_us']:6.2f} us  "
                  f"memtrace's own {r['extra_us']:+6.2f} us")
        return
    results = {"content_off": measure(args.iterations, False), "content_on": measure(args.iterations, True),
               "tracing_off": measure_off(args.iterations)}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, target in (("content_off", 2.0), ("content_on", 3.0)):
        r = results[name]
        verdict = "meets" if r["ratio"] <= target else "MISSES"
        floor_verdict = "meets" if r["traced_over_floor"] <= 1.1 else "MISSES"
        print(f"{name:12} bare {r['bare_us']:6.1f} us  traced {r['traced_us']:6.1f} us  "
              f"ratio {r['ratio']:.2f}x ({verdict} target <= {target:.0f}x); same payload set "
              f"directly through the SDK: {r['sdk_floor_us']:.1f} us = {r['sdk_floor_ratio']:.2f}x; traced / "
              f"SDK floor {r['traced_over_floor']:.3f}x ({floor_verdict} <= 1.1x)")
    print(f"tracing off  (no-op provider) traced operation {results['tracing_off']['traced_us']:.1f} us")


if __name__ == "__main__":
    main()
