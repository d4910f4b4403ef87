"""The parts of `memtrace serve`: the trace index, the write-ahead store and the annotation outbox."""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider

from memtrace_otel.collector.assembler import AssembledTrace, TraceAssembler, trace_index
from memtrace_otel.collector.durable import KIND_PROTOBUF, DurableStore
from memtrace_otel.collector.export import DurableOutbox, OtlpHttpSender
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.spans.model import SpanRecord


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _span(trace: int, span: int) -> SpanRecord:
    return SpanRecord(f"{trace:032x}", f"{span:016x}", f"s{span}")


def test_a_trace_is_released_only_after_it_settles() -> None:
    clock = Clock()
    assembler = TraceAssembler(settle_seconds=5, clock=clock)
    assembler.offer(trace_index([_span(1, 1), _span(2, 2)]))
    clock.now = 4
    assembler.offer(trace_index([_span(1, 3)]))  # trace 1 is busy again
    clock.now = 6
    assert [t.trace_id for t in assembler.settled()] == [f"{2:032x}"]
    clock.now = 8.9
    assert assembler.settled() == []
    clock.now = 9
    (trace,) = assembler.settled()
    assert trace.span_count == 2 and not trace.failed
    assert assembler.held_traces == 0


def _reference_settle(offers: list[tuple[float, dict[str, tuple[int, bool]]]], now: float,
                      settle: float) -> list[tuple[str, int, bool, float]]:
    """What settles by ``now``, by the rule itself: a trace's spans and failed flag summed over its offers,
    released once its last offer is ``settle`` seconds old, in the order of last arrival."""
    traces: dict[str, tuple[int, bool, float, int]] = {}
    for number, (at, index) in enumerate(offers):
        for position, (trace_id, (count, failed)) in enumerate(index.items()):
            before = traces.get(trace_id, (0, False, 0.0, 0))
            traces[trace_id] = (before[0] + count, before[1] or failed, at, number * 10_000 + position)
    due = sorted((order, trace_id) for trace_id, (_, _, at, order) in traces.items() if at <= now - settle)
    return [(trace_id, traces[trace_id][0], traces[trace_id][1], traces[trace_id][2]) for _, trace_id in due]


def _offers(rng: random.Random) -> list[tuple[float, dict[str, tuple[int, bool]]]]:
    """Offers over time of overlapping traces, some failed in one offer only."""
    offers, now = [], 0.0
    for _ in range(rng.randrange(1, 12)):
        now += rng.choice([0.0, 0.5, 1.0, 3.0])
        offers.append((now, {f"{rng.randrange(12):032x}": (rng.randrange(1, 4), rng.random() < 0.2)
                             for _ in range(rng.randrange(1, 6))}))
    return offers


def _as_tuples(traces: list[AssembledTrace]) -> list[tuple[str, int, bool, float]]:
    return [(t.trace_id, t.span_count, t.failed, t.last_arrival) for t in traces]


@pytest.mark.parametrize("seed", range(30))
def test_batches_settle_as_traces_do(seed: int) -> None:
    """A trace offered in several batches settles once its last is quiet, its spans summed and failed if any
    batch said so, in last-arrival order (the rule, computed here trace by trace); settled_split gives the
    same traces, the clean ones by id, also when settling between offers."""
    rng = random.Random(seed)
    offers = _offers(rng)
    clock = Clock()
    assembler = TraceAssembler(settle_seconds=2, clock=clock)
    for clock.now, index in offers:
        assembler.offer(index)
    cut = rng.uniform(0, offers[-1][0] + 3)
    clock.now = cut
    assert _as_tuples(assembler.settled()) == _reference_settle(offers, cut, 2)
    clock.now = offers[-1][0] + 2
    assert _as_tuples(assembler.settled()) == [
        trace for trace in _reference_settle(offers, clock.now, 2) if trace[3] > cut - 2]
    assert assembler.held_traces == 0

    clocks = [Clock(), Clock()]
    whole, split = (TraceAssembler(settle_seconds=2, clock=clock) for clock in clocks)
    got_whole: list[AssembledTrace] = []
    got_clean: list[str] = []
    got_failed: list[AssembledTrace] = []

    def settle() -> None:
        got_whole.extend(whole.settled())
        clean, failed = split.settled_split()
        got_clean.extend(clean)
        got_failed.extend(failed)

    for at, index in offers:
        clocks[0].now = clocks[1].now = at
        whole.offer(index)
        split.offer(index)
        if rng.random() < 0.5:
            settle()
    clocks[0].now = clocks[1].now = offers[-1][0] + 2
    settle()
    assert whole.held_traces == split.held_traces == 0
    assert got_clean == [t.trace_id for t in got_whole if not t.failed]
    assert _as_tuples(got_failed) == _as_tuples([t for t in got_whole if t.failed])


def test_traces_arriving_again_do_not_keep_their_earlier_batches() -> None:
    """Requests that each carry spans of the same long-running traces keep what those traces hold, not every
    request's index until it settles (the trace ceiling bounds the traces held, so it must bound this too):
    200 requests of the same 1,000 traces and one of their own kept 5 MiB here when each batch was held whole
    (or dropped only once all its traces had moved), 0.2 MiB cut to the traces left."""
    import tracemalloc

    clock = Clock()
    assembler = TraceAssembler(settle_seconds=10, clock=clock)
    ids = [f"{trace:032x}" for trace in range(1000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for request in range(200):
            clock.now = request * 0.01
            index = dict.fromkeys(ids, (1, False))
            index[f"{request:016x}"] = (1, False)  # a trace of its own: each batch keeps one trace
            assembler.offer(index)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert assembler.held_traces == 1200
    assert held < 2 << 20, f"{held / (1 << 20):.1f} MiB kept for 1,200 traces"
    clock.now = 20
    clean, failed = assembler.settled_split()
    assert sorted(clean) == sorted([*ids, *(f"{request:016x}" for request in range(200))])
    assert failed == [] and assembler.held_traces == 0


def test_the_trace_ceiling_refuses_whole_batches_and_frees_on_release() -> None:
    clock = Clock()
    assembler = TraceAssembler(settle_seconds=1, max_traces=2, clock=clock)
    first = trace_index([_span(1, 1), _span(2, 2)])
    assert assembler.room_for(first)
    assembler.offer(first)
    assert assembler.room_for(trace_index([_span(1, 3)]))  # a trace it holds: no new entry
    assert not assembler.room_for(trace_index([_span(3, 4)]))
    clock.now = 2
    assert len(assembler.settled()) == 2
    assert assembler.room_for(trace_index([_span(3, 4)]))


def test_a_huge_trace_keeps_its_first_spans_and_counts_the_rest() -> None:
    assembler = TraceAssembler(settle_seconds=0, max_trace_spans=3)
    assembler.offer(trace_index([_span(1, i) for i in range(1, 11)]))
    (trace,) = assembler.drain()
    assembler.keep_first(trace, [_span(1, i) for i in range(1, 11)])
    assert len(trace.spans) == 3 and trace.dropped == 7


def test_the_store_keeps_requests_until_their_traces_are_released_and_replays_after_reopening(
        tmp_path) -> None:
    store = DurableStore(tmp_path)
    store.append_records([_span(1, 1), _span(2, 2)], trace_index([_span(1, 1), _span(2, 2)]))
    store.append_records([_span(1, 3)], trace_index([_span(1, 3)]))
    assert len(store.requests_of(f"{1:032x}")) == 2
    store.release([f"{2:032x}"])  # the first request still holds trace 1
    assert len(store.requests_of(f"{1:032x}")) == 2
    ids = store.finish(f"{1:032x}", [(2, b"annotations")])
    assert store.requests_of(f"{1:032x}") == [] and store.held_bytes == len(b"annotations")
    with pytest.raises(OSError, match="in use by another memtrace serve"):
        DurableStore(tmp_path)  # one writer per directory
    store.append_records([_span(3, 4)], trace_index([_span(3, 4)]))
    store.close()  # as after a kill: nothing was released
    reopened = DurableStore(tmp_path)
    assert [t.trace_id for t in reopened.stored_traces()] == [f"{3:032x}"]
    assert reopened.outbox_ids() == ids and reopened.outbox_rows(ids) == [(ids[0], 2, b"annotations")]
    reopened.close()


def _hex(number: int) -> str:
    return f"{number:032x}"


def test_a_trace_forgotten_while_its_request_lives_is_not_judged_again_after_reopening(tmp_path) -> None:
    """The request holding traces 1, 2 and 3 outlives 1 (attributed) and 2 (settled clean) while 3 waits:
    reopened, 1 is not replayed (its verdict is in the outbox), 3 is, and so is 2 (settling it again
    does nothing), with the request they need."""
    store = DurableStore(tmp_path)
    store.append(KIND_PROTOBUF, b"first", {_hex(1): (2, True), _hex(2): (1, False), _hex(3): (1, False)})
    store.append(KIND_PROTOBUF, b"second", {_hex(3): (1, True)})
    store.finish(_hex(1), [(1, b"verdict")])
    store.release([_hex(2)], settled_clean=True)
    assert [t.trace_id for t in store.stored_traces()] == [_hex(3)]
    assert store.request(1) == (KIND_PROTOBUF, b"first", [])  # 1 is done: not decoded again for its job
    store.close()
    reopened = DurableStore(tmp_path)
    replayed = {t.trace_id: (t.spans, t.failed) for t in reopened.stored_traces()}
    assert replayed == {_hex(2): (1, False), _hex(3): (2, True)}
    assert reopened.request_ids_of(_hex(3)) == [1, 2] and reopened.request_ids_of(_hex(1)) == []
    reopened.release([_hex(2)], settled_clean=True)
    reopened.finish(_hex(3), [(1, b"verdict")])
    assert reopened.requests_of(_hex(3)) == [] and reopened.held_bytes == 2 * len(b"verdict")
    reopened.close()
    assert DurableStore(tmp_path).stored_traces() == []


def test_a_data_directory_an_older_version_wrote_is_carried_over(tmp_path) -> None:
    import sqlite3

    db = sqlite3.connect(tmp_path / "serve.sqlite3")
    db.executescript("""
        CREATE TABLE requests (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, body BLOB NOT NULL);
        CREATE TABLE traces (trace_id TEXT NOT NULL, request_id INTEGER NOT NULL, spans INTEGER NOT NULL,
                             failed INTEGER NOT NULL);
        INSERT INTO requests VALUES (1, 0, x'0102'), (2, 0, x'03');
        INSERT INTO traces VALUES ('""" + _hex(7) + """', 1, 2, 0), ('""" + _hex(8) + """', 1, 1, 1),
                                  ('""" + _hex(7) + """', 2, 1, 1);
    """)
    db.commit()
    db.close()
    store = DurableStore(tmp_path)
    replayed = [(t.trace_id, t.spans, t.failed) for t in store.stored_traces()]
    assert replayed == [(_hex(7), 3, True), (_hex(8), 1, True)]
    assert store.requests_of(_hex(7)) == [(0, b"\x01\x02"), (0, b"\x03")] and store.held_bytes == 3
    store.finish(_hex(7), [])
    store.finish(_hex(8), [])
    assert store.held_bytes == 0
    store.close()


def test_a_full_store_drops_the_oldest_requests_and_counts_them(tmp_path, caplog) -> None:
    store = DurableStore(tmp_path, max_bytes=3000)
    for number in range(1, 6):
        store.append(KIND_PROTOBUF, bytes(1000), {f"{number:032x}": (1, False)})
    assert store.dropped_requests == 2 and store.held_bytes == 3000
    assert [t.trace_id for t in store.stored_traces()] == [f"{n:032x}" for n in (3, 4, 5)]
    assert "data directory full" in caplog.text
    store.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_outbox_holds_annotations_while_the_backend_is_down_and_loses_none(tmp_path) -> None:
    port = _free_port()  # nothing listens there yet: the backend is down
    received: list[SpanRecord] = []
    got_all = threading.Event()

    def ingest(spans: list[SpanRecord], _bytes: int) -> bool:
        received.extend(spans)
        if len(received) >= 25:
            got_all.set()
        return True

    store = DurableStore(tmp_path)
    outbox = DurableOutbox(store, OtlpHttpSender(f"http://127.0.0.1:{port}/v1/traces", timeout=1),
                           initial_backoff=0.05, max_backoff=0.2)
    tracer = TracerProvider().get_tracer("test")
    spans = []
    for number in range(25):
        span = tracer.start_span(f"annotation-{number}")
        span.end()
        spans.append(span)
    for start in range(0, 25, 10):
        batch = spans[start:start + 10]
        outbox.add(store.finish(f"{start + 1:032x}", [(len(batch), encode_spans(batch).SerializeToString())]))
    assert not outbox.force_flush(300)  # still down: nothing exported, nothing dropped
    deadline = time.monotonic() + 30
    while outbox.failed_attempts < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outbox.held == 25 and outbox.dropped == 0 and outbox.failed_attempts >= 2
    backend = OTLPHttpReceiver(ingest, port=port, store_bodies=False)
    backend.start()
    try:
        assert outbox.force_flush(20_000)
        assert got_all.wait(5)
    finally:
        backend.stop()
    assert sorted(span.name for span in received) == sorted(f"annotation-{n}" for n in range(25))
    assert outbox.exported == 25 and outbox.held == 0
    outbox.shutdown(1000)
    store.close()


def test_memory_guard_refuses_over_the_soft_limit_and_caches_its_reading() -> None:
    from memtrace_otel.collector.memory import MemoryGuard

    assert MemoryGuard(1 << 40).resident_bytes() > 0  # /proc is there on the machines this runs on
    # The reading is injected: the live process's memory moves under load (other tests, the
    # collector freeing), which made the decisions below flaky when they read it.
    clock = Clock()
    resident = 100 << 20
    readings: list[int] = []

    def reading() -> int:
        readings.append(resident)
        return resident

    roomy = MemoryGuard(resident * 4, clock=clock, resident=reading)
    assert not roomy.over() and roomy.refusals == 0
    assert len(readings) == 1  # under the soft limit: one reading, nothing given back
    tight = MemoryGuard(resident, spike=0.2, clock=clock, resident=reading)  # soft limit: 80% of it
    assert tight.over() and tight.refusals == 1
    assert len(readings) == 3  # over: read again after giving free memory back, still over
    tight.limit_bytes = tight.soft_limit_bytes = resident * 4  # within the interval: the reading stands
    assert tight.over() and tight.refusals == 2
    assert len(readings) == 3
    clock.now = 1.0
    assert not tight.over() and tight.refusals == 2
    assert len(readings) == 4


def test_memory_guard_is_not_over_when_giving_memory_back_brings_it_under() -> None:
    from memtrace_otel.collector.memory import MemoryGuard

    readings = iter([900, 700])  # over the soft limit of 800 until the collection and trim
    guard = MemoryGuard(1000, spike=0.2, clock=Clock(), resident=lambda: next(readings))
    assert not guard.over() and guard.refusals == 0
