"""The traced operation's hot path (issue 28, item 2): the in-process content store keeps what spans do
not carry, each version's descriptor is made once, an operation holds on its instance what every operation
reads, and the locks every operation takes are released when a call fails."""

from __future__ import annotations

import hashlib
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, VariableKind
from memtrace_otel.instrument import InProcessContents
from memtrace_otel.instrument.operation import describe
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import MemTrace, MemTraceLink
from memtrace_otel.wire import content_hash
from memtrace_otel.wire import describe as wire_describe


def test_queued_contents_are_bounded_and_least_recently_written_go_first() -> None:
    store = InProcessContents(3)
    for i in range(5):
        store.put(f"v@{i}", f"text {i}")
    store.put("v@2", "text 2 again")  # written again: now the newest
    store.put("v@5", "text 5")
    assert len(store) == 3
    assert [store.get(f"v@{i}") for i in range(6)] == [None, None, "text 2 again", None, "text 4", "text 5"]
    store.put("v@6", "text 6")  # queued after a read: settled at the next one
    assert store.get("v@4") is None and store.get("v@2") == "text 2 again" and store.get("v@6") == "text 6"
    assert len(store) == 3  # reads do not refresh: only writes order the store


def test_the_queue_and_the_map_together_stay_within_the_bound() -> None:
    """After a read has filled the map, writes must not queue another ``max_items`` beside it."""
    store = InProcessContents(4)
    for i in range(4):
        store.put(f"v@{i}", "x" * 100)
    assert store.get("v@0") is not None  # the map is full now
    for i in range(4, 20):
        store.put(f"v@{i}", "x" * 100)
        held = len(store._items) + len(store._queued)  # what is in memory, not what a read settles to
        assert held <= 4, f"{held} contents held after put {i}, over the bound of 4"
    assert [store.get(f"v@{i}") is not None for i in range(14, 20)] == [False, False, True, True, True, True]


def test_a_store_of_size_zero_keeps_nothing() -> None:
    store = InProcessContents(0)
    store.put("v@1", "text")
    assert store.get("v@1") is None and len(store) == 0


def test_contents_put_from_threads_are_all_kept() -> None:
    store = InProcessContents(10_000)

    def write(thread: int) -> None:
        for i in range(1_000):
            store.put(f"t{thread}@{i}", f"{thread}-{i}")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 4_000
    assert all(store.get(f"t{t}@{i}") == f"{t}-{i}" for t in range(4) for i in range(0, 1_000, 97))


def _run(capture: bool) -> tuple[MemoryTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider, capture_content=capture, content_max_chars=10)
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read("question", content="a question read", kind=VariableKind.QUERY)
        op.write("mem:short", "short", kind=VariableKind.MEMORY_UNIT)
        op.write("mem:long", "longer than ten", kind=VariableKind.MEMORY_UNIT)
        op.update("mem:short", "changed", kind=VariableKind.MEMORY_UNIT)
    provider.shutdown()
    return mt, exporter


def test_the_store_keeps_what_the_span_does_not_carry() -> None:
    mt, exporter = _run(capture=True)
    (span,) = exporter.get_finished_spans()
    # Outputs carried whole on the span are not kept twice; a truncated one and inputs are.
    assert list(span.attributes[MemTrace.VARIABLE_CONTENTS]) == ["a question", "short", "longer tha",
                                                                 "changed"]
    assert mt.contents.get("mem:short@1") is None and mt.contents.get("mem:short@2") is None
    assert mt.contents.get("mem:long@1") == "longer than ten"
    assert mt.contents.get("question@1") == "a question read"
    mt, _ = _run(capture=False)  # capture off: the store has every content
    assert [mt.contents.get(v) for v in ("question@1", "mem:short@1", "mem:long@1", "mem:short@2")] == [
        "a question read", "short", "longer than ten", "changed"]


def test_a_descriptor_is_made_once_per_version_and_is_the_wire_format() -> None:
    variable = Variable("msg:D1:1", 1, VariableKind.MESSAGE, "hello")
    first = describe(variable)
    assert first == wire_describe("message", 5, content_hash("hello"), "msg:D1:1@1")
    assert variable.descriptor is first and describe(variable) == first
    tombstone = Variable("mem:1", 2, VariableKind.MEMORY_UNIT, None)
    assert describe(tombstone) == wire_describe("memory_unit", 0, content_hash(""), "mem:1@2")


def test_the_content_hash_is_blake2b_of_the_text_as_utf8_with_lone_surrogates_replaced() -> None:
    # The hash copies one empty BLAKE2b instead of making one per call; a text UTF-8 cannot encode
    # (a lone surrogate) is hashed as "replace" encodes it, as before.
    texts = ["", "hello", "Zoë moved to Lisbon 🏠", "x" * 5000, "half \ud800 a pair", "\udfff"]
    for text in texts:
        expected = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()
        assert content_hash(text) == expected
        assert describe(Variable("v", 1, VariableKind.OTHER, text)).split(" ")[2] == expected
    assert content_hash("hello") != content_hash("hello ") and len(content_hash("hello")) == 16


def test_a_version_is_kept_by_reference_and_read_back_under_its_id() -> None:
    # put_version keeps the name, the version (as a machine integer) and the text it was given, and makes
    # the id only when read; plain keys and versions interleave in write order and share one bound.
    store = InProcessContents(3)
    name, text = "mem:7", "User adopted a dog"
    store.put_version(name, 1, text)
    store.put("e:answer", "an answer")
    store.put_version(name, 2, "User adopted two dogs")
    assert all(held is name or held == "e:answer" for held in store._names if held is not None)
    assert store.get("mem:7@1") is text and store.get("e:answer") == "an answer"
    store.put_version(name, 3, "changed")  # after a read: the oldest (mem:7@1) goes at once
    assert len(store._queued) + len(store._items) <= 3
    assert [store.get(k) for k in ("mem:7@1", "e:answer", "mem:7@2", "mem:7@3")] == [
        None, "an answer", "User adopted two dogs", "changed"]
    huge = 1 << 70  # a version from a record's metadata no 64-bit slot holds: kept under its id all the same
    store.put_version("mem:8", huge, "far ahead")
    assert store.get(f"mem:8@{huge}") == "far ahead"
    roomy = InProcessContents(50_000)
    roomy.put_version(name, 1, text)
    assert len(roomy._names) == 1 and roomy.get("mem:7@1") is text  # the ring grows as it is written


def test_a_version_no_slot_holds_is_kept_under_its_id_before_and_after_the_ring_wraps() -> None:
    # put_version checks the range itself while the ring grows, and leaves it to the array once it wraps.
    huge = 1 << 70
    for store, before in ((InProcessContents(50_000), 0), (InProcessContents(2), 2)):
        for version in range(1, before + 1):
            store.put_version("mem:1", version, f"text {version}")
        store.put_version("mem:8", huge, "far ahead")
        store.put_version("mem:9", -huge, "behind")
        assert store.get(f"mem:8@{huge}") == "far ahead" and store.get(f"mem:9@{-huge}") == "behind"
        assert store.get("mem:8") is None and len(store) == 2


def test_writes_keep_contents_under_the_ids_spans_name() -> None:
    mt, _ = _run(capture=False)
    ids = ["question@1", "mem:short@1", "mem:long@1", "mem:short@2"]
    assert [mt.contents.get(v) for v in ids] == ["a question read", "short", "longer than ten", "changed"]
    assert len(mt.contents) == 4


def test_a_read_links_each_producer_once_and_never_the_parent() -> None:
    # The operation's end (operation._record_lineage) decides the links of its reads from the SpanContext's
    # items (trace id, span id, validity), in the order of the reads: one
    # link per producer span, none to the span's own parent (Jaeger would make it FOLLOWS_FROM), and a
    # producer in another trace or a sibling in this one linked like any other.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider, capture_content=False)
    with mt.operation("elsewhere", Category.INGEST) as op:
        foreign = op.write("msg:1", "from another trace", kind=VariableKind.MESSAGE)
        foreign_too = op.write("msg:2", "the same writer", kind=VariableKind.MESSAGE)
    with mt.operation("parent", Category.INGEST) as parent:
        own = parent.write("mem:parent", "written by the parent", kind=VariableKind.MEMORY_UNIT)
        with mt.operation("sibling", Category.EXTRACTION) as sibling:
            sibling_made = sibling.write("mem:sibling", "written by a sibling", kind=VariableKind.MEMORY_UNIT)
        with mt.operation("reader", Category.RETRIEVAL) as reader:
            for variable in (own, foreign, foreign_too, sibling_made, foreign, "mem:sibling"):
                reader.read(variable)
    provider.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    links = spans["reader"].links
    assert [(link.context.span_id, dict(link.attributes)) for link in links] == [
        (spans["elsewhere"].context.span_id, {MemTraceLink.VARIABLE: "msg:1@1"}),
        (spans["sibling"].context.span_id, {MemTraceLink.VARIABLE: "mem:sibling@1"})]
    assert spans["reader"].parent.span_id == spans["parent"].context.span_id
    assert list(spans["reader"].attributes[MemTrace.INPUTS]) == [
        "mem:parent@1", "msg:1@1", "msg:2@1", "mem:sibling@1", "msg:1@1", "mem:sibling@1"]


def test_an_operation_holds_its_state_in_slots_set_when_it_is_made() -> None:
    # CPython 3.11 specialises ``self.x`` only for state the instance holds: an operation keeps all of it in
    # slots (no instance dictionary, one allocation), each set when the operation is made, whichever way
    # (MemoryTracer.operation's plain case, __init__, _like, a mem0 stage): a slot left unset would raise
    # on its first read rather than fall back on a class default.
    from memtrace_otel.instrument.mem0.stages import StageOperation
    from memtrace_otel.instrument.operation import _like

    mt = MemoryTracer(TracerProvider(), capture_content=False)
    plain = mt.operation("extract", Category.EXTRACTION)  # made by _plain
    full = mt.operation("search", Category.RETRIEVAL, gen_ai_operation="search_memory")  # by __init__
    with mt.operation("add", Category.INGEST) as host:
        stage = StageOperation(mt, "mem0.add.extract", Category.EXTRACTION, host, set())
    for operation in (plain, full, _like(full), stage):
        assert not hasattr(operation, "__dict__")
        for cls in type(operation).__mro__:
            for name in getattr(cls, "__slots__", ()):
                assert hasattr(operation, name), name
        with operation:
            pass
        assert operation._finished
    with pytest.raises(AttributeError):
        plain.unknown = 1  # type: ignore[attr-defined]


def test_the_registry_and_the_store_release_their_lock_when_a_call_fails() -> None:
    # acquire/release in try/finally (not ``with``) on the calls every operation makes: a failing call
    # leaves the lock free for the next one.
    store = InProcessContents(4)
    with pytest.raises(TypeError):
        store.put_version("mem:1", "one", "text")  # type: ignore[arg-type]  # the array refuses it
    assert not store._lock.locked()
    store.put_version("mem:1", 1, "text")
    assert store.get("mem:1@1") == "text"
    registry = MemoryTracer(TracerProvider(), capture_content=False).registry
    evicted = registry._evicted
    registry._evicted = None  # type: ignore[assignment]  # next_version and resolve then fail
    registry._any_evicted = True
    with pytest.raises(TypeError):
        registry.next_version("mem:1", VariableKind.MEMORY_UNIT, "x", None)
    with pytest.raises(TypeError):
        registry.resolve("q", 0, VariableKind.QUERY, "why?")
    assert not registry._lock.locked()
    registry._evicted = evicted
    assert registry.next_version("mem:1", VariableKind.MEMORY_UNIT, "x", None).id == "mem:1@1"
    assert registry.resolve("q", 0, VariableKind.QUERY, "why?")[0].id == "q@1"
