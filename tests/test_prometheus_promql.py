"""The PromQL of ``docs/signals.md`` against a real Prometheus fed by ``memtrace serve``'s metrics.

``serve`` exports its attribution metrics by OTLP/HTTP to Prometheus's own OTLP receiver
(``--web.enable-otlp-receiver``), as the docs tell; every ``promql`` block of the docs is then asked
of Prometheus's query API. Each must evaluate (a renamed metric or a wrong label would not fail a
query, only empty it, so the names and labels the docs use are checked against what Prometheus
holds, and the queries that have data for this run must return it). Prometheus is the real binary,
built from source by ``.ci/install-prometheus.sh``; skipped with the reason when it is not built
(a failure on CI).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_evaluator_signals import _pipeline, _provider

from memtrace_otel.semconv import MemTraceMetric
from memtrace_otel.spans.model import record_from_readable

from process_harness import CachedBinary, LoggedProcess, free_ports, loopback_env, spawn_logged, stop_process

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="memtrace serve needs the [serve] extra")

_BINARY = CachedBinary("prometheus", "MEMTRACE_PROMETHEUS_BIN", "Prometheus", "Prometheus")
_DOCS = Path(__file__).resolve().parent.parent / "docs" / "signals.md"
_PROMQL = re.compile(r"```promql\n(.*?)```", re.S)
_LOOPBACK_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


@dataclass
class Prometheus(LoggedProcess):
    label: ClassVar[str] = "Prometheus"
    process: Any
    log_path: Path
    url: str

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with _LOOPBACK_OPENER.open(f"{self.url}{path}{query}", timeout=10) as answer:
            return json.loads(answer.read())

    def ready(self) -> bool:
        try:
            with _LOOPBACK_OPENER.open(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=promql)
        assert answer["status"] == "success", (promql, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = _BINARY.require()
    workdir = tmp_path_factory.mktemp("prometheus")
    (workdir / "prometheus.yml").write_text("global:\n  evaluation_interval: 1m\n")
    (port,) = free_ports(1)
    process, offset = spawn_logged(
        [str(binary), f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--web.enable-otlp-receiver", "--log.level=warn"],
        workdir / "prometheus.log", cwd=workdir, env=loopback_env())
    server = Prometheus(process, workdir / "prometheus.log", f"http://127.0.0.1:{port}")
    server.log_offset = offset
    try:
        server.wait_ready(server.ready, timeout=60)
        yield server
    finally:
        stop_process(process, timeout=20)


def _failure_spans() -> list[Any]:
    provider, exporter = _provider()
    _pipeline(provider, event_on="generate")  # an evaluator failed the answer: one failure
    return [record_from_readable(s) for s in exporter.get_finished_spans()]


@pytest.fixture(scope="module")
def fed(prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> Prometheus:
    """Two failures through ``serve``, a few exports apart, so a counter has more than one sample."""
    from memtrace_otel.collector.serve import ServeConfig, build_server

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")  # milliseconds, as the SDK reads it
        server = build_server(ServeConfig(grpc_port=None, http_port=0, settle_seconds=0.0,
                                          data_dir=str(tmp_path_factory.mktemp("serve")),
                                          metrics_otlp=f"{prometheus.url}/api/v1/otlp"),
                              exporter=InMemorySpanExporter())
    server.service.start()
    try:
        assert server.service.ingest(_failure_spans(), wire_bytes=1000)
        _until(lambda: _total(prometheus) == 1, prometheus, "the first failure's count")
        assert server.service.ingest(_failure_spans(), wire_bytes=1000)
    finally:
        assert server.stop(timeout=30.0)  # the last export happens at stop
    _until(lambda: _total(prometheus) == 2, prometheus, "both failures' count")
    return prometheus


def _total(prometheus: Prometheus) -> float:
    return sum(float(row["value"][1]) for row in prometheus.query("memtrace_attribution_failures_total"))


def _until(probe: Any, prometheus: Prometheus, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        prometheus.assert_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus never showed {what}; log tail:\n{prometheus.log_tail()}")
        time.sleep(0.2)


def _docs_queries() -> list[str]:
    """Each query of the docs' ``promql`` blocks (a blank line separates queries in one block)."""
    queries = [q.strip() for block in _PROMQL.findall(_DOCS.read_text(encoding="utf-8"))
               for q in block.split("\n\n") if q.strip()]
    assert len(queries) >= 4, "docs/signals.md lost its PromQL"
    return queries


def test_serve_metrics_land_under_the_names_the_docs_use(fed: Prometheus) -> None:
    rows = fed.query("memtrace_attribution_failures_total")
    assert rows and all(row["metric"]["job"] == "memtrace" for row in rows)  # serve's resource
    for row in rows:
        labels = row["metric"]
        assert labels["memtrace_attribution_source"] == "serve"
        assert labels["memtrace_error_type"] in {"UpdateError", "ResponseError", "RetrievalError",
                                                 "ExtractionError", "DeletionError"}
        assert labels["service_name"] == "shop"  # the blamed operation's service, a point attribute
        assert "memtrace_root_cause_operation_name" in labels
    names = set(fed.get("/api/v1/label/__name__/values")["data"])
    translated = {MemTraceMetric.FAILURES.replace(".", "_") + "_total",
                  MemTraceMetric.DURATION.replace(".", "_") + "_seconds_bucket"}
    assert translated <= names, sorted(n for n in names if n.startswith("memtrace"))
    used = {name for query in _docs_queries() for name in re.findall(r"\bmemtrace_[a-z_]+\b", query)}
    label_names = set(fed.get("/api/v1/labels")["data"])
    # every metric and label the docs name exists, or is the dropped counter (nothing was dropped)
    assert used - names - label_names <= {"memtrace_attribution_dropped_total", "memtrace_drop_reason"}


def test_every_promql_of_the_docs_evaluates_and_the_ones_with_data_answer(fed: Prometheus) -> None:
    answers = {query: fed.query(query) for query in _docs_queries()}
    share = next(q for q in answers if "group_left" in q)
    assert answers[share] and abs(sum(float(r["value"][1]) for r in answers[share]) - 1.0) < 1e-9
    quantile = next(q for q in answers if q.startswith("histogram_quantile"))
    ((row,),) = [answers[quantile]]
    assert 0 < float(row["value"][1]) < 60  # seconds spent on one failure
