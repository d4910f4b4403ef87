"""Runs the real OpenTelemetry Collector on loopback for the tests of the live pipeline.

The binary is the small distribution of ``collector/builder-config.yaml``, built
from source by ``.ci/install-otelcol.sh`` (Go toolchain, Go module proxy).
Without it a test is skipped with the reason, except on CI (``CI=true``), where
a missing Collector is a failure: CI must not go green on tests that silently
did not run.

A test gives a config (``collector/otelcol-tee.yaml``, ``otelcol-loadbalance.yaml``,
or its own) and the environment the config reads; the harness adds the OTLP
receiver ports (``OTELCOL_GRPC_PORT``, ``OTELCOL_HTTP_PORT``, free ports on
127.0.0.1), starts the process, waits until both receivers accept connections
(the Collector starts its receivers last, after every exporter, so an open
receiver means a running pipeline) and stops it (terminate, then kill) on
exit. Its log is kept in a file and its tail is part of every failure message.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from process_harness import (
    CachedBinary,
    LoggedProcess,
    accepts,
    free_ports,
    loopback_env,
    spawn_logged,
    stop_process,
)

__all__ = [
    "ENV_OTELCOL_BIN",
    "LOADBALANCE_CONFIG",
    "TEE_CONFIG",
    "CollectorEndpoints",
    "CollectorNotReady",
    "free_ports",
    "otelcol_binary",
    "require_otelcol_binary",
    "run_otelcol",
]

ENV_OTELCOL_BIN = "MEMTRACE_OTELCOL_BIN"
_COLLECTOR_DIR = Path(__file__).resolve().parent.parent / "collector"
TEE_CONFIG = _COLLECTOR_DIR / "otelcol-tee.yaml"
LOADBALANCE_CONFIG = _COLLECTOR_DIR / "otelcol-loadbalance.yaml"
_START_TIMEOUT = 60.0
# A Collector drains its exporters' queues when stopped; an exporter whose destination is down
# retries until the stop context ends, so the grace period is generous before SIGKILL.
_STOP_TIMEOUT = 20.0


class CollectorNotReady(RuntimeError):
    """The Collector exited or did not become ready in time; the message carries its log tail."""


@dataclass(frozen=True)
class CollectorEndpoints(LoggedProcess):
    """Where the running Collector's OTLP receiver listens; all on 127.0.0.1."""

    label: ClassVar[str] = "the Collector"
    failure: ClassVar[type[Exception]] = CollectorNotReady
    otlp_grpc: str
    """``host:port`` of the OTLP/gRPC receiver."""
    otlp_http: str
    """Base URL of the OTLP/HTTP receiver (traces go to ``/v1/traces``)."""
    log_path: Path
    process: subprocess.Popen[bytes]
    log_offset: int = 0
    """Where this run's lines begin in the log (a later run with the same log name appends)."""

    @property
    def otlp_http_traces(self) -> str:
        return f"{self.otlp_http}/v1/traces"


_BINARY = CachedBinary("otelcol", ENV_OTELCOL_BIN, "OpenTelemetry Collector", "Collector")
default_binary_path = _BINARY.default_path


def otelcol_binary() -> Path | None:
    """The Collector named by ``MEMTRACE_OTELCOL_BIN`` (else the install default), if present."""
    return _BINARY.find()


def require_otelcol_binary() -> Path:
    """The binary, or skip (fail on CI) saying how to get it."""
    return _BINARY.require()


@contextmanager
def run_otelcol(binary: Path, config: Path, workdir: Path, *, env: Mapping[str, str] | None = None,
                name: str = "otelcol") -> Iterator[CollectorEndpoints]:
    """Start the Collector with ``config`` on fresh loopback ports; stop it on exit.

    Parameters
    ----------
    binary: the built Collector (``require_otelcol_binary()``).
    config: a Collector config whose receiver ports are ``${env:OTELCOL_GRPC_PORT}`` and
        ``${env:OTELCOL_HTTP_PORT}`` (as the configs in ``collector/`` are).
    workdir: where the log (``<name>.log``) goes; the process runs there.
    env: the variables the config reads (``MEMTRACE_BACKEND_OTLP``, ...), over ``os.environ``.
    name: the log file's stem, to tell several Collectors of one test apart.

    Returns
    -------
    The endpoints, once both receivers accept connections.

    Raises
    ------
    CollectorNotReady: it exited (a config error, a port taken) or was not ready in time.
    """
    grpc_port, http_port = free_ports(2)
    log_path = workdir / f"{name}.log"
    ports = {"OTELCOL_GRPC_PORT": str(grpc_port), "OTELCOL_HTTP_PORT": str(http_port)}
    process, offset = spawn_logged([str(binary), "--config", str(config)], log_path, cwd=workdir,
                              env=loopback_env({**(env or {}), **ports}))
    endpoints = CollectorEndpoints(otlp_grpc=f"127.0.0.1:{grpc_port}",
                                   otlp_http=f"http://127.0.0.1:{http_port}",
                                   log_path=log_path, process=process, log_offset=offset)
    try:
        endpoints.wait_ready(lambda: accepts(grpc_port) and accepts(http_port), timeout=_START_TIMEOUT)
        yield endpoints
    finally:
        stop_process(process, timeout=_STOP_TIMEOUT)
