"""Resident memory of `memtrace serve` under a flood of large attribute-dense OTLP/HTTP requests.

Issue 24's case: eight clients at once, each posting ~15 MiB protobuf requests whose spans carry
many small attributes (the decoded size of such spans is many times their wire size); one trace
in fifty fails, so attribution decodes some of them too. The server is a real
`memtrace serve --memory-limit LIMIT` process; its RSS is sampled every 0.2 s.

    python benchmarks/performance/serve_flood.py --seconds 60 --memory-limit 512 --clients 8 --request-mib 15
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_HEADERS = {"Content-Type": "application/x-protobuf"}
_MARKER = b"\xfe\xed\xfa\xce"


def dense_request(mib: float, seed: int) -> bytes:
    """A request of about ``mib`` MiB: spans of 8 in a trace, 150 short attributes each."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    kv = resource.resource.attributes.add(key="service.name")
    kv.value.string_value = "flood"
    scope = resource.scope_spans.add()
    scope.scope.name = "memtrace_otel"
    number = size = 0
    while size < mib * (1 << 20):  # summed per span: ByteSize() of the whole request each time is quadratic
        # The first four bytes are a marker each post replaces with its own number: fresh trace ids
        # per post, so traces settle and the failed ones are attributed while the flood goes on.
        trace = _MARKER + (seed * 10_000_000 + number // 8 + 1).to_bytes(12, "big")
        span = scope.spans.add(trace_id=trace, span_id=(number + 1).to_bytes(8, "big"),
                               name=f"op{number % 8}")
        span.start_time_unix_nano = time.time_ns()
        span.end_time_unix_nano = span.start_time_unix_nano + 1000
        for key in range(150):
            attribute = span.attributes.add(key=f"k{key}")
            attribute.value.string_value = f"v{number}-{key}"
        if number % 8 == 6:  # each trace: ... -> a generation -> its evaluation
            _strings(span, {"memtrace.operation.category": "generation",
                            "memtrace.outputs": f"answer:{number}@1"})
        if number % 8 == 7:
            _strings(span, {"memtrace.operation.category": "evaluation",
                            "memtrace.inputs": f"answer:{number - 1}@1"})
            passed = span.attributes.add(key="memtrace.evaluation.passed")
            passed.value.bool_value = (number // 8) % 50 != 0  # one trace in fifty fails
        size += span.ByteSize() + 4
        number += 1
    return request.SerializeToString()


def _strings(span: object, attributes: dict[str, str]) -> None:
    for key, value in attributes.items():
        attribute = span.attributes.add(key=key)  # type: ignore[attr-defined]
        if key in ("memtrace.inputs", "memtrace.outputs"):
            attribute.value.array_value.values.add().string_value = value
        else:
            attribute.value.string_value = value


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except OSError:
        return 0.0


def _client(port: int, body: bytes, stop: threading.Event, totals: dict[int, int],
            lock: threading.Lock) -> None:
    connection: http.client.HTTPConnection | None = None
    posts = 0
    while not stop.is_set():
        posts += 1
        fresh = body.replace(_MARKER, (posts + 1000 * threading.get_ident() % 997).to_bytes(4, "big"))
        try:
            connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            connection.request("POST", "/v1/traces", body=fresh, headers=_HEADERS)
            response = connection.getresponse()
            response.read()
            status = response.status
        except OSError:
            connection, status = None, 0
        with lock:
            totals[status] = totals.get(status, 0) + 1
        if status != 200:
            time.sleep(0.2)  # an OTLP exporter backs off on 503


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--memory-limit", type=int, default=512, help="MiB, passed to memtrace serve")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--request-mib", type=float, default=15.0)
    args = parser.parse_args()
    bodies = [dense_request(args.request_mib, seed) for seed in range(args.clients)]
    port = _free_port()
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - lives as long as main()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("memtrace")), "serve", "--grpc-port", "-1",
         "--http-port", str(port),
         "--settle", "2", "--memory-limit", str(args.memory_limit), "--max-request",
         str(max(16, int(args.request_mib) + 1)), "--data-dir", tempfile.mkdtemp(prefix="memtrace-flood-")],
        stderr=log, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    totals: dict[int, int] = {}
    lock, stop = threading.Lock(), threading.Event()
    clients = [threading.Thread(target=_client, args=(port, body, stop, totals, lock), daemon=True)
               for body in bodies]
    for client in clients:
        client.start()
    started, peak = time.monotonic(), 0.0
    while time.monotonic() - started < args.seconds:
        time.sleep(0.2)
        peak = max(peak, _rss_mib(server.pid))
    stop.set()
    for client in clients:
        client.join(150)
    server.terminate()
    server.wait(120)
    log.seek(0)
    summary = [line for line in log.read().splitlines() if line.startswith("memtrace serve: stopped")]
    print(f"{args.clients} clients x {len(bodies[0]) / (1 << 20):.1f} MiB requests for {args.seconds:g} s: "
          f"answers {dict(sorted(totals.items()))}")
    print(f"server RSS peak {peak:.0f} MiB, limit {args.memory_limit} MiB")
    print(summary[-1] if summary else f"no summary from memtrace serve (exit {server.returncode})")


if __name__ == "__main__":
    main()
