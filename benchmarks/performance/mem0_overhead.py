"""Added time of the mem0 instrumentor per ``Memory.add`` and ``Memory.search``, against bare mem0.

Runs inside a venv with mem0ai (``.ci/install-mem0-venvs.sh`` builds them; 1.x and 2.x):
the real ``Memory``, fully offline, as the generation tests run it: LLM and embedder
on the test suite's local OpenAI-compatible server (extraction, and on 1.x an ADD
decision, answered at once; deterministic embeddings), qdrant in local mode on disk
under a temporary directory, history database there too, telemetry off. Spans go
through a ``BatchSpanProcessor`` to an exporter that discards them: the production
shape, without the cost of an exporter that is not ours.

Calls come in pairs on the same instrumented ``Memory``: one with instrumentation
suppressed (``suppress_instrumentation()``: the wrappers pass straight through), one
traced, back to back, the order alternating; the added time is the median of the
pairs' differences (drift between pairs cancels), against the median suppressed call,
in wall-clock time and, less sensitive to other load on the machine, in process CPU
time (all threads: mem0's workers, the local server, the span processor's worker).
Toggling ``instrument()``/``uninstrument()`` per call would measure re-patching and the
interpreter's invalidated caches instead. That the pass-through wrappers themselves
cost nothing measurable is shown apart: alternating blocks of calls uninstrumented and
instrumented-but-suppressed. Target: added time <= 5% of the call's own time.

    ~/.cache/memtrace/venvs/mem0ai-1.0.11/bin/python benchmarks/mem0_overhead.py [--pairs 150] [--top-k 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ["MEM0_TELEMETRY"] = "False"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# This checkout first: a cached venv's editable install may point at another clone of the project.
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "mem0")]

from mem0_app import config  # noqa: E402  (the generation tests' offline mem0 configuration)
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from memtrace_otel.instrument.mem0 import Mem0Instrumentor, mem0_generation  # noqa: E402

from openai_server import Reply, ScriptedOpenAIServer  # noqa: E402

_TARGET = 0.05


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _llm(body: dict[str, Any]) -> Reply:
    """Extraction answers one fact (the user's text); 1.x's decision call answers ADD."""
    text = str(body.get("messages", [{}])[-1].get("content", ""))
    fact = f"Fact {abs(hash(text)) % 10_000}"
    if "determine whether these facts should be added" in text:
        return Reply.json({"memory": [{"id": "new", "text": fact, "event": "ADD"}]})
    if mem0_generation() == 1:
        return Reply.json({"facts": [fact]})
    return Reply.json({"memory": [{"text": fact}]})


def _once(call: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    call()
    return clock() - start


def _pair(call: Callable[[], Any], traced_first: bool, clock: Callable[[], float]) -> tuple[float, float]:
    """One call with instrumentation suppressed, one traced, back to back: (suppressed, traced) s."""
    times: dict[bool, float] = {}
    for traced in (traced_first, not traced_first):
        if traced:
            times[traced] = _once(call, clock)
        else:
            with suppress_instrumentation():
                times[traced] = _once(call, clock)
    return times[False], times[True]


def _blocks(instrumentor: Mem0Instrumentor, provider: TracerProvider, call: Callable[[], Any],
            blocks: int, size: int) -> tuple[float, float]:
    """Median call uninstrumented and instrumented-but-suppressed, in alternating blocks (seconds):
    what the wrappers cost when they trace nothing."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for block in range(2 * blocks):
        wrapped = block % 2 == 1
        if not wrapped:
            instrumentor.uninstrument()
        with suppress_instrumentation():
            times[wrapped].extend(_once(call) for _ in range(size))
        if not wrapped:
            instrumentor.instrument(tracer_provider=provider)
    return statistics.median(times[False]), statistics.median(times[True])


def measure(pairs: int, top_k: int) -> dict[str, Any]:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Discard()))
    instrumentor, counter = Mem0Instrumentor(), iter(range(10**9))
    scope: dict[str, Any] = ({"user_id": "u", "limit": top_k} if mem0_generation() == 1
                             else {"filters": {"user_id": "u"}, "top_k": top_k})
    results: dict[str, list[tuple[float, float]]] = {"add": [], "search": []}
    cpu: dict[str, list[tuple[float, float]]] = {"add": [], "search": []}
    with ScriptedOpenAIServer(_llm) as server, tempfile.TemporaryDirectory() as data:
        from mem0 import Memory

        memory = Memory.from_config(config(server.base_url, data))
        calls = {"add": lambda: memory.add(f"I note item {next(counter)} today.", user_id="u"),
                 "search": lambda: memory.search(f"What item number {next(counter)}?", **scope)}
        instrumentor.instrument(tracer_provider=provider)
        for _ in range(2 * top_k):  # warm up (hooks installed), and give search something to find
            calls["add"]()
            calls["search"]()
        for i in range(pairs):
            for name, call in calls.items():
                results[name].append(_pair(call, i % 2 == 0, time.perf_counter))
                cpu[name].append(_pair(call, i % 2 == 1, time.process_time))
        dispatch = {name: _blocks(instrumentor, provider, call, 5, max(2, pairs // 10))
                    for name, call in calls.items()}
        instrumentor.uninstrument()
        getattr(memory, "close", lambda: None)()
    provider.shutdown()
    return {name: {**_summary(pairs_), "bare_ms": dispatch[name][0] * 1e3,
                   "suppressed_ms": dispatch[name][1] * 1e3,
                   **{f"cpu_{k}": v for k, v in _summary(cpu[name]).items()}}
            for name, pairs_ in results.items()}


def _summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    base = statistics.median(b for b, _ in pairs)
    added = statistics.median(t - b for b, t in pairs)
    return {"paired_base_ms": base * 1e3, "traced_ms": statistics.median(t for _, t in pairs) * 1e3,
            "added_ms": added * 1e3, "share": added / base}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=150, help="bare/traced call pairs per method")
    parser.add_argument("--top-k", type=int, default=10, help="records a search returns (a typical top-k)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import mem0

    summary = {"mem0ai": getattr(mem0, "__version__", str(mem0_generation())),
               **measure(args.pairs, args.top_k)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"mem0ai {summary['mem0ai']}: {args.pairs} bare/traced pairs per method, top-k {args.top_k}")
    for name in ("add", "search"):
        row = summary[name]
        verdict = "meets" if row["share"] <= _TARGET else "misses"
        print(f"  Memory.{name:<6} uninstrumented {row['bare_ms']:.2f} ms, wrapped but suppressed "
              f"{row['suppressed_ms']:.2f} ms; paired: suppressed {row['paired_base_ms']:.2f} ms, traced "
              f"{row['traced_ms']:.2f} ms, added {row['added_ms']:+.3f} ms = {row['share']:+.1%} "
              f"({verdict} the <= 5% target)\n"
              f"{'':16}process CPU time, paired: suppressed {row['cpu_paired_base_ms']:.2f} ms, traced "
              f"{row['cpu_traced_ms']:.2f} ms, added {row['cpu_added_ms']:+.3f} ms = {row['cpu_share']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
