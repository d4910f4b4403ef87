"""``memtrace serve``: the attribution service a Collector feeds as a second exporter.

Receives OTLP (gRPC and HTTP, protobuf and JSON), waits for each trace to
settle, attributes the failed ones (fetching from Jaeger or Tempo the traces
that used the same memory stores and the traces they link to) and writes the
verdicts back to the trace backend as spans.
Runs until SIGINT/SIGTERM, then drains: what has arrived is attributed and
exported before it exits. ``collector/README.md`` shows the Collector configs.
"""

from __future__ import annotations

import signal
import threading

import click

from memtrace_otel.cli.common import check_one_backend, content_store_option, stderr
from memtrace_otel.config import ENV_JAEGER_URL, ENV_TEMPO_URL

__all__ = ["serve_command"]


def _port(value: int) -> int | None:
    return None if value < 0 else value


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MEMTRACE_SERVE_HOST",
              help="Address the receivers bind to (loopback unless you mean otherwise).")
@click.option("--grpc-port", type=int, default=14317, show_default=True, envvar="MEMTRACE_SERVE_GRPC_PORT",
              help="OTLP/gRPC port; -1 turns the gRPC receiver off.")
@click.option("--http-port", type=int, default=14318, show_default=True, envvar="MEMTRACE_SERVE_HTTP_PORT",
              help="OTLP/HTTP port (POST /v1/traces); -1 turns it off.")
@click.option("--settle", "settle_seconds", type=click.FloatRange(min=0), default=10.0, show_default=True,
              envvar="MEMTRACE_SERVE_SETTLE", help="Seconds a trace must be quiet before it is judged.")
@click.option("--memory-limit", "memory_limit_mib", type=click.IntRange(min=128), default=512,
              show_default=True, envvar="MEMTRACE_SERVE_MEMORY_MIB",
              help="MiB; above it, receivers answer with OTLP's retryable 'unavailable'.")
@click.option("--max-request", "max_request_mib", type=click.IntRange(min=1), default=16, show_default=True,
              help="Largest accepted request, MiB.")
@click.option("--backend-otlp", envvar="MEMTRACE_BACKEND_OTLP", metavar="URL",
              help="OTLP endpoint of the trace backend the annotation spans go to (e.g. http://127.0.0.1:4318).")
@click.option("--backend-protocol", type=click.Choice(["http/protobuf", "grpc"]), default="http/protobuf",
              show_default=True, help="Protocol of --backend-otlp.")
@click.option("--jaeger", "jaeger_url", envvar=ENV_JAEGER_URL, metavar="URL",
              help="Jaeger query URL to fetch linked traces from (memory written in earlier traces).")
@click.option("--tempo", "tempo_url", envvar=ENV_TEMPO_URL, metavar="URL",
              help="Grafana Tempo HTTP API URL to fetch linked traces from instead (e.g. http://127.0.0.1:3200).")
@click.option("--store-lookback", type=click.FloatRange(min=0), default=7 * 24 * 3600.0, show_default=True,
              envvar="MEMTRACE_STORE_LOOKBACK", metavar="SECONDS",
              help="How far before a failure the backend is searched for traces that used the same memory "
                   "store (a retrieval that missed a memory has no link to it); 0 follows span links only.")
@click.option("--engine", default="lineage", show_default=True, help="Attribution engine.")
@content_store_option
def serve_command(host: str, grpc_port: int, http_port: int, settle_seconds: float, memory_limit_mib: int,
                  max_request_mib: int, backend_otlp: str | None, backend_protocol: str,
                  jaeger_url: str | None, tempo_url: str | None, store_lookback: float, engine: str,
                  content_store: str | None) -> None:
    """Attribute failed traces from an OTLP stream and write the verdicts back as spans."""
    try:
        import grpc  # noqa: F401 - only to tell whether the extra is installed
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        raise click.ClickException("`memtrace serve` needs the OTLP receiver and exporter packages: "
                                   "pip install 'memtrace-otel[serve]'") from None
    from memtrace_otel.collector.server import ServeConfig, build_server

    check_one_backend(jaeger_url, tempo_url)
    config = ServeConfig(host=host, grpc_port=_port(grpc_port), http_port=_port(http_port),
                         settle_seconds=settle_seconds, memory_limit_mib=memory_limit_mib,
                         max_request_mib=max_request_mib, backend_otlp=backend_otlp,
                         backend_protocol=backend_protocol, jaeger_url=jaeger_url, tempo_url=tempo_url,
                         engine=engine, content_store=content_store, store_lookback=store_lookback)
    try:
        server = build_server(config)
        server.start()
    except (ValueError, OSError) as error:
        raise click.ClickException(str(error)) from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    addresses = ", ".join(f"{type(r).__name__.removeprefix('OTLP').removesuffix('Receiver')} "
                          f"{r.address[0]}:{r.address[1]}" for r in server.receivers)  # type: ignore[attr-defined]
    stderr.print(f"memtrace serve: listening ({addresses}); settle {settle_seconds:g}s; Ctrl-C stops")
    stop.wait()
    stderr.print("memtrace serve: draining (attributing what arrived, exporting annotations)")
    drained = server.stop(timeout=30.0)
    stats = server.service.stats
    stderr.print(f"memtrace serve: stopped; {stats.spans_received} spans received, {stats.attributions} "
                 f"failures attributed, {server.service.outbox.dropped} annotations dropped"
                 + ("" if drained else "; drain timed out"))
