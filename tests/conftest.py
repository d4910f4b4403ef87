"""Shared fixtures: a real SDK pipeline per test, a clean environment, the LoCoMo data."""

from __future__ import annotations

import os

# mem0's own telemetry stays off in tests (it would try the network).
os.environ.setdefault("MEM0_TELEMETRY", "False")
# `memtrace serve`'s default data directory is under $XDG_STATE_HOME: one per test session, never
# the developer's own (a serve there would replay this session's requests, and its lock is exclusive).
os.environ["XDG_STATE_HOME"] = __import__("tempfile").mkdtemp(prefix="memtrace-test-state-")

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.config import ENV_CAPTURE_CONTENT


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def no_content_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CAPTURE_CONTENT, raising=False)


@pytest.fixture(scope="session")
def locomo() -> str:
    # The benchmark package (benchmarks/) knows where the data is; imported here so that tests
    # which never ask for LoCoMo run without it.
    from memtrace_bench.config import locomo_dir

    path = locomo_dir()
    if not os.path.isdir(path):
        pytest.skip(f"LoCoMo data not found at {path} (set MEMTRACE_LOCOMO_DIR)")
    return path
