"""Cost of a traced memory operation with content upload on, against the same operation with content off.

Both tracers run on one SDK TracerProvider with a BatchSpanProcessor feeding an exporter
that discards (the production shape without the network), capture off. The traced operation
reads a message and a prompt and writes a memory unit, each a text never seen before (so
every upload is a real write, not a deduplicated one); the uploading tracer writes them to a
local directory (or ``--store URL``) on its background thread. Target: upload on within 1.2x
of content off. The default run submits fewer texts than the upload queue holds (8192), so
every text is queued and written (none dropped) while it is timed; ``stored_per_s`` is the
upload thread's throughput over the whole run and final drain.

``--clock thread`` times the calling thread's CPU (``time.thread_time``): what the application
thread pays; the wall clock also counts the upload thread's share of the GIL and the cores.

    python benchmarks/performance/content_upload_overhead.py [--iterations 20000] \
        [--clock wall|thread] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from memtrace_otel import Category, MemoryTracer, VariableKind

TARGET = 1.2


class DiscardingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}


def _operation(mt: MemoryTracer, counter: Iterator[int]) -> Callable[[], None]:
    def traced() -> None:
        n = next(counter)
        with mt.operation("extract", Category.EXTRACTION) as op:
            op.read(f"msg:{n}", content=f"I moved to Lisbon in March 2021 ({n}).", kind=VariableKind.MESSAGE)
            op.read("instructions", content=f"Extract the facts of message {n}.", kind=VariableKind.PROMPT)
            op.write(f"mem:{n}", f"User moved to Lisbon in March 2021 ({n})", kind=VariableKind.MEMORY_UNIT)

    return traced


def _per_call(function: Callable[[], None], iterations: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(iterations):
        function()
    return (clock() - start) / iterations


def measure(iterations: int, clock: Callable[[], float], store: str, repeats: int = 9) -> dict[str, float]:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DiscardingExporter(), max_queue_size=1 << 16))
    counter = itertools.count()
    off = _operation(MemoryTracer(provider, capture_content=False, upload_base_path=""), counter)
    uploading = MemoryTracer(provider, capture_content=False, upload_base_path=store)
    on = _operation(uploading, counter)
    began = time.perf_counter()
    for function in (off, on):  # warm up
        _per_call(function, iterations // 10, clock)
    off_samples, on_samples = [], []
    for _ in range(repeats):  # alternating rounds: both see the same machine load
        off_samples.append(_per_call(off, iterations // repeats, clock))
        on_samples.append(_per_call(on, iterations // repeats, clock))
    start = time.perf_counter()
    drained = uploading.shutdown(120_000)
    drain_s = time.perf_counter() - start
    total_s = time.perf_counter() - began
    provider.shutdown()
    uploader = uploading.uploader
    assert uploader is not None
    off_s, on_s = statistics.median(off_samples), statistics.median(on_samples)
    return {"content_off_us": off_s * 1e6, "upload_on_us": on_s * 1e6, "ratio": on_s / off_s,
            "stored": uploader.stored, "dropped": uploader.dropped, "failed": uploader.failed,
            "final_drain_s": drain_s, "drained": drained, "stored_per_s": uploader.stored / total_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2_400)
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall")
    parser.add_argument("--store", help="Store URL (default: a fresh temporary directory, removed after).")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    directory = None if args.store else tempfile.mkdtemp(prefix="memtrace-upload-bench-")
    try:
        result = measure(args.iterations, _CLOCKS[args.clock], args.store or directory)
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    verdict = "meets" if result["ratio"] <= TARGET else "MISSES"
    print(f"content off {result['content_off_us']:6.1f} us  "
          f"upload on {result['upload_on_us']:6.1f} us  "
          f"ratio {result['ratio']:.2f}x ({verdict} target <= {TARGET}x); {result['stored']} texts stored, "
          f"{result['dropped']} dropped, {result['failed']} failed; "
          f"final drain {result['final_drain_s']:.2f} s; "
          f"{result['stored_per_s']:.0f} texts/s written")


if __name__ == "__main__":
    main()
