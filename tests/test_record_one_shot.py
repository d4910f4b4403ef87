"""``MemoryTracer.record`` makes the span the ``with tracer.operation(...)`` form makes, in one call.

One program of operations runs twice on span ids from one seeded sequence, each time on a tracer of its
own: once with every operation written as a ``with`` block (``op.read`` per read, ``op.write`` per write)
and once with the same operations as ``record`` calls. Every span must carry the same name, kind, parent,
attributes, events and links, and the tracers must end with the same versions, in-process contents and
uploaded contents; content off, on (with a truncation limit the program's long content passes), and
uploaded by reference.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, Variable, VariableKind, current_operation
from memtrace_otel.instrument.operation import Operation
from memtrace_otel.semconv import GenAI, MemTrace
from memtrace_otel.suppress import suppress_instrumentation

from scenario import SeededIds

_LONG = "User moved to Lisbon in March 2021 and has lived there since, near the river. " * 2



def _op(mt: MemoryTracer, one_shot: bool, name: str, category: Category | str, reads: tuple[Any, ...] = (),
        writes: tuple[Any, ...] = (), error: BaseException | None = None, **options: Any) -> list[Variable]:
    """One operation in either form: ``record``, or the ``with`` block doing the same reads and writes."""
    if one_shot:
        return mt.record(name, category, reads=reads, writes=writes, error=error, **options)
    written: list[Variable] = []
    try:
        with mt.operation(name, category, **options) as op:
            for item in reads:
                if isinstance(item, tuple):
                    op.read(item[0], content=item[1], **({"kind": item[2]} if len(item) == 3 else {}))
                else:
                    op.read(item)
            for item in writes:
                written.append(op.write(item[0], item[1], **({"kind": item[2]} if len(item) == 3 else {})))
            if error is not None:
                raise error
    except RuntimeError as raised:
        assert raised is error
    return written


def _program(mt: MemoryTracer, one_shot: bool) -> list[str]:
    """Ingestion, an extraction reading in every form ``read`` takes, a GenAI memory write, a read of the
    parent's output (no link to the parent), a tombstone-like write without content, a failed operation."""
    ids: list[str] = []
    message, second = _op(mt, one_shot, "ingest", Category.INGEST, writes=(
        ("msg:D1:1", "I moved to Lisbon in March 2021.", VariableKind.MESSAGE),
        ("msg:D1:2", "I love the river there.", "message")))
    facts = _op(mt, one_shot, "extract", "extraction", reads=(
        message, ("instructions", "Extract facts.", VariableKind.PROMPT), "msg:D1:2", "msg:D1:1@1",
        "question", ("context", None)), writes=(
        ("mem:1", "User moved to Lisbon in March 2021", VariableKind.MEMORY_UNIT),
        ("mem:2", _LONG, VariableKind.MEMORY_UNIT), ("raw", None)))
    stored = _op(mt, one_shot, "mem0.add", Category.UPDATE, reads=tuple(facts[:2]), writes=(
        ("mem:1", "User lives in Lisbon", VariableKind.MEMORY_UNIT),),
        gen_ai_operation="create_memory", store_id="store-1", record_id="r-1", provider="mem0",
        server_address="localhost", server_port=6333, attributes={"app.tag": "x"})
    with mt.operation("answer", Category.GENERATION) as parent:
        draft = parent.write("draft", "Lisbon", kind=VariableKind.RESPONSE)
        _op(mt, one_shot, "check", Category.EVALUATION, reads=(draft, stored[0]), span_name="check draft")
    _op(mt, one_shot, "search", Category.RETRIEVAL,
        reads=(("query", "Where?", VariableKind.QUERY), stored[0]), gen_ai_operation="search_memory",
        data_source_id="qdrant")
    _op(mt, one_shot, "extract", Category.EXTRACTION, reads=(message,), writes=(("mem:3", "x"),),
        error=RuntimeError("the model timed out"))
    ids.extend(v.id for v in (message, second, *facts, *stored, draft))
    return ids


def _run(one_shot: bool, *, capture: bool, upload: Path | None) -> tuple[list[Any], MemoryTracer, list[str]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SeededIds(37))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider, capture_content=capture, content_max_chars=100,
                      upload_base_path=str(upload) if upload else "")
    ids = _program(mt, one_shot)
    mt.shutdown()
    provider.shutdown()
    return list(exporter.get_finished_spans()), mt, ids


def _event(event: Any) -> tuple[str, dict[str, Any]]:
    # An exception raised in a with block has a traceback; one given to record(error=) was raised elsewhere
    # (or never): the stack trace is the only attribute that may differ.
    return event.name, {k: v for k, v in event.attributes.items() if k != "exception.stacktrace"}


def _shape(span: Any, content_ref: str | None) -> tuple[Any, ...]:
    # The two runs upload to two directories: memtrace.content_ref is each tracer's own (checked),
    # then set aside.
    attributes = dict(span.attributes)
    if MemTrace.CONTENT_REF in attributes:
        assert attributes.pop(MemTrace.CONTENT_REF) == content_ref
    return (span.name, span.kind, span.context.trace_id, span.context.span_id,
            span.parent.span_id if span.parent else None, span.status.status_code, span.status.description,
            attributes, [_event(e) for e in span.events],
            [(link.context.trace_id, link.context.span_id, dict(link.attributes)) for link in span.links])


@pytest.mark.parametrize("mode", ["content-off", "content-on", "upload", "content-on-upload"])
def test_record_makes_the_span_the_with_form_makes(mode: str, tmp_path: Path) -> None:
    capture, upload = mode.startswith("content-on"), mode.endswith("upload")
    with_form = _run(False, capture=capture, upload=tmp_path / "with" if upload else None)
    one_shot = _run(True, capture=capture, upload=tmp_path / "record" if upload else None)
    (spans_a, mt_a, ids_a), (spans_b, mt_b, ids_b) = with_form, one_shot
    assert ids_a == ids_b
    assert len(spans_a) == len(spans_b) == 7
    for a, b in zip(spans_a, spans_b, strict=True):
        assert _shape(b, mt_b.content_ref) == _shape(a, mt_a.content_ref)
    assert any(MemTrace.CONTENT_REF in s.attributes for s in spans_b) is upload
    # The program exercises what it claims to: links, a parent not linked, an error, GenAI attributes.
    by_name = {s.name: s for s in spans_b}  # the failed extraction is the last "extract"
    first_extract = next(s for s in spans_b if s.name == "extract")
    assert len(first_extract.links) == 1 and not first_extract.status.description  # msg:D1:* share a producer
    assert by_name["extract"].status.description == "the model timed out"
    assert len(by_name["check draft"].links) == 1  # the draft's producer is the parent: not linked
    assert by_name["create_memory"].attributes[GenAI.MEMORY_STORE_ID] == "store-1"
    assert by_name["extract"].attributes[GenAI.ERROR_TYPE] == "RuntimeError"
    assert (MemTrace.VARIABLE_CONTENTS in by_name["create_memory"].attributes) is capture
    for name in ("msg:D1:1", "msg:D1:2", "mem:1", "mem:2", "mem:3", "raw", "instructions", "question",
                 "draft"):
        a, b = mt_a.registry.latest(name), mt_b.registry.latest(name)
        assert a is not None and b is not None
        assert (b.id, b.kind, b.content, b.hash, b.producer) == (a.id, a.kind, a.content, a.hash, a.producer)
    assert len(mt_a.registry) == len(mt_b.registry)
    assert len(mt_a.contents) == len(mt_b.contents) > 0
    for variable_id in [*ids_a, "instructions@1", "mem:3@1"]:
        assert mt_b.contents.get(variable_id) == mt_a.contents.get(variable_id)
    if upload:
        files_a = sorted(p.relative_to(tmp_path / "with") for p in (tmp_path / "with").rglob("*")
                         if p.is_file())
        files_b = sorted(p.relative_to(tmp_path / "record") for p in (tmp_path / "record").rglob("*")
                         if p.is_file())
        assert files_a == files_b and files_a
        for path in files_a:
            assert (tmp_path / "record" / path).read_bytes() == (tmp_path / "with" / path).read_bytes()


def test_record_under_suppression_does_what_the_with_form_does() -> None:
    # The tracer itself opens what it is asked to open (the instrumentors test suppression before they
    # open an operation): under suppression both forms record the same spans, versions and contents.
    results = []
    for one_shot in (False, True):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        mt = MemoryTracer(provider, capture_content=True)
        with suppress_instrumentation():
            written = _op(mt, one_shot, "extract", Category.EXTRACTION, reads=(("q", "Why?"),),
                          writes=(("mem:1", "a"), ("mem:1", "b")))
        results.append(([v.id for v in written], len(exporter.get_finished_spans()), len(mt.contents)))
    assert results[0] == results[1]
    assert results[1][0] == ["mem:1@1", "mem:1@2"]


@pytest.mark.parametrize(("reads", "writes", "error", "message"), [
    ((3,), (), TypeError, "reads[0] must be a Variable, a name or (name, content[, kind]), not int"),
    (("ok", ("name",)), (), TypeError, "reads[1] must be (name, content[, kind])"),
    ((("q", 5),), (), TypeError, "reads[0]'s content must be a str or None, not int"),
    ((), ("mem:1",), TypeError, "writes[0] must be (name, content[, kind]), not str"),
    ((), (("mem:1", "a"), (1, "a")), TypeError, "writes[1]'s name must be a str, not 1"),
    ((), (("mem:1", "a", "memory"),), ValueError, "writes[0]'s kind 'memory' is not a VariableKind"),
    ((("q", "a", "nope"),), (), ValueError, "reads[0]'s kind 'nope' is not a VariableKind"),
])
def test_record_names_a_bad_argument_and_records_nothing(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, reads: tuple[Any, ...],
        writes: tuple[Any, ...], error: type[Exception], message: str) -> None:
    mt = MemoryTracer(tracer_provider, capture_content=False)
    with pytest.raises(error) as raised:
        mt.record("extract", Category.EXTRACTION, reads=reads, writes=writes)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert span_exporter.get_finished_spans() == () and len(mt.registry) == 0 and len(mt.contents) == 0
    with pytest.raises(ValueError, match="'nope' is not a valid Category"):
        mt.record("extract", "nope", writes=(("mem:1", "a"),))
    assert len(mt.registry) == 0


def test_record_takes_generators_and_times() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider, capture_content=False)
    written = mt.record("ingest", Category.INGEST, writes=((f"msg:{i}", str(i)) for i in range(3)),
                        start_time=1_000, end_time=5_000)
    read = mt.record("extract", Category.EXTRACTION, reads=(v for v in written))
    assert [v.id for v in written] == ["msg:0@1", "msg:1@1", "msg:2@1"] and read == []
    ingest, extract = exporter.get_finished_spans()
    assert (ingest.start_time, ingest.end_time) == (1_000, 5_000)
    assert list(extract.attributes[MemTrace.INPUTS]) == ["msg:0@1", "msg:1@1", "msg:2@1"]
    assert len(extract.links) == 1  # one producer span, one link


def test_record_from_threads_takes_one_version_per_write_and_leaves_no_current_operation() -> None:
    # Each call's state is its own (local to the call, never shared, never made current); versions come
    # from the registry's lock: threads writing one name get every version once.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemoryTracer(provider, capture_content=False)
    written: list[list[Variable]] = [[] for _ in range(4)]

    def work(mine: list[Variable]) -> None:
        for i in range(100):
            mine.extend(mt.record("write", Category.UPDATE, reads=(("q", f"asked {i}"),),
                                  writes=(("mem:shared", f"text {i}", VariableKind.MEMORY_UNIT),)))
            assert current_operation() is None

    threads = [threading.Thread(target=work, args=(mine,)) for mine in written]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    versions = sorted(v.version for mine in written for v in mine)
    assert versions == list(range(1, 401))
    assert len(exporter.get_finished_spans()) == 400
    latest = mt.registry.latest("mem:shared")
    assert latest is not None and latest.version == 400


def test_record_makes_no_operation_object(monkeypatch: pytest.MonkeyPatch, tracer_provider: TracerProvider,
                                          span_exporter: InMemorySpanExporter) -> None:
    # Issue 28, item 2: a one-shot operation records its span from the call's own lists, without making the
    # Operation a with block needs (nothing could reach it: it is never current), which cost about 5% of
    # the span itself. With options it reads the span's name, kind and start attributes off one, and only
    # that: its recording state stays untouched.
    from memtrace_otel.instrument import operation as operation_module

    def no_operation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("record made an Operation")

    mt = MemoryTracer(tracer_provider, capture_content=False)
    seed = mt.record("ingest", Category.INGEST, writes=(("msg:1", "hello"),))
    with monkeypatch.context() as patch:
        patch.setattr(operation_module, "_new_operation", no_operation)  # _plain's object
        patch.setattr(operation_module.Operation, "__init__", no_operation)
        written = mt.record("extract", Category.EXTRACTION, reads=(seed[0], ("q", "Why?")),
                            writes=(("mem:1", "a", VariableKind.MEMORY_UNIT),))
    assert [v.id for v in written] == ["mem:1@1"]
    started: list[Operation] = []
    original = Operation.__enter__

    def begun(self: Operation) -> Any:
        started.append(self)
        return original(self)

    monkeypatch.setattr(Operation, "__enter__", begun)
    mt.record("store", Category.UPDATE, writes=(("mem:2", "b"),), gen_ai_operation="create_memory")
    assert started == []  # the Operation made for its options starts no span: the one-shot path records it
    extract, store = span_exporter.get_finished_spans()[1:]
    assert list(extract.attributes[MemTrace.INPUTS]) == ["msg:1@1", "q@1"] and len(extract.links) == 1
    assert list(store.attributes[MemTrace.OUTPUTS]) == ["mem:2@1"] and store.name == "create_memory"
