"""Which linked traces are missing from an input: lineage links count, write-back links do not."""

from __future__ import annotations

from memtrace_otel.semconv import WRITEBACK_SCOPE
from memtrace_otel.spans.linked import missing_linked_traces
from memtrace_otel.spans.model import SpanLink, SpanRecord

_A, _B, _C = "a" * 32, "b" * 32, "c" * 32


def _span(trace: str, span: str, links: list[SpanLink], scope: str = "memtrace_otel") -> SpanRecord:
    return SpanRecord(trace, span, "op", links=links, scope_name=scope)


def test_links_to_spans_not_in_the_input_name_their_traces() -> None:
    spans = [_span(_A, "1" * 16, [SpanLink(_B, "2" * 16, {}), SpanLink(_A, "3" * 16, {})]),
             _span(_A, "3" * 16, [])]
    assert missing_linked_traces(spans) == {_B}


def test_write_back_spans_links_are_not_lineage() -> None:
    # A memtrace.root_cause span links to the failed evaluation of another trace: following it
    # would pull an unrelated failure's trace into this one's lineage.
    verdict = _span(_A, "4" * 16, [SpanLink(_C, "5" * 16, {})], scope=WRITEBACK_SCOPE)
    assert missing_linked_traces([verdict]) == set()
