"""`memtrace serve` as a user runs it: a real process, real OTLP, SIGTERM drains it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.collector.serve import ServeConfig, build_server

from scenario import run_pipeline

_LISTENING = re.compile(r"Http 127\.0\.0\.1:(\d+)")


def _start_serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    memtrace = Path(sys.executable).with_name("memtrace")
    process = subprocess.Popen([str(memtrace), "serve", "--grpc-port", "0", "--http-port", "0",
                                "--data-dir", str(tmp_path / "data"), *args],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               env={**os.environ, "COLUMNS": "200"}, cwd=tmp_path)
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        found = _LISTENING.search(line)
        if found:
            return process, int(found.group(1))
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"memtrace serve did not start: {process.stderr.read()}")


def test_serve_attributes_what_it_received_and_drains_on_sigterm(tmp_path: Path) -> None:
    process, port = _start_serve(tmp_path, "--settle", "60")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    run_pipeline(provider, capture_content=False)
    provider.shutdown()
    process.send_signal(signal.SIGTERM)  # long before the traces settle: the drain must judge them
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "18 spans received, 1 failures attributed, 0 annotations dropped" in err
    assert "ResponseError" in err or "RetrievalError" in err or "UpdateError" in err


def test_bad_settings_are_one_line_errors() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["serve", "--grpc-port", "-1", "--http-port", "-1"])
    assert result.exit_code == 1 and "both receivers are off" in result.output
    result = runner.invoke(main, ["serve", "--http-port", "70000"])
    assert result.exit_code == 1 and "70000" in result.output
    result = runner.invoke(main, ["serve", "--backend-otlp", "ftp://x"])
    assert result.exit_code == 1 and "not http(s)://host:port" in result.output
    result = runner.invoke(main, ["serve", "--store-lookback", "-5"])
    assert result.exit_code == 2 and "--store-lookback" in result.output and "Traceback" not in result.output
    with pytest.raises(ValueError, match="store lookback"):
        ServeConfig(store_lookback=-1).validate()


def test_the_server_is_wired_without_binding() -> None:
    server = build_server(ServeConfig(grpc_port=None, http_port=0, settle_seconds=0.5))
    assert server.receivers == []  # nothing bound before start()
    assert server.admission.max_bytes == 512 * (1 << 20) // 20  # decoding: a twentieth of the limit
    assert server.service.store.path is not None and server.service.store.path.parent.name == "serve"
    assert server.service.store_lookback == 7 * 24 * 3600  # a week of a store's traces by default
    server.service.stop(1)
