"""The one library pipeline: gathering traces (spans/gather), the backend factory, analyze / annotate,
the one process pool (attribution/runner)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import memtrace_otel
from memtrace_otel.attribution import runner
from memtrace_otel.cli import main
from memtrace_otel.semconv import WRITEBACK_SCOPE, MemTrace
from memtrace_otel.spans.gather import BackendChoiceError, gather_traces, open_backend
from memtrace_otel.spans.jaeger_query import JaegerQueryClient
from memtrace_otel.spans.linked import missing_linked_traces
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import SpanReadResult
from memtrace_otel.spans.tempo_query import TempoQueryClient
from memtrace_otel.writeback.annotations import annotate

from serve_harness import _SentBackend, offline_agent_spans, reference_verdicts, sent_records


@pytest.fixture(scope="module")
def agent_spans() -> list[ReadableSpan]:
    return offline_agent_spans()


_records = sent_records


class _Recording(_SentBackend):
    """The sent spans as a backend that writes down each call, in order."""

    def __init__(self, records: Sequence[Any]) -> None:
        super().__init__(records)
        self.calls: list[str] = []

    def fetch_traces(self, trace_ids: Sequence[str]) -> Any:
        self.calls.append("fetch")
        return super().fetch_traces(trace_ids)

    def search_traces(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("search")
        return super().search_traces(*args, **kwargs)


def _failed_traces(records: list[SpanRecord]) -> list[str]:
    return sorted({r.trace_id for r in records if r.attributes.get(MemTrace.EVALUATION_PASSED) is False})


def test_gathering_follows_links_then_searches_stores_then_links_again(
        agent_spans: list[ReadableSpan]) -> None:
    records = _records(agent_spans)
    searched = 0
    for trace_id in _failed_traces(records):
        backend = _Recording(records)
        result = SpanReadResult()
        result.add(backend.trace(trace_id))
        linked_first = bool(missing_linked_traces(result.spans))
        gathered = gather_traces(result, backend, {trace_id}, store_lookback=7 * 24 * 3600.0)
        assert gathered.store is not None and gathered.store.searchable and len(gathered.linked) == 2
        if "search" in backend.calls:
            searched += 1
            # The links first (they name the services that wrote the store), the search after.
            assert backend.calls[0] == ("fetch" if linked_first else "search")
        assert gathered.still_missing == set()
        links_only = SpanReadResult()
        links_only.add(backend.trace(trace_id))
        assert gather_traces(links_only, _Recording(records), {trace_id}).store is None
    assert searched == len(_failed_traces(records))  # every failed trace used the agent's store


def test_analyze_as_serve_gives_the_verdicts_of_one_graph_of_every_trace(
        agent_spans: list[ReadableSpan]) -> None:
    """serve's view (one failed trace + what the backend gives) through the library call equals the
    whole-input view, failure by failure."""
    records = _records(agent_spans)
    whole = reference_verdicts(agent_spans, view="whole")
    found: dict[tuple[str, str], str | None] = {}
    for trace_id in _failed_traces(records):
        backend = _SentBackend(records)
        analysis = runner.analyze(backend.trace(trace_id), backend=backend, store_lookback=7 * 24 * 3600.0,
                                  traces={trace_id})
        assert analysis.attributions and analysis.missing_traces == set()
        for a in analysis.attributions:
            data = analysis.graph.nodes[a.case.evaluation]
            found[(data["trace_id"], data["span_id"])] = a.error_type.value if a.error_type else None
    assert found == {key: verdict.error_type for key, verdict in whole.items()}


def test_the_graph_is_built_once_whatever_is_fetched(agent_spans: list[ReadableSpan],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(agent_spans)
    built: list[int] = []
    real = runner.build_graph

    def counting(spans: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(spans, **kwargs)

    monkeypatch.setattr(runner, "build_graph", counting)
    (trace_id, *_) = _failed_traces(records)
    backend = _SentBackend(records)
    analysis = runner.load_graph(backend.trace(trace_id), backend=backend, store_lookback=3600.0)
    assert built == [1] and analysis.input_traces == {trace_id}
    assert len({s.trace_id for s in analysis.spans.spans}) > 1  # the backend gave more traces


def test_analyze_reads_files_as_the_cli_does(tmp_path: Path, agent_spans: list[ReadableSpan]) -> None:
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter

    path = tmp_path / "spans.jsonl"
    exporter = OTLPJsonLinesSpanExporter(str(path))
    exporter.export(agent_spans)
    exporter.shutdown()
    library = memtrace_otel.analyze([path])
    result = CliRunner().invoke(main, ["analyze", "--json", str(path)])
    cli = json.loads(result.stdout)
    assert [(a.case.evaluation, a.operation, a.error_type.value if a.error_type else None)
            for a in library.attributions] == [(f["evaluation"], f["operation"], f["error_type"])
                                               for f in cli["failures"]]
    assert library.attributions and library.summary() == cli["summary"]


def test_one_backend_factory() -> None:
    assert open_backend() is None
    assert isinstance(open_backend("http://127.0.0.1:16686"), JaegerQueryClient)
    assert isinstance(open_backend(tempo_url="http://127.0.0.1:3200"), TempoQueryClient)
    with pytest.raises(BackendChoiceError, match="not both"):
        open_backend("http://127.0.0.1:16686", "http://127.0.0.1:3200")
    with pytest.raises(ValueError):
        open_backend("ftp://nowhere")


def _square(n: int) -> int:
    return n * n


def test_process_map_keeps_the_input_order_whatever_order_it_submits_in() -> None:
    seen: list[int] = []
    results = runner.process_map(_square, [1, 2, 3, 4], jobs=2, first=[3, 2, 1, 0],
                                 on_result=lambda index, _result: seen.append(index))
    assert results == [1, 4, 9, 16] and sorted(seen) == [0, 1, 2, 3]


def test_annotate_hangs_each_verdict_under_its_evaluation(agent_spans: list[ReadableSpan]) -> None:
    analysis = runner.analyze(_records(agent_spans))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = annotate(provider.get_tracer(WRITEBACK_SCOPE), analysis.graph, analysis.attributions,
                     include_explanation=False)
    attribution_spans = [s for s in exporter.get_finished_spans() if s.name == "memtrace.attribution"]
    assert len(attribution_spans) == len(analysis.attributions) and len(spans) >= len(attribution_spans)
    parents = {(f"{s.parent.trace_id:032x}", f"{s.parent.span_id:016x}")
               for s in attribution_spans if s.parent}
    evaluations = {(analysis.graph.nodes[a.case.evaluation]["trace_id"],
                    analysis.graph.nodes[a.case.evaluation]["span_id"]) for a in analysis.attributions}
    assert parents == evaluations


def test_chosen_evaluations_are_attributed_in_the_order_given(agent_spans: list[ReadableSpan]) -> None:
    analysis = runner.analyze(_records(agent_spans))
    every = [a.case.evaluation for a in analysis.attributions]
    assert len(every) >= 2
    chosen = runner.attribute_failures(analysis.graph, "lineage", evaluations=every[::-1][:2])
    assert [a.case.evaluation for a in chosen] == every[::-1][:2]
    assert [a.operation for a in chosen] == [a.operation for a in analysis.attributions][::-1][:2]
