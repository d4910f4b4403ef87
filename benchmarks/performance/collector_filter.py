"""The Collector alone, the Collector feeding `memtrace serve` through the memory filter, and serve alone,
side by side in one run, on a mixed load where about 10% of the spans are memory spans (issue 28).

Each set-up's processes are pinned to CPU 0; this script, the load generator, to CPU 1. The load
is pre-encoded OTLP/HTTP protobuf requests of ``--spans-per-request`` spans: memory traces as
``serve_ingest.py`` makes them (ingestion traces of extract + update, question traces of search ->
generate -> judge, 2% of the question traces failed) among plain application traces of three spans
(an HTTP handler, a database call, an LLM chat call) that no memory attribute marks, in the ratio
that makes ``--memory-share`` of the spans memory spans. Posted over ``--connections`` keep-alive
connections for ``--seconds`` per set-up, backing off 50 ms on a 503; the set-ups alternate for
``--rounds`` rounds (this VM is noisy: medians are reported).

* ``collector``: the built Collector (``.ci/install-otelcol.sh``): ``otlp`` receiver -> ``batch`` ->
  a ``file`` exporter writing OTLP/JSON to /dev/null (the backend's stand-in).
* ``collector+filter+serve``: ``collector/otelcol-memory-filter.yaml`` as shipped, its backend
  exporter replaced by that file exporter, feeding a real ``memtrace serve`` (durable, the default);
  both processes on CPU 0.
* ``serve``: ``memtrace serve`` receiving the whole mixed load itself.

Reported per set-up: spans accepted per second (wall clock), the CPU seconds of its processes
(from ``/proc``, all threads) and spans per CPU-second, what serve received, and peak RSS.

    python benchmarks/performance/collector_filter.py [--seconds 20] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_ingest import _add, _cpu_seconds, _free_port, _kv, _rss_mib, _sender, _trace

ROOT = Path(__file__).resolve().parents[2]
FILTER_CONFIG = ROOT / "collector" / "otelcol-memory-filter.yaml"
SETUPS = ("collector", "collector+filter+serve", "serve")
_SUMMARY_PREFIX = "memtrace serve: stopped; "

_COLLECTOR_ALONE = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${env:OTELCOL_HTTP_PORT}
processors:
  batch:
    timeout: 200ms
    send_batch_size: 1024
exporters:
  file/backend:
    path: /dev/null
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [file/backend]
  telemetry:
    metrics:
      level: none
"""


def _plain_trace(request: ExportTraceServiceRequest, number: int) -> int:
    scope = request.resource_spans[0].scope_spans[0]
    trace = (1 << 120 | number).to_bytes(16, "big")
    base = number * 10 + 1
    _add(scope, trace, base, "GET /orders", {"http.route": "/orders", "http.request.method": "GET"})
    _add(scope, trace, base + 1, "SELECT orders", {"db.system": "postgresql", "db.operation.name": "SELECT"})
    _add(scope, trace, base + 2, "chat gpt-4o",
         {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"})
    return 3


def mixed_requests(count: int, seed: int, spans_per_request: int,
                   memory_share: float) -> list[tuple[bytes, int]]:
    """Pre-encoded requests, ``memory_share`` of their spans in memory traces (the rest plain)."""
    rng = random.Random(seed)
    made, memory_number, plain_number = [], seed * 10_000_000, seed * 10_000_000
    memory_spans = plain_spans = 0
    for _ in range(count):
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.append(_kv("service.name", "bench"))
        resource.scope_spans.add().scope.name = "app"
        spans = 0
        while spans < spans_per_request:
            if memory_spans < memory_share * (memory_spans + plain_spans + 1):
                added = _trace(request, memory_number,
                               failed=memory_number % 2 == 1 and rng.random() < 0.02)
                memory_number += 1
                memory_spans += added
            else:
                added = _plain_trace(request, plain_number)
                plain_number += 1
                plain_spans += added
            spans += added
        made.append((request.SerializeToString(), spans))
    return made


def _otelcol_binary() -> Path:
    binary = Path(os.environ.get("MEMTRACE_OTELCOL_BIN", Path.home() / ".cache" / "memtrace" / "otelcol"))
    if not binary.exists():
        sys.exit(f"collector_filter: no Collector at {binary}: run .ci/install-otelcol.sh")
    return binary


def _filter_config(path: Path) -> str:
    """The memory filter, its backend exporter a file exporter to /dev/null."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    del config["exporters"]["otlp/backend"]
    config["exporters"]["file/backend"] = {"path": "/dev/null"}
    config["service"]["pipelines"]["traces/backend"]["exporters"] = ["file/backend"]
    return yaml.safe_dump(config, sort_keys=False)


def _wait_port(port: int, process: subprocess.Popen[Any], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"collector_filter: {what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"collector_filter: {what} did not listen on {port}")


@contextmanager
def _process(command: list[str], log: Any,
             env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[Any]]:
    process = subprocess.Popen(["taskset", "-c", "0", *command], stdout=subprocess.DEVNULL, stderr=log,
                               env={**os.environ, "COLUMNS": "250", **(env or {})})
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _drive(port: int, requests: list[tuple[bytes, int]], seconds: float, connections: int,
           pids: list[int]) -> dict[str, Any]:
    totals: dict[str, int] = {"spans": 0}
    lock, stop = threading.Lock(), threading.Event()
    senders = [threading.Thread(target=_sender, daemon=True,  # each connection from its own offset
                                args=(port, requests, stop, totals, lock, n * len(requests) // connections))
               for n in range(connections)]
    started, cpu_started = time.monotonic(), sum(_cpu_seconds(pid) for pid in pids)
    for sender in senders:
        sender.start()
    peak = 0.0
    while time.monotonic() - started < seconds:
        time.sleep(1)
        peak = max(peak, sum(_rss_mib(pid) for pid in pids))
    stop.set()
    for sender in senders:
        sender.join(30)
    elapsed = time.monotonic() - started
    cpu = sum(_cpu_seconds(pid) for pid in pids) - cpu_started
    return {"seconds": elapsed, "spans": totals["spans"], "spans_per_second": totals["spans"] / elapsed,
            "cpu_seconds": cpu, "spans_per_cpu_second": totals["spans"] / cpu if cpu else 0.0,
            "overload_503": totals.get("http_503", 0), "peak_rss_mib": peak}


def _serve_command(port: int, data_dir: str, settle: float) -> list[str]:
    memtrace = Path(sys.executable).with_name("memtrace")
    return [str(memtrace), "serve", "--grpc-port", "-1", "--http-port", str(port), "--settle", str(settle),
            "--data-dir", data_dir]


def _serve_received(log: Any) -> int | None:
    log.seek(0)
    for line in reversed(log.read().splitlines()):
        if line.startswith(_SUMMARY_PREFIX):
            return int(line[len(_SUMMARY_PREFIX):].split()[0])
    return None


def run_setup(name: str, requests: list[tuple[bytes, int]], args: argparse.Namespace,
              workdir: Path) -> dict[str, Any]:
    """One set-up for ``args.seconds``; what it accepted, cost and (serve) received."""
    binary = _otelcol_binary()
    data_dir = tempfile.mkdtemp(prefix="serve-", dir=workdir)
    with tempfile.TemporaryFile("w+") as serve_log, tempfile.TemporaryFile("w+") as otelcol_log:
        if name == "serve":
            port = _free_port()
            with _process(_serve_command(port, data_dir, args.settle), serve_log) as serve:
                _wait_port(port, serve, "memtrace serve")
                result = _drive(port, requests, args.seconds, args.connections, [serve.pid])
            result["serve_received"] = _serve_received(serve_log)
        else:
            config = workdir / f"{name.replace('+', '-')}.yaml"
            text = _COLLECTOR_ALONE if name == "collector" else _filter_config(args.filter_config)
            config.write_text(text, encoding="utf-8")
            port, grpc_port, serve_port = _free_port(), _free_port(), _free_port()
            env = {"OTELCOL_HTTP_PORT": str(port), "OTELCOL_GRPC_PORT": str(grpc_port),
                   "MEMTRACE_SERVE_OTLP": f"http://127.0.0.1:{serve_port}",
                   "MEMTRACE_DECISION_WAIT": f"{args.decision_wait}s"}
            if name == "collector":
                with _process([str(binary), "--config", str(config)], otelcol_log, env) as collector:
                    _wait_port(port, collector, "the Collector")
                    result = _drive(port, requests, args.seconds, args.connections, [collector.pid])
            else:
                with _process(_serve_command(serve_port, data_dir, args.settle), serve_log) as serve:
                    _wait_port(serve_port, serve, "memtrace serve")
                    with _process([str(binary), "--config", str(config)], otelcol_log, env) as collector:
                        _wait_port(port, collector, "the Collector")
                        result = _drive(port, requests, args.seconds, args.connections,
                                        [collector.pid, serve.pid])
                        # What is still held for a decision goes out after the wait, then the batch.
                        time.sleep(args.decision_wait + 2)
                result["serve_received"] = _serve_received(serve_log)
    shutil.rmtree(data_dir, ignore_errors=True)
    result["setup"] = name
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per set-up and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--spans-per-request", type=int, default=500)
    parser.add_argument("--memory-share", type=float, default=0.10)
    parser.add_argument("--pool", type=int, default=400,
                        help="distinct pre-encoded requests, sent round-robin")
    parser.add_argument("--settle", type=float, default=2.0, help="serve's --settle")
    parser.add_argument("--decision-wait", type=float, default=2.0,
                        help="the filter's MEMTRACE_DECISION_WAIT")
    parser.add_argument("--filter-config", type=Path, default=FILTER_CONFIG,
                        help="the memory filter's Collector config (default: the shipped one)")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"some of {', '.join(SETUPS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setups = [s for s in args.setups.split(",") if s]
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        parser.error(f"--setups: unknown {', '.join(unknown)}; choose from {', '.join(SETUPS)}")
    os.sched_setaffinity(0, {1})
    requests = [item for seed in range(4)
                for item in mixed_requests(max(1, args.pool // 4), seed, args.spans_per_request,
                                           args.memory_share)]
    offered = sum(spans for _, spans in requests)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in setups}
    with tempfile.TemporaryDirectory(prefix="collector-filter-") as directory:
        for _ in range(max(args.rounds, 1)):
            for name in setups:
                runs[name].append(run_setup(name, requests, args, Path(directory)))
    keys = ("spans_per_second", "cpu_seconds", "spans_per_cpu_second", "peak_rss_mib", "overload_503")
    medians = {name: {key: statistics.median(r[key] for r in results) for key in keys}
               for name, results in runs.items()}
    for name, results in runs.items():
        shares = [r["serve_received"] / r["spans"] for r in results if r.get("serve_received") and r["spans"]]
        medians[name]["serve_received_share"] = statistics.median(shares) if shares else None
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"runs": runs, "medians": medians, "offered_per_round": offered,
                          "load_average": load}, indent=2))
        return
    print(f"mixed load: {args.memory_share:.0%} memory spans, {args.spans_per_request} spans a request, "
          f"{args.connections} connections, {args.seconds:g} s per set-up, medians of {args.rounds} rounds; "
          f"load average now {load[0]:.1f}")
    print(f"{'set-up':24} {'spans/s':>10} {'CPU s':>7} {'spans/CPU-s':>12} {'serve got':>10} "
          f"{'peak MiB':>9} {'503s':>5}")
    for name, m in medians.items():
        got = m["serve_received_share"]
        print(f"{name:24} {m['spans_per_second']:>10,.0f} {m['cpu_seconds']:>7.1f} "
              f"{m['spans_per_cpu_second']:>12,.0f} {'' if got is None else f'{got:.1%}':>10} "
              f"{m['peak_rss_mib']:>9.0f} {m['overload_503']:>5.0f}")


if __name__ == "__main__":
    main()
