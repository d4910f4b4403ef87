"""Delay from a failed evaluation to its annotation being queryable in Jaeger, through the live pipeline.

Real processes on 127.0.0.1: Jaeger v2 (memory storage), the OpenTelemetry
Collector built from ``collector/builder-config.yaml`` and ``memtrace serve``
(two instances behind ``collector/otelcol-loadbalance.yaml``, or one behind
``otelcol-tee.yaml`` with ``--tee``), each with ``--settle S`` and fetching linked
traces from Jaeger. The application (``tests/scenario.py``: ingestion,
maintenance and two question traces; q1 fails because an update overwrote the
answer) exports each span by OTLP/HTTP to the Collector as it ends, one run
every ``--interval`` seconds, so failures are measured one by one, not queued.

For each failed evaluation span the delay runs from the span's end time to the
moment Jaeger's query API (``/api/traces/{id}``, polled every 50 ms) first
returns the ``memtrace.attribution`` span in that trace, and to the moment the
``memtrace.root_cause`` span is in the root cause's (maintenance) trace.
It covers the Collector's batch (200 ms), the settle wait, serve's settle tick
(0.2 s), the linked-trace fetch, attribution, the OTLP export and Jaeger's own
batch (100 ms). Target: median and max <= S + 2 s.

    python benchmarks/performance/writeback_delay.py [--failures 20] [--settle 2] [--interval 1] \
        [--tee] [--json]

Needs ``~/.cache/memtrace/jaeger`` and ``~/.cache/memtrace/otelcol`` (``.ci/install-jaeger.sh``,
``.ci/install-otelcol.sh``; or ``MEMTRACE_JAEGER_BIN`` / ``MEMTRACE_OTELCOL_BIN``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))

from memtrace_otel.semconv import AnnotationSpan, MemTrace, MemTraceAttribution

import jaeger_harness
import otelcol_harness
from scenario import run_pipeline
from serve_harness import (
    AppPipeline,
    ServeProcess,
    app_pipeline,
    hex_ids,
    jaeger_trace,
    start_serve,
    stop_serve,
)

_POLL_SECONDS = 0.05
_GIVE_UP_SECONDS = 60.0


@dataclass
class Failure:
    """One failed evaluation and when its annotations were first seen in Jaeger (wall clock, s)."""

    trace_id: str
    ended: float
    root_trace: str | None = None
    attribution_seen: float | None = None
    root_cause_seen: float | None = None


@dataclass
class Watcher:
    """Polls Jaeger for the annotations of every pending failure, on one thread."""

    query_url: str
    failures: list[Failure] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, failure: Failure) -> None:
        with self.lock:
            self.failures.append(failure)

    def pending(self) -> list[Failure]:
        with self.lock:
            return [f for f in self.failures if f.attribution_seen is None or f.root_cause_seen is None]

    def run(self) -> None:
        while not self.stop.wait(_POLL_SECONDS):
            for failure in self.pending():
                try:
                    self._look(failure, time.time())
                except OSError as error:  # Jaeger busy or restarting: the next poll tries again
                    print(f"writeback_delay: query failed: {error}", file=sys.stderr)

    def _look(self, failure: Failure, now: float) -> None:
        if failure.attribution_seen is None:
            for span in jaeger_trace(self.query_url, failure.trace_id):
                if span["operationName"] == AnnotationSpan.ATTRIBUTION:
                    failure.attribution_seen = now
                    tags = {tag["key"]: tag["value"] for tag in span.get("tags") or ()}
                    failure.root_trace = tags.get(MemTraceAttribution.ROOT_CAUSE_TRACE_ID)
        if failure.root_trace and failure.root_cause_seen is None:
            names = [s["operationName"] for s in jaeger_trace(self.query_url, failure.root_trace)]
            if AnnotationSpan.ROOT_CAUSE in names:
                failure.root_cause_seen = now


def _binaries() -> tuple[Path, Path]:
    jaeger, otelcol = jaeger_harness.jaeger_binary(), otelcol_harness.otelcol_binary()
    if jaeger is None or otelcol is None:
        sys.exit("writeback_delay: needs Jaeger and the Collector: run `bash .ci/install-jaeger.sh` and "
                 "`bash .ci/install-otelcol.sh`")
    return jaeger, otelcol


def _pipeline(stack: ExitStack, workdir: Path, settle: float,
              tee: bool) -> tuple[Any, list[ServeProcess], Any]:
    jaeger_bin, otelcol_bin = _binaries()
    jaeger = stack.enter_context(jaeger_harness.run_jaeger(jaeger_bin, workdir))
    options = {"settle": settle, "backend_otlp": jaeger.otlp_http, "jaeger_url": jaeger.query_url}
    if tee:
        serves = [start_serve(workdir, grpc_port=-1, http_port=0, **options)]
        env = {"MEMTRACE_SERVE_OTLP": serves[0].http_url}
    else:
        serves = [start_serve(workdir, name=f"serve-{n}", grpc_port=port, http_port=-1, **options)
                  for n, port in enumerate(otelcol_harness.free_ports(2))]
        env = {"MEMTRACE_SERVE_OTLP_ENDPOINTS": ",".join(serve.grpc_endpoint for serve in serves)}
    for serve in serves:
        stack.callback(stop_serve, serve)
    config = otelcol_harness.TEE_CONFIG if tee else otelcol_harness.LOADBALANCE_CONFIG
    collector = stack.enter_context(otelcol_harness.run_otelcol(
        otelcol_bin, config, workdir, env={"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, **env}))
    return jaeger, serves, collector


def _failures_of(app: AppPipeline, since: int) -> list[Failure]:
    return [Failure(hex_ids(span)[0], span.end_time / 1e9) for span in app.spans()[since:]
            if (span.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False]


def measure(failures: int, settle: float, interval: float, tee: bool) -> tuple[list[Failure], list[str]]:
    """Run the pipeline and time ``failures`` failed evaluations: each one's annotation times, and
    each serve instance's closing summary line."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="writeback-delay-")))
        jaeger, serves, collector = _pipeline(stack, workdir, settle, tee)
        app = app_pipeline(collector.otlp_http_traces, f"writeback-delay-{uuid.uuid4().hex[:8]}")
        watcher = Watcher(jaeger.query_url)
        thread = threading.Thread(target=watcher.run, name="jaeger-poller", daemon=True)
        thread.start()
        while len(watcher.failures) < failures:
            started, before = time.monotonic(), len(app.spans())
            run_pipeline(app.provider, capture_content=True)
            for failure in _failures_of(app, before)[:failures - len(watcher.failures)]:
                watcher.add(failure)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
        deadline = time.monotonic() + _GIVE_UP_SECONDS
        while watcher.pending() and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher.stop.set()
        thread.join()
        app.provider.shutdown()
        for serve in serves:
            stop_serve(serve)
        return watcher.failures, [_closing_line(serve) for serve in serves]


def _closing_line(serve: ServeProcess) -> str:
    lines = [line for line in serve.log().splitlines() if "memtrace serve: stopped" in line]
    return lines[-1].removeprefix("memtrace serve: ") if lines else f"no summary:\n{serve.log_tail()}"


def _summary(delays: list[float], target: float) -> dict[str, Any]:
    if not delays:
        return {"count": 0}
    ordered = sorted(delays)
    return {"count": len(delays), "median_s": round(statistics.median(ordered), 3),
            "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
            "max_s": round(ordered[-1], 3), "target_s": target,
            "meets_target": statistics.median(ordered) <= target and ordered[-1] <= target}


def report(found: list[Failure], settle: float) -> dict[str, Any]:
    target = settle + 2.0
    attribution = [f.attribution_seen - f.ended for f in found if f.attribution_seen is not None]
    root_cause = [f.root_cause_seen - f.ended for f in found if f.root_cause_seen is not None]
    return {"settle_s": settle, "failures": len(found),
            "never_seen": sum(f.attribution_seen is None or f.root_cause_seen is None for f in found),
            "attribution_span": _summary(attribution, target),
            "root_cause_span": _summary(root_cause, target)}


def _print_table(results: dict[str, Any], topology: str) -> None:
    print(f"writeback delay, failed evaluation end -> annotation queryable in Jaeger; {topology}; "
          f"settle {results['settle_s']:g} s; {results['failures']} failures "
          f"({results['never_seen']} never seen)")
    print(f"{'span':<22}{'median':>9}{'p90':>9}{'max':>9}{'target':>9}  ok")
    for key in ("attribution_span", "root_cause_span"):
        row = results[key]
        if not row["count"]:
            print(f"{key:<22}{'-':>9}{'-':>9}{'-':>9}")
            continue
        print(f"{key:<22}{row['median_s']:>8.2f}s{row['p90_s']:>8.2f}s{row['max_s']:>8.2f}s"
              f"{row['target_s']:>8.2f}s  {'yes' if row['meets_target'] else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, default=20, help="failed evaluations to time")
    parser.add_argument("--settle", type=float, default=2.0, help="serve's --settle, seconds")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between application runs")
    parser.add_argument("--tee", action="store_true", help="one serve behind the tee config instead of two "
                                                          "behind the load-balancing config")
    parser.add_argument("--json", action="store_true", help="print the results as JSON only")
    args = parser.parse_args()
    if args.failures < 1 or args.settle < 0 or args.interval < 0:
        parser.error("--failures must be >= 1, --settle and --interval >= 0")
    found, serves = measure(args.failures, args.settle, args.interval, args.tee)
    results = {**report(found, args.settle), "serve": serves}
    topology = "tee, 1 serve instance" if args.tee else "load balancing, 2 serve instances"
    if args.json:
        print(json.dumps({"topology": topology, **results}, indent=2))
    else:
        _print_table(results, topology)
        for line in serves:
            print(f"serve: {line}")


if __name__ == "__main__":
    main()
