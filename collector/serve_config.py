"""``memtrace serve``'s configuration: every setting once, with its default, option and variable.

:class:`ServeConfig` is the one source: each field's default is the default, and its
:class:`~memtrace_otel.config.Setting` names the command-line option and the environment
variable (defined in :mod:`memtrace_otel.config`). ``memtrace serve`` builds its click options
from these fields (``cli/serve_cmd.py``); library users get the same values with
:meth:`ServeConfig.from_env`. Kept apart from ``serve.py`` so the CLI can read the settings
without importing the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memtrace_otel.config import (
    DEFAULT_STORE_LOOKBACK_SECONDS,
    ENV_BACKEND_OTLP,
    ENV_CONTENT_STORE,
    ENV_JAEGER_URL,
    ENV_METRICS_OTLP,
    ENV_SERVE_DATA_DIR,
    ENV_SERVE_DATA_MIB,
    ENV_SERVE_GRPC_PORT,
    ENV_SERVE_HOST,
    ENV_SERVE_HTTP_PORT,
    ENV_SERVE_MEMORY_MIB,
    ENV_SERVE_SETTLE,
    ENV_STORE_LOOKBACK,
    ENV_TEMPO_URL,
    default_serve_data_dir,
    setting,
    settings_from_env,
)
from memtrace_otel.content.store import open_store
from memtrace_otel.spans.gather import open_backend

__all__ = ["MIN_MEMORY_MIB", "ServeConfig"]

MIN_MEMORY_MIB = 128
"""The smallest memory limit: the service alone takes ~60 MiB."""
BACKEND_PROTOCOLS = ("http/protobuf", "grpc")


@dataclass(slots=True)
class ServeConfig:
    """Everything ``memtrace serve`` can be told. Ports 0 pick free ones; ``None`` turns a receiver off."""

    host: str = setting("127.0.0.1", option="--host", env=ENV_SERVE_HOST,
                        help="Address the receivers bind to (loopback unless you mean otherwise).")
    grpc_port: int | None = setting(14317, option="--grpc-port", env=ENV_SERVE_GRPC_PORT, off=-1,
                                    help="OTLP/gRPC port; -1 turns the gRPC receiver off.")
    http_port: int | None = setting(14318, option="--http-port", env=ENV_SERVE_HTTP_PORT, off=-1,
                                    help="OTLP/HTTP port (POST /v1/traces); -1 turns it off.")
    settle_seconds: float = setting(10.0, option="--settle", env=ENV_SERVE_SETTLE, minimum=0,
                                    help="Seconds a trace must be quiet before it is judged.")
    memory_limit_mib: int = setting(
        512, option="--memory-limit", env=ENV_SERVE_MEMORY_MIB, minimum=MIN_MEMORY_MIB,
        help="MiB; above it, receivers answer with OTLP's retryable 'unavailable'.")
    max_request_mib: int = setting(16, option="--max-request", minimum=1,
                                   help="Largest accepted request, MiB.")
    backend_otlp: str | None = setting(
        None, option="--backend-otlp", env=ENV_BACKEND_OTLP, metavar="URL",
        help="OTLP endpoint of the trace backend the annotation spans go to (e.g. http://127.0.0.1:4318).")
    backend_protocol: str = setting("http/protobuf", option="--backend-protocol", choices=BACKEND_PROTOCOLS,
                                    help="Protocol of --backend-otlp.")
    metrics_otlp: str | None = setting(
        None, option="--metrics-otlp", env=ENV_METRICS_OTLP, metavar="URL",
        help="OTLP/HTTP endpoint the attribution metrics go to (memtrace.attribution.failures, .duration, "
             ".dropped; e.g. a Collector's http://127.0.0.1:4318); off by default.")
    jaeger_url: str | None = setting(
        None, option="--jaeger", env=ENV_JAEGER_URL, metavar="URL",
        help="Jaeger query URL to fetch linked traces from (memory written in earlier traces).")
    tempo_url: str | None = setting(
        None, option="--tempo", env=ENV_TEMPO_URL, metavar="URL",
        help="Grafana Tempo HTTP API URL to fetch linked traces from instead (e.g. http://127.0.0.1:3200).")
    store_lookback: float = setting(
        DEFAULT_STORE_LOOKBACK_SECONDS, option="--store-lookback", env=ENV_STORE_LOOKBACK, minimum=0,
        metavar="SECONDS",
        help="How far before a failure the backend is searched for traces that used the same memory "
             "store (a retrieval that missed a memory has no link to it); 0 follows span links only.")
    """Seconds before a failure searched for traces using the same memory store; 0 = links only."""
    engine: str = setting("lineage", option="--engine", help="Attribution engine.")
    content_store: str | None = setting(
        None, option="--content-store", env=ENV_CONTENT_STORE, metavar="PATH_OR_URL",
        help="Content store the spans' references point into (a directory, or an fsspec URL such as "
             "s3://bucket/prefix): variable contents the spans left there are read back.")
    """Directory or fsspec URL the spans' content references point into (``--content-store``)."""

    data_dir: str = setting(
        default_serve_data_dir(), option="--data-dir", env=ENV_SERVE_DATA_DIR, metavar="DIR",
        help="Write-ahead store: spans are acknowledged once written here, annotations held here until "
             "the backend accepts them; both are replayed after a restart. One serve per directory.")
    data_limit_mib: int = setting(
        1024, option="--data-limit", env=ENV_SERVE_DATA_MIB, minimum=16,
        help="MiB the data directory holds at most; past it the oldest requests (then annotations) are "
             "dropped, counted and logged.")
    workers: int = setting(2, option="--workers", minimum=1,
                           help="Attribution threads (one expensive failure holds one of them).")
    failure_max_traces: int = setting(
        200, option="--failure-max-traces", minimum=0,
        help="Traces fetched from the backend for one failure at most (links and store searches).")
    failure_max_searches: int = setting(
        20, option="--failure-max-searches", minimum=0, help="Store searches for one failure at most.")
    failure_seconds: float = setting(
        30.0, option="--failure-seconds", minimum=1, help="Seconds of backend work one failure may take.")
    backend_rate: float = setting(50.0, option="--backend-rate", minimum=1,
                                  help="Requests per second to the query backend, for all failures together.")
    redo_seconds: float = setting(
        3600.0, option="--redo-window", minimum=0, metavar="SECONDS",
        help="A verdict made while the backend failed is provisional and judged again when it answers, "
             "for this long; 0 turns it off.")

    @classmethod
    def from_env(cls, **overrides: Any) -> ServeConfig:
        """The defaults, then the environment variables that are set, then ``overrides``.

        Raises
        ------
        ValueError
            A variable that does not parse (one line naming it).
        """
        return cls(**{**settings_from_env(cls), **overrides})

    def validate(self) -> None:
        """``ValueError`` naming the first bad setting."""
        if self.settle_seconds < 0:
            raise ValueError("settle time must be >= 0 seconds")
        if self.store_lookback < 0:
            raise ValueError("store lookback must be >= 0 seconds (0 follows span links only)")
        if self.memory_limit_mib < MIN_MEMORY_MIB:
            raise ValueError(f"memory limit must be >= {MIN_MEMORY_MIB} MiB (the service alone takes ~60)")
        if self.max_request_mib < 1 or self.max_request_mib * 4 > self.memory_limit_mib:
            raise ValueError("max request size must be >= 1 MiB and at most a quarter of the memory limit")
        if self.backend_protocol not in BACKEND_PROTOCOLS:
            raise ValueError(f"backend protocol {self.backend_protocol!r} is not grpc or http/protobuf")
        if self.grpc_port is None and self.http_port is None:
            raise ValueError("both receivers are off: give a gRPC or an HTTP port")
        for name, port in (("gRPC", self.grpc_port), ("HTTP", self.http_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name} port {port} is not in 0..65535")
        open_backend(self.jaeger_url, self.tempo_url)  # one of the two, each a well-formed URL
        if self.metrics_otlp is not None and not self.metrics_otlp.startswith(("http://", "https://")):
            raise ValueError(f"metrics endpoint {self.metrics_otlp[:80]!r} is not an http:// or https:// URL")
        if self.data_limit_mib < 16:
            raise ValueError("data directory limit must be >= 16 MiB")
        if not self.data_dir:
            raise ValueError("give a data directory (--data-dir)")
        if self.content_store is not None:
            open_store(self.content_store)  # ContentStoreError (a ValueError) names a bad path or URL
