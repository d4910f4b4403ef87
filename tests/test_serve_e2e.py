"""`memtrace serve` behind the built OpenTelemetry Collector, writing verdicts into Jaeger (issue 9, 6b).

Real processes, all on 127.0.0.1: Jaeger v2 (memory storage), the Collector built
from ``collector/builder-config.yaml``, and ``memtrace serve`` started as a user
starts it. The application exports by OTLP/HTTP to the Collector only.

* ``loadbalance``: ``collector/otelcol-loadbalance.yaml`` routes by trace id to two
  serve instances (OTLP/gRPC) and sends every span to Jaeger. The memory pipeline
  of ``tests/scenario.py`` runs twice; its q1 fails because a maintenance trace
  overwrote Lisbon with Porto. Each instance holds only its share of the traces
  and rebuilds the lineage from Jaeger's query API, so the verdict is the
  cross-trace one (UpdateError on ``update``), not the ResponseError a lone trace gives.
* ``tee``: ``collector/otelcol-tee.yaml`` with one serve instance (OTLP/HTTP). The
  offline memory agent of ``examples/`` (content capture off) ingests its sessions
  (stored in Jaeger before any question is asked), then answers questions one by
  one, several wrongly, each verdict written back before the next question: the
  session traces fetched for a later failure already hold earlier root-cause
  spans, whose links must not drag other failures into its lineage.

The expected verdicts are the engine's over each failed trace, the traces that
used the same memory store before it, and the traces those link to
(transitively), computed from the spans sent: what each instance can know by
design, searching and fetching from the backend. In the ``tee`` run that is
the verdict a graph of every trace gives. Through Jaeger's query API only, each
test checks: every application span is
stored; each failed evaluation has its ``memtrace.attribution`` span (child of the
evaluation, a reference to the root cause); each root-cause trace has its
``memtrace.root_cause`` span; the UI's tag search finds exactly the annotated
traces. Skipped with the reason when Jaeger or the Collector is not built
(failed on CI).
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from memtrace_otel import MemoryTracer
from memtrace_otel.semconv import WRITEBACK_SCOPE, AnnotationSpan, ErrorType, MemTrace, MemTraceAttribution

import jaeger_harness
import otelcol_harness
from jaeger_harness import JaegerEndpoints
from scenario import run_pipeline
from serve_harness import (
    AppPipeline,
    ServeProcess,
    Verdict,
    app_pipeline,
    await_annotations,
    await_stored,
    hex_ids,
    reference_verdicts,
    references,
    run_serve,
    stop_serve,
    stored_verdict,
    tag_search,
    tags,
)

_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_SETTLE = 1.0
_SUMMARY = re.compile(r"stopped; (\d+) spans received, (\d+) failures attributed, (\d+) annotations dropped")
_A = MemTraceAttribution
_ANNOTATIONS = {role.value for role in AnnotationSpan}


@dataclass
class LiveRun:
    """One pipeline run and what Jaeger holds afterwards."""

    jaeger: JaegerEndpoints
    service: str
    since: float
    sent: list[ReadableSpan]
    expected: dict[tuple[str, str], Verdict]
    stored: dict[str, list[dict[str, Any]]]  # trace id -> Jaeger's spans of it
    summaries: list[tuple[int, int, int]]  # per serve instance: spans received, attributed, dropped

    def annotations(self, role: AnnotationSpan) -> list[dict[str, Any]]:
        return [s for spans in self.stored.values() for s in spans
                if s["operationName"] == role and s["serviceName"] == self.service]

    def root_span_names(self) -> dict[str, str]:
        return {hex_ids(s)[0]: s.name for s in self.sent if s.parent is None}


def _summary(serve: ServeProcess) -> tuple[int, int, int]:
    code = stop_serve(serve)  # SIGTERM: drains, then prints its counters
    found = _SUMMARY.search(serve.log())
    assert code == 0 and found, f"serve exited {code}\n{serve.log_tail()}"
    received, attributed, dropped = (int(group) for group in found.groups())
    return received, attributed, dropped


def _serve_options(jaeger: JaegerEndpoints) -> dict[str, Any]:
    return {"settle": _SETTLE, "backend_otlp": jaeger.otlp_http, "jaeger_url": jaeger.query_url}


def _finish(app: AppPipeline, jaeger: JaegerEndpoints, service: str, since: float, serves: list[ServeProcess],
            collector: otelcol_harness.CollectorEndpoints) -> LiveRun:
    app.provider.shutdown()
    sent = app.spans()
    expected = reference_verdicts(sent)
    assert expected, "the application produced no failed evaluation: nothing to attribute"
    stored = await_annotations(jaeger, sent, [*serves, collector])
    return LiveRun(jaeger, service, since, sent, expected, stored, [_summary(serve) for serve in serves])


@pytest.fixture(scope="module")
def otelcol_bin() -> Path:
    """The built Collector; asked first so a missing one skips before anything is started."""
    return otelcol_harness.require_otelcol_binary()


@pytest.fixture(scope="module")
def jaeger_bin(otelcol_bin: Path) -> Path:
    return jaeger_harness.require_jaeger_binary()


@pytest.fixture(scope="module")
def loadbalance_run(otelcol_bin: Path, jaeger_bin: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    # A Jaeger per run: the tag searches must see this run's annotations only.
    workdir = tmp_path_factory.mktemp("e2e-loadbalance")
    service = f"memory-app-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        jaeger = stack.enter_context(jaeger_harness.run_jaeger(jaeger_bin, workdir))
        since = time.time()
        ports = otelcol_harness.free_ports(2)
        serves = [stack.enter_context(run_serve(workdir, name=f"serve-{n}", grpc_port=port, http_port=-1,
                                                **_serve_options(jaeger)))
                  for n, port in enumerate(ports)]
        env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc,
               "MEMTRACE_SERVE_OTLP_ENDPOINTS": ",".join(serve.grpc_endpoint for serve in serves)}
        collector = stack.enter_context(otelcol_harness.run_otelcol(
            otelcol_bin, otelcol_harness.LOADBALANCE_CONFIG, workdir, env=env))
        app = app_pipeline(collector.otlp_http_traces, service)
        for run in range(2):  # two failures; their traces spread over both instances
            run_pipeline(app.provider, capture_content=True, store_id=f"s{run}")
        yield _finish(app, jaeger, service, since, serves, collector)  # Jaeger stays up for the searches


@pytest.fixture(scope="module")
def tee_run(otelcol_bin: Path, jaeger_bin: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    sys.path.insert(0, str(_EXAMPLES))
    try:
        from jaeger_writeback import ingest
        from offline_memory_agent import QUESTIONS, TinyMemory
    finally:
        sys.path.remove(str(_EXAMPLES))
    workdir = tmp_path_factory.mktemp("e2e-tee")
    service = f"memory-agent-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        jaeger = stack.enter_context(jaeger_harness.run_jaeger(jaeger_bin, workdir))
        since = time.time()
        serve = stack.enter_context(run_serve(workdir, grpc_port=-1, http_port=0, **_serve_options(jaeger)))
        env = {"MEMTRACE_BACKEND_OTLP": jaeger.otlp_grpc, "MEMTRACE_SERVE_OTLP": serve.http_url}
        collector = stack.enter_context(otelcol_harness.run_otelcol(
            otelcol_bin, otelcol_harness.TEE_CONFIG, workdir, env=env))
        app = app_pipeline(collector.otlp_http_traces, service)
        memory_tracer = MemoryTracer(app.provider, capture_content=False)
        agent = TinyMemory(memory_tracer, app.provider.get_tracer("agent"))
        ingest(agent)
        # Memory is written long before it is read: the sessions are in Jaeger before any question.
        await_stored(jaeger, Counter(hex_ids(span)[0] for span in app.spans()), [serve, collector])
        for case_id, question, gold, evidence in QUESTIONS:
            # Questions come one by one, each verdict written back before the next: later
            # fetches of the session traces find the earlier root-cause spans in them.
            if not agent.answer(case_id, question, gold, evidence):
                failed = hex_ids(app.spans()[-1])[0]  # the question's root span ends last
                await_stored(jaeger, {failed: 1}, [serve, collector], name=AnnotationSpan.ATTRIBUTION)
        yield _finish(app, jaeger, service, since, [serve], collector)


@pytest.fixture(scope="module", params=["loadbalance", "tee"])
def live_run(request: pytest.FixtureRequest) -> LiveRun:
    return request.getfixturevalue(f"{request.param}_run")


def test_every_application_span_is_in_jaeger(live_run: LiveRun) -> None:
    for trace_id, spans in live_run.stored.items():
        sent = {hex_ids(s)[1] for s in live_run.sent if hex_ids(s)[0] == trace_id}
        application = {s["spanID"].rjust(16, "0") for s in spans if s["operationName"] not in _ANNOTATIONS}
        assert application == sent, trace_id
        # every span, annotations too, under the application's service (issue 25, item 4)
        assert {s["serviceName"] for s in spans} == {live_run.service}, trace_id
    assert {hex_ids(s)[0] for s in live_run.sent} == set(live_run.stored)


def test_each_failure_has_its_attribution_span_under_the_evaluation(live_run: LiveRun) -> None:
    attributions = live_run.annotations(AnnotationSpan.ATTRIBUTION)
    verdicts = _stored_verdicts(live_run)
    assert len(attributions) == len(verdicts) == len(live_run.expected)  # one each, no duplicates
    differing = {key: (verdicts.get(key), verdict) for key, verdict in live_run.expected.items()
                 if verdicts.get(key) != verdict}
    assert not differing, f"verdicts in Jaeger differ from the reference (stored, expected): {differing}"
    for span in attributions:
        verdict, found = stored_verdict(span), tags(span)
        assert span["traceID"].rjust(32, "0") == verdict.evaluation[0]
        expected_refs = {("CHILD_OF", *verdict.evaluation)}
        if verdict.root_cause is not None:
            expected_refs.add(("FOLLOWS_FROM", *verdict.root_cause))
            assert found["otel.status_code"] == "ERROR"
            assert found["otel.status_description"] == f"{verdict.error_type} in {verdict.operation_name}"
        assert references(span) == expected_refs
        assert found[_A.ENGINE] == "lineage" and found[_A.EXPLANATION]
        assert found["otel.scope.name"] == WRITEBACK_SCOPE  # under the app's service, written by memtrace
        (log,) = [log for log in span["logs"] if tags({"tags": log["fields"]}).get("gen_ai.evaluation.name")]
        assert tags({"tags": log["fields"]}).get("gen_ai.evaluation.score.label") == verdict.error_type


def test_each_root_cause_trace_has_its_root_cause_span(live_run: LiveRun) -> None:
    blamed = {v.root_cause: v for v in live_run.expected.values() if v.root_cause is not None}
    assert blamed
    spans = live_run.annotations(AnnotationSpan.ROOT_CAUSE)
    assert len(spans) == len(blamed)
    for span in spans:
        refs = references(span)
        (parent,) = [(t, s) for kind, t, s in refs if kind == "CHILD_OF"]
        verdict = blamed[parent]
        assert span["traceID"].rjust(32, "0") == parent[0]  # in the blamed span's own trace
        assert parent[1] in {s["spanID"].rjust(16, "0") for s in live_run.stored[parent[0]]}
        assert refs == {("CHILD_OF", *parent), ("FOLLOWS_FROM", *verdict.evaluation)}
        assert tags(span)[_A.ERROR_TYPE] == verdict.error_type


def test_verdicts_follow_lineage_across_traces(live_run: LiveRun) -> None:
    crossing = [v for v in live_run.expected.values() if v.root_cause and v.root_cause[0] != v.evaluation[0]]
    assert crossing, "no verdict blames another trace: the cross-trace path went untested"
    if live_run.service.startswith("memory-app-"):  # tests/scenario.py: q1 failed because of an update
        roots = live_run.root_span_names()
        stored = [stored_verdict(span) for span in live_run.annotations(AnnotationSpan.ATTRIBUTION)]
        assert [roots[v.evaluation[0]] for v in stored] == ["question q1"] * 2
        assert {(v.error_type, v.operation_name) for v in stored} == {(ErrorType.UPDATE.value, "update")}
        assert {roots[v.root_cause[0]] for v in stored if v.root_cause} == {"maintenance"}


def test_tag_search_finds_exactly_the_annotated_traces(live_run: LiveRun) -> None:
    by_type: dict[str, set[str]] = {}
    for verdict in live_run.expected.values():
        if verdict.error_type is not None:
            traces = by_type.setdefault(verdict.error_type, set())
            traces.add(verdict.evaluation[0])
            if verdict.root_cause is not None:
                traces.add(verdict.root_cause[0])
    assert by_type
    for error_type, traces in by_type.items():
        # a search of the APPLICATION's service finds them (issue 25, item 4)
        assert tag_search(live_run.jaeger.query_url, live_run.service, {_A.ERROR_TYPE: error_type},
                          since=live_run.since) == traces, error_type


def test_the_serve_instances_saw_every_span_and_attributed_every_failure(live_run: LiveRun) -> None:
    received, attributed, dropped = (sum(column) for column in zip(*live_run.summaries, strict=True))
    assert received == len(live_run.sent)
    assert attributed == len(live_run.expected)
    assert dropped == 0
    failed = sum((s.attributes or {}).get(MemTrace.EVALUATION_PASSED) is False for s in live_run.sent)
    assert failed == len(live_run.expected)


def _stored_verdicts(run: LiveRun) -> dict[tuple[str, str], Verdict]:
    return {stored_verdict(span).evaluation: stored_verdict(span)
            for span in run.annotations(AnnotationSpan.ATTRIBUTION)}


def test_verdicts_match_a_judgement_over_every_trace(tee_run: LiveRun) -> None:
    # The agent's q5 answer is in session 2, which its search did not retrieve: no link leads
    # there. Serve's search of Jaeger for the traces that used the same store finds it, so the
    # verdict is the RetrievalError a graph of every trace gives, not a ResponseError.
    assert _stored_verdicts(tee_run) == reference_verdicts(tee_run.sent, view="whole")
