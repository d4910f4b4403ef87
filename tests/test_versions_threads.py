"""Versions are unique: under threads, and after the bounded registry evicts a name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Callable

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import Category, MemoryTracer, Variable, VariableKind
from memtrace_otel.instrument import VariableRegistry
from memtrace_otel.semconv import MemTrace
from memtrace_otel.wire import parse_variable_id

THREADS, UPDATES = 8, 300


def _in_threads(work: Callable[[], list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Run ``work`` in THREADS threads released together; every (input id, output id) they made."""
    start, lock, made = threading.Barrier(THREADS), threading.Lock(), []

    def worker() -> None:
        start.wait(timeout=30)
        pairs = work()
        with lock:
            made.extend(pairs)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so that a race shows whenever there is one
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return made


def _duplicates(ids: list[str]) -> dict[str, int]:
    return {i: n for i, n in Counter(ids).items() if n > 1}


def test_updates_by_name_from_threads_get_unique_versions_and_read_what_they_replace(
        tracer_provider, span_exporter: InMemorySpanExporter) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("add", Category.EXTRACTION) as op:
        op.write("mem:shared", "v1", kind=VariableKind.MEMORY_UNIT)

    def work() -> list[tuple[str, str]]:
        pairs = []
        for n in range(UPDATES):
            with mt.operation("update", Category.UPDATE) as op:
                after = op.update("mem:shared", f"v{n}")
                pairs.append((op.inputs[0].id, after.id))
        return pairs

    pairs = _in_threads(work)
    outputs = [after for _, after in pairs]
    assert not _duplicates(outputs)
    # One chain: each update read exactly the version it replaced, so versions 1..2401 follow each other.
    assert sorted(parse_variable_id(i)[1] for i in outputs) == list(range(2, THREADS * UPDATES + 2))
    assert all(parse_variable_id(after)[1] == parse_variable_id(before)[1] + 1 for before, after in pairs)
    spans = span_exporter.get_finished_spans()
    updates = [s for s in spans if s.attributes[MemTrace.OPERATION_NAME] == "update"]
    exported = [v for s in updates for v in s.attributes[MemTrace.OUTPUTS]]
    assert len(exported) == THREADS * UPDATES and not _duplicates(exported)


def test_updates_and_deletes_of_a_stale_variable_from_threads_never_share_a_version(tracer_provider) -> None:
    mt = MemoryTracer(tracer_provider)
    with mt.operation("add", Category.EXTRACTION) as op:
        stale = op.write("mem:shared", "v1", kind=VariableKind.MEMORY_UNIT)

    def work() -> list[tuple[str, str]]:
        pairs = []
        for n in range(UPDATES // 10):
            with mt.operation("change", Category.UPDATE) as op:
                after = op.delete(stale) if n % 3 == 0 else op.update(stale, f"v{n}")
                pairs.append((op.inputs[0].id, after.id))
        return pairs

    pairs = _in_threads(work)
    assert not _duplicates([after for _, after in pairs])
    assert {before for before, _ in pairs} == {"mem:shared@1"}  # each read what it was given


def _evict(mt: MemoryTracer, count: int) -> None:
    with mt.operation("flood", Category.INGEST) as op:
        for n in range(count):
            op.write(f"other:{n}", "x")


def test_eviction_never_reissues_a_version(tracer_provider) -> None:
    mt = MemoryTracer(tracer_provider, registry=VariableRegistry(max_names=8))
    issued: list[str] = []
    with mt.operation("add", Category.EXTRACTION) as op:
        unit = op.write("mem:a", "v1", kind=VariableKind.MEMORY_UNIT)
        issued += [unit.id, op.update(unit, "v2").id, op.update("mem:a", "v3").id]
    _evict(mt, 20)
    assert mt.registry.latest("mem:a") is None  # evicted
    with mt.operation("update", Category.UPDATE) as op:
        issued.append(op.update("mem:a", "v4").id)  # by name
    _evict(mt, 20)
    with mt.operation("update", Category.UPDATE) as op:
        issued.append(op.update(unit, "v5").id)  # from an old Variable
    _evict(mt, 20)
    with mt.operation("write", Category.EXTRACTION) as op:
        issued.append(op.write("mem:a", "v6").id)  # written afresh
    _evict(mt, 20)
    with mt.operation("delete", Category.DELETION) as op:
        issued.append(op.delete("mem:a").id)
    assert not _duplicates(issued), issued
    assert issued[:3] == ["mem:a@1", "mem:a@2", "mem:a@3"]


def test_eviction_then_a_record_read_back_from_storage_still_moves_forward(tracer_provider) -> None:
    mt = MemoryTracer(tracer_provider, registry=VariableRegistry(max_names=4))
    with mt.operation("add", Category.EXTRACTION) as op:
        unit = op.update(op.write("mem:b", "v1"), "v2")
        metadata = op.lineage_metadata(unit)
    _evict(mt, 10)
    with mt.operation("update", Category.UPDATE) as op:
        old = op.read_record({**metadata, "memtrace_variable": "mem:b@1"}, content="v1")
        assert op.update(old, "v3").id not in {"mem:b@1", "mem:b@2"}


def test_versions_below_the_bound_are_unchanged_and_gapless() -> None:
    registry = VariableRegistry(max_names=100)
    made = [registry.next_version(f"n{i % 10}", VariableKind.OTHER, None, None).id for i in range(50)]
    assert made[:10] == [f"n{i}@1" for i in range(10)] and made[-1] == "n9@5"


def test_allocation_after_eviction_does_not_depend_on_the_hash_seed() -> None:
    script = textwrap.dedent("""
        from memtrace_otel.instrument import VariableRegistry
        from memtrace_otel.semconv import VariableKind
        r = VariableRegistry(max_names=16)
        ids = [r.next_version(f"n{i % 40}", VariableKind.OTHER, None, None).id for i in range(400)]
        print(" ".join(ids))
    """)
    runs = {seed: subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed},
                                 capture_output=True, text=True, check=True).stdout for seed in ("1", "2")}
    assert runs["1"] == runs["2"] and len(set(runs["1"].split())) == 400


def test_registry_contract_without_tracing() -> None:
    registry = VariableRegistry(max_names=2)
    first = registry.next_version("x", VariableKind.MEMORY_UNIT, "a", None)
    before, after = registry.replace("x", None, "b", None, unknown_kind=VariableKind.OTHER)
    assert (before, after.id, after.kind) == (first, "x@2", VariableKind.MEMORY_UNIT)
    registry.register(Variable("x", 1, VariableKind.OTHER))  # older: ignored
    assert registry.latest("x") is after
    assert len(registry) == 1
