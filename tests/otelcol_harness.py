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

import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

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
_LOG_TAIL_LINES = 60
_LOOPBACK = "127.0.0.1,localhost,::1"


class CollectorNotReady(RuntimeError):
    """The Collector exited or did not become ready in time; the message carries its log tail."""


@dataclass(frozen=True)
class CollectorEndpoints:
    """Where the running Collector's OTLP receiver listens; all on 127.0.0.1."""

    otlp_grpc: str
    """``host:port`` of the OTLP/gRPC receiver."""
    otlp_http: str
    """Base URL of the OTLP/HTTP receiver (traces go to ``/v1/traces``)."""
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def otlp_http_traces(self) -> str:
        return f"{self.otlp_http}/v1/traces"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(no Collector log: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def assert_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise CollectorNotReady(f"the Collector exited with code {code}; log tail:\n{self.log_tail()}")


def default_binary_path() -> Path:
    return Path.home() / ".cache" / "memtrace" / "otelcol"


def otelcol_binary() -> Path | None:
    """The Collector named by ``MEMTRACE_OTELCOL_BIN`` (else the install default), if present."""
    configured = os.environ.get(ENV_OTELCOL_BIN)
    path = Path(configured).expanduser() if configured else default_binary_path()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require_otelcol_binary() -> Path:
    """The binary, or skip (fail on CI) saying how to get it."""
    path = otelcol_binary()
    if path is not None:
        return path
    where = os.environ.get(ENV_OTELCOL_BIN) or str(default_binary_path())
    reason = f"OpenTelemetry Collector not found at {where}: run `bash .ci/install-otelcol.sh` (Go build)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must run the Collector tests", pytrace=False)
    pytest.skip(reason)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (free when chosen; a race stays possible)."""
    # Hold every socket open until all are chosen so the ports are distinct.
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                   for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _child_env(env: Mapping[str, str], grpc_port: int, http_port: int) -> dict[str, str]:
    # Exporters to loopback must never go through a proxy a developer's shell may set.
    merged = {**os.environ, "NO_PROXY": _LOOPBACK, "no_proxy": _LOOPBACK, **env}
    merged.update(OTELCOL_GRPC_PORT=str(grpc_port), OTELCOL_HTTP_PORT=str(http_port))
    return merged


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_ready(endpoints: CollectorEndpoints, ports: tuple[int, int]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        endpoints.assert_alive()
        if all(_accepts(port) for port in ports):
            return
        time.sleep(0.1)
    raise CollectorNotReady(
        f"the Collector was not ready within {_START_TIMEOUT:g} s; log tail:\n{endpoints.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_STOP_TIMEOUT)


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
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(binary), "--config", str(config)], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                   env=_child_env(env or {}, grpc_port, http_port))
    endpoints = CollectorEndpoints(otlp_grpc=f"127.0.0.1:{grpc_port}",
                                   otlp_http=f"http://127.0.0.1:{http_port}",
                                   log_path=log_path, process=process)
    try:
        _wait_ready(endpoints, (grpc_port, http_port))
        yield endpoints
    finally:
        _stop(process)
