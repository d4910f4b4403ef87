"""Ingest rate and memory of `memtrace serve` on one core, with 1% of traces failing.

The server runs as a real `memtrace serve` process pinned to CPU 0; this
script, pinned to CPU 1, posts OTLP/HTTP protobuf requests of memory-pipeline
traces (ingestion traces of extract + update operations, question traces of
search -> generate -> judge; one trace in a hundred has a failed verdict) as
fast as the server takes them, over keep-alive connections, for
``--seconds``. It samples the server's resident memory every second and
reports accepted spans per second, the server's CPU time (all its threads, from
``/proc``: spans per CPU-second is what one core's work buys when the machine is
shared), 503 (overload) answers, and peak RSS against the configured ``--memory-limit``.

    python benchmarks/performance/serve_ingest.py --seconds 300 --memory-limit 256
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

_SPANS_PER_REQUEST = 200
_HEADERS = {"Content-Type": "application/x-protobuf"}


def _kv(key: str, value: object) -> KeyValue:
    kv = KeyValue(key=key)
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, list):
        kv.value.array_value.values.add().string_value = value[0]
        for item in value[1:]:
            kv.value.array_value.values.add().string_value = item
    else:
        kv.value.string_value = str(value)
    return kv


def _add(scope: object, trace: bytes, span: int, name: str, attributes: dict[str, object]) -> None:
    record = scope.spans.add()  # type: ignore[attr-defined]
    record.trace_id, record.span_id, record.name = trace, span.to_bytes(8, "big"), name
    record.start_time_unix_nano = time.time_ns()
    record.end_time_unix_nano = record.start_time_unix_nano + 1000
    record.attributes.extend(_kv(k, v) for k, v in attributes.items())


def _trace(request: ExportTraceServiceRequest, number: int, failed: bool) -> int:
    scope = request.resource_spans[0].scope_spans[0]
    trace = (number + 1).to_bytes(16, "big")
    base = number * 10 + 1
    if number % 2 == 0:  # an ingestion trace
        _add(scope, trace, base, "mem0.extract", {
            "memtrace.operation.category": "extraction", "memtrace.inputs": [f"msg:{number}@1"],
            "memtrace.outputs": [f"mem:{number}@1"],
            "memtrace.variables": [f"message 40 00ff00ff00ff00ff msg:{number}@1",
                                   f"memory_unit 30 11ff11ff11ff11ff mem:{number}@1"]})
        _add(scope, trace, base + 1, "mem0.update", {
            "memtrace.operation.category": "update", "memtrace.inputs": [f"mem:{number}@1"],
            "memtrace.outputs": [f"mem:{number}@2"],
            "memtrace.variables": [f"memory_unit 31 22ff22ff22ff22ff mem:{number}@2"]})
        return 2
    _add(scope, trace, base, "search_memory user", {
        "memtrace.operation.category": "retrieval", "gen_ai.operation.name": "search_memory",
        "memtrace.inputs": [f"mem:{number - 1}@2"], "memtrace.outputs": [f"context:{number}@1"],
        "memtrace.variables": [f"context 31 33ff33ff33ff33ff context:{number}@1"]})
    _add(scope, trace, base + 1, "generate", {
        "memtrace.operation.category": "generation", "memtrace.inputs": [f"context:{number}@1"],
        "memtrace.outputs": [f"answer:{number}@1"],
        "memtrace.variables": [f"answer 5 44ff44ff44ff44ff answer:{number}@1"]})
    _add(scope, trace, base + 2, "judge", {
        "memtrace.operation.category": "evaluation", "memtrace.inputs": [f"answer:{number}@1"],
        "memtrace.evaluation.passed": not failed, "memtrace.evaluation.answer": f"answer:{number}@1"})
    return 3


def _requests(count: int, seed: int) -> list[tuple[bytes, int]]:
    """Pre-encoded requests: the generator must not be what is measured."""
    rng = random.Random(seed)
    made, number = [], seed * 10_000_000
    for _ in range(count):
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.append(_kv("service.name", "bench"))
        resource.scope_spans.add().scope.name = "memtrace_otel"
        spans = 0
        while spans < _SPANS_PER_REQUEST:
            spans += _trace(request, number, failed=number % 2 == 1 and rng.random() < 0.02)
            number += 1
        made.append((request.SerializeToString(), spans))
    return made


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sender(port: int, requests: list[tuple[bytes, int]], stop: threading.Event, totals: dict[str, int],
            lock: threading.Lock, start: int = 0) -> None:
    """Posts ``requests`` round-robin from ``start``. Each connection starts at its own offset: started at
    the same one, every connection sent the same requests at once, so each trace arrived once per connection
    (its spans stored as many times, and a trace's work shared by that many copies of its spans)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    index = start
    while not stop.is_set():
        body, spans = requests[index % len(requests)]
        index += 1
        connection.request("POST", "/v1/traces", body=body, headers=_HEADERS)
        response = connection.getresponse()
        response.read()
        with lock:
            if response.status == 200:
                totals["spans"] += spans
            else:
                totals[f"http_{response.status}"] = totals.get(f"http_{response.status}", 0) + 1
        if response.status == 503:
            time.sleep(0.05)  # what an OTLP exporter does: back off and retry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--memory-limit", type=int, default=256, help="MiB, passed to memtrace serve")
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--pool", type=int, default=200,
                        help="distinct pre-encoded requests sent round-robin; a trace id comes back once "
                             "per round, so with more requests than the settle time takes, each round's "
                             "traces have settled (and failed ones are attributed again) before it repeats")
    parser.add_argument("--data-dir", default=None,
                        help="serve's write-ahead store (default: a fresh temporary directory)")
    args = parser.parse_args()

    port = _free_port()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="memtrace-serve-bench-")
    log_file = tempfile.TemporaryFile("w+")  # noqa: SIM115 - lives as long as main(); not a pipe, which would stall the server when full
    memtrace = Path(sys.executable).with_name("memtrace")
    server = subprocess.Popen(
        ["taskset", "-c", "0", str(memtrace), "serve", "--grpc-port", "-1", "--http-port", str(port),
         "--settle", str(args.settle), "--memory-limit", str(args.memory_limit), "--data-dir", data_dir],
        stderr=log_file, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"})
    os.sched_setaffinity(0, {1})
    requests = [item for seed in range(4) for item in _requests(max(1, args.pool // 4), seed)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    totals: dict[str, int] = {"spans": 0}
    lock, stop = threading.Lock(), threading.Event()
    offsets = [n * len(requests) // args.connections for n in range(args.connections)]
    senders = [threading.Thread(target=_sender, args=(port, requests, stop, totals, lock, start), daemon=True)
               for start in offsets]
    started, cpu_started = time.monotonic(), _cpu_seconds(server.pid)
    for sender in senders:
        sender.start()
    peak, samples = 0.0, []
    while time.monotonic() - started < args.seconds:
        time.sleep(1)
        rss = _rss_mib(server.pid)
        peak = max(peak, rss)
        samples.append(rss)
    stop.set()
    for sender in senders:
        sender.join(30)
    elapsed = time.monotonic() - started
    cpu = _cpu_seconds(server.pid) - cpu_started  # on a shared machine: what one core's work bought
    server.terminate()
    server.wait(120)
    log_file.seek(0)
    summary = [line for line in log_file.read().splitlines() if line.startswith("memtrace serve: stopped")]
    print(f"seconds {elapsed:.1f}  spans accepted {totals['spans']:,}  "
          f"rate {totals['spans'] / elapsed:,.0f} spans/s  "
          f"overload answers {totals.get('http_503', 0)}  other errors "
          f"{sum(v for k, v in totals.items() if k.startswith('http_') and k != 'http_503')}")
    print(f"server CPU {cpu:.1f} s ({cpu / elapsed:.0%} of the run): "
          f"{totals['spans'] / cpu if cpu else 0:,.0f} spans per CPU-second")
    print(f"server RSS: peak {peak:.0f} MiB, last {samples[-1] if samples else 0:.0f} MiB, "
          f"limit {args.memory_limit} MiB")
    print(summary[-1] if summary else f"no summary from memtrace serve (exit {server.returncode})")


if __name__ == "__main__":
    main()
