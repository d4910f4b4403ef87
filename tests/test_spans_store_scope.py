"""Fetching the traces that used a failed trace's memory stores (spans/store_scope).

The spans are the offline memory agent's of ``examples/`` (a real SDK pipeline); the backend is
the spans sent, searched as Jaeger's tag search does (``serve_harness``). The real Jaeger and
Tempo searches are tested with their clients (test_spans_jaeger_client, test_spans_tempo_client).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from memtrace_otel.semconv import WRITEBACK_SCOPE, GenAI, MemTrace
from memtrace_otel.spans.backend import BackendFetch, TraceSearch
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import SpanReadResult
from memtrace_otel.spans.store_scope import fetch_store_traces, stores_used

from serve_harness import _SentBackend, offline_agent_spans, reference_verdicts, sent_records


@pytest.fixture(scope="module")
def agent_spans() -> list[ReadableSpan]:
    return offline_agent_spans()


_records = sent_records


def _question_trace(records: list[SpanRecord], case: str) -> str:
    (trace_id,) = {r.trace_id for r in records if r.attributes.get(MemTrace.EVALUATION_CASE) == case}
    return trace_id


def test_a_missed_retrieval_is_a_retrieval_error_only_with_the_store_search(
        agent_spans: list[ReadableSpan]) -> None:
    # q5's answer was written in session 2, which its search did not return: no link leads there.
    linked, searched = (reference_verdicts(agent_spans, view=view) for view in ("linked", "serve"))
    whole = reference_verdicts(agent_spans, view="whole")
    q5 = _question_trace(_records(agent_spans), "q5")
    (key,) = [k for k in whole if k[0] == q5]
    assert linked[key].error_type == "ResponseError"
    assert searched[key].error_type == whole[key].error_type == "RetrievalError"
    assert searched == whole  # every failure of the agent: the store search sees what a batch run sees


def test_the_search_adds_the_store_traces_written_before_the_failure(agent_spans: list[ReadableSpan]) -> None:
    records = _records(agent_spans)
    backend = _SentBackend(records)
    assert isinstance(backend, TraceSearch)
    q5 = _question_trace(records, "q5")
    result = SpanReadResult()
    result.add(backend.trace(q5))
    (use,) = stores_used(result.spans)
    assert (use.store_id, use.service) == ("tiny-memory", "memory-agent")
    fetched = fetch_store_traces(result, backend, {q5})
    sessions = {r.trace_id for r in records if r.name.startswith("session")}
    assert sessions and sessions <= {s.trace_id for s in result.spans}
    starts = {r.trace_id: r.start_time_unix_nano for r in records}
    later = {t for t in starts if starts[t] > use.end_unix_nano}
    assert later and not later & {s.trace_id for s in result.spans}  # nothing after the failure
    assert fetched.received >= sessions and not fetched.limited and fetched.searchable
    assert result.problems == []  # the failed trace itself, found again, is no duplicate


def test_a_search_at_its_limit_is_reported(agent_spans: list[ReadableSpan]) -> None:
    records = _records(agent_spans)
    q5 = _question_trace(records, "q5")
    result = SpanReadResult()
    result.add(_SentBackend(records).trace(q5))
    fetched = fetch_store_traces(result, _SentBackend(records), {q5}, limit=1)
    assert [u.store_id for u in fetched.limited] == ["tiny-memory"]
    assert len({s.trace_id for s in result.spans}) == 1  # the newest trace of the store: q5's own


class _FetchOnly:
    """A backend that can fetch by id but not search."""

    name = "fetch only"

    def fetch_traces(self, trace_ids: Sequence[str]) -> BackendFetch:
        return BackendFetch()


def test_a_backend_that_cannot_search_fetches_nothing(agent_spans: list[ReadableSpan]) -> None:
    records = _records(agent_spans)
    result = SpanReadResult()
    result.add(records[:3])
    fetched = fetch_store_traces(result, _FetchOnly(), {records[0].trace_id})
    assert not fetched.searchable and fetched.searched == [] and len(result.spans) == 3


def test_the_given_traces_stores_are_searched_under_every_service_seen_using_them() -> None:
    store = GenAI.MEMORY_STORE_ID
    spans = [SpanRecord("a" * 32, "1" * 16, "search", start_time_unix_nano=5, end_time_unix_nano=9,
                        attributes={store: "s1"}, service_name="app"),
             SpanRecord("a" * 32, "2" * 16, "search", end_time_unix_nano=7, attributes={store: "s1"},
                        service_name="app"),
             SpanRecord("a" * 32, "3" * 16, "note", attributes={store: "s9"}, service_name="memtrace",
                        scope_name=WRITEBACK_SCOPE),
             SpanRecord("a" * 32, "4" * 16, "odd", attributes={store: 7}, service_name="app"),
             SpanRecord("a" * 32, "5" * 16, "anon", attributes={store: "s2"}),
             SpanRecord("b" * 32, "6" * 16, "search", attributes={store: "s3"}, service_name="app"),
             SpanRecord("c" * 32, "7" * 16, "extract", end_time_unix_nano=99, attributes={store: "s1"},
                        service_name="worker")]
    # s1 is searched under both services that acted on it, up to when trace a last did.
    assert [(u.store_id, u.service, u.end_unix_nano) for u in stores_used(spans, {"a" * 32})] == \
        [("s1", "app", 9), ("s1", "worker", 9)]
    assert {(u.store_id, u.service) for u in stores_used(spans)} == \
        {("s1", "app"), ("s1", "worker"), ("s3", "app")}


@pytest.mark.parametrize(("lookback", "limit"), [(0, 10), (-1.0, 10), (60, 0)])
def test_bad_bounds_are_refused(lookback: float, limit: int) -> None:
    with pytest.raises(ValueError, match="lookback_seconds"):
        fetch_store_traces(SpanReadResult(), _FetchOnly(), set(), lookback_seconds=lookback, limit=limit)
