"""Runs a real Jaeger v2 process on loopback for the tests that need a trace backend.

The binary is built from source by ``.ci/install-jaeger.sh`` (Go toolchain, Go
module proxy). Without it a test is skipped with the reason, except on CI
(``CI=true``), where a missing Jaeger is a failure: CI must not go green on
tests that silently did not run.

Everything binds 127.0.0.1 on free ports, storage is in memory, and the
process is stopped (terminate, then kill) when the session ends. Its log is
kept in a file and shown when a test failed or Jaeger did not start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "ENV_JAEGER_BIN",
    "JaegerEndpoints",
    "JaegerNotReady",
    "jaeger",
    "jaeger_binary",
    "jaeger_config",
    "require_jaeger_binary",
    "run_jaeger",
]

ENV_JAEGER_BIN = "MEMTRACE_JAEGER_BIN"
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 10.0
_LOG_TAIL_LINES = 60
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class JaegerNotReady(RuntimeError):
    """Jaeger exited or did not become ready in time; the message carries its log tail."""


@dataclass(frozen=True)
class JaegerEndpoints:
    """Where the running Jaeger listens; all on 127.0.0.1."""

    query_url: str
    """Base URL of the query HTTP API (``/api/traces``) and UI."""
    otlp_grpc: str
    """``host:port`` of the OTLP/gRPC receiver."""
    otlp_http: str
    """Base URL of the OTLP/HTTP receiver (traces go to ``/v1/traces``)."""
    health_url: str
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def otlp_http_traces(self) -> str:
        return f"{self.otlp_http}/v1/traces"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(no Jaeger log: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def assert_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise JaegerNotReady(f"Jaeger exited with code {code}; log tail:\n{self.log_tail()}")


def default_binary_path() -> Path:
    return Path.home() / ".cache" / "memtrace" / "jaeger"


def jaeger_binary() -> Path | None:
    """The Jaeger binary named by ``MEMTRACE_JAEGER_BIN`` (else the install default), if present."""
    configured = os.environ.get(ENV_JAEGER_BIN)
    path = Path(configured).expanduser() if configured else default_binary_path()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require_jaeger_binary() -> Path:
    """The binary, or skip (fail on CI) saying how to get it."""
    path = jaeger_binary()
    if path is not None:
        return path
    where = os.environ.get(ENV_JAEGER_BIN) or str(default_binary_path())
    reason = f"Jaeger v2 binary not found at {where}: run `bash .ci/install-jaeger.sh` (Go build)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must run the Jaeger tests", pytrace=False)
    pytest.skip(reason)


def _free_ports(count: int) -> list[int]:
    # Hold every socket open until all are chosen so the ports are distinct.
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                   for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def jaeger_config(*, otlp_grpc: int, otlp_http: int, query_http: int, query_grpc: int,
                  health: int) -> str:
    """A Jaeger v2 (Collector) config: OTLP in, memory storage, query API; loopback only.

    Every component that would listen gets an explicit 127.0.0.1 endpoint, and the
    Collector's own metrics endpoint is switched off (``level: none``), so nothing
    binds a wildcard address. The query service's self-tracing is off too: it would
    export Jaeger's own spans to the default OTLP port, 127.0.0.1:4317, which may be
    another test's collector (and stalls shutdown 10 s when nothing listens there).
    """
    return f"""\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info

extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}

processors:
  batch:
    timeout: 100ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def _answers(url: str) -> bool:
    try:
        with _DIRECT.open(url, timeout=2.0) as response:
            return 200 <= response.status < 300
    except (OSError, urllib.error.URLError):
        return False


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_ready(endpoints: JaegerEndpoints, grpc_port: int, http_port: int) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        endpoints.assert_alive()
        if (_answers(f"{endpoints.query_url}/api/services") and _answers(endpoints.health_url)
                and _accepts(grpc_port) and _accepts(http_port)):
            return
        time.sleep(0.1)
    raise JaegerNotReady(f"Jaeger not ready within {_START_TIMEOUT:g} s; log tail:\n{endpoints.log_tail()}")


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
def run_jaeger(binary: Path, workdir: Path) -> Iterator[JaegerEndpoints]:
    """Start Jaeger with a fresh loopback config in ``workdir``; stop it on exit."""
    otlp_grpc, otlp_http, query_http, query_grpc, health = _free_ports(5)
    config = workdir / "jaeger.yaml"
    config.write_text(jaeger_config(otlp_grpc=otlp_grpc, otlp_http=otlp_http, query_http=query_http,
                                    query_grpc=query_grpc, health=health), encoding="utf-8")
    log_path = workdir / "jaeger.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(binary), "--config", str(config)], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    endpoints = JaegerEndpoints(
        query_url=f"http://127.0.0.1:{query_http}", otlp_grpc=f"127.0.0.1:{otlp_grpc}",
        otlp_http=f"http://127.0.0.1:{otlp_http}", health_url=f"http://127.0.0.1:{health}/status",
        log_path=log_path, process=process,
    )
    try:
        _wait_ready(endpoints, otlp_grpc, otlp_http)
        yield endpoints
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def jaeger(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JaegerEndpoints]:
    """A running Jaeger v2 for the whole session (skipped, or failed on CI, when not built)."""
    binary = require_jaeger_binary()
    try:
        with run_jaeger(binary, tmp_path_factory.mktemp("jaeger")) as endpoints:
            yield endpoints
            if request.session.testsfailed:
                _show_log(request, endpoints)
    except JaegerNotReady as error:
        pytest.fail(str(error), pytrace=False)


def _show_log(request: pytest.FixtureRequest, endpoints: JaegerEndpoints) -> None:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"--- Jaeger log tail ({endpoints.log_path}) ---")
        reporter.write_line(endpoints.log_tail())
