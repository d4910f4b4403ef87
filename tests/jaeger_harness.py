"""Runs a real Jaeger v2 process on loopback for the tests that need a trace backend.

The binary is built from source by ``.ci/install-jaeger.sh`` (Go toolchain, Go
module proxy). Without it a test is skipped with the reason, except on CI
(``CI=true``), where a missing Jaeger is a failure: CI must not go green on
tests that silently did not run.

When the real Jaeger UI is unpacked (``.ci/install-jaeger-ui.sh``, into
``~/.cache/memtrace/jaeger-ui/build`` or ``MEMTRACE_JAEGER_UI``), Jaeger serves it through
``ui.assets_path`` with the project's UI config (``collector/jaeger-ui.json``, its link patterns);
without it the query port shows Jaeger's placeholder page and only the API tests can run.

Everything binds 127.0.0.1 on free ports, storage is in memory, and the
process is stopped (terminate, then kill) when the session ends. Its log is
kept in a file and shown when a test failed or Jaeger did not start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from memtrace_otel.spans.jaeger_query import JaegerQueryClient, JaegerQueryError

from process_harness import CachedBinary, LoggedProcess, accepts, free_ports, spawn_logged, stop_process

__all__ = [
    "ENV_JAEGER_BIN",
    "ENV_JAEGER_UI",
    "UI_CONFIG",
    "JaegerEndpoints",
    "JaegerNotReady",
    "jaeger",
    "jaeger_binary",
    "jaeger_config",
    "jaeger_ui_assets",
    "require_jaeger_binary",
    "require_jaeger_ui",
    "run_jaeger",
]

ENV_JAEGER_BIN = "MEMTRACE_JAEGER_BIN"
ENV_JAEGER_UI = "MEMTRACE_JAEGER_UI"
UI_CONFIG = Path(__file__).resolve().parent.parent / "collector" / "jaeger-ui.json"
"""The UI config the project ships (link patterns from an annotation to the spans it names)."""
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 10.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class JaegerNotReady(RuntimeError):
    """Jaeger exited or did not become ready in time; the message carries its log tail."""


@dataclass(frozen=True)
class JaegerEndpoints(LoggedProcess):
    """Where the running Jaeger listens; all on 127.0.0.1."""

    label: ClassVar[str] = "Jaeger"
    failure: ClassVar[type[Exception]] = JaegerNotReady
    query_url: str
    """Base URL of the query HTTP API (``/api/traces``) and UI."""
    otlp_grpc: str
    """``host:port`` of the OTLP/gRPC receiver."""
    otlp_http: str
    """Base URL of the OTLP/HTTP receiver (traces go to ``/v1/traces``)."""
    health_url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    log_offset: int = 0
    """Where this run's lines begin in the log (a later run with the same log name appends)."""
    ui_assets: Path | None = None
    """The real Jaeger UI served at :attr:`query_url`, or ``None`` (Jaeger's placeholder page)."""

    @property
    def otlp_http_traces(self) -> str:
        return f"{self.otlp_http}/v1/traces"


_BINARY = CachedBinary("jaeger", ENV_JAEGER_BIN, "Jaeger v2 binary", "Jaeger")
default_binary_path = _BINARY.default_path


def jaeger_binary() -> Path | None:
    """The Jaeger binary named by ``MEMTRACE_JAEGER_BIN`` (else the install default), if present."""
    return _BINARY.find()


def require_jaeger_binary() -> Path:
    """The binary, or skip (fail on CI) saying how to get it."""
    return _BINARY.require()


def jaeger_ui_assets() -> Path | None:
    """The unpacked UI: ``build/`` under ``MEMTRACE_JAEGER_UI`` or ``~/.cache/memtrace/jaeger-ui``."""
    configured = os.environ.get(ENV_JAEGER_UI)
    base = Path(configured).expanduser() if configured else Path.home() / ".cache" / "memtrace" / "jaeger-ui"
    build = base / "build"
    return build if (build / "index.html").is_file() else None


def require_jaeger_ui() -> Path:
    """The unpacked UI, or skip (fail on CI) saying how to get it."""
    found = jaeger_ui_assets()
    if found is not None:
        return found
    reason = ("the Jaeger UI is not unpacked: run `bash .ci/install-jaeger-ui.sh` "
              f"(or set {ENV_JAEGER_UI} to a folder holding build/index.html)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must run the Jaeger UI tests", pytrace=False)
    pytest.skip(reason)


def jaeger_config(*, otlp_grpc: int, otlp_http: int, query_http: int, query_grpc: int,
                  health: int, ui_assets: Path | None = None, ui_config: Path | None = None) -> str:
    """A Jaeger v2 (Collector) config: OTLP in, memory storage, query API; loopback only.

    Every component that would listen gets an explicit 127.0.0.1 endpoint, and the
    Collector's own metrics endpoint is switched off (``level: none``), so nothing
    binds a wildcard address. The query service's self-tracing is off too: it would
    export Jaeger's own spans to the default OTLP port, 127.0.0.1:4317, which may be
    another test's collector (and stalls shutdown 10 s when nothing listens there).
    ``ui_assets`` (a UI ``build`` folder) and ``ui_config`` (a UI config JSON) add a ``ui`` section.
    """
    ui = ""
    if ui_assets is not None:
        ui = f"\n    ui:\n      assets_path: {ui_assets}"
        if ui_config is not None:
            ui += f"\n      config_file: {ui_config}"
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
      traces: memstore{ui}
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


def _ready(endpoints: JaegerEndpoints, grpc_port: int, http_port: int) -> bool:
    return (_answers(f"{endpoints.query_url}/api/services") and _answers(endpoints.health_url)
            and accepts(grpc_port) and accepts(http_port))


@contextmanager
def run_jaeger(binary: Path, workdir: Path) -> Iterator[JaegerEndpoints]:
    """Start Jaeger with a fresh loopback config in ``workdir``; stop it on exit."""
    otlp_grpc, otlp_http, query_http, query_grpc, health = free_ports(5)
    ui_assets, ui_config = jaeger_ui_assets(), None
    if ui_assets is not None:  # the UI config in a folder of its own, as Jaeger's docs keep it
        ui_config = workdir / "ui" / UI_CONFIG.name
        ui_config.parent.mkdir(exist_ok=True)
        shutil.copyfile(UI_CONFIG, ui_config)
    config = workdir / "jaeger.yaml"
    config.write_text(jaeger_config(otlp_grpc=otlp_grpc, otlp_http=otlp_http, query_http=query_http,
                                    query_grpc=query_grpc, health=health, ui_assets=ui_assets,
                                    ui_config=ui_config), encoding="utf-8")
    log_path = workdir / "jaeger.log"
    process, offset = spawn_logged([str(binary), "--config", str(config)], log_path, cwd=workdir)
    endpoints = JaegerEndpoints(
        query_url=f"http://127.0.0.1:{query_http}", otlp_grpc=f"127.0.0.1:{otlp_grpc}",
        otlp_http=f"http://127.0.0.1:{otlp_http}", health_url=f"http://127.0.0.1:{health}/status",
        log_path=log_path, process=process, log_offset=offset, ui_assets=ui_assets,
    )
    try:
        endpoints.wait_ready(lambda: _ready(endpoints, otlp_grpc, otlp_http), timeout=_START_TIMEOUT)
        yield endpoints
    finally:
        stop_process(process, timeout=_STOP_TIMEOUT)


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


def wait_for_trace(jaeger: JaegerEndpoints, trace_id: str, spans: int, *,
                   seconds: float = 30.0) -> dict[str, Any]:
    """Jaeger stores asynchronously (batch processor): poll until the whole trace is there."""
    deadline, last = time.monotonic() + seconds, "never answered"
    while time.monotonic() < deadline:
        jaeger.assert_alive()
        try:
            document = JaegerQueryClient(jaeger.query_url).fetch_trace(trace_id)
        except JaegerQueryError as error:
            last = str(error)
        else:
            found = sum(len(t.get("spans") or ()) for t in document["data"])
            if found >= spans:
                return document
            last = f"{found} of {spans} spans"
        time.sleep(0.2)
    raise AssertionError(f"trace {trace_id} not complete in Jaeger after {seconds:g} s "
                         f"({last}); Jaeger log:\n{jaeger.log_tail()}")
